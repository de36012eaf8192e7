//! The `SEND_EMAIL` step: asks the host to send a template to the contact or to an address.

use herald_sdk::config::FieldError;
use herald_sdk::step::{Effect, Input, Output, Step};
use serde::Deserialize;

/// `SEND_EMAIL { templateId, to?: "contact" | <email>, topicId? }`. The host reads `topicId`
/// itself (the mail is about that topic, in place of the template's), as it reads `templateId`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    template_id: String,
    to: Option<String>,
    topic_id: Option<String>,
}

fn plausible_email(s: &str) -> bool {
    let Some((local, domain)) = s.rsplit_once('@') else {
        return false;
    };
    !local.is_empty()
        && local.len() <= 64
        && s.len() <= 254
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

struct SendEmail;

impl Step for SendEmail {
    type Config = Config;

    fn check(config: &Config) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if config.template_id.trim().is_empty() {
            errors.push(FieldError::new("templateId", "must not be empty"));
        }
        if let Some(to) = &config.to
            && to != "contact"
            && !plausible_email(to)
        {
            errors.push(FieldError::new(
                "to",
                "must be \"contact\" or an email address",
            ));
        }
        if let Some(topic) = &config.topic_id
            && !topic.starts_with("top_")
        {
            errors.push(FieldError::new(
                "topicId",
                "must be a topic id (`top_…`) or left out",
            ));
        }
        errors
    }

    fn run(config: Config, _input: Input) -> Output {
        let to = config.to.filter(|to| to != "contact");
        Output::next().effect(Effect::SendEmail {
            template_id: config.template_id,
            to,
        })
    }
}

herald_sdk::export_step!(SendEmail);
