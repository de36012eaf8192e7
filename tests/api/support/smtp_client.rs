//! A raw SMTP client for protocol-level tests of Herald's own SMTP server: one line at a time,
//! every reply read whole (multi-line ones too), over plain TCP or TLS after `STARTTLS`.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The longest a test waits for one reply.
const REPLY_WAIT: Duration = Duration::from_secs(20);

/// A reply: its code (0 when the server closed the connection) and its lines' text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmtpReply {
    pub code: u16,
    pub text: String,
}

impl SmtpReply {
    /// Whether it is `code` with the enhanced status code `enhanced` (`"5.1.1"`) first.
    pub fn is(&self, code: u16, enhanced: &str) -> bool {
        self.code == code && self.text.starts_with(&format!("{enhanced} "))
    }
}

/// A client connection.
pub struct SmtpClient<S> {
    stream: BufReader<S>,
}

impl SmtpClient<TcpStream> {
    /// Connects to `addr` (the greeting is left to read).
    pub async fn connect(addr: SocketAddr) -> SmtpClient<TcpStream> {
        SmtpClient::over(
            TcpStream::connect(addr)
                .await
                .expect("SMTP server reachable"),
        )
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> SmtpClient<S> {
    /// A client over an open stream.
    pub fn over(stream: S) -> SmtpClient<S> {
        SmtpClient {
            stream: BufReader::new(stream),
        }
    }

    /// The stream, for a TLS handshake (nothing may be buffered).
    pub fn into_inner(self) -> S {
        assert!(
            self.stream.buffer().is_empty(),
            "bytes left after the reply"
        );
        self.stream.into_inner()
    }

    /// Reads one reply (code 0 when the connection closed first).
    pub async fn reply(&mut self) -> SmtpReply {
        let mut text = Vec::new();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(REPLY_WAIT, self.stream.read_line(&mut line))
                .await
                .expect("a reply in time")
                .unwrap_or(0);
            if n == 0 {
                return SmtpReply {
                    code: 0,
                    text: text.join("\n"),
                };
            }
            let line = line.trim_end();
            let code = line.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0);
            text.push(line.get(4..).unwrap_or("").to_string());
            if line.as_bytes().get(3) != Some(&b'-') {
                return SmtpReply {
                    code,
                    text: text.join("\n"),
                };
            }
        }
    }

    /// Writes raw bytes.
    pub async fn write(&mut self, bytes: &[u8]) {
        let stream = self.stream.get_mut();
        // The server may have closed already (a test of that reads the reply next).
        let _ = stream.write_all(bytes).await;
        let _ = stream.flush().await;
    }

    /// Sends `line` with CRLF and reads the reply.
    pub async fn cmd(&mut self, line: &str) -> SmtpReply {
        self.write(format!("{line}\r\n").as_bytes()).await;
        self.reply().await
    }

    /// Sends `message` as `DATA` (dot-stuffed, with the final dot) after a `354`, and reads the
    /// reply to its end.
    pub async fn data(&mut self, message: &[u8]) -> SmtpReply {
        let go = self.cmd("DATA").await;
        assert_eq!(go.code, 354, "{go:?}");
        let mut stuffed = Vec::with_capacity(message.len() + 64);
        for line in message.split_inclusive(|b| *b == b'\n') {
            if line.first() == Some(&b'.') {
                stuffed.push(b'.');
            }
            stuffed.extend_from_slice(line);
        }
        if !stuffed.ends_with(b"\r\n") {
            stuffed.extend_from_slice(b"\r\n");
        }
        stuffed.extend_from_slice(b".\r\n");
        self.write(&stuffed).await;
        self.reply().await
    }
}
