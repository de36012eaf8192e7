//! The plan of a `/v1/send` request: its fields checked whole (every problem found is reported
//! at once, before anything is written) and resolved against the project, its template and
//! its default sender into a [`SendPlan`] that [`Sending::send`] carries out: the recipients,
//! the sender and who signs for it, the reply-to, the compiled subject and body, the data,
//! headers and attachments.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::domain::custom_data::DataPatch;
use crate::domain::email::EmailAddress;
use crate::domain::ids::TemplateId;
use crate::domain::project::Project;
use crate::domain::send::{
    AttachmentInput, Mailbox, Problem, check_subject, parse_attachments, parse_headers,
    parse_mailbox, parse_recipients,
};
use crate::domain::template::fields::TemplateType;
use crate::services::sending::{SendPlan, Sending};
use crate::services::sending_domains::{SenderError, SendingDomains};
use crate::store::{Store, StoreError};

/// The fields of a `/v1/send` request as sent, before any check.
pub struct SendInput<'a> {
    /// Recipients: an address, `"Name <address>"`, `{ "name", "email" }`, or an array of them.
    pub to: &'a Value,
    /// The subject, which overrides the template's.
    pub subject: Option<&'a str>,
    /// The HTML body, which overrides the template's.
    pub body: Option<&'a str>,
    /// A template id (`tpl_…`).
    pub template: Option<&'a str>,
    /// The sender, in any of the recipients' shapes.
    pub from: Option<&'a Value>,
    /// The sender's name when `from` is an address without one (deprecated).
    pub name: Option<&'a str>,
    /// The subscription state asked for.
    pub subscribed: Option<bool>,
    /// Template variables and contact data.
    pub data: Option<&'a BTreeMap<String, Value>>,
    /// Extra headers.
    pub headers: Option<&'a BTreeMap<String, String>>,
    /// The Reply-To address.
    pub reply: Option<&'a str>,
    /// The attachments.
    pub attachments: Vec<AttachmentInput<'a>>,
}

/// Why a send request has no plan.
#[derive(Debug, thiserror::Error)]
pub enum SendPlanError {
    /// The request breaks rules: every problem found, in order.
    #[error("the send request has {} problem(s)", .0.len())]
    Invalid(Vec<Problem>),
    /// The sender's domain is not verified for the project; the message says which.
    #[error("{0}")]
    NotVerified(String),
    /// A request that passed the checks lacks a part (a defect, never the caller's doing).
    #[error("a checked send request lacks a part")]
    Incomplete,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Plans `/v1/send` requests: reads the template, compiles the content through [`Sending`]
/// (sharing what the project's earlier sends compiled) and authorizes the sender through
/// [`SendingDomains`].
pub struct SendPlanner {
    store: Store,
    sending: Arc<Sending>,
    sending_domains: Arc<SendingDomains>,
}

impl SendPlanner {
    /// A planner reading from `store`, compiling with `sending` and asking `sending_domains`
    /// who signs for a sender.
    pub fn new(
        store: Store,
        sending: Arc<Sending>,
        sending_domains: Arc<SendingDomains>,
    ) -> SendPlanner {
        SendPlanner {
            store,
            sending,
            sending_domains,
        }
    }

    /// Checks the whole request and turns it into a plan; every problem is reported at once.
    pub async fn plan(
        &self,
        project: &Project,
        body: &SendInput<'_>,
    ) -> Result<SendPlan, SendPlanError> {
        let mut problems = Vec::new();
        let recipients = parse_recipients(body.to, &mut problems);

        let template = match body.template {
            Some(id) => {
                let found = match TemplateId::parse(id) {
                    Some(tid) => match self.store.template(&project.id, &tid).await {
                        Ok(t) => Some(t.fields),
                        Err(StoreError::NotFound) => None,
                        Err(e) => return Err(e.into()),
                    },
                    None => None,
                };
                if found.is_none() {
                    problems.push(Problem {
                        field: "template".into(),
                        code: "not_found",
                        message: format!("no template `{id}` in this project"),
                    });
                }
                found
            }
            None => None,
        };
        // The template's topic (a topic a template names cannot be deleted, but a concurrent
        // change may have): its mail goes only to the topic's subscribers.
        let topic = match template.as_ref().and_then(|t| t.topic.as_ref()) {
            Some(id) => match self.store.topic(&project.id, id).await {
                Ok(t) => Some(t),
                Err(StoreError::NotFound) => {
                    problems.push(Problem {
                        field: "template".into(),
                        code: "not_found",
                        message: format!("the template's topic `{id}` no longer exists"),
                    });
                    None
                }
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        if let Some(subject) = body.subject {
            check_subject(subject, "subject", &mut problems);
        }
        if body.body == Some("") {
            problems.push(Problem {
                field: "body".into(),
                code: "required",
                message: "the body is empty".into(),
            });
        }
        let subject = body
            .subject
            .map(str::to_string)
            .or_else(|| template.as_ref().map(|t| t.subject.clone()));
        let html = body
            .body
            .map(str::to_string)
            .or_else(|| template.as_ref().map(|t| t.body.clone()));
        if body.template.is_none() {
            for (field, missing) in [("subject", subject.is_none()), ("body", html.is_none())] {
                if missing {
                    problems.push(Problem {
                        field: field.into(),
                        code: "required",
                        message: format!("`{field}` is required unless a template is given"),
                    });
                }
            }
        }

        let from = match body.from {
            Some(value) => parse_mailbox(value, "from", &mut problems).map(|mut m| {
                if m.name.is_none() && matches!(value, Value::String(_)) {
                    m.name = body
                        .name
                        .map(str::trim)
                        .filter(|n| !n.is_empty() && !n.contains(['\r', '\n']))
                        .map(str::to_string);
                }
                m
            }),
            None => match template.as_ref().and_then(|t| {
                t.from_email.clone().map(|email| Mailbox {
                    name: t.from_name.clone(),
                    email,
                })
            }) {
                Some(from) => Some(from),
                None => match &project.default_from {
                    Some(default) => Some(Mailbox {
                        name: default.name.clone(),
                        email: default.email.clone(),
                    }),
                    None => {
                        if template.is_some() || body.template.is_none() {
                            problems.push(Problem {
                                field: "from".into(),
                                code: "required",
                                message: "`from` is required unless the template or the \
                                          project (`defaultFrom`) has a from address"
                                    .into(),
                            });
                        }
                        None
                    }
                },
            },
        };
        let reply_to = match body.reply {
            Some(r) => match EmailAddress::parse(r) {
                Ok(a) => Some(a),
                Err(e) => {
                    problems.push(Problem {
                        field: "reply".into(),
                        code: "invalid_email",
                        message: e.to_string(),
                    });
                    None
                }
            },
            None => template.as_ref().and_then(|t| t.reply_to.clone()),
        };
        let data = match parse_data(body.data) {
            Ok(d) => Some(d),
            Err(problem) => {
                problems.push(problem);
                None
            }
        };
        let headers = body
            .headers
            .map(|h| parse_headers(h.iter(), &mut problems))
            .unwrap_or_default();
        let attachments = parse_attachments(&body.attachments, &mut problems);
        // The template's languages, unless the request writes its own subject or body.
        let variants = match &template {
            Some(t) if body.subject.is_none() && body.body.is_none() => {
                match self
                    .sending
                    .compile_variants(&project.id, &t.variants)
                    .await
                {
                    Ok(compiled) => compiled,
                    Err((tag, e)) => {
                        problems.push(Problem {
                            field: "template".into(),
                            code: "template_syntax",
                            message: format!("its `{tag}` {}: {}", e.field, e.describe()),
                        });
                        Vec::new()
                    }
                }
            }
            _ => Vec::new(),
        };
        let content = match (subject, html) {
            (Some(subject), Some(html)) => {
                match self.sending.compile(&project.id, subject, html).await {
                    Ok(c) => Some(c),
                    Err(e) => {
                        problems.push(Problem {
                            field: e.field.to_string(),
                            code: "template_syntax",
                            message: e.describe(),
                        });
                        None
                    }
                }
            }
            _ => None,
        };
        if !problems.is_empty() {
            return Err(SendPlanError::Invalid(problems));
        }
        let (Some(from), Some(data), Some(content)) = (from, data, content) else {
            return Err(SendPlanError::Incomplete);
        };
        let sender = self
            .sending_domains
            .authorize_sender(&project.id, &from.email)
            .await
            .map_err(|e| match e {
                SenderError::NotVerified(_) => SendPlanError::NotVerified(e.to_string()),
                SenderError::Store(s) => s.into(),
            })?;
        Ok(SendPlan {
            recipients,
            from: Mailbox {
                name: from.name,
                email: from.email,
            },
            sender,
            reply_to,
            content,
            localized: variants,
            template_id: body
                .template
                .map(str::to_string)
                .filter(|_| template.is_some()),
            // Mail about a topic is marketing mail.
            marketing: topic.is_some()
                || template
                    .as_ref()
                    .is_some_and(|t| t.template_type == TemplateType::Marketing),
            subscribed: body.subscribed,
            data,
            topics: Vec::new(),
            topic,
            headers,
            attachments,
        })
    }
}

/// The custom data rules applied to a request's `data`: its problem, at `data` when there are
/// too many keys, at `data.<key>` for a key or value the rules refuse.
fn parse_data(data: Option<&BTreeMap<String, Value>>) -> Result<DataPatch, Problem> {
    let map: Map<String, Value> = data
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    DataPatch::parse(map).map_err(|e| Problem {
        field: if e.too_many {
            "data".to_string()
        } else {
            format!("data.{}", e.key)
        },
        code: "invalid_key",
        message: e.message,
    })
}
