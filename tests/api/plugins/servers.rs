//! Small real servers on loopback for the tests: HTTP (one canned answer), SMTP and DNS.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// One HTTP request as received.
#[derive(Clone, Debug, Default)]
pub struct HttpRequest {
    pub head: String,
    pub body: String,
}

/// Answers every request with `status`, `extra_headers` and `body`; records requests.
pub async fn http_server(
    status: &'static str,
    extra_headers: String,
    reply: &'static str,
) -> (SocketAddr, Arc<Mutex<Vec<HttpRequest>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let log = log.clone();
            let extra = extra_headers.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, body_start) = loop {
                    let n = socket.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break (String::from_utf8_lossy(&buf[..pos]).into_owned(), pos + 4);
                    }
                };
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                while buf.len() < body_start + length {
                    let n = socket.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let body = String::from_utf8_lossy(&buf[body_start..]).into_owned();
                log.lock().unwrap().push(HttpRequest { head, body });
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{reply}",
                    reply.len(),
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (addr, seen)
}

/// What the SMTP server received.
#[derive(Clone, Debug, Default)]
pub struct SmtpLog {
    pub auth: Vec<String>,
    pub mail_from: Vec<String>,
    pub rcpt_to: Vec<String>,
    pub data: Vec<String>,
}

/// A small SMTP server: EHLO with `AUTH PLAIN`, MAIL, RCPT (recipients starting with `reject`
/// get 550, `later` get 451), DATA, RSET, NOOP, QUIT.
pub async fn smtp_server() -> (SocketAddr, Arc<Mutex<SmtpLog>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Arc::new(Mutex::new(SmtpLog::default()));
    let shared = log.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let log = shared.clone();
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read);
                let _ = write.write_all(b"220 test.local ESMTP ready\r\n").await;
                let mut line = String::new();
                loop {
                    line.clear();
                    if lines.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let cmd = line.trim_end().to_string();
                    let upper = cmd.to_ascii_uppercase();
                    let reply: String = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                        "250-test.local\r\n250-AUTH PLAIN\r\n250 8BITMIME\r\n".into()
                    } else if let Some(b64) = upper.strip_prefix("AUTH PLAIN ").map(|_| &cmd[11..])
                    {
                        log.lock().unwrap().auth.push(b64.to_string());
                        "235 2.7.0 authenticated\r\n".into()
                    } else if upper.starts_with("MAIL FROM:") {
                        log.lock().unwrap().mail_from.push(cmd[10..].to_string());
                        "250 2.1.0 ok\r\n".into()
                    } else if upper.starts_with("RCPT TO:") {
                        let to = cmd[8..].to_string();
                        if to.contains("reject") {
                            "550 5.1.1 no such user\r\n".into()
                        } else if to.contains("later") {
                            "451 4.3.0 try again later\r\n".into()
                        } else {
                            log.lock().unwrap().rcpt_to.push(to);
                            "250 2.1.5 ok\r\n".into()
                        }
                    } else if upper == "DATA" {
                        let _ = write.write_all(b"354 go ahead\r\n").await;
                        let mut data = String::new();
                        loop {
                            line.clear();
                            if lines.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            if line == ".\r\n" {
                                break;
                            }
                            data.push_str(&line);
                        }
                        log.lock().unwrap().data.push(data);
                        "250 2.0.0 queued as TEST123\r\n".into()
                    } else if upper == "QUIT" {
                        let _ = write.write_all(b"221 bye\r\n").await;
                        return;
                    } else if upper == "RSET" || upper == "NOOP" {
                        "250 ok\r\n".into()
                    } else {
                        "502 command not implemented\r\n".into()
                    };
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, log)
}
