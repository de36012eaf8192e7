//! Settings of Herald's own SMTP server (`host/src/smtp/`): the MX listener that receives
//! bounces, complaints and replies (`[inbound]`), and the submission listener for applications
//! that only speak SMTP (`[submission]`). Each is off until its `listen` is set.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One mebibyte, the unit of `memory_mb`.
pub const MIB: usize = 1024 * 1024;

/// Bytes an SMTP session reads at a time; a message's buffer may pass its size limit by one
/// read before the message is refused.
pub const READ_CHUNK_BYTES: usize = 8 * 1024;

/// What both listeners share: how long a client may take, and what one address may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmtpLimits {
    /// Largest message accepted (advertised with `SIZE`), in bytes.
    pub max_message_bytes: usize,
    /// Open connections one client address may hold (0: no cap).
    pub max_connections_per_ip: usize,
    /// Messages one client address may start a minute (0: no cap).
    pub messages_per_ip_per_minute: u32,
    /// Seconds to wait for the next command (RFC 5321: 5 minutes).
    pub command_timeout_seconds: u64,
    /// Seconds to wait for each block of a message's data (RFC 5321: 3 minutes).
    pub data_block_timeout_seconds: u64,
    /// Seconds a whole message's data may take to arrive (RFC 5321: 10 minutes).
    pub data_timeout_seconds: u64,
    /// Bytes of message data all sessions of the listener may hold at once.
    pub memory_bytes: usize,
}

/// The MX listener (`[inbound]`, `HERALD_INBOUND__<NAME>`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct InboundSettings {
    /// Address and port of the MX listener (e.g. `0.0.0.0:25`); unset: off.
    pub listen: Option<String>,
    /// The name the server gives itself in its greeting; defaults to `domains.mail_host`.
    pub hostname: Option<String>,
    /// The PEM certificate chain offered with `STARTTLS` (with `tls_key_file`); unset: no
    /// `STARTTLS`.
    pub tls_cert_file: Option<PathBuf>,
    /// The PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// Largest message accepted, in bytes.
    pub max_message_bytes: usize,
    /// Open connections one client address may hold (0: no cap).
    pub max_connections_per_ip: usize,
    /// Messages one client address may start a minute (0: no cap).
    pub messages_per_ip_per_minute: u32,
    /// An address (e.g. `abuse@mail.example.com`) where feedback-loop reports are complaints
    /// about the emails they name; unset: none.
    pub abuse_address: Option<String>,
    /// Seconds to wait for the next command.
    pub command_timeout_seconds: u64,
    /// Seconds to wait for each block of a message's data.
    pub data_block_timeout_seconds: u64,
    /// Seconds a whole message's data may take.
    pub data_timeout_seconds: u64,
    /// Mebibytes of message data all sessions may hold at once; a message that would pass it
    /// is answered `452 4.3.1`.
    pub memory_mb: usize,
}

impl Default for InboundSettings {
    fn default() -> InboundSettings {
        InboundSettings {
            listen: None,
            hostname: None,
            tls_cert_file: None,
            tls_key_file: None,
            max_message_bytes: 25 * 1024 * 1024,
            max_connections_per_ip: 16,
            messages_per_ip_per_minute: 600,
            abuse_address: None,
            command_timeout_seconds: 300,
            data_block_timeout_seconds: 180,
            data_timeout_seconds: 600,
            memory_mb: 64,
        }
    }
}

impl SmtpLimits {
    /// The least `memory_mb` that holds one message of `max_message_bytes` (and the read past
    /// it).
    pub fn memory_needed_mb(&self) -> usize {
        self.max_message_bytes
            .saturating_add(READ_CHUNK_BYTES)
            .div_ceil(MIB)
    }
}

impl InboundSettings {
    /// Its limits.
    pub fn limits(&self) -> SmtpLimits {
        SmtpLimits {
            max_message_bytes: self.max_message_bytes,
            max_connections_per_ip: self.max_connections_per_ip,
            messages_per_ip_per_minute: self.messages_per_ip_per_minute,
            command_timeout_seconds: self.command_timeout_seconds,
            data_block_timeout_seconds: self.data_block_timeout_seconds,
            data_timeout_seconds: self.data_timeout_seconds,
            memory_bytes: self.memory_mb.saturating_mul(MIB),
        }
    }
}

/// The submission listener (`[submission]`, `HERALD_SUBMISSION__<NAME>`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct SubmissionSettings {
    /// Address and port of the submission listener with `STARTTLS` (e.g. `0.0.0.0:587`);
    /// unset: off.
    pub listen: Option<String>,
    /// Address and port of the submission listener speaking TLS from the first byte (e.g.
    /// `0.0.0.0:465`); unset: off. Needs `tls_cert_file` and `tls_key_file`.
    pub implicit_tls_listen: Option<String>,
    /// The name the server gives itself in its greeting; defaults to `domains.mail_host`.
    pub hostname: Option<String>,
    /// The PEM certificate chain (with `tls_key_file`).
    pub tls_cert_file: Option<PathBuf>,
    /// The PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// Allow `AUTH` on a connection that is not encrypted, on a listener that is not on
    /// loopback (the password is the project's secret key).
    pub allow_plain_auth: bool,
    /// Largest message accepted, in bytes.
    pub max_message_bytes: usize,
    /// Open connections one client address may hold (0: no cap).
    pub max_connections_per_ip: usize,
    /// Messages one client address may start a minute (0: no cap).
    pub messages_per_ip_per_minute: u32,
    /// Seconds to wait for the next command.
    pub command_timeout_seconds: u64,
    /// Seconds to wait for each block of a message's data.
    pub data_block_timeout_seconds: u64,
    /// Seconds a whole message's data may take.
    pub data_timeout_seconds: u64,
    /// Mebibytes of message data all sessions may hold at once; a message that would pass it
    /// is answered `452 4.3.1`.
    pub memory_mb: usize,
}

impl Default for SubmissionSettings {
    fn default() -> SubmissionSettings {
        SubmissionSettings {
            listen: None,
            implicit_tls_listen: None,
            hostname: None,
            tls_cert_file: None,
            tls_key_file: None,
            allow_plain_auth: false,
            max_message_bytes: 25 * 1024 * 1024,
            max_connections_per_ip: 32,
            messages_per_ip_per_minute: 6_000,
            command_timeout_seconds: 300,
            data_block_timeout_seconds: 180,
            data_timeout_seconds: 600,
            memory_mb: 64,
        }
    }
}

impl SubmissionSettings {
    /// Its limits.
    pub fn limits(&self) -> SmtpLimits {
        SmtpLimits {
            max_message_bytes: self.max_message_bytes,
            max_connections_per_ip: self.max_connections_per_ip,
            messages_per_ip_per_minute: self.messages_per_ip_per_minute,
            command_timeout_seconds: self.command_timeout_seconds,
            data_block_timeout_seconds: self.data_block_timeout_seconds,
            data_timeout_seconds: self.data_timeout_seconds,
            memory_bytes: self.memory_mb.saturating_mul(MIB),
        }
    }
}
