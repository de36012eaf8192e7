//! Settings: defaults, overridden by an optional TOML file, then by `HERALD_*` environment
//! variables, then by command-line flags. Every setting is listed with its default in
//! `docs/settings.md`, generated from [`reference`] by `herald config --markdown`.

mod check;
pub mod reference;
mod smtp;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use check::{LoadedSettings, SettingLine, SettingsError, variable_of};
pub use smtp::{InboundSettings, MIB, READ_CHUNK_BYTES, SmtpLimits, SubmissionSettings};

/// How logs are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Every setting of a Herald deployment.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Address and port to listen on.
    pub listen: String,
    /// Directory for the SQLite database and other files.
    pub data_dir: PathBuf,
    /// `sqlite://PATH` or `postgres://…`; defaults to `sqlite://<data_dir>/herald.db`.
    pub database_url: Option<String>,
    /// Largest number of pooled database connections (on SQLite, readers; capped at twice the
    /// cores, at least 4 and at most 16).
    pub database_max_connections: u32,
    /// On PostgreSQL, the longest a statement of the server's pool may run before the database
    /// cancels it (the request answers 503); 0 for none. Migrations run without it.
    pub database_statement_timeout_ms: u64,
    /// The address users reach this service at (for links and the cookie's `Secure` flag);
    /// defaults to `http://<listen>`.
    pub public_url: Option<String>,
    /// API requests per minute per project.
    pub rate_limit_per_minute: u32,
    /// The public key's share of `rate_limit_per_minute`, in percent (1 to 100), counted apart
    /// from the secret key's requests, which keep the whole limit.
    pub rate_limit_public_share: u32,
    /// Largest size of a contact's custom data, serialized as JSON, in bytes.
    pub contact_data_max_bytes: usize,
    /// Most distinct custom fields one project's contacts may have.
    pub contact_fields_max_per_project: u64,
    /// Most distinct event names one project may track.
    pub event_names_max_per_project: u64,
    /// Whether `POST /auth/signup` is open.
    pub signup_enabled: bool,
    /// Login and signup attempts per minute from one client address (429 beyond).
    pub auth_attempts_per_ip_per_minute: u32,
    /// Login attempts per minute for one account's address, from anywhere (429 beyond).
    pub login_attempts_per_account_per_minute: u32,
    /// Secret that signs dashboard session tokens; generated once and kept in the database when
    /// not set, so that every instance shares it.
    pub jwt_secret: Option<String>,
    /// How long a dashboard login lasts, in hours.
    pub session_ttl_hours: u64,
    /// Largest request body in bytes for JSON endpoints.
    pub max_body_bytes: usize,
    /// Seconds to wait for in-flight requests on shutdown.
    pub shutdown_grace_seconds: u64,
    /// A connection that neither sends nor receives a byte for this many seconds is closed: an
    /// idle keep-alive connection, one whose request stopped half-way, or one whose request takes
    /// longer than this to answer. Above the 90 s for which common HTTP clients (Go's, reqwest)
    /// keep idle connections, so that they drop theirs first instead of sending a request on
    /// one the server is closing.
    pub http_idle_timeout_seconds: u64,
    /// Open connections one client address may hold; a new one beyond it is closed as it is
    /// accepted. 0: no cap (behind a reverse proxy, whose address every client shares).
    pub http_max_connections_per_ip: usize,
    /// Jobs this instance runs at once, and delivery batches at once beside them.
    pub jobs_concurrency: usize,
    /// How often idle job workers, delivery workers and the event dispatcher look for work, in
    /// milliseconds.
    pub jobs_poll_interval_ms: u64,
    /// How long a job's claim lasts without a heartbeat, in seconds; a job whose worker died is
    /// picked up again after this.
    pub jobs_lease_seconds: u64,
    /// Attempts before a failing job is marked failed.
    pub jobs_max_attempts: i32,
    /// How long a finished job (completed or failed) is kept, in hours, before the periodic
    /// maintenance deletes it; an import's or bulk action's status (`GET /contacts/import/:jobId`,
    /// `GET /contacts/bulk/:jobId`) is 404 afterwards.
    pub jobs_retention_hours: u64,
    /// How long `POST /v1/verify` waits for each DNS answer, in milliseconds; a domain whose
    /// answers do not come in time is reported as unverified. Nameservers are
    /// `plugins.dns_nameservers`.
    pub verify_dns_timeout_ms: u64,
    /// How long `POST /v1/verify` keeps what DNS said about a domain, in seconds (`0`: no cache).
    pub verify_cache_seconds: u64,
    /// Log filter (`tracing` env-filter syntax), e.g. `info` or `herald=debug`.
    pub log: String,
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// The plugin runtime (`[plugins]`, `HERALD_PLUGINS__<NAME>`).
    pub plugins: crate::plugins::PluginSettings,
    /// Named transports (`[transports.<name>]` with `plugin`, an optional `fallback` and
    /// settings of the plugin; `HERALD_TRANSPORTS__<NAME>__<KEY>`).
    #[serde(deserialize_with = "scalar_tables")]
    pub transports: crate::plugins::TransportTables,
    /// Sending domains (`[domains]`, `HERALD_DOMAINS__<NAME>`).
    pub domains: DomainSettings,
    /// Sending (`[sending]`, `HERALD_SENDING__<NAME>`).
    pub sending: SendingSettings,
    /// Dashboard accounts and the mail the service sends them (`[accounts]`,
    /// `HERALD_ACCOUNTS__<NAME>`).
    pub accounts: AccountSettings,
    /// Automatic suspension of sending on bad bounce or complaint rates (`[security]`,
    /// `HERALD_SECURITY__<NAME>`).
    pub security: SecuritySettings,
    /// Image uploads (`[uploads]`, `HERALD_UPLOADS__<NAME>`).
    pub uploads: UploadSettings,
    /// Segments (`[segments]`, `HERALD_SEGMENTS__<NAME>`).
    pub segments: SegmentSettings,
    /// Contacts' confirmed opt-in (`[contacts]`, `HERALD_CONTACTS__<NAME>`).
    pub contacts: ContactSettings,
    /// The workflow engine's share of the job slots (`[workflows]`, `HERALD_WORKFLOWS__<NAME>`).
    pub workflows: WorkflowSettings,
    /// OAuth sign-in providers (`[oauth.github]`, `[oauth.google]`,
    /// `HERALD_OAUTH__GITHUB__CLIENT_ID`…); a provider without a client id is off.
    pub oauth: OAuthSettings,
    /// Prometheus metrics (`[metrics]`, `HERALD_METRICS__<NAME>`).
    pub metrics: MetricsSettings,
    /// Traces exported over OTLP (`[traces]`, `HERALD_TRACES__<NAME>`).
    pub traces: TraceSettings,
    /// The SMTP server receiving bounces, complaints and replies (`[inbound]`,
    /// `HERALD_INBOUND__<NAME>`).
    pub inbound: InboundSettings,
    /// The SMTP submission server (`[submission]`, `HERALD_SUBMISSION__<NAME>`).
    pub submission: SubmissionSettings,
}

/// Traces: with an OTLP endpoint, every span (request, job, plugin call, store call) is
/// exported; without one, nothing is.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct TraceSettings {
    /// The collector's OTLP/HTTP base URL (e.g. `http://otel-collector:4318`); spans are posted
    /// to `<endpoint>/v1/traces`. Unset: no traces.
    pub otlp_endpoint: Option<String>,
    /// `protobuf` (OTLP's default) or `json`.
    pub protocol: OtlpProtocol,
    /// The `service.name` of the spans.
    pub service_name: String,
}

impl Default for TraceSettings {
    fn default() -> TraceSettings {
        TraceSettings {
            otlp_endpoint: None,
            protocol: OtlpProtocol::Protobuf,
            service_name: "herald".into(),
        }
    }
}

/// The encoding of OTLP/HTTP exports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OtlpProtocol {
    /// `application/x-protobuf`.
    #[default]
    Protobuf,
    /// `application/json`.
    Json,
}

/// Settings of `GET /metrics`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MetricsSettings {
    /// The bearer token a scraper sends (`Authorization: Bearer <token>`); unset turns
    /// `/metrics` off (404).
    pub token: Option<String>,
}

/// The OAuth sign-in providers.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OAuthSettings {
    /// GitHub (an OAuth app; scopes `read:user user:email`).
    pub github: Option<OAuthProviderSettings>,
    /// Google (OpenID Connect; scopes `openid email`).
    pub google: Option<OAuthProviderSettings>,
}

/// One OAuth provider's client. The URLs default to the provider's own; set them only to point
/// at a stand-in (tests) or an enterprise instance (GitHub Enterprise).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OAuthProviderSettings {
    /// The client id the provider issued.
    pub client_id: String,
    /// The client secret the provider issued.
    pub client_secret: String,
    /// The authorization endpoint.
    pub authorize_url: Option<String>,
    /// The token endpoint.
    pub token_url: Option<String>,
    /// Google: the userinfo endpoint; GitHub: the API's base URL (`/user`, `/user/emails`).
    pub userinfo_url: Option<String>,
}

/// Settings of segments.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct SegmentSettings {
    /// Seconds between periodic re-evaluations of the tracked dynamic segments whose filters
    /// change with time alone (`within`, `olderThan`, `triggeredWithin`, `notTriggeredWithin`);
    /// at least 1. One job for every instance sharing the database.
    pub reevaluate_interval_seconds: u64,
    /// Seconds a dynamic segment's member count (the `total` of `GET /segments/:id/contacts`)
    /// is reused by the next pages, by every instance sharing the database, while its filter is
    /// unchanged; 0 counts the filter on every page.
    pub members_count_cache_seconds: u64,
}

impl SegmentSettings {
    /// [`SegmentSettings::members_count_cache_seconds`] in milliseconds.
    pub fn members_count_cache_ms(&self) -> i64 {
        i64::try_from(self.members_count_cache_seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
    }
}

impl Default for SegmentSettings {
    fn default() -> SegmentSettings {
        SegmentSettings {
            reevaluate_interval_seconds: 300,
            members_count_cache_seconds: 5,
        }
    }
}

/// Settings of confirmed opt-in (docs/engagement.md, "Confirmed opt-in").
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct ContactSettings {
    /// Days a contact stays pending after its confirmation was first mailed; its link confirms
    /// nothing afterwards, and the pending state is cleared (at least 1).
    pub pending_days: u64,
    /// Minutes before another subscription asked for a pending contact mails its confirmation
    /// again (0: every time), so that a form submitted over and over does not flood an address.
    pub confirmation_resend_minutes: u64,
}

impl ContactSettings {
    /// [`ContactSettings::confirmation_resend_minutes`] in milliseconds.
    pub fn resend_ms(&self) -> i64 {
        i64::try_from(self.confirmation_resend_minutes.saturating_mul(60_000)).unwrap_or(i64::MAX)
    }
}

impl Default for ContactSettings {
    fn default() -> ContactSettings {
        ContactSettings {
            pending_days: 7,
            confirmation_resend_minutes: 10,
        }
    }
}

/// Settings of the workflow engine: how long a step job may hold a job slot, and how many
/// `WEBHOOK` calls may be under way at once (see `docs/decisions.md`, "Slow steps and the job
/// slots").
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkflowSettings {
    /// Longest a claimed `workflow.step` job runs step runs, in milliseconds: past it, between
    /// two step runs, the job commits what it ran and puts the rest back in the queue (at least
    /// 1; a step run under way is not interrupted).
    pub job_wall_time_ms: u64,
    /// `WEBHOOK` calls of one project under way at once on this instance (at least 1); a step
    /// run beyond it waits in the queue, not in a job slot.
    pub webhooks_per_project: usize,
}

impl Default for WorkflowSettings {
    fn default() -> WorkflowSettings {
        WorkflowSettings {
            job_wall_time_ms: 15_000,
            webhooks_per_project: 4,
        }
    }
}

/// Settings of dashboard accounts and of the mail the service sends for itself (address
/// verification, password reset), which goes through the configured transport and never counts
/// against a project.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct AccountSettings {
    /// Whether a new account must verify its address before it can log in: signup then answers
    /// 201 without a session and mails a verification link.
    pub require_email_verification: bool,
    /// The sender of account mail; defaults to `Herald <no-reply@<host of public_url>>`.
    pub mail_from: Option<String>,
    /// A folder whose `<name>.subject.hbs`, `<name>.text.hbs` and `<name>.html.hbs` replace the
    /// built-in templates (`verify-email`, `reset-password`, `invitation`, `invitation-accept`,
    /// `added-to-project`, `project-suspended`).
    pub templates_dir: Option<PathBuf>,
    /// Where the links in account mail point (the dashboard's base URL); defaults to
    /// `<public_url>/app`, the dashboard this binary serves. Links are `<dashboard_url>/verify-email?token=…` and
    /// `<dashboard_url>/reset-password?token=…`.
    pub dashboard_url: Option<String>,
    /// A folder to serve the dashboard from, read on each request, instead of the copy built into
    /// the binary: for work on `web/`, pointed at the `web/dist` that `npm run build` rewrites.
    pub dashboard_dir: Option<PathBuf>,
    /// Hours a verification link works.
    pub verify_token_hours: u64,
    /// Minutes a password-reset link works.
    pub reset_token_minutes: u64,
    /// Account mails (verification, reset) per minute to one address (429 beyond).
    pub mail_per_address_per_minute: u32,
    /// Days an invitation to a project works.
    pub invitation_days: u64,
    /// Team mails (invitations, added-to-project notices) one user may have sent per hour,
    /// across projects (429 beyond).
    pub invitations_per_inviter_per_hour: u32,
    /// Team mails sent for one project per day (UTC), whoever sends them (429 beyond).
    pub invitations_per_project_per_day: u32,
}

impl Default for AccountSettings {
    fn default() -> AccountSettings {
        AccountSettings {
            require_email_verification: false,
            mail_from: None,
            templates_dir: None,
            dashboard_url: None,
            dashboard_dir: None,
            verify_token_hours: 48,
            reset_token_minutes: 60,
            mail_per_address_per_minute: 2,
            invitation_days: 7,
            invitations_per_inviter_per_hour: 50,
            invitations_per_project_per_day: 200,
        }
    }
}

/// When a project's sending is suspended: its hard-bounce or complaint rate over the last
/// `window_days` reaches a threshold once it has sent `min_volume` emails in that window
/// (defaults like the large mailbox providers' guidance).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct SecuritySettings {
    /// Bounce rate (0..1) at which sending stops.
    pub bounce_rate_threshold: f64,
    /// Complaint rate (0..1) at which sending stops.
    pub complaint_rate_threshold: f64,
    /// Emails sent in the window before a rate counts.
    pub min_volume: i64,
    /// Days the rates are measured over.
    pub window_days: u64,
}

impl Default for SecuritySettings {
    fn default() -> SecuritySettings {
        SecuritySettings {
            bounce_rate_threshold: 0.05,
            complaint_rate_threshold: 0.001,
            min_volume: 100,
            window_days: 7,
        }
    }
}

/// Image uploads (`POST /uploads/image`), stored in the data directory under content-hash names
/// and served at `/uploads/files/<name>`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct UploadSettings {
    /// Largest image file, in bytes.
    pub max_bytes: usize,
    /// Largest image, in pixels (width × height), checked before decoding.
    pub max_pixels: u64,
    /// Attachments of one received message stored at most (`email.received`); the others are
    /// listed without a URL.
    pub inbound_attachments: usize,
    /// Bytes of one received message's attachments stored at most, all together; an attachment
    /// that would pass the cap is listed without a URL.
    pub inbound_attachment_bytes: usize,
    /// Where files are kept: `local` (`<data_dir>/uploads`) or `s3` (S3-compatible object
    /// storage, the `s3_*` settings).
    pub storage: UploadStorage,
    /// The bucket (`s3`).
    pub s3_bucket: Option<String>,
    /// The region (`s3`).
    pub s3_region: String,
    /// The endpoint of an S3-compatible service (MinIO, R2, …); unset is AWS.
    pub s3_endpoint: Option<String>,
    /// Access key id; unset takes the usual AWS environment and instance credentials.
    pub s3_access_key_id: Option<String>,
    /// Secret access key.
    pub s3_secret_access_key: Option<String>,
    /// A key prefix inside the bucket.
    pub s3_prefix: Option<String>,
    /// Allow `http://` endpoints (a service on a trusted network).
    pub s3_allow_http: bool,
}

/// Where uploaded files are kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UploadStorage {
    /// The data directory.
    #[default]
    Local,
    /// S3-compatible object storage.
    S3,
}

impl Default for UploadSettings {
    fn default() -> UploadSettings {
        UploadSettings {
            max_bytes: 5 * 1024 * 1024,
            max_pixels: 40_000_000,
            inbound_attachments: 10,
            inbound_attachment_bytes: 10 * 1024 * 1024,
            storage: UploadStorage::Local,
            s3_bucket: None,
            s3_region: "us-east-1".into(),
            s3_endpoint: None,
            s3_access_key_id: None,
            s3_secret_access_key: None,
            s3_prefix: None,
            s3_allow_http: false,
        }
    }
}

/// Settings of sending.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct SendingSettings {
    /// Emails per second per project handed to the transport, across all instances (0: no
    /// limit). Emails over the budget wait in the queue.
    pub per_project_per_second: u32,
    /// How long a delivery that fails transiently (the relay is down, a 4xx answer) is retried,
    /// from when the email was queued, before it is marked failed: an MTA's queue lifetime.
    pub retry_lifetime_seconds: u64,
    /// Memory, in megabytes, that the messages being built and handed off at once may take; a
    /// hand-off waits for room (small messages never wait; a few large ones at a time do).
    pub hand_off_memory_mb: u64,
    /// Memory, in megabytes, that rendered messages waiting for their commit may take at once
    /// (those of a `/v1/send`, of a campaign group); a request whose messages take more than
    /// all of it fails, one that finds no room waits for it (`services::render_budget`).
    pub render_memory_mb: u64,
    /// Most emails of one project handed to the transport in one plugin call (one SMTP
    /// connection, one commit): a delivery worker claims up to this many due emails at once.
    pub batch_size: u32,
    /// Soft bounces of one address, with no delivery to it between them, that put it on its
    /// project's suppression list as a hard bounce (0: soft bounces never do).
    pub soft_bounce_limit: u32,
    /// The days within which `soft_bounce_limit` soft bounces count.
    pub soft_bounce_days: u32,
    /// Days the rendered email behind a `{{viewInBrowserUrl}}` link is kept after delivery
    /// (the "view in browser" page answers 404 afterwards; at least 1).
    pub view_in_browser_days: u64,
}

impl Default for SendingSettings {
    fn default() -> SendingSettings {
        SendingSettings {
            per_project_per_second: 0,
            retry_lifetime_seconds: 86_400,
            hand_off_memory_mb: 256,
            render_memory_mb: 256,
            batch_size: 50,
            soft_bounce_limit: 3,
            soft_bounce_days: 7,
            view_in_browser_days: 30,
        }
    }
}

/// Settings of sending domains and their DNS checks.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct DomainSettings {
    /// The host that receives bounces: the target of each domain's return-path MX record.
    /// Defaults to the host of `public_url`.
    pub mail_host: Option<String>,
    /// The SPF mechanism that authorises this service's outgoing mail, e.g. `include:_spf.mail.example`
    /// or `ip4:203.0.113.7`. Defaults to `a:<mail_host>`.
    pub spf_include: Option<String>,
    /// Seconds between background checks of pending and failed domains.
    pub check_interval_seconds: u64,
    /// Seconds between background checks of verified domains.
    pub verified_check_interval_seconds: u64,
    /// Development only: accept `from` addresses on domains that are not verified (mail from
    /// them is sent unsigned). Logged loudly at start when on.
    pub allow_unverified: bool,
}

impl Default for DomainSettings {
    fn default() -> DomainSettings {
        DomainSettings {
            mail_host: None,
            spf_include: None,
            check_interval_seconds: 300,
            verified_check_interval_seconds: 86_400,
            allow_unverified: false,
        }
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            listen: "127.0.0.1:8080".into(),
            data_dir: PathBuf::from("./data"),
            database_url: None,
            database_max_connections: 16,
            database_statement_timeout_ms: 30_000,
            public_url: None,
            rate_limit_per_minute: 1000,
            rate_limit_public_share: 50,
            contact_data_max_bytes: 65_536,
            contact_fields_max_per_project: 2_000,
            event_names_max_per_project: 10_000,
            signup_enabled: true,
            auth_attempts_per_ip_per_minute: 30,
            login_attempts_per_account_per_minute: 10,
            jwt_secret: None,
            session_ttl_hours: 24 * 7,
            max_body_bytes: 1024 * 1024,
            shutdown_grace_seconds: 10,
            http_idle_timeout_seconds: 120,
            http_max_connections_per_ip: 256,
            jobs_concurrency: 4,
            jobs_poll_interval_ms: 500,
            jobs_lease_seconds: 30,
            jobs_max_attempts: 5,
            jobs_retention_hours: 24 * 7,
            verify_dns_timeout_ms: 2_000,
            verify_cache_seconds: 600,
            log: "info".into(),
            log_format: LogFormat::Text,
            plugins: crate::plugins::PluginSettings::default(),
            transports: Default::default(),
            domains: DomainSettings::default(),
            sending: SendingSettings::default(),
            accounts: AccountSettings::default(),
            security: SecuritySettings::default(),
            uploads: UploadSettings::default(),
            segments: SegmentSettings::default(),
            contacts: ContactSettings::default(),
            workflows: WorkflowSettings::default(),
            oauth: OAuthSettings::default(),
            metrics: MetricsSettings::default(),
            traces: TraceSettings::default(),
            inbound: InboundSettings::default(),
            submission: SubmissionSettings::default(),
        }
    }
}

/// Tables of tables of scalars, each value as a string: the environment gives `587` or `true`
/// as a number or a boolean.
fn scalar_tables<'de, D>(deserializer: D) -> Result<crate::plugins::TransportTables, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Scalar {
        Text(String),
        Bool(bool),
        Int(i64),
        Float(f64),
    }
    let tables: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Scalar>> =
        Deserialize::deserialize(deserializer)?;
    Ok(tables
        .into_iter()
        .map(|(name, table)| {
            let table = table
                .into_iter()
                .map(|(key, value)| {
                    let value = match value {
                        Scalar::Text(s) => s,
                        Scalar::Bool(b) => b.to_string(),
                        Scalar::Int(i) => i.to_string(),
                        Scalar::Float(f) => f.to_string(),
                    };
                    (key, value)
                })
                .collect();
            (name, table)
        })
        .collect())
}

/// Environment variables with the `HERALD_` prefix that are not settings.
const NOT_SETTINGS: [&str; 2] = ["config", "bless_openapi"];

impl Settings {
    /// Loads defaults, then `file` (or `HERALD_CONFIG`) if given, then `HERALD_*` variables,
    /// and checks them (see [`check`]).
    pub fn load(file: Option<&Path>) -> Result<Settings, SettingsError> {
        Settings::load_checked(file).map(|l| l.settings)
    }

    /// The database URL in effect.
    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("herald.db").display()))
    }

    /// The bounce host in effect (`domains.mail_host`, else the host of the public URL).
    pub fn mail_host(&self) -> String {
        if let Some(host) = self.domains.mail_host.as_deref().filter(|h| !h.is_empty()) {
            return host.trim_end_matches('.').to_ascii_lowercase();
        }
        let url = self.public_url();
        let rest = url.split_once("://").map(|x| x.1).unwrap_or(&url);
        let authority = rest.split('/').next().unwrap_or(rest);
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6),
            None => authority.split(':').next().unwrap_or(authority),
        };
        host.to_ascii_lowercase()
    }

    /// The SPF mechanism in effect (`domains.spf_include`, else `a:<mail_host>`).
    pub fn spf_include(&self) -> String {
        match self
            .domains
            .spf_include
            .as_deref()
            .filter(|s| !s.is_empty())
        {
            Some(spf) => spf.to_string(),
            None => format!("a:{}", self.mail_host()),
        }
    }

    /// The sender of account mail in effect (`accounts.mail_from`, else `Herald
    /// <no-reply@<host of public_url>>`).
    pub fn account_mail_from(&self) -> String {
        match self.accounts.mail_from.as_deref().filter(|s| !s.is_empty()) {
            Some(from) => from.to_string(),
            None => format!("Herald <no-reply@{}>", self.mail_host()),
        }
    }

    /// The base URL of links in account mail, without a trailing slash.
    pub fn dashboard_url(&self) -> String {
        match self
            .accounts
            .dashboard_url
            .as_deref()
            .filter(|s| !s.is_empty())
        {
            Some(url) => url.trim_end_matches('/').to_string(),
            // The dashboard the binary serves (`api::dashboard`).
            None => format!("{}/app", self.public_url()),
        }
    }

    /// The public base URL in effect, without a trailing slash.
    pub fn public_url(&self) -> String {
        self.public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.listen))
            .trim_end_matches('/')
            .to_string()
    }
}
