//! A real SMTP server on loopback for the tests: EHLO (advertising `AUTH PLAIN`, and `STARTTLS`
//! when it has a certificate), AUTH PLAIN, MAIL, RCPT (recipients starting with `reject` get 550,
//! `later` get 451, `ratelimited` 451 asking to retry after 120 s, `flaky` get 451 the first
//! time only), DATA, RSET, NOOP, QUIT; plain, upgraded
//! with STARTTLS, or TLS from the first byte. It records what it received and how many
//! connections it accepted.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// What the SMTP server received.
#[derive(Clone, Debug, Default)]
pub struct SmtpLog {
    /// TCP connections accepted.
    pub connections: usize,
    /// `AUTH PLAIN` payloads (base64).
    pub auth: Vec<String>,
    /// `MAIL FROM` arguments.
    pub mail_from: Vec<String>,
    /// Accepted `RCPT TO` arguments.
    pub rcpt_to: Vec<String>,
    /// Message data, one per accepted message.
    pub data: Vec<String>,
    /// For each accepted message, whether it arrived over TLS.
    pub over_tls: Vec<bool>,
    /// `flaky…` recipients already refused once (they are accepted the second time).
    pub refused_once: Vec<String>,
}

/// How the server speaks TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmtpTlsMode {
    /// Plain text only.
    Plain,
    /// Plain, upgraded with `STARTTLS`.
    Starttls,
    /// TLS from the first byte.
    Implicit,
}

/// A certificate authority and a server certificate it signed for `localhost` and 127.0.0.1.
pub struct TestPki {
    /// The CA certificate, PEM (what a client must trust).
    pub ca_pem: String,
    config: Arc<ServerConfig>,
}

impl TestPki {
    /// Generates a fresh CA and server certificate.
    pub fn generate() -> TestPki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Herald test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let server_key = KeyPair::generate().unwrap();
        let server_params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let server = server_params.signed_by(&server_key, &issuer).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let config = ServerConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![server.der().clone()], key)
        .unwrap();
        TestPki {
            ca_pem: ca.pem(),
            config: Arc::new(config),
        }
    }
}

/// A running SMTP server.
pub struct SmtpServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it received.
    pub log: Arc<Mutex<SmtpLog>>,
}

impl SmtpServer {
    /// The log once at least `n` messages arrived (waits up to 20 seconds).
    pub async fn received(&self, n: usize) -> SmtpLog {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let log = self.log.lock().unwrap().clone();
            if log.data.len() >= n {
                return log;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {n} messages arrived: {log:?}",
                log.data.len()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

impl SmtpServer {
    /// A plain-text server.
    pub async fn start() -> SmtpServer {
        SmtpServer::start_with(SmtpTlsMode::Plain, None).await
    }

    /// A server speaking TLS as `mode` says, with `pki`'s certificate.
    pub async fn start_with(mode: SmtpTlsMode, pki: Option<&TestPki>) -> SmtpServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        SmtpServer::serve(listener, mode, pki)
    }

    /// A plain-text server on `addr` (a relay coming back on its port after an outage).
    pub async fn start_at(addr: SocketAddr) -> SmtpServer {
        let listener = TcpListener::bind(addr).await.unwrap();
        SmtpServer::serve(listener, SmtpTlsMode::Plain, None)
    }

    fn serve(listener: TcpListener, mode: SmtpTlsMode, pki: Option<&TestPki>) -> SmtpServer {
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(SmtpLog::default()));
        let acceptor = pki.map(|p| TlsAcceptor::from(p.config.clone()));
        let shared = log.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                shared.lock().unwrap().connections += 1;
                let log = shared.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let stream: Box<dyn Stream> = if mode == SmtpTlsMode::Implicit {
                        match acceptor.as_ref().unwrap().accept(socket).await {
                            Ok(tls) => Box::new(tls),
                            Err(_) => return,
                        }
                    } else {
                        Box::new(socket)
                    };
                    let starttls = acceptor.filter(|_| mode == SmtpTlsMode::Starttls);
                    session(stream, mode == SmtpTlsMode::Implicit, starttls, log).await;
                });
            }
        });
        SmtpServer { addr, log }
    }
}

async fn session(
    stream: Box<dyn Stream>,
    mut tls: bool,
    mut starttls: Option<TlsAcceptor>,
    log: Arc<Mutex<SmtpLog>>,
) {
    let mut conn = BufReader::new(stream);
    // A recipient containing `slow` holds the answer to DATA for three seconds.
    let mut slow = false;
    let _ = conn.write_all(b"220 test.local ESMTP ready\r\n").await;
    let mut line = String::new();
    loop {
        line.clear();
        if conn.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let cmd = line.trim_end().to_string();
        let upper = cmd.to_ascii_uppercase();
        let reply: String = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            let tls_line = if starttls.is_some() && !tls {
                "250-STARTTLS\r\n"
            } else {
                ""
            };
            format!("250-test.local\r\n{tls_line}250-AUTH PLAIN\r\n250 8BITMIME\r\n")
        } else if upper == "STARTTLS" {
            let Some(acceptor) = starttls.take() else {
                let _ = conn.write_all(b"502 no TLS here\r\n").await;
                continue;
            };
            let _ = conn.write_all(b"220 2.0.0 ready to start TLS\r\n").await;
            let _ = conn.flush().await;
            let plain = conn.into_inner();
            let upgraded = match acceptor.accept(plain).await {
                Ok(s) => s,
                Err(_) => return,
            };
            conn = BufReader::new(Box::new(upgraded) as Box<dyn Stream>);
            tls = true;
            continue;
        } else if let Some(b64) = upper.strip_prefix("AUTH PLAIN ").map(|_| &cmd[11..]) {
            log.lock().unwrap().auth.push(b64.to_string());
            "235 2.7.0 authenticated\r\n".into()
        } else if upper.starts_with("MAIL FROM:") {
            log.lock().unwrap().mail_from.push(cmd[10..].to_string());
            "250 2.1.0 ok\r\n".into()
        } else if upper.starts_with("RCPT TO:") {
            let to = cmd[8..].to_string();
            if to.contains("reject") {
                "550 5.1.1 no such user\r\n".into()
            } else if to.contains("ratelimited") {
                "451 4.7.0 rate limited (retry after 120 s)\r\n".into()
            } else if to.contains("later") {
                "451 4.3.0 try again later\r\n".into()
            } else if to.contains("flaky") && !log.lock().unwrap().refused_once.contains(&to) {
                log.lock().unwrap().refused_once.push(to);
                "451 4.3.0 greylisted, try again\r\n".into()
            } else {
                slow |= to.contains("slow");
                log.lock().unwrap().rcpt_to.push(to);
                "250 2.1.5 ok\r\n".into()
            }
        } else if upper == "DATA" {
            let _ = conn.write_all(b"354 go ahead\r\n").await;
            let mut data = String::new();
            loop {
                line.clear();
                if conn.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                if line == ".\r\n" {
                    break;
                }
                data.push_str(line.strip_prefix('.').unwrap_or(&line));
            }
            if slow {
                tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            }
            let mut log = log.lock().unwrap();
            log.data.push(data);
            log.over_tls.push(tls);
            "250 2.0.0 queued as TEST123\r\n".into()
        } else if upper == "QUIT" {
            let _ = conn.write_all(b"221 bye\r\n").await;
            return;
        } else if upper == "RSET" || upper == "NOOP" {
            "250 ok\r\n".into()
        } else {
            "502 command not implemented\r\n".into()
        };
        if conn.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}
