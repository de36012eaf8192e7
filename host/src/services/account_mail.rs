//! Mail the service sends for itself to account holders (address verification, password reset):
//! rendered from templates that ship in the binary (`host/templates/account/`) or replace them
//! from `accounts.templates_dir`, built as a MIME message, and queued as an `accounts.mail` job
//! without a project, which hands it to the configured transport (see
//! `jobs::account_mail`). It never creates an email row and never counts against a project.

use std::path::Path;
use std::sync::Arc;

use handlebars::Handlebars;
use lettre::Message;
use lettre::message::MultiPart;
use serde::Serialize;

use crate::jobs::JobQueue;
use crate::jobs::account_mail::{ACCOUNT_MAIL_KIND, AccountMailPayload};
use crate::store::StoreError;

/// One kind of account mail's built-in templates: subject, text and HTML.
macro_rules! built_in {
    ($name:literal) => {
        (
            $name,
            [
                include_str!(concat!("../../templates/account/", $name, ".subject.hbs")),
                include_str!(concat!("../../templates/account/", $name, ".text.hbs")),
                include_str!(concat!("../../templates/account/", $name, ".html.hbs")),
            ],
        )
    };
}

/// The kinds of account mail and their built-in templates.
const BUILT_IN: &[(&str, [&str; 3])] = &[
    built_in!("verify-email"),
    built_in!("reset-password"),
    built_in!("invitation"),
    built_in!("invitation-accept"),
    built_in!("added-to-project"),
    built_in!("project-suspended"),
];

const PARTS: [&str; 3] = ["subject", "text", "html"];

/// Why account mail could not be prepared or queued.
#[derive(Debug, thiserror::Error)]
pub enum AccountMailError {
    /// A template (built-in or from the folder) does not compile or render.
    #[error("the account mail template {0} failed: {1}")]
    Template(String, String),
    /// The sender or recipient cannot be used in a message.
    #[error("the account mail cannot be built: {0}")]
    Build(String),
    /// Queuing failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Renders and queues account mail; cheap to clone.
#[derive(Clone)]
pub struct AccountMail {
    /// Subject and text templates (no escaping) under `<name>.subject` and `<name>.text`.
    plain: Arc<Handlebars<'static>>,
    /// HTML templates (escaped) under `<name>.html`.
    html: Arc<Handlebars<'static>>,
    from: String,
    jobs: JobQueue,
}

impl AccountMail {
    /// Compiles the templates (the files of `templates_dir` replace the built-in ones of the
    /// same name) and checks the sender `from`.
    pub fn new(
        from: String,
        templates_dir: Option<&Path>,
        jobs: JobQueue,
    ) -> Result<AccountMail, AccountMailError> {
        let (plain, html) = registries(templates_dir)?;
        from.parse::<lettre::message::Mailbox>()
            .map_err(|e| AccountMailError::Build(format!("accounts.mail_from `{from}`: {e}")))?;
        Ok(AccountMail {
            plain: Arc::new(plain),
            html: Arc::new(html),
            from,
            jobs,
        })
    }

    /// Renders mail `name` with `vars` for `to` in language `locale` (a tag from
    /// [`crate::i18n`]; its texts are the variable `t`) and queues it for the transport.
    /// Rendering and building run on the blocking pool, off the async workers.
    pub async fn send(
        &self,
        name: &str,
        to: &str,
        locale: &str,
        vars: &impl Serialize,
    ) -> Result<(), AccountMailError> {
        let mut vars = serde_json::to_value(vars)
            .map_err(|e| AccountMailError::Template(name.to_string(), e.to_string()))?;
        let texts = texts(&self.plain, name, locale, &vars)?;
        if let Some(object) = vars.as_object_mut() {
            object.insert("t".into(), serde_json::Value::Object(texts));
        }
        let (plain, html) = (self.plain.clone(), self.html.clone());
        let (name, recipient, from) = (name.to_string(), to.to_string(), self.from.clone());
        let (id, from, message) = tokio::task::spawn_blocking(move || {
            build_message(&plain, &html, &name, &recipient, &from, &vars)
        })
        .await
        .map_err(|e| AccountMailError::Build(e.to_string()))??;
        let payload = AccountMailPayload {
            id,
            sender: from,
            recipient: to.to_string(),
        };
        self.jobs
            .enqueue_system(ACCOUNT_MAIL_KIND, payload, Some(message))
            .await?;
        Ok(())
    }
}

/// The plain (subject, text) and HTML registries with every template compiled; the files of
/// `templates_dir` replace the built-in ones of the same name.
fn registries(
    templates_dir: Option<&Path>,
) -> Result<(Handlebars<'static>, Handlebars<'static>), AccountMailError> {
    let mut plain = Handlebars::new();
    plain.register_escape_fn(handlebars::no_escape);
    plain.set_strict_mode(true);
    let mut html = Handlebars::new();
    html.set_strict_mode(true);
    for (name, sources) in BUILT_IN {
        for (part, built_in) in PARTS.iter().zip(sources) {
            let key = format!("{name}.{part}");
            let source = match templates_dir {
                Some(dir) => read_override(dir, &key)?,
                None => None,
            };
            let source = source.as_deref().unwrap_or(built_in);
            let registry = if *part == "html" {
                &mut html
            } else {
                &mut plain
            };
            registry
                .register_template_string(&key, source.trim_end_matches('\n'))
                .map_err(|e| AccountMailError::Template(key.clone(), e.to_string()))?;
        }
    }
    Ok((plain, html))
}

/// The texts of mail `name` in `locale` (`mail.common` and `mail.<name>` of the language
/// files), each rendered with `vars` as a Handlebars template without escaping (the HTML
/// template escapes them where it uses them).
fn texts(
    plain: &Handlebars<'static>,
    name: &str,
    locale: &str,
    vars: &serde_json::Value,
) -> Result<serde_json::Map<String, serde_json::Value>, AccountMailError> {
    let mut texts = crate::i18n::section(locale, "mail.common");
    texts.extend(crate::i18n::section(locale, &format!("mail.{name}")));
    for (key, value) in texts.iter_mut() {
        if let serde_json::Value::String(source) = value {
            *source = plain.render_template(source, vars).map_err(|e| {
                AccountMailError::Template(format!("{locale} mail.{name}.{key}"), e.to_string())
            })?;
        }
    }
    Ok(texts)
}

/// Renders mail `name` for `to` and builds its message; answers its id, the envelope sender and
/// the formatted message.
fn build_message(
    plain: &Handlebars<'static>,
    html: &Handlebars<'static>,
    name: &str,
    to: &str,
    from: &str,
    vars: &serde_json::Value,
) -> Result<(String, String, Vec<u8>), AccountMailError> {
    let render = |registry: &Handlebars<'static>, part: &str| {
        let key = format!("{name}.{part}");
        registry
            .render(&key, vars)
            .map_err(|e| AccountMailError::Template(key, e.to_string()))
    };
    let subject = render(plain, "subject")?;
    let text = render(plain, "text")?;
    let html = render(html, "html")?;
    let id = format!("acc_{}", uuid::Uuid::new_v4().simple());
    let build = |e: &dyn std::fmt::Display| AccountMailError::Build(e.to_string());
    let from: lettre::message::Mailbox = from.parse().map_err(|e| build(&e))?;
    let recipient: lettre::message::Mailbox = to.parse().map_err(|e| build(&e))?;
    let domain = from.email.domain().to_string();
    let message = Message::builder()
        .from(from.clone())
        .to(recipient)
        .subject(subject.trim())
        .message_id(Some(format!("<{id}@{domain}>")))
        .multipart(MultiPart::alternative_plain_html(text, html))
        .map_err(|e| build(&e))?;
    Ok((id, from.email.to_string(), message.formatted()))
}

/// The folder's replacement for template `key`, if it has one.
fn read_override(dir: &Path, key: &str) -> Result<Option<String>, AccountMailError> {
    let path = dir.join(format!("{key}.hbs"));
    match std::fs::read_to_string(&path) {
        Ok(source) => Ok(Some(source)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(AccountMailError::Template(
            key.to_string(),
            format!("{}: {e}", path.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mail_renders_in_every_language() {
        let (plain, html) = registries(None).unwrap();
        let vars = serde_json::json!({
            "email": "a@example.com", "link": "https://x/y?token=t", "hours": 24, "minutes": 30,
            "days": 7, "project": "P <1>", "inviter": "b@example.com", "role": "member",
            "reason": "too many bounces",
        });
        for (name, _) in BUILT_IN {
            for locale in ["en", "fr", "de", "xx"] {
                let mut vars = vars.clone();
                let t = texts(&plain, name, locale, &vars).unwrap();
                vars.as_object_mut().unwrap().insert("t".into(), t.into());
                let (_, _, message) = build_message(
                    &plain,
                    &html,
                    name,
                    "a@example.com",
                    "Herald <noreply@example.com>",
                    &vars,
                )
                .unwrap_or_else(|e| panic!("{name} in {locale}: {e}"));
                assert!(!message.is_empty());
            }
        }
        let t = texts(&plain, "reset-password", "de", &vars).unwrap();
        assert_eq!(t["hello"], "Hallo,");
        assert!(t["intro"].as_str().unwrap().contains("a@example.com"));
    }

    #[test]
    fn built_in_templates_compile_and_a_folder_replaces_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("reset-password.subject.hbs"),
            "Reset for {{email}}",
        )
        .unwrap();
        assert_eq!(
            read_override(dir.path(), "reset-password.subject")
                .unwrap()
                .as_deref(),
            Some("Reset for {{email}}")
        );
        assert_eq!(
            read_override(dir.path(), "verify-email.text").unwrap(),
            None
        );
        for (name, sources) in BUILT_IN {
            for (part, source) in PARTS.iter().zip(sources) {
                let mut h = Handlebars::new();
                h.set_strict_mode(true);
                h.register_template_string("t", *source)
                    .unwrap_or_else(|e| panic!("{name}.{part}: {e}"));
            }
        }
    }
}
