//! The `smtp` capability: sending through the configured relay (`plugins.smtp_*`), over a
//! pooled connection ([`Relay`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lettre::address::Envelope;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, Certificate, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::transport::smtp::response::Response;
use tokio::net::TcpStream;

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

/// The relay, when `plugins.smtp_host` is set.
pub(super) struct Smtp(Option<Relay>, Duration);

/// The relay's settings and its pool of open connections (at most `plugins.smtp_pool_size`).
///
/// Connections are lettre's `AsyncSmtpConnection`s over sockets of our own with `TCP_NODELAY`
/// set: lettre writes a message's final `.` apart from its body, and with Nagle's algorithm on,
/// that write waits for the relay's delayed ACK (40 ms on Linux) on every message. (Implicit
/// TLS goes through lettre's own connect, which does not set it.)
pub(super) struct Relay {
    host: String,
    port: u16,
    tls: SmtpTls,
    tls_parameters: Option<TlsParameters>,
    credentials: Option<Credentials>,
    timeout: Duration,
    hello: ClientId,
    slots: tokio::sync::Semaphore,
    idle: std::sync::Mutex<Vec<(AsyncSmtpConnection, Instant)>>,
}

/// How long an idle connection is kept for reuse.
const IDLE_FOR: Duration = Duration::from_secs(60);

/// Why a send through the relay failed.
enum RelayError {
    /// The relay answered, or lettre refused.
    Smtp(lettre::transport::smtp::Error),
    /// The connection could not be made, or the relay did not answer in time.
    Network(String),
}

impl Smtp {
    /// The relay of `settings`.
    pub(super) fn new(settings: &PluginSettings) -> Result<Smtp, SmtpSetupError> {
        let timeout = Duration::from_millis(settings.smtp_timeout_ms);
        let Some(host) = &settings.smtp_host else {
            return Ok(Smtp(None, timeout));
        };
        let tls_parameters = match settings.smtp_tls {
            SmtpTls::None => None,
            SmtpTls::Starttls | SmtpTls::Tls => Some(tls_parameters(host, settings)?),
        };
        let credentials = match (&settings.smtp_username, &settings.smtp_password) {
            (Some(user), Some(password)) => Some(Credentials::new(user.clone(), password.clone())),
            _ => None,
        };
        Ok(Smtp(
            Some(Relay {
                host: host.clone(),
                port: settings.smtp_port,
                tls: settings.smtp_tls,
                tls_parameters,
                credentials,
                timeout,
                hello: ClientId::default(),
                slots: tokio::sync::Semaphore::new(settings.smtp_pool_size.max(1) as usize),
                idle: std::sync::Mutex::new(Vec::new()),
            }),
            timeout,
        ))
    }
}

impl Relay {
    /// A new connection: connected, greeted, encrypted as configured, authenticated.
    async fn connect(&self) -> Result<AsyncSmtpConnection, RelayError> {
        let address = (self.host.as_str(), self.port);
        let mut connection = match (self.tls, &self.tls_parameters) {
            (SmtpTls::Tls, Some(tls)) => AsyncSmtpConnection::connect_tokio1(
                address,
                Some(self.timeout),
                &self.hello,
                Some(tls.clone()),
                None,
            )
            .await
            .map_err(RelayError::Smtp)?,
            _ => {
                let stream = tokio::time::timeout(self.timeout, TcpStream::connect(address))
                    .await
                    .map_err(|_| RelayError::Network("connecting to the relay timed out".into()))?
                    .map_err(|e| {
                        RelayError::Network(format!("cannot connect to the relay: {e}"))
                    })?;
                let _ = stream.set_nodelay(true);
                let mut connection =
                    AsyncSmtpConnection::connect_with_transport(Box::new(stream), &self.hello)
                        .await
                        .map_err(RelayError::Smtp)?;
                if let (SmtpTls::Starttls, Some(tls)) = (self.tls, &self.tls_parameters) {
                    connection
                        .starttls(tls.clone(), &self.hello)
                        .await
                        .map_err(RelayError::Smtp)?;
                }
                connection
            }
        };
        if let Some(credentials) = &self.credentials {
            connection
                .auth(&[Mechanism::Plain, Mechanism::Login], credentials)
                .await
                .map_err(RelayError::Smtp)?;
        }
        Ok(connection)
    }

    /// Sends one message over a pooled connection (a new one when none is idle, and once more
    /// on a new one when a reused connection turns out closed), within the SMTP timeout.
    async fn send(&self, envelope: &Envelope, message: &[u8]) -> Result<Response, RelayError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|e| RelayError::Network(e.to_string()))?;
        let work = async {
            let reused = {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                idle.retain(|(_, since)| since.elapsed() < IDLE_FOR);
                idle.pop().map(|(c, _)| c)
            };
            let was_reused = reused.is_some();
            let mut connection = match reused {
                Some(c) => c,
                None => self.connect().await?,
            };
            let mut sent = connection.send(envelope, message).await;
            if was_reused
                && let Err(e) = &sent
                && !e.is_permanent()
                && !e.is_transient()
            {
                // Not an answer of the relay: the idle connection was closed under us.
                connection = self.connect().await?;
                sent = connection.send(envelope, message).await;
            }
            if !connection.has_broken() {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                idle.push((connection, Instant::now()));
            }
            sent.map_err(RelayError::Smtp)
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| RelayError::Network("the relay did not answer in time".into()))?
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
        let Some(relay) = &self.services.smtp.0 else {
            return Ok(Err(smtp::Error::Permanent(
                "no SMTP relay is configured (plugins.smtp_host)".into(),
            )));
        };
        // A send that could time out past the call's I/O budget is not started: the call must
        // end with an answer for what it already sent (a batch), not be cut off.
        if !self.io_time.is_zero() && self.io_time + self.services.smtp.1 > self.io_budget {
            return Ok(Err(smtp::Error::Transient(
                "not sent: this plugin call's I/O budget (plugins.io_budget_ms) is nearly spent"
                    .into(),
            )));
        }
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
        let sent = timed(&mut self.io_time, relay.send(&envelope, &message)).await;
        Ok(match sent {
            Ok(response) => Ok(format!(
                "{} {}",
                response.code(),
                response.message().collect::<Vec<_>>().join(" ")
            )),
            Err(RelayError::Smtp(e)) if e.is_permanent() => {
                Err(smtp::Error::Permanent(e.to_string()))
            }
            Err(RelayError::Smtp(e)) => Err(smtp::Error::Transient(e.to_string())),
            Err(RelayError::Network(e)) => Err(smtp::Error::Transient(e)),
        })
    }
}
