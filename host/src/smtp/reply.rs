//! One SMTP reply: a code, its enhanced status code (RFC 3463, in every reply but the greeting
//! and the answer to `EHLO`/`HELO`, as RFC 2034 has it) and a line of text, written by
//! `smtp-proto`.

use std::borrow::Cow;

/// A reply to one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The reply code (`250`, `550`…).
    pub code: u16,
    /// The enhanced status code (`[5, 1, 1]` for `5.1.1`).
    pub enhanced: [u8; 3],
    /// The text, one line.
    pub text: Cow<'static, str>,
}

impl Reply {
    /// A reply with a fixed text.
    pub const fn fixed(code: u16, enhanced: [u8; 3], text: &'static str) -> Reply {
        Reply {
            code,
            enhanced,
            text: Cow::Borrowed(text),
        }
    }

    /// A reply with a text made at run time (kept to one line of printable characters).
    pub fn new(code: u16, enhanced: [u8; 3], text: impl Into<String>) -> Reply {
        let text: String = text
            .into()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(400)
            .collect();
        Reply {
            code,
            enhanced,
            text: Cow::Owned(text),
        }
    }

    /// A reply from a code, an enhanced code as text (`"5.7.1"`) and a message, as the services
    /// answer; an enhanced code that does not parse becomes the class's generic one (`x.0.0`).
    pub fn parsed(code: u16, enhanced: &str, text: impl Into<String>) -> Reply {
        let class = (code / 100).clamp(2, 5) as u8;
        let mut parts = enhanced.split('.').map(|p| p.parse::<u8>().ok());
        let esc = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(Some(a)), Some(Some(b)), Some(Some(c)), None) if a == class => [a, b, c],
            _ => [class, 0, 0],
        };
        Reply::new(code, esc, text)
    }

    /// Whether the reply accepts (2xx or 3xx).
    pub fn is_positive(&self) -> bool {
        self.code < 400
    }

    /// Appends the reply's line to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let [a, b, c] = self.enhanced;
        // Writing into a Vec cannot fail.
        let _ = smtp_proto::Response::new(self.code, a, b, c, &self.text).write(out);
    }
}

/// `250 2.0.0`: done.
pub const OK: Reply = Reply::fixed(250, [2, 0, 0], "OK");
/// `451 4.3.0`: the database could not be reached; the client tries again later.
pub const TRY_LATER: Reply =
    Reply::fixed(451, [4, 3, 0], "temporary failure, please try again later");
/// `550 5.1.1`: nobody here by that address.
pub const NO_SUCH_USER: Reply = Reply::fixed(550, [5, 1, 1], "no such recipient here");
/// `452 4.3.1`: the listener's memory budget has no room for the message now
/// (`inbound.memory_mb`, `submission.memory_mb`); the client tries again later.
pub const NO_ROOM: Reply = Reply::fixed(452, [4, 3, 1], "insufficient system storage");
/// `552 5.3.4`: the message is over the size limit.
pub const TOO_BIG: Reply = Reply::fixed(
    552,
    [5, 3, 4],
    "message size exceeds the fixed maximum message size",
);

#[cfg(test)]
mod tests {
    use super::*;

    fn text(reply: &Reply) -> String {
        let mut out = Vec::new();
        reply.write(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn replies_carry_their_enhanced_code_on_one_line() {
        assert_eq!(text(&NO_SUCH_USER), "550 5.1.1 no such recipient here\r\n");
        assert_eq!(
            text(&Reply::new(550, [5, 7, 1], "bad\r\nRCPT TO:<x>")),
            "550 5.7.1 bad  RCPT TO:<x>\r\n"
        );
    }

    #[test]
    fn a_service_code_is_parsed_or_falls_back_to_its_class() {
        assert_eq!(Reply::parsed(550, "5.7.1", "x").enhanced, [5, 7, 1]);
        assert_eq!(Reply::parsed(451, "4.3.0", "x").enhanced, [4, 3, 0]);
        assert_eq!(Reply::parsed(550, "4.3.0", "x").enhanced, [5, 0, 0]);
        assert_eq!(Reply::parsed(535, "nonsense", "x").enhanced, [5, 0, 0]);
    }
}
