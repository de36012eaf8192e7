//! One SMTP connection, as a state machine over any byte stream (plain TCP, or TLS after
//! `STARTTLS` or from the first byte): commands parsed by `smtp-proto`'s receivers, replies
//! batched while pipelined commands are pending (RFC 2920) and flushed before each read, every
//! read under RFC 5321's timeouts, message data read into a buffer never larger than the
//! listener's limit (past it, the rest is read and thrown away, then refused with `552 5.3.4`),
//! each growth of the buffer taken from the listener's memory budget (`budget.rs`; without room,
//! the rest is thrown away likewise and the message answered `452 4.3.1`).
//! The session holds only its envelope; what a message means is the role's to decide
//! (`inbound.rs`, `submission.rs`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use smtp_proto::request::receiver::{
    DataReceiver, DummyDataReceiver, DummyLineReceiver, LineReceiver, RequestReceiver,
};
use smtp_proto::{
    AUTH_LOGIN, AUTH_PLAIN, EXT_8BIT_MIME, EXT_AUTH, EXT_ENHANCED_STATUS_CODES, EXT_PIPELINING,
    EXT_SIZE, EXT_START_TLS, EhloResponse, Error as ParseError, Request,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::budget::Held;
use super::inbound::Route;
use super::reply::{self, Reply};
use super::submission::{AuthStep, auth_allowed, decode_login, decode_plain};
use super::{Listener, Role, stopped};
use crate::domain::ids::ProjectId;

/// Errors (refused commands) after which the session is closed.
pub const MAX_ERRORS: usize = 10;
/// Commands one session may send (its connection, across `STARTTLS`).
pub const MAX_COMMANDS: usize = 10_000;
/// Recipients of one message (RFC 5321's minimum a server must take).
pub const MAX_RECIPIENTS: usize = 100;
/// Bytes read at a time.
const READ_CHUNK: usize = crate::config::READ_CHUNK_BYTES;

/// How a session ended.
pub enum Outcome {
    /// The connection is done.
    Closed,
    /// `STARTTLS` was accepted: the caller runs the TLS handshake and a new session over it.
    StartTls,
}

/// What a session counts across `STARTTLS`, so that an upgrade does not reset its caps.
#[derive(Clone, Copy, Default)]
pub struct Counts {
    commands: usize,
    errors: usize,
}

/// What the session does after a command.
enum Step {
    Continue,
    Close,
    StartTls,
}

/// How a read ended.
enum Read {
    Bytes,
    Closed,
    TimedOut,
    Stopped,
}

/// What a `DATA` block came to.
enum Data {
    /// The message, with the budget it holds until it is handled.
    Message(Vec<u8>, Held),
    TooBig,
    /// The listener's memory budget had no room for it.
    NoRoom,
    Closed,
    TimedOut,
}

/// How the next input is read.
enum Mode {
    Command,
    /// The rest of a line too long (or not parsed to its end) is thrown away.
    Discard(DummyLineReceiver),
    /// A line answering an `AUTH` challenge.
    Auth(AuthStep, LineReceiver<()>),
}

/// The bytes read and not yet consumed.
struct Input {
    buf: Vec<u8>,
    pos: usize,
    len: usize,
}

impl Input {
    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..self.len]
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.len);
    }
}

/// The mail transaction under way.
struct Envelope {
    mail_from: String,
    rcpts: Vec<String>,
    /// Where each recipient goes (the MX listener).
    routes: Vec<Route>,
}

/// One session over `S`.
pub struct Session<'a, S> {
    io: S,
    peer: SocketAddr,
    listener: &'a Listener,
    tls: bool,
    out: Vec<u8>,
    receiver: RequestReceiver,
    mode: Mode,
    helo: Option<String>,
    envelope: Option<Envelope>,
    project: Option<ProjectId>,
    counts: Counts,
}

impl<'a, S: AsyncRead + AsyncWrite + Unpin> Session<'a, S> {
    /// A session of `listener` with `peer` over `io` (encrypted when `tls`).
    pub fn new(io: S, peer: SocketAddr, listener: &'a Listener, tls: bool, counts: Counts) -> Self {
        Session {
            io,
            peer,
            listener,
            tls,
            out: Vec::with_capacity(512),
            receiver: RequestReceiver::default(),
            mode: Mode::Command,
            helo: None,
            envelope: None,
            project: None,
            counts,
        }
    }

    /// The stream and the counts, once the session ended (for `STARTTLS`).
    pub fn into_parts(self) -> (S, Counts) {
        (self.io, self.counts)
    }

    /// Writes `reply` and closes: for a connection refused as it is accepted.
    pub async fn refuse(mut self, reply: Reply) {
        reply.write(&mut self.out);
        let _ = self.flush().await;
        let _ = self.io.shutdown().await;
    }

    /// Serves the connection until it ends; `greet` sends the `220` greeting first (not after
    /// `STARTTLS`). `stop` turning true ends a session waiting for a command with `421`.
    pub async fn run(&mut self, greet: bool, stop: &mut watch::Receiver<bool>) -> Outcome {
        if greet {
            let greeting = format!("220 {} ESMTP Herald\r\n", self.listener.hostname);
            self.out.extend_from_slice(greeting.as_bytes());
        }
        let mut input = Input {
            buf: vec![0; READ_CHUNK],
            pos: 0,
            len: 0,
        };
        loop {
            while !input.pending().is_empty() {
                match self.step(&mut input).await {
                    Step::Continue => {}
                    Step::Close => {
                        let _ = self.flush().await;
                        return Outcome::Closed;
                    }
                    Step::StartTls => {
                        // Whatever the client sent after STARTTLS is dropped (RFC 3207 §6).
                        return match self.flush().await {
                            Ok(()) => Outcome::StartTls,
                            Err(_) => Outcome::Closed,
                        };
                    }
                }
            }
            if self.flush().await.is_err() {
                return Outcome::Closed;
            }
            let wait = secs(self.listener.limits.command_timeout_seconds);
            match self.read(&mut input, wait, Some(&mut *stop)).await {
                Read::Bytes => {}
                Read::Closed => return Outcome::Closed,
                Read::TimedOut => {
                    self.timed_out().await;
                    return Outcome::Closed;
                }
                Read::Stopped => {
                    self.write(&Reply::fixed(
                        421,
                        [4, 3, 2],
                        "the server is shutting down, try again later",
                    ));
                    let _ = self.flush().await;
                    return Outcome::Closed;
                }
            }
        }
    }

    /// Reads more input (when all of it was consumed) within `wait`.
    async fn read(
        &mut self,
        input: &mut Input,
        wait: Duration,
        stop: Option<&mut watch::Receiver<bool>>,
    ) -> Read {
        input.pos = 0;
        input.len = 0;
        let read = tokio::time::timeout(wait, self.io.read(&mut input.buf));
        let result = match stop {
            Some(stop) => tokio::select! {
                r = read => r,
                _ = stopped(stop) => return Read::Stopped,
            },
            None => read.await,
        };
        match result {
            Err(_) => Read::TimedOut,
            Ok(Ok(0)) | Ok(Err(_)) => Read::Closed,
            Ok(Ok(n)) => {
                input.len = n;
                Read::Bytes
            }
        }
    }

    async fn timed_out(&mut self) {
        self.write(&Reply::fixed(
            421,
            [4, 4, 2],
            "timeout exceeded, closing the connection",
        ));
        let _ = self.flush().await;
    }

    fn write(&mut self, reply: &Reply) {
        reply.write(&mut self.out);
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let result = self.io.write_all(&self.out).await;
        self.out.clear();
        result?;
        self.io.flush().await
    }

    /// Writes a refusal and counts it; closes the session at [`MAX_ERRORS`].
    fn refused(&mut self, reply: Reply) -> Step {
        self.write(&reply);
        self.counts.errors += 1;
        if self.counts.errors >= MAX_ERRORS {
            self.write(&Reply::fixed(
                421,
                [4, 7, 0],
                "too many errors, closing the connection",
            ));
            return Step::Close;
        }
        Step::Continue
    }

    /// Consumes what the current mode reads from `input`.
    async fn step(&mut self, input: &mut Input) -> Step {
        match &mut self.mode {
            Mode::Discard(receiver) => {
                let pending = input.pending();
                let mut iter = pending.iter();
                let ended = receiver.ingest(&mut iter);
                input.consume(pending.len() - iter.as_slice().len());
                if ended {
                    self.mode = Mode::Command;
                }
                Step::Continue
            }
            Mode::Auth(_, receiver) => {
                let pending = input.pending();
                let mut iter = pending.iter();
                let ended = receiver.ingest(&mut iter);
                input.consume(pending.len() - iter.as_slice().len());
                if !ended {
                    return Step::Continue;
                }
                let Mode::Auth(step, receiver) = std::mem::replace(&mut self.mode, Mode::Command)
                else {
                    return Step::Continue;
                };
                let line = String::from_utf8_lossy(&receiver.buf).trim().to_string();
                self.auth_line(step, &line).await
            }
            Mode::Command => {
                let pending = input.pending();
                let mut iter = pending.iter();
                let parsed = self.receiver.ingest(&mut iter).map(Request::into_owned);
                let rest = iter.as_slice().len();
                let line_ended = pending[..pending.len() - rest].last() == Some(&b'\n');
                input.consume(pending.len() - rest);
                match parsed {
                    Ok(request) => {
                        self.counts.commands += 1;
                        if self.counts.commands > MAX_COMMANDS {
                            self.write(&Reply::fixed(
                                421,
                                [4, 7, 0],
                                "too many commands, closing the connection",
                            ));
                            return Step::Close;
                        }
                        self.command(request, input).await
                    }
                    Err(ParseError::NeedsMoreData { .. }) => {
                        // The receiver keeps the partial line.
                        input.consume(usize::MAX);
                        Step::Continue
                    }
                    Err(ParseError::ResponseTooLong) => {
                        self.mode = Mode::Discard(DummyLineReceiver::default());
                        self.refused(Reply::fixed(500, [5, 5, 2], "line too long"))
                    }
                    Err(error) => {
                        if !line_ended {
                            self.mode = Mode::Discard(DummyLineReceiver::default());
                        }
                        self.refused(parse_error(error))
                    }
                }
            }
        }
    }

    /// Answers one command.
    async fn command(&mut self, request: Request<String>, input: &mut Input) -> Step {
        match request {
            Request::Ehlo { host } => {
                self.envelope = None;
                self.ehlo(&host);
                self.helo = Some(host);
                Step::Continue
            }
            Request::Helo { host } => {
                self.envelope = None;
                let line = format!("250 {}\r\n", self.listener.hostname);
                self.out.extend_from_slice(line.as_bytes());
                self.helo = Some(host);
                Step::Continue
            }
            Request::Mail { from } => self.mail(from.address, from.size).await,
            Request::Rcpt { to } => self.rcpt(to.address).await,
            Request::Data => self.data(input).await,
            Request::Rset => {
                self.envelope = None;
                self.write(&reply::OK);
                Step::Continue
            }
            Request::Noop { .. } => {
                self.write(&reply::OK);
                Step::Continue
            }
            Request::Quit => {
                self.write(&Reply::fixed(221, [2, 0, 0], "bye"));
                Step::Close
            }
            Request::Vrfy { .. } => {
                self.write(&Reply::fixed(
                    252,
                    [2, 5, 2],
                    "cannot verify the user, send the message to find out",
                ));
                Step::Continue
            }
            Request::Help { .. } => {
                self.write(&Reply::fixed(214, [2, 0, 0], "see RFC 5321"));
                Step::Continue
            }
            Request::StartTls => {
                if self.tls {
                    self.refused(Reply::fixed(503, [5, 5, 1], "TLS is already active"))
                } else if self.listener.tls.is_none() {
                    self.refused(Reply::fixed(502, [5, 5, 1], "STARTTLS is not available"))
                } else {
                    self.write(&Reply::fixed(220, [2, 0, 0], "ready to start TLS"));
                    Step::StartTls
                }
            }
            Request::Auth {
                mechanism,
                initial_response,
            } => self.auth(mechanism, &initial_response).await,
            Request::Lhlo { .. }
            | Request::Expn { .. }
            | Request::Bdat { .. }
            | Request::Etrn { .. }
            | Request::Atrn { .. }
            | Request::Burl { .. } => {
                self.refused(Reply::fixed(502, [5, 5, 1], "command not implemented"))
            }
        }
    }

    /// Whether `AUTH` may be used now: on the submission listener, over TLS, on loopback, or
    /// where `submission.allow_plain_auth` allows it.
    fn auth_offered(&self) -> bool {
        matches!(self.listener.role, Role::Submission(_))
            && auth_allowed(self.tls, self.listener.plain_auth)
    }

    fn ehlo(&mut self, client: &str) {
        let mut ehlo = EhloResponse::new(self.listener.hostname.as_str());
        ehlo.capabilities = EXT_PIPELINING | EXT_8BIT_MIME | EXT_ENHANCED_STATUS_CODES | EXT_SIZE;
        ehlo.size = self.listener.limits.max_message_bytes;
        if !self.tls && self.listener.tls.is_some() {
            ehlo.capabilities |= EXT_START_TLS;
        }
        if self.project.is_none() && self.auth_offered() {
            ehlo.capabilities |= EXT_AUTH;
            ehlo.auth_mechanisms = AUTH_PLAIN | AUTH_LOGIN;
        }
        let mut lines = Vec::with_capacity(256);
        let _ = ehlo.write(&mut lines);
        // The first line is the server's name and a greeting of ours (smtp-proto writes one of
        // its own).
        let first = lines
            .windows(2)
            .position(|w| w == b"\r\n")
            .map_or(lines.len(), |p| p + 2);
        let client: String = client
            .chars()
            .filter(|c| !c.is_control())
            .take(64)
            .collect();
        let greeting = format!("250-{} greets {client}\r\n", self.listener.hostname);
        self.out.extend_from_slice(greeting.as_bytes());
        self.out.extend_from_slice(&lines[first..]);
    }

    async fn mail(&mut self, from: String, size: usize) -> Step {
        if self.helo.is_none() {
            return self.refused(Reply::fixed(503, [5, 5, 1], "send EHLO or HELO first"));
        }
        if self.envelope.is_some() {
            return self.refused(Reply::fixed(503, [5, 5, 1], "nested MAIL command"));
        }
        if matches!(self.listener.role, Role::Submission(_)) && self.project.is_none() {
            return self.refused(Reply::fixed(530, [5, 7, 0], "authentication required"));
        }
        if size > self.listener.limits.max_message_bytes {
            self.write(&reply::TOO_BIG);
            return Step::Continue;
        }
        // A declared size (RFC 1870) that the memory budget has no room for now.
        if size > self.listener.budget.available() {
            self.write(&reply::NO_ROOM);
            return Step::Continue;
        }
        let now = crate::domain::time::now_ms();
        if !self.listener.clients.message(self.peer.ip(), now) {
            self.write(&Reply::fixed(
                450,
                [4, 7, 1],
                "too many messages from your address, try again later",
            ));
            return Step::Continue;
        }
        self.envelope = Some(Envelope {
            mail_from: from,
            rcpts: Vec::new(),
            routes: Vec::new(),
        });
        self.write(&Reply::fixed(250, [2, 1, 0], "sender OK"));
        Step::Continue
    }

    async fn rcpt(&mut self, to: String) -> Step {
        let Some(envelope) = &self.envelope else {
            return self.refused(Reply::fixed(503, [5, 5, 1], "send MAIL first"));
        };
        if envelope.rcpts.len() >= MAX_RECIPIENTS {
            self.write(&Reply::fixed(452, [4, 5, 3], "too many recipients"));
            return Step::Continue;
        }
        let listener = self.listener;
        let route = match &listener.role {
            Role::Inbound(mx) => match mx.route(&to).await {
                Ok(Some(route)) => Some(route),
                Ok(None) => return self.refused(reply::NO_SUCH_USER),
                Err(err) => {
                    tracing::warn!(error = %err, "could not route an inbound recipient");
                    self.write(&reply::TRY_LATER);
                    return Step::Continue;
                }
            },
            Role::Submission(_) => None,
        };
        if let Some(envelope) = &mut self.envelope {
            envelope.rcpts.push(to);
            envelope.routes.extend(route);
        }
        self.write(&Reply::fixed(250, [2, 1, 5], "recipient OK"));
        Step::Continue
    }

    async fn data(&mut self, input: &mut Input) -> Step {
        if self.envelope.as_ref().is_none_or(|e| e.rcpts.is_empty()) {
            return self.refused(Reply::fixed(503, [5, 5, 1], "send RCPT first"));
        }
        if self.listener.budget.available() < READ_CHUNK {
            // Not even the first read fits: the transaction is over, the client retries later.
            self.envelope = None;
            self.write(&reply::NO_ROOM);
            return Step::Continue;
        }
        self.out
            .extend_from_slice(b"354 start mail input; end with <CRLF>.<CRLF>\r\n");
        if self.flush().await.is_err() {
            return Step::Close;
        }
        let data = self.receive_data(input).await;
        let Some(envelope) = self.envelope.take() else {
            return Step::Close;
        };
        match data {
            Data::Message(raw, held) => {
                let listener = self.listener;
                let reply = match &listener.role {
                    Role::Inbound(mx) => mx.receive(&envelope.routes, raw).await,
                    Role::Submission(submit) => match &self.project {
                        Some(project) => {
                            submit
                                .submit(project, &envelope.mail_from, &envelope.rcpts, raw)
                                .await
                        }
                        None => Reply::fixed(530, [5, 7, 0], "authentication required"),
                    },
                };
                // The message is handled: its room goes back to the budget.
                drop(held);
                self.write(&reply);
                Step::Continue
            }
            Data::TooBig => {
                self.write(&reply::TOO_BIG);
                Step::Continue
            }
            Data::NoRoom => {
                self.write(&reply::NO_ROOM);
                Step::Continue
            }
            Data::TimedOut => {
                self.timed_out().await;
                Step::Close
            }
            Data::Closed => Step::Close,
        }
    }

    /// Reads a message's data up to its final `.`: each block within the data block timeout,
    /// the whole within the data timeout. The buffer never grows past the size limit (and one
    /// read), and each growth is taken from the listener's memory budget first: past the limit,
    /// or without room in the budget, the rest is read and dropped (and the room given back).
    async fn receive_data(&mut self, input: &mut Input) -> Data {
        let limits = self.listener.limits;
        let max = limits.max_message_bytes;
        let deadline = Instant::now() + secs(limits.data_timeout_seconds);
        let mut receiver = DataReceiver::new();
        let mut message: Vec<u8> = Vec::new();
        let mut held = self.listener.budget.hold();
        // Why the rest is dropped, once it is.
        let mut discard: Option<(DummyDataReceiver, Data)> = None;
        loop {
            let pending = input.pending();
            if !pending.is_empty() {
                let mut iter = pending.iter();
                let done = match &mut discard {
                    Some((dummy, _)) => dummy.ingest(&mut iter),
                    None => {
                        // Room for this read at most, doubling up to the limit, if the budget
                        // has it.
                        let needed = message.len() + pending.len();
                        let mut room = true;
                        if needed > message.capacity() {
                            let target = (message.capacity() * 2)
                                .max(needed)
                                .min(max + READ_CHUNK)
                                .max(needed);
                            room = held.cover(target);
                            if room {
                                message.reserve_exact(target - message.len());
                            }
                        }
                        if room {
                            receiver.ingest(&mut iter, &mut message)
                        } else {
                            let mut dummy = DummyDataReceiver::new_data(&receiver);
                            let done = dummy.ingest(&mut iter);
                            discard = Some((dummy, Data::NoRoom));
                            done
                        }
                    }
                };
                input.consume(pending.len() - iter.as_slice().len());
                if discard.is_none() && message.len() > max {
                    discard = Some((DummyDataReceiver::new_data(&receiver), Data::TooBig));
                }
                if discard.is_some() && message.capacity() > 0 {
                    message = Vec::new();
                    held = self.listener.budget.hold();
                }
                if done {
                    return match discard {
                        Some((_, why)) => why,
                        None => Data::Message(message, held),
                    };
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = secs(limits.data_block_timeout_seconds).min(left);
            match self.read(input, wait, None).await {
                Read::Bytes => {}
                Read::Closed | Read::Stopped => return Data::Closed,
                Read::TimedOut => return Data::TimedOut,
            }
        }
    }

    async fn auth(&mut self, mechanism: u64, initial: &str) -> Step {
        if !matches!(self.listener.role, Role::Submission(_)) {
            return self.refused(Reply::fixed(502, [5, 5, 1], "AUTH is not available here"));
        }
        if self.project.is_some() {
            return self.refused(Reply::fixed(503, [5, 5, 1], "already authenticated"));
        }
        if self.envelope.is_some() {
            return self.refused(Reply::fixed(
                503,
                [5, 5, 1],
                "AUTH is not allowed during a mail transaction",
            ));
        }
        if !self.auth_offered() {
            return self.refused(Reply::fixed(
                538,
                [5, 7, 11],
                "encryption required: use STARTTLS first",
            ));
        }
        let initial = initial.trim();
        match (mechanism, initial.is_empty()) {
            (AUTH_PLAIN, true) => self.challenge(AuthStep::Plain, ""),
            (AUTH_PLAIN, false) => self.auth_line(AuthStep::Plain, initial).await,
            // "Username:" and "Password:", base64.
            (AUTH_LOGIN, true) => self.challenge(AuthStep::LoginUser, "VXNlcm5hbWU6"),
            (AUTH_LOGIN, false) => self.challenge(AuthStep::LoginPassword, "UGFzc3dvcmQ6"),
            _ => self.refused(Reply::fixed(
                504,
                [5, 5, 4],
                "unrecognized authentication type: use PLAIN or LOGIN",
            )),
        }
    }

    /// Sends a `334` challenge and reads the answer as `step`.
    fn challenge(&mut self, step: AuthStep, text: &str) -> Step {
        self.out
            .extend_from_slice(format!("334 {text}\r\n").as_bytes());
        self.mode = Mode::Auth(step, LineReceiver::new(()));
        Step::Continue
    }

    /// Takes the client's answer to an `AUTH` challenge.
    async fn auth_line(&mut self, step: AuthStep, line: &str) -> Step {
        if line == "*" {
            return self.refused(Reply::fixed(501, [5, 7, 0], "authentication cancelled"));
        }
        let password = match step {
            AuthStep::LoginUser => {
                return match decode_login(line) {
                    Some(_) => self.challenge(AuthStep::LoginPassword, "UGFzc3dvcmQ6"),
                    None => self.refused(Reply::fixed(501, [5, 5, 2], "invalid base64")),
                };
            }
            AuthStep::LoginPassword => decode_login(line),
            AuthStep::Plain => decode_plain(line),
        };
        let Some(password) = password else {
            return self.refused(Reply::fixed(501, [5, 5, 2], "invalid authentication data"));
        };
        let listener = self.listener;
        let Role::Submission(submit) = &listener.role else {
            return Step::Close;
        };
        match submit.authenticate(&password).await {
            Ok(project) => {
                self.project = Some(project);
                self.write(&Reply::fixed(235, [2, 7, 0], "authentication succeeded"));
                Step::Continue
            }
            Err(reply) if reply.code < 500 => {
                self.write(&reply);
                Step::Continue
            }
            Err(reply) => self.refused(reply),
        }
    }
}

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds.max(1))
}

/// The reply to a command that did not parse.
fn parse_error(error: ParseError) -> Reply {
    match error {
        ParseError::InvalidSenderAddress => {
            Reply::fixed(501, [5, 1, 7], "bad sender address syntax")
        }
        ParseError::InvalidRecipientAddress => {
            Reply::fixed(501, [5, 1, 3], "bad recipient address syntax")
        }
        ParseError::SyntaxError { syntax } => {
            Reply::new(501, [5, 5, 4], format!("syntax: {syntax}"))
        }
        ParseError::InvalidParameter { param } => {
            Reply::new(501, [5, 5, 4], format!("invalid parameter {param}"))
        }
        ParseError::UnsupportedParameter { param } => {
            Reply::new(555, [5, 5, 4], format!("unsupported parameter {param}"))
        }
        ParseError::UnknownCommand
        | ParseError::InvalidResponse { .. }
        | ParseError::NeedsMoreData { .. }
        | ParseError::ResponseTooLong => {
            Reply::fixed(500, [5, 5, 2], "syntax error, command unrecognized")
        }
    }
}
