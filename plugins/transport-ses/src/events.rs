//! SES event notifications (`notificationType` of identity notifications, `eventType` of a
//! configuration set's event destination) as Herald's delivery events.

use herald_sdk::transport::{DeliveryEvent, DeliveryEventKind};
use serde_json::Value;

use crate::sigv4::parse_iso8601;

/// Herald's email id of the SES `mail` object: the `herald_id` tag, else the `Message-ID`
/// (common headers, then the original headers) when it is one of Herald's.
fn herald_id(mail: &Value) -> Option<String> {
    let tag = mail["tags"]["herald_id"][0].as_str().map(str::to_string);
    let common = mail["commonHeaders"]["messageId"]
        .as_str()
        .map(str::to_string);
    let header = mail["headers"].as_array().and_then(|headers| {
        headers.iter().find_map(|h| {
            h["name"]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case("message-id"))
                .then(|| h["value"].as_str().map(str::to_string))?
        })
    });
    [tag, common, header]
        .into_iter()
        .flatten()
        .map(|id| id.trim().to_string())
        .find(|id| id.trim_start_matches('<').starts_with("eml_"))
}

/// An address as SES lists it (`a@b`, or `Name <a@b>`), lower-cased.
fn address(entry: &Value) -> Option<String> {
    let text = entry.as_str().or_else(|| entry["emailAddress"].as_str())?;
    let text = match (text.rfind('<'), text.rfind('>')) {
        (Some(start), Some(end)) if start < end => &text[start + 1..end],
        _ => text,
    };
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_ascii_lowercase())
}

fn joined(parts: &[Option<&str>]) -> Option<String> {
    let parts: Vec<&str> = parts
        .iter()
        .flatten()
        .copied()
        .filter(|p| !p.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join(": "))
}

/// The events of one SES event; an event Herald does not track (`Send`, `Reject`,
/// `DeliveryDelay`, `RenderingFailure`, `Subscription`…) is none.
pub fn from_ses(event: &Value, now: i64) -> Vec<DeliveryEvent> {
    let kind = event["eventType"]
        .as_str()
        .or_else(|| event["notificationType"].as_str())
        .unwrap_or("");
    let mail = &event["mail"];
    let message_id = herald_id(mail);
    let at = |part: &Value| {
        part["timestamp"]
            .as_str()
            .and_then(parse_iso8601)
            .unwrap_or(now)
    };
    let mut events = Vec::new();
    let mut push =
        |kind: DeliveryEventKind, email: Option<String>, at: i64, detail: Option<String>| {
            if let Some(email) = email {
                events.push(DeliveryEvent {
                    kind,
                    message_id: message_id.clone(),
                    email,
                    at,
                    detail,
                });
            }
        };
    match kind {
        "Bounce" => {
            let bounce = &event["bounce"];
            let hard = bounce["bounceType"].as_str() == Some("Permanent");
            let kind = if hard {
                DeliveryEventKind::BouncedHard
            } else {
                DeliveryEventKind::BouncedSoft
            };
            let class = joined(&[
                bounce["bounceType"].as_str(),
                bounce["bounceSubType"].as_str(),
            ]);
            for recipient in bounce["bouncedRecipients"].as_array().into_iter().flatten() {
                let detail = joined(&[
                    class.as_deref(),
                    recipient["diagnosticCode"]
                        .as_str()
                        .or_else(|| recipient["status"].as_str()),
                ]);
                push(kind, address(recipient), at(bounce), detail);
            }
        }
        "Complaint" => {
            let complaint = &event["complaint"];
            let detail = complaint["complaintFeedbackType"]
                .as_str()
                .map(|t| format!("complaint: {t}"));
            for recipient in complaint["complainedRecipients"]
                .as_array()
                .into_iter()
                .flatten()
            {
                push(
                    DeliveryEventKind::Complained,
                    address(recipient),
                    at(complaint),
                    detail.clone(),
                );
            }
        }
        "Delivery" => {
            let delivery = &event["delivery"];
            let detail = delivery["smtpResponse"].as_str().map(str::to_string);
            for recipient in delivery["recipients"].as_array().into_iter().flatten() {
                push(
                    DeliveryEventKind::Delivered,
                    address(recipient),
                    at(delivery),
                    detail.clone(),
                );
            }
        }
        // Opens and clicks (configuration sets only) name no recipient: the message's.
        "Open" | "Click" => {
            let (kind, part, detail) = if kind == "Open" {
                (DeliveryEventKind::Opened, &event["open"], None)
            } else {
                let click = &event["click"];
                (
                    DeliveryEventKind::Clicked,
                    click,
                    click["link"].as_str().map(str::to_string),
                )
            };
            for recipient in mail["destination"].as_array().into_iter().flatten() {
                push(kind, address(recipient), at(part), detail.clone());
            }
        }
        _ => {}
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mail() -> Value {
        json!({
            "messageId": "0100-ses", "destination": ["Ann@Example.com"],
            "tags": { "herald_id": ["eml_1"] },
            "commonHeaders": { "messageId": "<0100-ses@email.amazonses.com>" },
        })
    }

    #[test]
    fn bounces_complaints_deliveries_opens_and_clicks() {
        let hard = from_ses(
            &json!({ "notificationType": "Bounce", "mail": mail(), "bounce": {
                "bounceType": "Permanent", "bounceSubType": "General",
                "timestamp": "2016-01-27T14:59:38.237Z",
                "bouncedRecipients": [
                    { "emailAddress": "Ann@Example.com", "diagnosticCode": "smtp; 550 5.1.1 unknown" },
                    { "emailAddress": "\"Bob\" <bob@example.com>", "status": "5.1.1" },
                ] } }),
            0,
        );
        assert_eq!(hard.len(), 2);
        assert!(matches!(hard[0].kind, DeliveryEventKind::BouncedHard));
        assert_eq!(hard[0].email, "ann@example.com");
        assert_eq!(hard[1].email, "bob@example.com");
        assert_eq!(hard[0].message_id.as_deref(), Some("eml_1"));
        assert_eq!(hard[0].at, 1_453_906_778_237);
        assert_eq!(
            hard[0].detail.as_deref(),
            Some("Permanent: General: smtp; 550 5.1.1 unknown")
        );
        for soft in ["Transient", "Undetermined"] {
            let events = from_ses(
                &json!({ "eventType": "Bounce", "mail": mail(), "bounce": {
                    "bounceType": soft, "bouncedRecipients": [{ "emailAddress": "a@b.c" }] } }),
                5,
            );
            assert!(matches!(events[0].kind, DeliveryEventKind::BouncedSoft));
            assert_eq!(events[0].at, 5);
        }
        let complaint = from_ses(
            &json!({ "eventType": "Complaint", "mail": mail(), "complaint": {
                "complainedRecipients": [{ "emailAddress": "a@b.c" }],
                "complaintFeedbackType": "abuse" } }),
            0,
        );
        assert!(matches!(complaint[0].kind, DeliveryEventKind::Complained));
        let delivery = from_ses(
            &json!({ "notificationType": "Delivery", "mail": mail(), "delivery": {
                "recipients": ["a@b.c", "d@e.f"], "smtpResponse": "250 ok" } }),
            0,
        );
        assert_eq!(delivery.len(), 2);
        assert!(matches!(delivery[1].kind, DeliveryEventKind::Delivered));
        let click = from_ses(
            &json!({ "eventType": "Click", "mail": mail(), "click": { "link": "https://x.test/" } }),
            0,
        );
        assert_eq!(click[0].email, "ann@example.com");
        assert_eq!(click[0].detail.as_deref(), Some("https://x.test/"));
        let open = from_ses(
            &json!({ "eventType": "Open", "mail": mail(), "open": {} }),
            0,
        );
        assert!(matches!(open[0].kind, DeliveryEventKind::Opened));
        assert!(from_ses(&json!({ "eventType": "Send", "mail": mail() }), 0).is_empty());
    }

    #[test]
    fn the_herald_id_from_tags_or_headers() {
        let mut m = mail();
        assert_eq!(herald_id(&m).as_deref(), Some("eml_1"));
        m["tags"] = json!({});
        assert_eq!(herald_id(&m), None, "SES's own Message-ID is not Herald's");
        m["headers"] = json!([{ "name": "Message-ID", "value": "<eml_2@acme.test>" }]);
        assert_eq!(herald_id(&m).as_deref(), Some("<eml_2@acme.test>"));
        m["commonHeaders"]["messageId"] = json!("<eml_3@acme.test>");
        assert_eq!(herald_id(&m).as_deref(), Some("<eml_3@acme.test>"));
    }
}
