//! Automatic replies (RFC 3834): `Auto-Submitted` other than `no`, the `X-Autoreply` /
//! `X-Autorespond` headers of vacation programs, `Precedence: auto_reply`, and the subjects mail
//! clients give out-of-office notices ("Out of Office", "Automatic reply: …").

use mail_parser::Message;

use super::header_text;

/// Subject beginnings of out-of-office and automatic replies (lowercase), in the languages mail
/// clients most often write them.
const SUBJECTS: [&str; 16] = [
    "out of office",
    "out-of-office",
    "automatic reply",
    "auto reply",
    "auto-reply",
    "autoreply",
    "auto response",
    "auto-response",
    "autoresponse",
    "automatische antwort",
    "abwesenheitsnotiz",
    "réponse automatique",
    "respuesta automática",
    "risposta automatica",
    "resposta automática",
    "automatisch antwoord",
];

/// Whether `message` says it is an automatic reply.
pub(super) fn is_auto_reply(message: &Message<'_>) -> bool {
    let auto_submitted = header_text(message, "Auto-Submitted").is_some_and(|value| {
        let keyword = value.split([';', '(']).next().unwrap_or("").trim();
        !keyword.is_empty() && !keyword.eq_ignore_ascii_case("no")
    });
    let vacation_header = ["X-Autoreply", "X-Autorespond", "X-Auto-Reply"]
        .iter()
        .any(|name| {
            header_text(message, name).is_some_and(|v| !v.trim().eq_ignore_ascii_case("no"))
        });
    let precedence = header_text(message, "Precedence").is_some_and(|v| {
        let v = v.trim();
        v.eq_ignore_ascii_case("auto_reply") || v.eq_ignore_ascii_case("auto-reply")
    });
    auto_submitted || vacation_header || precedence || auto_reply_subject(message)
}

fn auto_reply_subject(message: &Message<'_>) -> bool {
    let Some(subject) = message.subject() else {
        return false;
    };
    let start: String = subject
        .trim_start()
        .chars()
        .take(32)
        .collect::<String>()
        .to_lowercase();
    SUBJECTS.iter().any(|s| start.starts_with(s))
}
