//! A queued email as it waits for its hand-off: everything the delivery worker needs to build
//! and sign the MIME message then, stored per email (a few kilobytes of rendered content),
//! while the attachments of a request are stored once for all its recipients. So a send to 50
//! recipients with a 10 MB attachment keeps one copy of the attachment, not 50 messages.

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::email::EmailAddress;
use super::send::{Attachment, Disposition, Mailbox};

/// One recipient's rendered message, without the attachments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageDraft {
    pub from_name: Option<String>,
    pub from: String,
    pub to_name: Option<String>,
    pub to: String,
    pub reply_to: Option<String>,
    /// Rendered subject.
    pub subject: String,
    /// Rendered HTML with tracking applied.
    pub html: String,
    /// Plain-text alternative.
    pub text: String,
    /// `Message-ID` without brackets.
    pub message_id: String,
    /// The caller's headers.
    pub headers: Vec<(String, String)>,
    /// The one-click unsubscribe URL of marketing mail.
    pub list_unsubscribe: Option<String>,
    /// The verified domain whose DKIM key signs it at hand-off.
    pub dkim_domain: Option<String>,
    /// Whether the draft is kept after hand-off for the "view in browser" page (its content
    /// used `{{viewInBrowserUrl}}`); written only when true (`store::emails::view`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub view: bool,
}

impl MessageDraft {
    /// The sender.
    pub fn from_mailbox(&self) -> Mailbox {
        Mailbox {
            name: self.from_name.clone(),
            email: EmailAddress::from_trusted(self.from.clone()),
        }
    }

    /// The recipient.
    pub fn to_mailbox(&self) -> Mailbox {
        Mailbox {
            name: self.to_name.clone(),
            email: EmailAddress::from_trusted(self.to.clone()),
        }
    }

    /// The Reply-To address.
    pub fn reply_to_address(&self) -> Option<EmailAddress> {
        self.reply_to.clone().map(EmailAddress::from_trusted)
    }

    /// A close upper estimate of the built message's size with attachments of `attachment_bytes`
    /// decoded bytes: base64 (4/3 with line breaks), quoted-printable bodies and the headers,
    /// including a DKIM signature.
    pub fn estimated_size(&self, attachment_bytes: usize) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.len() + 4)
            .sum();
        let bodies = (self.html.len() + self.text.len()) * 11 / 10;
        let attachments = attachment_bytes.div_ceil(3) * 4 * 78 / 76;
        2_048 + self.subject.len() * 2 + headers + bodies + attachments
    }
}

/// An attachment as stored with a request's shared content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredAttachment {
    pub filename: String,
    pub content_type: String,
    /// The content, base64.
    pub content: String,
    /// The `Content-ID` of an inline part.
    pub content_id: Option<String>,
}

/// The attachments of a request as stored once (JSON).
pub fn encode_attachments(attachments: &[Attachment]) -> String {
    let stored: Vec<StoredAttachment> = attachments
        .iter()
        .map(|a| StoredAttachment {
            filename: a.filename.clone(),
            content_type: a.content_type.clone(),
            content: base64::engine::general_purpose::STANDARD.encode(&a.content),
            content_id: match &a.disposition {
                Disposition::Attachment => None,
                Disposition::Inline { content_id } => Some(content_id.clone()),
            },
        })
        .collect();
    serde_json::to_string(&stored).unwrap_or_else(|_| "[]".into())
}

/// The attachments stored by [`encode_attachments`].
pub fn decode_attachments(stored: &str) -> Result<Vec<Attachment>, String> {
    let stored: Vec<StoredAttachment> =
        serde_json::from_str(stored).map_err(|e| format!("stored attachments unreadable: {e}"))?;
    stored
        .into_iter()
        .map(|a| {
            let content = base64::engine::general_purpose::STANDARD
                .decode(a.content.as_bytes())
                .map_err(|e| format!("stored attachment `{}` unreadable: {e}", a.filename))?;
            Ok(Attachment {
                filename: a.filename,
                content,
                content_type: a.content_type,
                disposition: match a.content_id {
                    None => Disposition::Attachment,
                    Some(content_id) => Disposition::Inline { content_id },
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_round_trip() {
        let attachments = vec![
            Attachment {
                filename: "a.pdf".into(),
                content: vec![0, 1, 2, 255],
                content_type: "application/pdf".into(),
                disposition: Disposition::Attachment,
            },
            Attachment {
                filename: "logo.png".into(),
                content: b"png".to_vec(),
                content_type: "image/png".into(),
                disposition: Disposition::Inline {
                    content_id: "logo".into(),
                },
            },
        ];
        let stored = encode_attachments(&attachments);
        assert_eq!(decode_attachments(&stored).unwrap(), attachments);
        assert!(decode_attachments("{").is_err());
    }
}
