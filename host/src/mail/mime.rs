//! The MIME message of one email, built with lettre: `multipart/alternative` (text and HTML),
//! wrapped in `multipart/related` when there are inline parts and in `multipart/mixed` when there
//! are attachments; the service's own headers (Message-ID naming the email's id, Reply-To,
//! `List-Unsubscribe` with `List-Unsubscribe-Post` for one-click unsubscribe) and the caller's.

use lettre::Message;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment as Part, MultiPart, SinglePart};

use crate::domain::email::EmailAddress;
use crate::domain::send::{Attachment, Disposition, Mailbox};

/// Why a message could not be built.
#[derive(Debug, thiserror::Error)]
pub enum MimeError {
    /// An address lettre refuses.
    #[error("the address `{0}` cannot be used in a message header")]
    Address(String),
    /// A header lettre refuses.
    #[error("the header `{0}` cannot be used")]
    Header(String),
    /// A content type lettre refuses.
    #[error("the content type `{0}` is not valid")]
    ContentType(String),
    /// Anything else lettre reports.
    #[error("the message cannot be built: {0}")]
    Build(String),
}

/// Everything one email's message is made of.
pub struct Outgoing<'a> {
    /// Sender.
    pub from: &'a Mailbox,
    /// Recipient.
    pub to: &'a Mailbox,
    /// Reply-To.
    pub reply_to: Option<&'a EmailAddress>,
    /// Subject (rendered).
    pub subject: &'a str,
    /// HTML body (rendered, tracked).
    pub html: &'a str,
    /// Plain-text alternative.
    pub text: &'a str,
    /// `Message-ID` without angle brackets, e.g. `eml_…@example.com`.
    pub message_id: &'a str,
    /// The caller's headers.
    pub headers: &'a [(String, String)],
    /// Attachments and inline parts.
    pub attachments: &'a [Attachment],
    /// One-click unsubscribe URL (marketing mail): `List-Unsubscribe` and
    /// `List-Unsubscribe-Post`.
    pub list_unsubscribe: Option<&'a str>,
}

fn mailbox(m: &Mailbox) -> Result<lettre::message::Mailbox, MimeError> {
    let address = m
        .email
        .as_str()
        .parse::<lettre::Address>()
        .map_err(|_| MimeError::Address(m.email.to_string()))?;
    Ok(lettre::message::Mailbox::new(m.name.clone(), address))
}

fn raw_header(name: &str, value: &str) -> Result<HeaderValue, MimeError> {
    let header_name =
        HeaderName::new_from_ascii(name.to_string()).map_err(|_| MimeError::Header(name.into()))?;
    Ok(HeaderValue::new(header_name, value.to_string()))
}

/// Names of the headers a message carries, for the DKIM signature (`h=`), which signs the
/// formatted message.
pub fn signed_header_names(o: &Outgoing<'_>) -> Vec<&'static str> {
    let mut names = vec![
        "From",
        "To",
        "Subject",
        "Date",
        "Message-ID",
        "MIME-Version",
        "Content-Type",
    ];
    if o.reply_to.is_some() {
        names.push("Reply-To");
    }
    if o.list_unsubscribe.is_some() {
        names.push("List-Unsubscribe");
        names.push("List-Unsubscribe-Post");
    }
    names
}

/// Builds the message.
pub fn build(o: &Outgoing<'_>) -> Result<Message, MimeError> {
    let mut builder = Message::builder()
        .from(mailbox(o.from)?)
        .to(mailbox(o.to)?)
        .subject(o.subject)
        .date_now()
        .message_id(Some(format!("<{}>", o.message_id)))
        // Bounce reports quote the original headers; this one names the email for them.
        .raw_header(raw_header(
            "X-Herald-Message-Id",
            &format!("<{}>", o.message_id),
        )?);
    if let Some(reply) = o.reply_to {
        builder = builder.reply_to(mailbox(&Mailbox {
            name: None,
            email: reply.clone(),
        })?);
    }
    if let Some(url) = o.list_unsubscribe {
        builder = builder
            .raw_header(raw_header("List-Unsubscribe", &format!("<{url}>"))?)
            .raw_header(raw_header(
                "List-Unsubscribe-Post",
                "List-Unsubscribe=One-Click",
            )?);
    }
    for (name, value) in o.headers {
        builder = builder.raw_header(raw_header(name, value)?);
    }

    let alternative = MultiPart::alternative_plain_html(o.text.to_string(), o.html.to_string());
    let content_type =
        |ct: &str| ContentType::parse(ct).map_err(|_| MimeError::ContentType(ct.to_string()));
    let (inline, files): (Vec<&Attachment>, Vec<&Attachment>) = o
        .attachments
        .iter()
        .partition(|a| matches!(a.disposition, Disposition::Inline { .. }));
    let mut body = alternative;
    if !inline.is_empty() {
        let mut related = MultiPart::related().multipart(body);
        for a in inline {
            let Disposition::Inline { content_id } = &a.disposition else {
                continue;
            };
            let part: SinglePart = Part::new_inline(content_id.clone())
                .body(a.content.clone(), content_type(&a.content_type)?);
            related = related.singlepart(part);
        }
        body = related;
    }
    if !files.is_empty() {
        let mut mixed = MultiPart::mixed().multipart(body);
        for a in files {
            let part = Part::new(a.filename.clone())
                .body(a.content.clone(), content_type(&a.content_type)?);
            mixed = mixed.singlepart(part);
        }
        body = mixed;
    }
    builder
        .multipart(body)
        .map_err(|e| MimeError::Build(e.to_string()))
}
