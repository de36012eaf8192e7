//! Feedback-loop reports (ARF, RFC 5965): the `message/feedback-report` part's fields
//! (`Feedback-Type`, `Original-Rcpt-To`) and the returned message's id.

use mail_parser::MessagePart;

use super::{
    Complaint, MAX_REPORT_BYTES, capped_text, field, field_groups, normalize_address,
    returned_message_id, single_to, with_returned,
};

/// The complaint a feedback report (`report`, the part's decoded contents) makes about the
/// message returned in `returned`; `None` without a `Feedback-Type`.
pub(super) fn parse(report: &[u8], returned: Option<&MessagePart<'_>>) -> Option<Complaint> {
    let text = capped_text(report, MAX_REPORT_BYTES);
    let fields: Vec<(String, String)> = field_groups(&text).into_iter().flatten().collect();
    let feedback_type = field(&fields, "feedback-type")?
        .split(|c: char| c.is_whitespace() || c == ';' || c == '(')
        .next()
        .filter(|t| !t.is_empty())?
        .to_ascii_lowercase();
    let original_recipient = field(&fields, "original-rcpt-to")
        .and_then(normalize_address)
        .or_else(|| returned.and_then(|part| with_returned(part, single_to)));
    Some(Complaint {
        feedback_type,
        original_message_id: returned.and_then(returned_message_id),
        original_recipient,
    })
}
