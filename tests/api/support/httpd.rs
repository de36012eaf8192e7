//! A small real HTTP server on loopback for the tests (one canned answer); SMTP is in
//! `smtpd.rs`, DNS in `dnsd.rs`.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    let (addr, seen, _) = answering_server(status, extra_headers, reply, None).await;
    (addr, seen)
}

/// Answers every request `200 {"ok":true}` after `delay` (a slow webhook receiver), counting
/// the requests under way at once.
pub async fn slow_http_server(delay: Duration) -> (SocketAddr, Arc<ServerCounts>) {
    let (addr, _, counts) =
        answering_server("200 OK", String::new(), r#"{"ok":true}"#, Some(delay)).await;
    (addr, counts)
}

/// What an [`answering_server`] saw: requests answered, and most under way at once.
#[derive(Debug, Default)]
pub struct ServerCounts {
    pub answered: AtomicUsize,
    pub in_flight: AtomicUsize,
    pub most_in_flight: AtomicUsize,
}

/// Answers every request with `status`, `extra_headers` and `reply`, after `delay` when one is
/// given; records the requests and counts those under way.
async fn answering_server(
    status: &'static str,
    extra_headers: String,
    reply: &'static str,
    delay: Option<Duration>,
) -> (SocketAddr, Arc<Mutex<Vec<HttpRequest>>>, Arc<ServerCounts>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let counts = Arc::new(ServerCounts::default());
    let (log, shared) = (seen.clone(), counts.clone());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let log = log.clone();
            let counts = shared.clone();
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
                let now = counts.in_flight.fetch_add(1, SeqCst) + 1;
                counts.most_in_flight.fetch_max(now, SeqCst);
                if let Some(delay) = delay {
                    tokio::time::sleep(delay).await;
                }
                counts.in_flight.fetch_sub(1, SeqCst);
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{reply}",
                    reply.len(),
                );
                let _ = socket.write_all(response.as_bytes()).await;
                counts.answered.fetch_add(1, SeqCst);
            });
        }
    });
    (addr, seen, counts)
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
