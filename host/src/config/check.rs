//! Checking the settings before anything starts: every key of the settings file is a setting,
//! every value is usable, and `herald config` can say where each value came from.
//!
//! A problem is reported with the setting's name and where its value came from (the default,
//! the file, or the environment variable), and `herald` exits with status 2.

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::{Figment, Provider};

use super::smtp::MIB;
use super::{NOT_SETTINGS, Settings, UploadStorage};

/// Why the settings cannot be used (`herald` exits with status 2).
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The file cannot be read or a value has the wrong type (figment names the key and the
    /// file or variable).
    #[error("{0}")]
    Load(Box<figment::Error>),
    /// A key of the settings file is not a setting.
    #[error("`{key}` in {file} is not a setting{hint}")]
    Unknown {
        /// The key, dotted.
        key: String,
        /// The file.
        file: String,
        /// ", did you mean `…`?", when a setting is close.
        hint: String,
    },
    /// A value the service found unusable when it started (the address is taken).
    #[error("setting `{setting}`: {message}")]
    Unusable {
        /// The setting, dotted.
        setting: String,
        /// What is wrong.
        message: String,
    },
    /// A value is not usable.
    #[error("setting `{setting}` (from {origin}): {message}")]
    Invalid {
        /// The setting, dotted.
        setting: String,
        /// Where its value came from.
        origin: String,
        /// What to fix.
        message: String,
    },
}

/// Settings as loaded, with where each value came from.
pub struct LoadedSettings {
    /// The settings.
    pub settings: Settings,
    figment: Figment,
    /// `HERALD_*` variables that name no setting (ignored, and reported as warnings: the
    /// environment also carries variables of other programs).
    pub unknown_variables: Vec<String>,
}

/// One line of `herald config`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SettingLine {
    /// The setting, dotted (`sending.batch_size`).
    pub setting: String,
    /// Its value in effect, secrets masked.
    pub value: serde_json::Value,
    /// `default`, `file <path>` or `env HERALD_…`.
    pub source: String,
}

/// Settings whose values are secrets: shown as `"***"` when set.
const SECRET_KEYS: [&str; 6] = [
    "jwt_secret",
    "password",
    "secret",
    "token",
    "secret_access_key",
    "webhook_secret",
];

fn is_secret(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    SECRET_KEYS
        .iter()
        .any(|s| last == *s || last.ends_with(&format!("_{s}")))
        || key.starts_with("plugins.settings.")
        || (key.starts_with("transports.")
            && !key.ends_with(".plugin")
            && !key.ends_with(".fallback"))
}

/// The environment variable of a dotted setting.
pub fn variable_of(key: &str) -> String {
    format!("HERALD_{}", key.replace('.', "__").to_ascii_uppercase())
}

impl Settings {
    /// The layered sources: defaults, then `file` (or `HERALD_CONFIG`), then `HERALD_*`.
    fn figment(file: Option<&Path>) -> Figment {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("HERALD_CONFIG").map(PathBuf::from));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        // `HERALD_TEST_*` and `HERALD_BENCH_*` belong to the tests and benchmarks.
        let ours = |key: &figment::value::UncasedStr| {
            !key.as_str().starts_with("test_") && !key.as_str().starts_with("bench_")
        };
        figment.merge(
            Env::prefixed("HERALD_")
                .ignore(&NOT_SETTINGS)
                .filter(ours)
                .split("__"),
        )
    }

    /// Loads the settings (see [`Settings::load`]) and checks them: unknown keys in the file
    /// and unusable values are errors naming the setting and its source.
    pub fn load_checked(file: Option<&Path>) -> Result<LoadedSettings, SettingsError> {
        let figment = Settings::figment(file);
        let settings: Settings = figment
            .extract()
            .map_err(|e| SettingsError::Load(Box::new(e)))?;
        let data = figment
            .data()
            .map_err(|e| SettingsError::Load(Box::new(e)))?;
        let mut ignored = Vec::new();
        if let Some(dict) = data.get(&figment::Profile::Default) {
            let value = figment::value::Value::from(dict.clone());
            let _: Result<Settings, _> =
                serde_ignored::deserialize(&value, |path| ignored.push(path.to_string()));
        }
        let mut unknown_variables = Vec::new();
        for key in ignored {
            let from = figment
                .find_metadata(&key)
                .map(|m| m.name.to_string())
                .unwrap_or_default();
            if from.contains("environment") {
                unknown_variables.push(variable_of(&key));
                continue;
            }
            let file = figment
                .find_metadata(&key)
                .and_then(|m| m.source.as_ref().map(|s| s.to_string()))
                .unwrap_or_else(|| "the settings file".into());
            let hint = closest(&key)
                .map(|k| format!("; did you mean `{k}`?"))
                .unwrap_or_default();
            return Err(SettingsError::Unknown { key, file, hint });
        }
        let loaded = LoadedSettings {
            settings,
            figment,
            unknown_variables,
        };
        loaded.validate()?;
        Ok(loaded)
    }
}

/// The defaults as JSON, with the optional tables filled so that their keys are listed too.
pub(super) fn defaults_filled() -> serde_json::Value {
    let mut all = Settings::default();
    all.oauth.github = Some(Default::default());
    all.oauth.google = Some(Default::default());
    serde_json::to_value(&all).unwrap_or_default()
}

/// Every setting's dotted key (those of optional tables included).
pub(super) fn known_keys() -> Vec<String> {
    let mut keys = Vec::new();
    flatten("", &defaults_filled(), &mut |k, _| keys.push(k.to_string()));
    keys
}

/// The known setting closest to `key` (same table, small edit distance), if any.
fn closest(key: &str) -> Option<String> {
    known_keys()
        .into_iter()
        .map(|k| (strsim::levenshtein(&k, key), k))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, k)| k)
}

pub(super) fn flatten(
    prefix: &str,
    value: &serde_json::Value,
    out: &mut impl FnMut(&str, &serde_json::Value),
) {
    match value {
        serde_json::Value::Object(map) if !map.is_empty() || prefix.is_empty() => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => out(prefix, other),
    }
}

impl LoadedSettings {
    /// Where the value of `key` came from: `default`, `file <path>` or `env HERALD_…`.
    pub fn source_of(&self, key: &str) -> String {
        match self.figment.find_metadata(key) {
            Some(m) if m.name.contains("environment") => format!("env {}", variable_of(key)),
            Some(m) if m.name.contains("TOML") => match &m.source {
                Some(source) => format!("file {source}"),
                None => "file".into(),
            },
            _ => "default".into(),
        }
    }

    /// Every setting in effect with its source, secrets masked (`herald config`).
    pub fn lines(&self) -> Vec<SettingLine> {
        let mut lines = Vec::new();
        let value = serde_json::to_value(&self.settings).unwrap_or_default();
        flatten("", &value, &mut |key, value| {
            let value = if is_secret(key) && !value.is_null() {
                serde_json::Value::from("***")
            } else if key == "database_url" {
                value
                    .as_str()
                    .map(|u| serde_json::Value::from(mask_url(u)))
                    .unwrap_or(serde_json::Value::Null)
            } else {
                value.clone()
            };
            lines.push(SettingLine {
                setting: key.to_string(),
                value,
                source: self.source_of(key),
            });
        });
        lines
    }

    fn invalid(&self, setting: &str, message: impl Into<String>) -> SettingsError {
        SettingsError::Invalid {
            setting: setting.to_string(),
            origin: self.source_of(setting),
            message: message.into(),
        }
    }

    /// Checks the values that would otherwise fail later, or silently do the wrong thing.
    fn validate(&self) -> Result<(), SettingsError> {
        let s = &self.settings;
        let port = s.listen.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
        if !matches!(port, Some(Ok(_))) {
            return Err(self.invalid(
                "listen",
                format!("`{}` is not HOST:PORT (e.g. 127.0.0.1:8080)", s.listen),
            ));
        }
        if let Some(url) = &s.database_url
            && !["sqlite:", "postgres://", "postgresql://"]
                .iter()
                .any(|p| url.starts_with(p))
        {
            return Err(self.invalid(
                "database_url",
                "must start with sqlite:// or postgres:// (postgresql://)",
            ));
        }
        for (key, url) in [
            ("public_url", s.public_url.as_deref()),
            (
                "accounts.dashboard_url",
                s.accounts.dashboard_url.as_deref(),
            ),
            ("traces.otlp_endpoint", s.traces.otlp_endpoint.as_deref()),
        ] {
            if let Some(url) = url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                return Err(
                    self.invalid(key, format!("`{url}` must start with http:// or https://"))
                );
            }
        }
        let at_least: [(&str, u64, u64); 22] = [
            (
                "contact_data_max_bytes",
                s.contact_data_max_bytes as u64,
                1024,
            ),
            (
                "contact_fields_max_per_project",
                s.contact_fields_max_per_project,
                1,
            ),
            (
                "event_names_max_per_project",
                s.event_names_max_per_project,
                1,
            ),
            ("jobs_concurrency", s.jobs_concurrency as u64, 1),
            (
                "workflows.job_wall_time_ms",
                s.workflows.job_wall_time_ms,
                1,
            ),
            (
                "workflows.webhooks_per_project",
                s.workflows.webhooks_per_project as u64,
                1,
            ),
            ("http_idle_timeout_seconds", s.http_idle_timeout_seconds, 1),
            ("jobs_poll_interval_ms", s.jobs_poll_interval_ms, 1),
            ("jobs_lease_seconds", s.jobs_lease_seconds, 1),
            ("jobs_max_attempts", s.jobs_max_attempts.max(0) as u64, 1),
            ("jobs_retention_hours", s.jobs_retention_hours, 1),
            (
                "database_max_connections",
                u64::from(s.database_max_connections),
                1,
            ),
            ("max_body_bytes", s.max_body_bytes as u64, 1024),
            (
                "sending.hand_off_memory_mb",
                s.sending.hand_off_memory_mb,
                1,
            ),
            ("sending.render_memory_mb", s.sending.render_memory_mb, 1),
            (
                "sending.view_in_browser_days",
                s.sending.view_in_browser_days,
                1,
            ),
            ("contacts.pending_days", s.contacts.pending_days, 1),
            (
                "sending.soft_bounce_days",
                u64::from(s.sending.soft_bounce_days),
                1,
            ),
            (
                "plugins.smtp_pool_size",
                u64::from(s.plugins.smtp_pool_size),
                1,
            ),
            ("plugins.memory_bytes", s.plugins.memory_bytes, 1024 * 1024),
            (
                "accounts.invitations_per_inviter_per_hour",
                u64::from(s.accounts.invitations_per_inviter_per_hour),
                1,
            ),
            (
                "accounts.invitations_per_project_per_day",
                u64::from(s.accounts.invitations_per_project_per_day),
                1,
            ),
        ];
        for (key, value, least) in at_least {
            if value < least {
                return Err(self.invalid(key, format!("is {value}; it must be at least {least}")));
            }
        }
        if !(1..=100).contains(&s.rate_limit_public_share) {
            return Err(self.invalid(
                "rate_limit_public_share",
                format!(
                    "is {}; it is a percentage of rate_limit_per_minute, between 1 and 100",
                    s.rate_limit_public_share
                ),
            ));
        }
        if !(1..=1000).contains(&s.sending.batch_size) {
            return Err(self.invalid(
                "sending.batch_size",
                format!("is {}; it must be between 1 and 1000", s.sending.batch_size),
            ));
        }
        for (key, rate) in [
            (
                "security.bounce_rate_threshold",
                s.security.bounce_rate_threshold,
            ),
            (
                "security.complaint_rate_threshold",
                s.security.complaint_rate_threshold,
            ),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(self.invalid(key, format!("is {rate}; a rate is between 0 and 1")));
            }
        }
        self.validate_smtp()?;
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&s.log) {
            return Err(self.invalid("log", format!("`{}` is not a log filter: {e}", s.log)));
        }
        if s.uploads.storage == UploadStorage::S3 && s.uploads.s3_bucket.is_none() {
            return Err(self.invalid(
                "uploads.s3_bucket",
                "uploads.storage = \"s3\" needs a bucket",
            ));
        }
        for (key, file) in [
            ("plugins.smtp_ca_file", s.plugins.smtp_ca_file.as_ref()),
            ("accounts.templates_dir", s.accounts.templates_dir.as_ref()),
            ("plugins.dir", s.plugins.dir.as_ref()),
        ] {
            if let Some(path) = file
                && let Err(e) = std::fs::metadata(path)
            {
                return Err(self.invalid(key, format!("`{}` cannot be read: {e}", path.display())));
            }
        }
        for (name, provider) in [("github", &s.oauth.github), ("google", &s.oauth.google)] {
            if let Some(p) = provider
                && !p.client_id.is_empty()
                && p.client_secret.is_empty()
            {
                return Err(self.invalid(
                    &format!("oauth.{name}.client_secret"),
                    format!("oauth.{name}.client_id is set; its client secret is needed too"),
                ));
            }
        }
        Ok(())
    }
}

impl LoadedSettings {
    /// The SMTP listeners' settings: addresses, certificate files that go in pairs and can be
    /// read, and limits that leave a server able to answer.
    fn validate_smtp(&self) -> Result<(), SettingsError> {
        let s = &self.settings;
        for (key, listen) in [
            ("inbound.listen", s.inbound.listen.as_deref()),
            ("submission.listen", s.submission.listen.as_deref()),
            (
                "submission.implicit_tls_listen",
                s.submission.implicit_tls_listen.as_deref(),
            ),
        ] {
            let port = listen.map(|l| l.rsplit_once(':').map(|(_, p)| p.parse::<u16>()));
            if let Some(port) = port
                && !matches!(port, Some(Ok(_)))
            {
                return Err(self.invalid(
                    key,
                    format!(
                        "`{}` is not HOST:PORT (e.g. 0.0.0.0:25)",
                        listen.unwrap_or("")
                    ),
                ));
            }
        }
        for (table, cert, key) in [
            (
                "inbound",
                s.inbound.tls_cert_file.as_ref(),
                s.inbound.tls_key_file.as_ref(),
            ),
            (
                "submission",
                s.submission.tls_cert_file.as_ref(),
                s.submission.tls_key_file.as_ref(),
            ),
        ] {
            match (cert, key) {
                (Some(_), None) => {
                    return Err(self.invalid(
                        &format!("{table}.tls_key_file"),
                        format!("{table}.tls_cert_file is set; its key file is needed too"),
                    ));
                }
                (None, Some(_)) => {
                    return Err(self.invalid(
                        &format!("{table}.tls_cert_file"),
                        format!("{table}.tls_key_file is set; its certificate file is needed too"),
                    ));
                }
                _ => {}
            }
            for (name, file) in [("tls_cert_file", cert), ("tls_key_file", key)] {
                if let Some(path) = file
                    && let Err(e) = std::fs::metadata(path)
                {
                    return Err(self.invalid(
                        &format!("{table}.{name}"),
                        format!("`{}` cannot be read: {e}", path.display()),
                    ));
                }
            }
        }
        if s.submission.implicit_tls_listen.is_some() && s.submission.tls_cert_file.is_none() {
            return Err(self.invalid(
                "submission.implicit_tls_listen",
                "implicit TLS needs submission.tls_cert_file and submission.tls_key_file",
            ));
        }
        for (table, limits) in [
            ("inbound", s.inbound.limits()),
            ("submission", s.submission.limits()),
        ] {
            for (name, value, least) in [
                ("max_message_bytes", limits.max_message_bytes as u64, 1024),
                ("command_timeout_seconds", limits.command_timeout_seconds, 1),
                (
                    "data_block_timeout_seconds",
                    limits.data_block_timeout_seconds,
                    1,
                ),
                ("data_timeout_seconds", limits.data_timeout_seconds, 1),
            ] {
                if value < least {
                    return Err(self.invalid(
                        &format!("{table}.{name}"),
                        format!("is {value}; it must be at least {least}"),
                    ));
                }
            }
            // One message of the largest size must fit (its buffer may pass the size by one
            // read before it is refused).
            let needed = limits.memory_needed_mb();
            let memory_mb = limits.memory_bytes / MIB;
            if memory_mb < needed {
                return Err(self.invalid(
                    &format!("{table}.memory_mb"),
                    format!(
                        "is {memory_mb}; it must hold one message of {table}.max_message_bytes ({} bytes): at least {needed}",
                        limits.max_message_bytes
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A database URL with its password masked.
fn mask_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') {
                format!("{}://{user}:***@{}", &url[..scheme], &url[at + 1..])
            } else {
                url.to_string()
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_recognised_and_urls_masked() {
        for key in [
            "jwt_secret",
            "plugins.smtp_password",
            "plugins.notify_secret",
            "metrics.token",
            "uploads.s3_secret_access_key",
            "oauth.github.client_secret",
            "plugins.billing_webhook_secret",
            "plugins.settings.stripe.api_key",
        ] {
            assert!(is_secret(key), "{key}");
        }
        for key in [
            "listen",
            "plugins.smtp_username",
            "sending.batch_size",
            "oauth.github.client_id",
        ] {
            assert!(!is_secret(key), "{key}");
        }
        assert_eq!(
            mask_url("postgres://herald:hunter2@db:5432/herald"),
            "postgres://herald:***@db:5432/herald"
        );
        assert_eq!(
            mask_url("sqlite://./data/herald.db"),
            "sqlite://./data/herald.db"
        );
    }

    #[test]
    fn a_misspelt_key_suggests_the_setting() {
        assert_eq!(
            closest("sending.batchsize").as_deref(),
            Some("sending.batch_size")
        );
        assert_eq!(closest("entirely.different.thing"), None);
        assert_eq!(
            variable_of("sending.batch_size"),
            "HERALD_SENDING__BATCH_SIZE"
        );
    }
}
