//! Herald's own SMTP server, beside the HTTP API and calling the same services (a concept a
//! file, after Stalwart's `smtp` crate): the MX listener that receives bounces, complaints and
//! replies (`inbound.listen`, `inbound.rs`) and the submission listeners for applications that
//! only speak SMTP (`submission.listen` with `STARTTLS`, `submission.implicit_tls_listen`;
//! `submission.rs`). `session.rs` is the per-connection state machine, `limits.rs` what one
//! client address may do, `budget.rs` the message data all of a listener's sessions may hold,
//! `tls.rs` the rustls configuration, `reply.rs` one reply.
//!
//! Each listener is off until its address is set. [`bind`] binds them (and reads the
//! certificates) when the app is built, so that a bad setting stops the start; [`SmtpListeners::serve`]
//! accepts until the stop signal. Nothing a session learns stays in the process: every instance
//! may receive, and what a message teaches Herald is written to the database before its `250`.

pub mod budget;
pub mod inbound;
pub mod limits;
pub mod reply;
pub mod session;
pub mod submission;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::api::AppState;
use crate::config::{Settings, SettingsError, SmtpLimits};
use budget::Budget;
use inbound::InboundMx;
use limits::ClientLimits;
use reply::Reply;
use session::{Counts, Outcome, Session};
use submission::{Submit, plain_auth_allowed};

/// Where the SMTP listeners are bound (`None`: off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmtpAddrs {
    /// The MX listener.
    pub inbound: Option<SocketAddr>,
    /// The submission listener (`STARTTLS`).
    pub submission: Option<SocketAddr>,
    /// The submission listener speaking TLS from the first byte.
    pub submission_tls: Option<SocketAddr>,
}

/// What a listener serves.
pub enum Role {
    /// Bounces, complaints and replies.
    Inbound(InboundMx),
    /// Mail submitted by applications.
    Submission(Submit),
}

/// One listener's configuration, shared by its sessions.
pub struct Listener {
    /// The name in the greeting and the `EHLO` answer.
    pub hostname: String,
    /// Sizes and timeouts.
    pub limits: SmtpLimits,
    /// The TLS configuration (`STARTTLS`, or implicit TLS).
    pub tls: Option<TlsAcceptor>,
    /// TLS from the first byte.
    pub implicit_tls: bool,
    /// `AUTH` is allowed before TLS (a loopback listener, or `submission.allow_plain_auth`).
    pub plain_auth: bool,
    /// What it serves.
    pub role: Role,
    /// What one client address may do.
    pub clients: Arc<ClientLimits>,
    /// The message data its sessions may hold at once (shared by the two submission
    /// listeners).
    pub budget: Arc<Budget>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Inbound,
    Submission,
    SubmissionTls,
}

/// One bound socket with its settings.
struct Bound {
    kind: Kind,
    socket: TcpListener,
    addr: SocketAddr,
    hostname: String,
    limits: SmtpLimits,
    tls: Option<TlsAcceptor>,
    plain_auth: bool,
    budget: Arc<Budget>,
}

/// The bound SMTP listeners, not yet serving.
pub struct SmtpListeners {
    bound: Vec<Bound>,
}

/// Binds the configured SMTP listeners and reads their certificates; an address that cannot be
/// bound or a certificate that cannot be used is an error naming its setting.
pub async fn bind(settings: &Settings) -> Result<SmtpListeners, SettingsError> {
    let mut bound = Vec::new();
    let inbound = &settings.inbound;
    let submission = &settings.submission;
    let inbound_tls = match (&inbound.tls_cert_file, &inbound.tls_key_file) {
        (Some(cert), Some(key)) if inbound.listen.is_some() => {
            Some(tls::acceptor("inbound", cert, key)?)
        }
        _ => None,
    };
    let submission_tls = match (&submission.tls_cert_file, &submission.tls_key_file) {
        (Some(cert), Some(key))
            if submission.listen.is_some() || submission.implicit_tls_listen.is_some() =>
        {
            Some(tls::acceptor("submission", cert, key)?)
        }
        _ => None,
    };
    // One budget for each table of settings: the submission listeners share theirs.
    let inbound_budget = Budget::new(inbound.limits().memory_bytes);
    let submission_budget = Budget::new(submission.limits().memory_bytes);
    let name = |configured: &Option<String>| {
        configured
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| settings.mail_host())
    };
    let listeners = [
        (
            Kind::Inbound,
            "inbound.listen",
            &inbound.listen,
            name(&inbound.hostname),
            inbound.limits(),
            inbound_tls,
            inbound_budget,
        ),
        (
            Kind::Submission,
            "submission.listen",
            &submission.listen,
            name(&submission.hostname),
            submission.limits(),
            submission_tls.clone(),
            submission_budget.clone(),
        ),
        (
            Kind::SubmissionTls,
            "submission.implicit_tls_listen",
            &submission.implicit_tls_listen,
            name(&submission.hostname),
            submission.limits(),
            submission_tls,
            submission_budget,
        ),
    ];
    for (kind, setting, listen, hostname, limits, tls, budget) in listeners {
        let Some(listen) = listen.as_deref() else {
            continue;
        };
        let unusable = |message: String| SettingsError::Unusable {
            setting: setting.into(),
            message,
        };
        let socket = TcpListener::bind(listen)
            .await
            .map_err(|e| unusable(format!("cannot listen on {listen}: {e}")))?;
        let addr = socket
            .local_addr()
            .map_err(|e| unusable(format!("cannot listen on {listen}: {e}")))?;
        let plain_auth = plain_auth_allowed(addr, submission.allow_plain_auth);
        bound.push(Bound {
            kind,
            socket,
            addr,
            hostname,
            limits,
            tls,
            plain_auth,
            budget,
        });
    }
    Ok(SmtpListeners { bound })
}

impl SmtpListeners {
    /// Where each listener is bound.
    pub fn addrs(&self) -> SmtpAddrs {
        let of = |kind: Kind| self.bound.iter().find(|b| b.kind == kind).map(|b| b.addr);
        SmtpAddrs {
            inbound: of(Kind::Inbound),
            submission: of(Kind::Submission),
            submission_tls: of(Kind::SubmissionTls),
        }
    }

    /// Serves every listener with `state`'s services until `stop` turns true; each task ends
    /// once its listener stopped accepting and its sessions ended (those waiting for a command
    /// are answered `421` at once; those receiving a message finish it).
    pub fn serve(
        self,
        state: &AppState,
        stop: watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        self.bound
            .into_iter()
            .map(|b| {
                tracing::info!(address = %b.addr, "SMTP {} listening", match b.kind {
                    Kind::Inbound => "inbound (MX)",
                    Kind::Submission => "submission",
                    Kind::SubmissionTls => "submission (implicit TLS)",
                });
                let role = match b.kind {
                    Kind::Inbound => Role::Inbound(InboundMx::new(state.clone())),
                    Kind::Submission | Kind::SubmissionTls => {
                        Role::Submission(Submit::new(state.clone()))
                    }
                };
                let listener = Arc::new(Listener {
                    hostname: b.hostname,
                    clients: ClientLimits::new(
                        b.limits.max_connections_per_ip,
                        b.limits.messages_per_ip_per_minute,
                    ),
                    limits: b.limits,
                    implicit_tls: b.kind == Kind::SubmissionTls,
                    tls: b.tls,
                    plain_auth: b.plain_auth,
                    role,
                    budget: b.budget,
                });
                tokio::spawn(accept(b.socket, listener, stop.clone()))
            })
            .collect()
    }
}

/// Accepts connections until `stop`, then waits for the sessions.
async fn accept(socket: TcpListener, listener: Arc<Listener>, mut stop: watch::Receiver<bool>) {
    let mut sessions = JoinSet::new();
    loop {
        tokio::select! {
            accepted = socket.accept() => match accepted {
                Ok((tcp, peer)) => {
                    let _ = tcp.set_nodelay(true);
                    sessions.spawn(serve(tcp, peer, listener.clone(), stop.clone()));
                }
                Err(err) => {
                    // Out of descriptors, most likely: wait for sessions to end.
                    tracing::warn!(error = %err, "could not accept an SMTP connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            _ = stopped(&mut stop) => break,
        }
    }
    drop(socket);
    while sessions.join_next().await.is_some() {}
}

/// Serves one connection: counted against its address, TLS first on an implicit-TLS listener,
/// upgraded on `STARTTLS`.
async fn serve(
    tcp: TcpStream,
    peer: SocketAddr,
    listener: Arc<Listener>,
    mut stop: watch::Receiver<bool>,
) {
    let Some(_connection) = listener.clients.connect(peer.ip()) else {
        let session = Session::new(tcp, peer, &listener, false, Counts::default());
        session
            .refuse(Reply::fixed(
                421,
                [4, 7, 0],
                "too many connections from your address, try again later",
            ))
            .await;
        return;
    };
    let handshake = Duration::from_secs(listener.limits.command_timeout_seconds.max(1));
    let (tcp, counts) = if listener.implicit_tls {
        (tcp, Counts::default())
    } else {
        let mut session = Session::new(tcp, peer, &listener, false, Counts::default());
        let outcome = session.run(true, &mut stop).await;
        let (mut tcp, counts) = session.into_parts();
        if let Outcome::Closed = outcome {
            let _ = tokio::time::timeout(handshake, tcp.shutdown()).await;
            return;
        }
        (tcp, counts)
    };
    let Some(acceptor) = listener.tls.clone() else {
        return;
    };
    let tls = match tokio::time::timeout(handshake, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(err)) => {
            tracing::debug!(%peer, error = %err, "SMTP TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let mut session = Session::new(tls, peer, &listener, true, counts);
    // Greeted already when upgraded with STARTTLS; a second STARTTLS is refused.
    session.run(listener.implicit_tls, &mut stop).await;
    let (mut tls, _) = session.into_parts();
    let _ = tokio::time::timeout(handshake, tls.shutdown()).await;
}

/// Resolves once `stop` is true (never, when its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
