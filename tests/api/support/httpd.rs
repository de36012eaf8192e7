//! A small real HTTP server on loopback for the tests (one canned answer); SMTP is in
//! `smtpd.rs`, DNS in `dnsd.rs`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
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

/// Serves a poem endpoint on a random loopback port; answers once it accepts connections.
pub async fn serve(endpoint: impl poem::Endpoint + 'static) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    tokio::spawn(poem::Server::new(poem::listener::TcpListener::bind(addr)).run(endpoint));
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    addr
}

/// What a [`slow_http_server`] saw: requests answered, and most under way at once.
#[derive(Debug, Default)]
pub struct SlowServerCounts {
    pub answered: std::sync::atomic::AtomicUsize,
    pub in_flight: std::sync::atomic::AtomicUsize,
    pub most_in_flight: std::sync::atomic::AtomicUsize,
}

/// Answers every request `200 {"ok":true}` after `delay` (a slow webhook receiver), counting
/// the requests under way at once.
pub async fn slow_http_server(delay: std::time::Duration) -> (SocketAddr, Arc<SlowServerCounts>) {
    use std::sync::atomic::Ordering::SeqCst;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts = Arc::new(SlowServerCounts::default());
    let shared = counts.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counts = shared.clone();
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
                let now = counts.in_flight.fetch_add(1, SeqCst) + 1;
                counts.most_in_flight.fetch_max(now, SeqCst);
                tokio::time::sleep(delay).await;
                counts.in_flight.fetch_sub(1, SeqCst);
                let reply = r#"{"ok":true}"#;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                    reply.len(),
                );
                let _ = socket.write_all(response.as_bytes()).await;
                counts.answered.fetch_add(1, SeqCst);
            });
        }
    });
    (addr, counts)
}
