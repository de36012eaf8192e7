//! SMTP submission (issue 76, item 6): a message an application hands to Herald's submission
//! listener (`smtp/`), read into the fields of a `/v1/send` request and sent the way that
//! request is: planned whole by [`SendPlanner`] (verified `from` domain, recipients, headers,
//! attachments) and carried out by [`Sending`] (contact upserts, suppression, tracking, the
//! render budget, one transaction with the idempotency key, DKIM at hand-off).
//!
//! - **Credentials**: the project's secret key is the password (`AUTH PLAIN` or `LOGIN`, any
//!   user name); [`Submission::authenticate`].
//! - **Who receives**: the envelope's `RCPT TO` list, one email per address (a `Bcc` is an
//!   envelope recipient the headers do not show); each recipient's name is taken from the
//!   `To`, `Cc` or `Bcc` header that lists its address. Over the 50 recipients of a send, the
//!   message goes in parts of 50, all planned before any is sent.
//! - **The content**: `From` (with its name), `Subject`, `Reply-To`, the HTML part (a message
//!   with only a text part is sent as that text, preformatted), the attachments (inline ones
//!   by their `Content-ID`) and the extra headers `/v1/send` accepts (`X-…`, `In-Reply-To`,
//!   `References`…; the transport's and MIME's own are left out). The message is sent as
//!   written, never read as a template: subject and body reach the renderer as values
//!   (`{{smtpSubject}}`, `{{{smtpHtml}}}`) for this request only. The text alternative is derived
//!   from the HTML, as for every email Herald sends.
//! - **Idempotency**: the `Message-ID` with the envelope's recipients names the request (each
//!   part's, kept 24 hours like an `Idempotency-Key`): a client that submits the same message
//!   again after a lost `250` (or a failure after some parts were sent) is answered with the
//!   emails sent before, and nothing is sent twice.
//! - **Answers**: `Ok` only once every email is committed (queued, or recorded suppressed);
//!   every refusal is a [`SubmissionError`] with the reply code, the enhanced status code and
//!   the reason the API would give.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::domain::ids::{EmailId, ProjectId};
use crate::domain::keys::KeyKind;
use crate::domain::project::Project;
use crate::domain::send::{AttachmentInput, MAX_RECIPIENTS, check_subject};
use crate::services::ratelimit::{RateLimiter, bucket};
use crate::services::render_budget::RenderBudgetError;
use crate::services::send_plan::{SendInput, SendPlanError, SendPlanner};
use crate::services::sending::{Idempotency, QueuedEmail, SendError, SendPlan, Sending};
use crate::store::{Conflict, Store, StoreError};

mod message;

pub use message::{Party, Submitted, SubmittedAttachment, read_message, submitted};

/// The endpoint the idempotency keys of submitted messages are stored under.
const ENDPOINT: &str = "SMTP submission";

/// The variables the submitted subject and HTML reach the renderer as, for this request only,
/// and the "templates" that insert them as they are (the body unescaped): the message is never
/// parsed as a template.
const SUBJECT_VARIABLE: &str = "smtpSubject";
const HTML_VARIABLE: &str = "smtpHtml";
const SUBJECT_TEMPLATE: &str = "{{smtpSubject}}";
const BODY_TEMPLATE: &str = "{{{smtpHtml}}}";

/// Messages up to this size are parsed where they are submitted; larger ones on the CPU pool.
const INLINE_PARSE_BYTES: usize = 64 * 1024;

/// A refusal, as the SMTP reply it becomes: `code enhanced message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code} {enhanced} {message}")]
pub struct SubmissionError {
    /// The reply code: 535, 550, 552, 554 (permanent), 451, 454 (temporary)…
    pub code: u16,
    /// The enhanced status code (RFC 3463), e.g. `5.7.1`.
    pub enhanced: String,
    /// The reason, on one line.
    pub message: String,
}

impl SubmissionError {
    pub(crate) fn new(code: u16, enhanced: &str, message: impl Into<String>) -> SubmissionError {
        let message: String = message.into();
        SubmissionError {
            code,
            enhanced: enhanced.to_string(),
            message: message.replace(['\r', '\n'], " "),
        }
    }

    /// Whether the client may try the same message again later (a 4xx reply).
    pub fn is_temporary(&self) -> bool {
        self.code < 500
    }

    fn bad_credentials() -> SubmissionError {
        SubmissionError::new(
            535,
            "5.7.8",
            "authentication failed: use the project's secret key as the password",
        )
    }

    pub(crate) fn unparseable(why: &str) -> SubmissionError {
        SubmissionError::new(554, "5.6.0", why)
    }
}

/// Sends the messages submitted over SMTP through the path of `/v1/send`. Built once by
/// `app`, shared by every submission session.
pub struct Submission {
    store: Store,
    planner: SendPlanner,
    sending: Arc<Sending>,
    rate_limiter: Arc<RateLimiter>,
    /// The project's requests per minute (`rate_limit_per_minute`): a submitted message counts
    /// as one request made with the secret key.
    rate_limit: u32,
}

impl Submission {
    /// Submission planning with `planner`, sending through `sending`, each message counted by
    /// `rate_limiter` against `rate_limit` per minute, with the API's requests.
    pub fn new(
        store: Store,
        planner: SendPlanner,
        sending: Arc<Sending>,
        rate_limiter: Arc<RateLimiter>,
        rate_limit: u32,
    ) -> Submission {
        Submission {
            store,
            planner,
            sending,
            rate_limiter,
            rate_limit,
        }
    }

    /// The project whose *secret* key is `password` (`AUTH PLAIN`/`LOGIN`, any user name). A
    /// public key, an unknown key, anything else and a disabled project's key are `535 5.7.8`;
    /// a store that cannot answer is `454 4.7.0` (try again later).
    pub async fn authenticate(&self, password: &str) -> Result<ProjectId, SubmissionError> {
        let key = password.trim();
        if KeyKind::of(key) != Some(KeyKind::Secret) {
            return Err(SubmissionError::bad_credentials());
        }
        match self.store.project_by_key(KeyKind::Secret, key).await {
            Ok(Some(project)) if project.disabled => Err(SubmissionError::new(
                535,
                "5.7.8",
                "authentication failed: this project is disabled",
            )),
            Ok(Some(project)) => Ok(project.id),
            Ok(None) => Err(SubmissionError::bad_credentials()),
            Err(e) => {
                tracing::warn!(error = %e, "submission: the key could not be looked up");
                Err(SubmissionError::new(
                    454,
                    "4.7.0",
                    "temporary authentication failure: the database is unavailable; try again",
                ))
            }
        }
    }

    /// Sends `raw` (RFC 5322) to each of `rcpts` the way `/v1/send` does; `Ok` (the emails'
    /// ids, in the order of `rcpts`) only once every email is durably queued or recorded
    /// suppressed. `mail_from`, the envelope sender, is not used: the `From` header is the
    /// sender the rules check, and Herald writes its own return path.
    pub async fn submit(
        &self,
        project: &ProjectId,
        _mail_from: &str,
        rcpts: &[String],
        raw: &[u8],
    ) -> Result<Vec<EmailId>, SubmissionError> {
        let project = match self.store.project(project).await {
            Ok(p) => p,
            Err(StoreError::NotFound) => return Err(SubmissionError::bad_credentials()),
            Err(e) => return Err(store_refusal(e)),
        };
        if project.disabled {
            return Err(disabled());
        }
        let decision = self
            .rate_limiter
            .hit(
                &bucket(project.id.as_str(), KeyKind::Secret),
                self.rate_limit,
            )
            .await;
        if !decision.allowed {
            return Err(SubmissionError::new(
                451,
                "4.7.1",
                format!(
                    "this project may make {} requests per minute; retry after {} seconds",
                    self.rate_limit, decision.reset_secs
                ),
            ));
        }
        let submitted = if raw.len() <= INLINE_PARSE_BYTES {
            read_message(raw, rcpts)?
        } else {
            let (raw, rcpts) = (raw.to_vec(), rcpts.to_vec());
            self.sending
                .cpu()
                .run(move || read_message(&raw, &rcpts))
                .await?
        };
        // The subject reaches the planner as a value: its rule is checked here.
        let mut problems = Vec::new();
        if !submitted.subject.is_empty() {
            check_subject(&submitted.subject, "subject", &mut problems);
        }
        if !problems.is_empty() {
            return Err(plan_refusal(SendPlanError::Invalid(problems)));
        }
        // A send has at most `MAX_RECIPIENTS`, as `/v1/send`; a message to more (RFC 5321 asks a
        // server to take 100) goes in parts, each its own idempotent send, all of them planned
        // (every rule checked) before any is sent.
        let parts: Vec<Submitted> = if submitted.recipients.len() <= MAX_RECIPIENTS {
            vec![submitted]
        } else {
            submitted
                .recipients
                .chunks(MAX_RECIPIENTS)
                .map(|chunk| Submitted {
                    recipients: chunk.to_vec(),
                    ..submitted.clone()
                })
                .collect()
        };
        let mut planned = Vec::with_capacity(parts.len());
        for part in &parts {
            let hash = part.request_hash();
            let key = part.idempotency_key();
            if let Some(key) = &key
                && let Some(ids) = self.replayed(&project.id, key, &hash).await?
            {
                planned.push(Planned::Sent(ids));
                continue;
            }
            let plan = self
                .planner
                .plan(&project, &Request::of(part).input())
                .await
                .map_err(plan_refusal)?;
            planned.push(Planned::ToSend {
                plan: Box::new(plan),
                key,
                hash,
            });
        }
        let mut ids = Vec::with_capacity(rcpts.len());
        for part in planned {
            match part {
                Planned::Sent(sent) => ids.extend(sent),
                Planned::ToSend { plan, key, hash } => {
                    ids.extend(self.send(&project, &plan, key, &hash).await?);
                }
            }
        }
        Ok(ids)
    }

    /// Sends one planned part, storing its idempotency key with its emails; a concurrent
    /// session that sent the same part first is answered with its emails.
    async fn send(
        &self,
        project: &Project,
        plan: &SendPlan,
        key: Option<String>,
        hash: &str,
    ) -> Result<Vec<EmailId>, SubmissionError> {
        let respond = |queued: &[QueuedEmail]| json!({ "emails": queued.iter().map(|q| q.email_id.as_str()).collect::<Vec<_>>() });
        let idempotency = key.as_deref().map(|key| Idempotency {
            key,
            endpoint: ENDPOINT,
            request_hash: hash,
            respond: &respond,
        });
        match self.sending.send(project, plan, idempotency).await {
            Ok(queued) => Ok(queued.into_iter().map(|q| q.email_id).collect()),
            Err(SendError::Store(StoreError::Conflict(Conflict::IdempotencyKey))) => {
                let key = key.unwrap_or_default();
                match self.replayed(&project.id, &key, hash).await? {
                    Some(ids) => Ok(ids),
                    None => Err(SubmissionError::new(
                        451,
                        "4.3.0",
                        "this message is being sent by another session; try again",
                    )),
                }
            }
            Err(e) => Err(send_refusal(e)),
        }
    }

    /// The emails of the first submission stored under `key`, when it was this same message;
    /// a refusal when the key names another message.
    async fn replayed(
        &self,
        project: &ProjectId,
        key: &str,
        hash: &str,
    ) -> Result<Option<Vec<EmailId>>, SubmissionError> {
        let Some(stored) = self
            .store
            .idempotent_response(project, key)
            .await
            .map_err(store_refusal)?
        else {
            return Ok(None);
        };
        if stored.endpoint != ENDPOINT || stored.request_hash != hash {
            return Err(SubmissionError::new(
                554,
                "5.6.0",
                "a different message with this Message-ID was submitted to these recipients in \
                 the last 24 hours; give each message its own Message-ID",
            ));
        }
        Ok(Some(
            stored.response["emails"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter_map(EmailId::parse)
                .collect(),
        ))
    }
}

/// A part of a submission: sent before (its emails), or planned and ready to send.
enum Planned {
    Sent(Vec<EmailId>),
    ToSend {
        plan: Box<SendPlan>,
        key: Option<String>,
        hash: String,
    },
}

fn disabled() -> SubmissionError {
    SubmissionError::new(550, "5.7.1", "this project is disabled")
}

/// A submitted message as the values a [`SendInput`] borrows.
struct Request {
    to: Value,
    from: Value,
    data: BTreeMap<String, Value>,
    headers: BTreeMap<String, String>,
    reply: Option<String>,
    attachments: Vec<(String, String, String, Option<String>)>,
}

impl Request {
    fn of(s: &Submitted) -> Request {
        let party = |p: &Party| {
            let mut m = Map::new();
            if let Some(name) = &p.name {
                m.insert("name".into(), Value::String(name.clone()));
            }
            m.insert("email".into(), Value::String(p.email.clone()));
            Value::Object(m)
        };
        let once = |v: &str| json!({ "value": v, "persistent": false });
        Request {
            to: Value::Array(s.recipients.iter().map(party).collect()),
            from: party(&s.from),
            data: BTreeMap::from([
                (SUBJECT_VARIABLE.to_string(), once(&s.subject)),
                (HTML_VARIABLE.to_string(), once(&s.html)),
            ]),
            headers: s.headers.clone(),
            reply: s.reply_to.clone(),
            attachments: s
                .attachments
                .iter()
                .map(|a| {
                    (
                        a.filename.clone(),
                        base64::engine::general_purpose::STANDARD.encode(&a.content),
                        a.content_type.clone(),
                        a.content_id.clone(),
                    )
                })
                .collect(),
        }
    }

    fn input(&self) -> SendInput<'_> {
        SendInput {
            to: &self.to,
            subject: Some(SUBJECT_TEMPLATE),
            body: Some(BODY_TEMPLATE),
            template: None,
            from: Some(&self.from),
            name: None,
            subscribed: None,
            data: Some(&self.data),
            headers: Some(&self.headers),
            reply: self.reply.as_deref(),
            attachments: self
                .attachments
                .iter()
                .map(
                    |(filename, content, content_type, content_id)| AttachmentInput {
                        filename,
                        content,
                        content_type,
                        disposition: Some(if content_id.is_some() {
                            "inline"
                        } else {
                            "attachment"
                        }),
                        content_id: content_id.as_deref(),
                    },
                )
                .collect(),
        }
    }
}

/// The reply for a request the planner refused: by its first problem's field, every problem's
/// message.
fn plan_refusal(err: SendPlanError) -> SubmissionError {
    match err {
        SendPlanError::Invalid(problems) => {
            let message = problems
                .iter()
                .map(|p| format!("{}: {}", p.field, p.message))
                .collect::<Vec<_>>()
                .join("; ");
            let first = problems.first();
            let field = first.map_or("", |p| p.field.as_str());
            let code = first.map_or("", |p| p.code);
            let (reply, enhanced) = if field.starts_with("from") {
                (550, "5.1.7")
            } else if field == "to" && code == "too_many" {
                (550, "5.5.3")
            } else if field.starts_with("to") || field == "reply" {
                (550, "5.1.3")
            } else if field.starts_with("attachments")
                && (code == "too_many" || field == "attachments")
            {
                (552, "5.3.4")
            } else {
                (554, "5.6.0")
            };
            SubmissionError::new(reply, enhanced, message)
        }
        SendPlanError::NotVerified(message) => SubmissionError::new(550, "5.7.1", message),
        SendPlanError::Incomplete => {
            SubmissionError::new(451, "4.3.0", "the message could not be planned; try again")
        }
        SendPlanError::Store(e) => store_refusal(e),
    }
}

/// The reply for a send that failed after its plan.
fn send_refusal(err: SendError) -> SubmissionError {
    match err {
        e @ SendError::TooLarge { .. } => SubmissionError::new(552, "5.3.4", e.to_string()),
        SendError::Render(e) => SubmissionError::new(554, "5.6.0", e.to_string()),
        SendError::Mime(e) => SubmissionError::new(554, "5.6.0", e.to_string()),
        SendError::Suspended(reason) => SubmissionError::new(550, "5.7.1", reason),
        SendError::RenderBudget(e @ RenderBudgetError::OverBudget { .. }) => {
            SubmissionError::new(552, "5.3.4", e.to_string())
        }
        SendError::RenderBudget(e) => SubmissionError::new(451, "4.3.0", e.to_string()),
        SendError::Store(e) => store_refusal(e),
        e @ SendError::Dkim(_) => {
            tracing::error!(error = %e, "submission: the message could not be signed");
            SubmissionError::new(451, "4.3.0", "the message could not be signed; try again")
        }
    }
}

/// The reply for a store failure: a cap the project reached is permanent until raised; the
/// rest is temporary (`451 4.3.0`), the same message may pass later.
fn store_refusal(err: StoreError) -> SubmissionError {
    match err {
        e @ (StoreError::BillingLimit(_) | StoreError::Cap(_)) => {
            SubmissionError::new(550, "5.7.0", e.to_string())
        }
        e => {
            tracing::warn!(error = %e, "submission: the store failed");
            SubmissionError::new(
                451,
                "4.3.0",
                format!("temporary failure, nothing was sent; try again ({e})"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::send::Problem;
    use crate::domain::template::CompiledTemplate;

    #[test]
    fn the_message_reaches_the_renderer_as_values_never_as_a_template() {
        let s = read_message(
            "From: a@example.com\r\nSubject: {{code}} ?? x\r\nContent-Type: text/html\r\n\r\n\
             <p>{{name ?? there}} {{{raw}}} \\{{x}} {{#if}}</p>"
                .as_bytes(),
            &["b@example.org".to_string()],
        )
        .unwrap();
        let request = Request::of(&s);
        let input = request.input();
        let data = crate::domain::custom_data::DataPatch::parse(
            input.data.unwrap().clone().into_iter().collect(),
        )
        .unwrap();
        assert!(
            data.is_noop(),
            "nothing of the message is stored on the contact"
        );
        let template =
            CompiledTemplate::compile(input.subject.unwrap(), input.body.unwrap()).unwrap();
        let rendered = template.render(&Value::Object(data.transient)).unwrap();
        assert_eq!(rendered.subject, "{{code}} ?? x");
        assert_eq!(
            rendered.html.trim(),
            "<p>{{name ?? there}} {{{raw}}} \\{{x}} {{#if}}</p>"
        );
        assert_eq!(SUBJECT_TEMPLATE, format!("{{{{{SUBJECT_VARIABLE}}}}}"));
        assert_eq!(BODY_TEMPLATE, format!("{{{{{{{HTML_VARIABLE}}}}}}}"));
    }

    #[test]
    fn refusals_carry_the_reply_the_apis_error_would_give() {
        let problem = |field: &str, code: &'static str| Problem {
            field: field.into(),
            code,
            message: format!("{field} is wrong"),
        };
        let reply = |problems: Vec<Problem>| {
            let e = plan_refusal(SendPlanError::Invalid(problems));
            (e.code, e.enhanced)
        };
        assert_eq!(
            reply(vec![problem("from", "invalid_email")]),
            (550, "5.1.7".into())
        );
        assert_eq!(
            reply(vec![problem("to[1].email", "invalid_email")]),
            (550, "5.1.3".into())
        );
        assert_eq!(
            reply(vec![problem("to", "too_many")]),
            (550, "5.5.3".into())
        );
        assert_eq!(
            reply(vec![problem("attachments", "too_large")]),
            (552, "5.3.4".into())
        );
        assert_eq!(
            reply(vec![problem("attachments", "too_many")]),
            (552, "5.3.4".into())
        );
        assert_eq!(
            reply(vec![problem("attachments[0].contentType", "invalid")]),
            (554, "5.6.0".into())
        );
        let both = plan_refusal(SendPlanError::Invalid(vec![
            problem("to[0].email", "invalid_email"),
            problem("reply", "invalid_email"),
        ]));
        assert_eq!(
            both.message,
            "to[0].email: to[0].email is wrong; reply: reply is wrong"
        );
        let unverified = plan_refusal(SendPlanError::NotVerified(
            "the domain example.com is not verified for this project".into(),
        ));
        assert_eq!(
            unverified.to_string(),
            "550 5.7.1 the domain example.com is not verified for this project"
        );
        let down = store_refusal(StoreError::Unavailable("gone".into()));
        assert_eq!((down.code, down.enhanced.as_str()), (451, "4.3.0"));
        assert!(down.is_temporary());
        let too_large = send_refusal(SendError::TooLarge {
            to: "a@example.org".into(),
            size: 50_000_000,
        });
        assert_eq!(
            (too_large.code, too_large.enhanced.as_str()),
            (552, "5.3.4")
        );
        let suspended = send_refusal(SendError::Suspended("bounce rate".into()));
        assert_eq!(suspended.to_string(), "550 5.7.1 bounce rate");
        assert_eq!(
            SubmissionError::bad_credentials().to_string(),
            "535 5.7.8 authentication failed: use the project's secret key as the password"
        );
    }
}
