//! The `smtp` capability: sending through the configured relay (`plugins.smtp_*`), over a
//! pooled connection.

use std::path::PathBuf;
use std::time::Duration;

use lettre::transport::smtp::PoolConfig;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::{CallState, timed};
use crate::plugins::bindings::imports::herald::plugin::smtp;
use crate::plugins::settings::{PluginSettings, SmtpTls};

/// Why the SMTP relay's transport cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SmtpSetupError {
    /// `plugins.smtp_ca_file` cannot be read.
    #[error("plugins.smtp_ca_file `{}` cannot be read: {source}", path.display())]
    CaUnreadable {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// `plugins.smtp_ca_file` holds no PEM certificate block.
    #[error(
        "plugins.smtp_ca_file `{}` holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        path.display()
    )]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// `plugins.smtp_ca_file`'s certificate cannot be parsed.
    #[error("plugins.smtp_ca_file `{}` holds no PEM certificate: {source}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// The error.
        source: lettre::transport::smtp::Error,
    },
    /// The TLS parameters are refused.
    #[error("SMTP TLS: {0}")]
    Tls(lettre::transport::smtp::Error),
}

/// The relay's transport, when `plugins.smtp_host` is set.
pub(super) struct Smtp(Option<AsyncSmtpTransport<Tokio1Executor>>);

impl Smtp {
    /// The transport of `settings`.
    pub(super) fn new(settings: &PluginSettings) -> Result<Smtp, SmtpSetupError> {
        let Some(host) = &settings.smtp_host else {
            return Ok(Smtp(None));
        };
        let tls = match settings.smtp_tls {
            SmtpTls::None => Tls::None,
            SmtpTls::Starttls => Tls::Required(tls_parameters(host, settings)?),
            SmtpTls::Tls => Tls::Wrapper(tls_parameters(host, settings)?),
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
            .port(settings.smtp_port)
            .tls(tls)
            .timeout(Some(Duration::from_millis(settings.smtp_timeout_ms)))
            .pool_config(PoolConfig::new().max_size(settings.smtp_pool_size.max(1)));
        if let (Some(user), Some(password)) = (&settings.smtp_username, &settings.smtp_password) {
            builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
        }
        Ok(Smtp(Some(builder.build())))
    }
}

/// TLS towards `host`, trusting `plugins.smtp_ca_file` in addition to the system's roots.
fn tls_parameters(host: &str, settings: &PluginSettings) -> Result<TlsParameters, SmtpSetupError> {
    let mut builder = TlsParameters::builder(host.to_string());
    if let Some(path) = &settings.smtp_ca_file {
        let pem = std::fs::read(path).map_err(|source| SmtpSetupError::CaUnreadable {
            path: path.clone(),
            source,
        })?;
        if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
            return Err(SmtpSetupError::NoCertificate { path: path.clone() });
        }
        let ca = Certificate::from_pem(&pem).map_err(|source| SmtpSetupError::BadCertificate {
            path: path.clone(),
            source,
        })?;
        builder = builder.add_root_certificate(ca);
    }
    builder.build().map_err(SmtpSetupError::Tls)
}

impl smtp::Host for CallState {
    async fn send(
        &mut self,
        envelope: smtp::Envelope,
        message: Vec<u8>,
    ) -> wasmtime::Result<Result<String, smtp::Error>> {
        if !self.granted.grants.smtp {
            return Err(self.deny("smtp"));
        }
        let Some(transport) = &self.services.smtp.0 else {
            return Ok(Err(smtp::Error::Permanent(
                "no SMTP relay is configured (plugins.smtp_host)".into(),
            )));
        };
        let parse = |a: &str| {
            a.parse::<lettre::Address>()
                .map_err(|e| smtp::Error::Permanent(format!("address `{a}`: {e}")))
        };
        let sender = match parse(&envelope.sender) {
            Ok(a) => a,
            Err(e) => return Ok(Err(e)),
        };
        let recipients = match envelope.recipients.iter().map(|r| parse(r)).collect() {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let envelope = match lettre::address::Envelope::new(Some(sender), recipients) {
            Ok(e) => e,
            Err(e) => return Ok(Err(smtp::Error::Permanent(e.to_string()))),
        };
        let sent = timed(&mut self.io_time, transport.send_raw(&envelope, &message)).await;
        Ok(match sent {
            Ok(response) => Ok(format!(
                "{} {}",
                response.code(),
                response.message().collect::<Vec<_>>().join(" ")
            )),
            Err(e) if e.is_permanent() => Err(smtp::Error::Permanent(e.to_string())),
            Err(e) => Err(smtp::Error::Transient(e.to_string())),
        })
    }
}
