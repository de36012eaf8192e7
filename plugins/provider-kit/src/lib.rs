//! What the provider transport plugins share: [`deliver`], their settings, outcomes and JSON
//! calls; [`split`], which turns the message Herald built into the fields of the APIs that take
//! fields rather than a MIME message (Postmark, Resend…); [`timestamp`], the providers' RFC 3339
//! times; [`retry_after`], a `429`'s wait; [`same`], secrets compared in constant time.
//!
//! A library each plugin (one component each) links in.

pub mod deliver;

use mail_parser::{Addr, Address, MessageParser, MimeHeaders};

/// A file the message carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Attachment {
    /// Its file name (`attachment` when the part names none).
    pub name: String,
    /// `type/subtype`.
    pub content_type: String,
    /// The `Content-ID` of an inline part, without angle brackets.
    pub content_id: Option<String>,
    /// The decoded content.
    pub content: Vec<u8>,
}

/// The fields of one message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fields {
    /// The sender, as `Name <address>` or `address`.
    pub from: String,
    /// The `To` recipients (the envelope's recipients when the message has no `To`).
    pub to: Vec<String>,
    /// The `Cc` recipients.
    pub cc: Vec<String>,
    /// Envelope recipients named in neither `To` nor `Cc`.
    pub bcc: Vec<String>,
    /// The `Reply-To` addresses.
    pub reply_to: Vec<String>,
    /// The subject (decoded).
    pub subject: String,
    /// The HTML body.
    pub html: Option<String>,
    /// The plain-text body.
    pub text: Option<String>,
    /// Every other header, in order, unfolded and decoded: `Message-ID`,
    /// `X-Herald-Message-Id`, `List-Unsubscribe`, `List-Unsubscribe-Post` and the sender's own.
    /// Left out: the ones the fields carry, the MIME structure's, `Date` and the trace and
    /// signature headers (the provider writes, and signs, its own).
    pub headers: Vec<(String, String)>,
    /// Attachments and inline parts.
    pub attachments: Vec<Attachment>,
}

/// Headers the fields carry or the provider writes itself (lower case).
const NOT_FORWARDED: [&str; 17] = [
    "from",
    "to",
    "cc",
    "bcc",
    "reply-to",
    "sender",
    "subject",
    "date",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "content-disposition",
    "content-id",
    "dkim-signature",
    "return-path",
    "received",
    "x-mailgun-variables",
];

/// A mailbox as the providers take it: `address`, or `Name <address>` with the name quoted
/// when it holds characters special in an address.
pub fn mailbox(name: Option<&str>, address: &str) -> String {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        None => address.to_string(),
        Some(name) if name.chars().any(|c| "()<>[]:;@\\,.\"".contains(c)) => {
            let escaped = name.replace('\\', "\\\\").replace('"', "\\\"");
            format!("\"{escaped}\" <{address}>")
        }
        Some(name) => format!("{name} <{address}>"),
    }
}

fn addresses(address: Option<&Address<'_>>) -> Vec<String> {
    address
        .map(|a| {
            a.iter()
                .filter_map(|addr: &Addr<'_>| Some(mailbox(addr.name(), addr.address()?)))
                .collect()
        })
        .unwrap_or_default()
}

fn bare(address: Option<&Address<'_>>) -> Vec<String> {
    address
        .map(|a| {
            a.iter()
                .filter_map(|addr| addr.address().map(str::to_ascii_lowercase))
                .collect()
        })
        .unwrap_or_default()
}

/// A raw header value unfolded (`CRLF WSP` joined into one line) and trimmed.
fn unfold(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for (i, line) in raw.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if i > 0 && !line.is_empty() {
            out.push(' ');
            out.push_str(line.trim_start());
        } else {
            out.push_str(line);
        }
    }
    out.trim().to_string()
}

/// Splits Herald's message `raw`, sent to the envelope `recipients`, into its fields.
pub fn split(raw: &[u8], recipients: &[String]) -> Result<Fields, String> {
    let message = MessageParser::default()
        .parse(raw)
        .ok_or("the message cannot be parsed as MIME")?;
    let from = addresses(message.from())
        .into_iter()
        .next()
        .ok_or("the message has no From address")?;
    let mut to = addresses(message.to());
    let cc = addresses(message.cc());
    let mut named = bare(message.to());
    named.extend(bare(message.cc()));
    if to.is_empty() {
        to = recipients.to_vec();
        named.extend(recipients.iter().map(|r| r.to_ascii_lowercase()));
    }
    let bcc = recipients
        .iter()
        .filter(|r| !named.contains(&r.to_ascii_lowercase()))
        .cloned()
        .collect();
    let mut headers = Vec::new();
    for (name, value) in message.headers_raw() {
        if NOT_FORWARDED.contains(&name.to_ascii_lowercase().as_str()) {
            continue;
        }
        let mut value = unfold(value);
        if value.contains("=?") {
            // An encoded word: the decoded text, when the parser has one.
            if let Some(text) = message.header(name).and_then(|h| h.as_text()) {
                value = text.to_string();
            }
        }
        headers.push((name.to_string(), value));
    }
    let html = message
        .html_part(0)
        .filter(|p| p.is_text_html())
        .and_then(|p| p.text_contents())
        .map(str::to_string);
    let text = message
        .text_part(0)
        .filter(|p| p.is_text() && !p.is_text_html())
        .and_then(|p| p.text_contents())
        .map(str::to_string);
    let attachments = message
        .attachments()
        .map(|part| Attachment {
            name: part.attachment_name().unwrap_or("attachment").to_string(),
            content_type: part
                .content_type()
                .map(|ct| match ct.subtype() {
                    Some(sub) => format!("{}/{sub}", ct.ctype()),
                    None => ct.ctype().to_string(),
                })
                .unwrap_or_else(|| "application/octet-stream".to_string()),
            content_id: part
                .content_id()
                .map(|id| id.trim_matches(['<', '>']).to_string()),
            content: part.contents().to_vec(),
        })
        .collect();
    Ok(Fields {
        from,
        to,
        cc,
        bcc,
        reply_to: addresses(message.reply_to()),
        subject: message.subject().unwrap_or("").to_string(),
        html,
        text,
        headers,
        attachments,
    })
}

/// The value of the header `name` (any case) among `headers`.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Seconds to wait before trying again after a `429`: the `Retry-After` header (seconds, or
/// an HTTP date is not used by these providers), 60 when absent or unreadable, at least 1.
pub fn retry_after(headers: &[(String, String)]) -> u64 {
    header(headers, "retry-after")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(60, |s| (s.ceil() as u64).max(1))
}

/// Whether two secrets are equal, in time independent of where they differ.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Milliseconds since the epoch of an RFC 3339 time (`2019-11-05T16:33:54.9070259Z`,
/// `2024-11-22T23:41:11.894719+00:00`), or `None` when it is not one.
pub fn timestamp(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, rest) = text.split_once(['T', 't', ' '])?;
    let mut d = date.splitn(3, '-');
    let year: i64 = d.next()?.parse().ok()?;
    let month: i64 = d.next()?.parse().ok()?;
    let day: i64 = d.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // The offset: `Z`, `+hh:mm` or `-hh:mm` (none: UTC).
    let (time, offset_min) = if let Some(t) = rest.strip_suffix(['Z', 'z']) {
        (t, 0)
    } else if let Some(at) = rest.rfind(['+', '-']) {
        let (t, off) = rest.split_at(at);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let off = &off[1..];
        let (h, m) = off
            .split_once(':')
            .unwrap_or((&off[..2.min(off.len())], "0"));
        (
            t,
            sign * (h.parse::<i64>().ok()? * 60 + m.parse::<i64>().ok()?),
        )
    } else {
        (rest, 0)
    };
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':');
    let hour: i64 = t.next()?.parse().ok()?;
    let minute: i64 = t.next()?.parse().ok()?;
    let second: i64 = t.next().unwrap_or("0").parse().ok()?;
    let millis: i64 = if fraction.is_empty() {
        0
    } else {
        let digits: String = fraction.chars().take(3).collect();
        if !digits.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        format!("{digits:0<3}").parse().ok()?
    };
    // Days since the epoch of the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60;
    Some(seconds * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(timestamp("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            timestamp("2019-11-05T16:33:54.9070259Z"),
            Some(1_572_971_634_907)
        );
        assert_eq!(
            timestamp("2024-11-22T23:41:11.894719+00:00"),
            Some(1_732_318_871_894)
        );
        assert_eq!(
            timestamp("2024-11-23T01:41:11+02:00"),
            Some(1_732_318_871_000)
        );
        assert_eq!(timestamp("yesterday"), None);
    }

    #[test]
    fn retry() {
        let h = |v: &str| vec![("Retry-After".to_string(), v.to_string())];
        assert_eq!(retry_after(&h("7")), 7);
        assert_eq!(retry_after(&h("0.2")), 1);
        assert_eq!(retry_after(&h("soon")), 60);
        assert_eq!(retry_after(&[]), 60);
    }

    #[test]
    fn mailboxes() {
        assert_eq!(mailbox(None, "a@x.test"), "a@x.test");
        assert_eq!(mailbox(Some("Ann"), "a@x.test"), "Ann <a@x.test>");
        assert_eq!(
            mailbox(Some("Lee, \"Ann\""), "a@x.test"),
            "\"Lee, \\\"Ann\\\"\" <a@x.test>"
        );
    }

    #[test]
    fn splits_a_message() {
        let raw = "From: Acme <hi@acme.test>\r\nTo: ann@example.com\r\nReply-To: help@acme.test\r\n\
Subject: =?utf-8?q?Caf=C3=A9?=\r\nDate: Mon, 7 Dec 2026 02:00:00 +0000\r\n\
Message-ID: <eml_1@acme.test>\r\nList-Unsubscribe: <https://h.test/u/1>\r\n\
X-Custom: a\r\n b\r\nDKIM-Signature: v=1; a=rsa-sha256\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"m\"\r\n\r\n--m\r\n\
Content-Type: multipart/alternative; boundary=\"a\"\r\n\r\n--a\r\n\
Content-Type: text/plain; charset=utf-8\r\n\r\nHi\r\n--a\r\n\
Content-Type: text/html; charset=utf-8\r\n\r\n<p>Hi</p>\r\n--a--\r\n--m\r\n\
Content-Type: text/csv\r\nContent-Disposition: attachment; filename=\"r.csv\"\r\n\
Content-Transfer-Encoding: base64\r\n\r\nYSxi\r\n--m--\r\n";
        let f = split(
            raw.as_bytes(),
            &["ann@example.com".into(), "b@x.test".into()],
        )
        .unwrap();
        assert_eq!(f.from, "Acme <hi@acme.test>");
        assert_eq!(f.to, ["ann@example.com"]);
        assert_eq!(f.bcc, ["b@x.test"]);
        assert_eq!(f.reply_to, ["help@acme.test"]);
        assert_eq!(f.subject, "Café");
        assert_eq!(f.text.as_deref().map(str::trim), Some("Hi"));
        assert_eq!(f.html.as_deref().map(str::trim), Some("<p>Hi</p>"));
        let names: Vec<&str> = f.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Message-ID", "List-Unsubscribe", "X-Custom"]);
        assert_eq!(header(&f.headers, "x-custom"), Some("a b"));
        assert_eq!(f.attachments.len(), 1);
        assert_eq!(f.attachments[0].name, "r.csv");
        assert_eq!(f.attachments[0].content_type, "text/csv");
        assert_eq!(f.attachments[0].content, b"a,b");
    }
}
