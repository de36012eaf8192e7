//! Delivery status notifications (RFC 3464): the `message/delivery-status` part's fields, a
//! per-message group then one group per recipient. A recipient whose `Action` is `failed` or
//! `delayed` bounced (its `Status` class says hard or soft); `delivered`, `relayed` and
//! `expanded` are no bounces.

use mail_parser::MessagePart;

use super::{
    Bounce, BounceRecipient, MAX_RECIPIENTS, MAX_REPORT_BYTES, bounce_recipient, capped_text,
    clean_id, diagnostic, field, field_groups, find_status, normalize_address, returned_message_id,
    status_code,
};

/// The bounce a delivery-status report (`report`, the part's decoded contents) describes, with
/// the id of the message returned in `returned`.
pub(super) fn parse(report: &[u8], returned: Option<&MessagePart<'_>>) -> Bounce {
    let text = capped_text(report, MAX_REPORT_BYTES);
    let groups = field_groups(&text);
    let recipients = groups
        .iter()
        .filter_map(|group| recipient(group))
        .take(MAX_RECIPIENTS)
        .collect();
    // Gmail names the message in the per-message fields too, for reports that return nothing.
    let reported_id = || {
        groups
            .iter()
            .find_map(|g| field(g, "x-original-message-id"))
            .and_then(clean_id)
    };
    Bounce {
        recipients,
        original_message_id: returned.and_then(returned_message_id).or_else(reported_id),
    }
}

/// The bounced recipient a per-recipient group reports, if it reports one.
fn recipient(group: &[(String, String)]) -> Option<BounceRecipient> {
    let address = field(group, "original-recipient")
        .and_then(recipient_address)
        .or_else(|| field(group, "final-recipient").and_then(recipient_address))?;
    let action = field(group, "action")
        .and_then(|a| a.split(|c: char| c.is_whitespace() || c == '(').next())
        .map(str::to_ascii_lowercase);
    if matches!(
        action.as_deref(),
        Some("delivered" | "relayed" | "expanded")
    ) {
        return None;
    }
    let diagnostic_code = field(group, "diagnostic-code").map(without_type);
    let in_diagnostic = diagnostic_code.and_then(find_status);
    let status = match field(group, "status").and_then(|s| status_code(s.trim())) {
        // `5.0.0` (Exim's) says less than the server's own code in the diagnostic.
        Some(status) if status.ends_with(".0.0") => match &in_diagnostic {
            Some(specific) if specific.as_bytes()[0] == status.as_bytes()[0] => {
                Some(specific.clone())
            }
            _ => Some(status),
        },
        Some(status) => Some(status),
        None => None,
    }
    .filter(|s| !s.starts_with('2'))
    .or(in_diagnostic)
    .or_else(|| match action.as_deref() {
        Some("failed") => Some("5.0.0".to_string()),
        Some("delayed") => Some("4.0.0".to_string()),
        _ => None,
    })?;
    Some(bounce_recipient(
        address,
        status,
        diagnostic_code.and_then(diagnostic),
    ))
}

/// The address of a recipient field: `rfc822; user@example.com` (an `rfc822` or `utf-8`
/// address type, or none).
fn recipient_address(value: &str) -> Option<String> {
    match value.split_once(';') {
        Some((kind, address)) => {
            let kind = kind.trim();
            (kind.eq_ignore_ascii_case("rfc822") || kind.eq_ignore_ascii_case("utf-8"))
                .then(|| normalize_address(address))?
        }
        None => normalize_address(value),
    }
}

/// A diagnostic without its type: `smtp; 550 5.1.1 …` is `550 5.1.1 …`.
fn without_type(value: &str) -> &str {
    match value.split_once(';') {
        Some((kind, rest))
            if !kind.is_empty()
                && kind.len() <= 16
                && kind
                    .trim()
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-') =>
        {
            rest.trim()
        }
        _ => value.trim(),
    }
}
