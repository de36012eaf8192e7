//! The server's listener, guarded against clients that hold connections to starve the others
//! (slowloris): at most `http_max_connections_per_ip` open connections from one client address
//! (a connection beyond it is closed as it is accepted); a connection that neither sends nor
//! receives a byte for `http_idle_timeout_seconds` is closed (an idle keep-alive connection;
//! one whose request head stopped half-way, which the server's own idle timeout would wait on
//! as a request in flight; or one whose request takes longer than that to answer, since hyper
//! reads the connection for an early end while the handler runs); and an accept that fails
//! because the process is out of file descriptors (or the kernel out of buffers) waits a moment
//! instead of being retried at once in a loop that would take a core. The process raises its
//! open-files limit to the hard limit at start ([`raise_open_files_limit`]).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use poem::http::uri::Scheme;
use poem::listener::{Acceptor, TcpAcceptor};
use poem::web::{LocalAddr, RemoteAddr};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long an accept that failed for want of descriptors or buffers waits before the next.
const EXHAUSTED_PAUSE: Duration = Duration::from_millis(100);

/// The least time between two warnings of one kind.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Open connections by client address.
type OpenByAddress = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// A TCP acceptor that caps the connections of one client address and pauses when the process
/// runs out of descriptors.
pub struct GuardedAcceptor {
    inner: TcpAcceptor,
    /// 0: no cap.
    max_per_address: usize,
    idle: Duration,
    open: OpenByAddress,
    warned_cap: Option<Instant>,
    warned_exhausted: Option<Instant>,
}

impl GuardedAcceptor {
    /// Guards `inner`; `max_per_address` 0 leaves the connections of one address uncapped; a
    /// connection without a byte either way for `idle` is closed.
    pub fn new(inner: TcpAcceptor, max_per_address: usize, idle: Duration) -> GuardedAcceptor {
        GuardedAcceptor {
            inner,
            max_per_address,
            idle,
            open: Arc::default(),
            warned_cap: None,
            warned_exhausted: None,
        }
    }

    /// Counts a new connection of `address`; `None` when the address is at its cap.
    fn admit(&self, address: Option<IpAddr>) -> Option<Option<Slot>> {
        let (Some(address), true) = (address, self.max_per_address > 0) else {
            return Some(None);
        };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(address).or_insert(0);
        if *n >= self.max_per_address {
            return None;
        }
        *n += 1;
        Some(Some(Slot {
            open: self.open.clone(),
            address,
        }))
    }
}

/// Whether an accept failed because the process or the kernel is out of a resource, which
/// clears as connections close (not because of the connection itself).
fn exhausted(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Whether a warning last given at `last` may be given again, noting it as given.
fn may_warn(last: &mut Option<Instant>) -> bool {
    let now = Instant::now();
    if last.is_some_and(|at| now.duration_since(at) < WARN_EVERY) {
        return false;
    }
    *last = Some(now);
    true
}

impl Acceptor for GuardedAcceptor {
    type Io = GuardedStream;

    fn local_addr(&self) -> Vec<LocalAddr> {
        self.inner.local_addr()
    }

    async fn accept(&mut self) -> io::Result<(GuardedStream, LocalAddr, RemoteAddr, Scheme)> {
        loop {
            match self.inner.accept().await {
                Ok((io, local, remote, scheme)) => {
                    let address = remote.as_socket_addr().map(|a| a.ip());
                    match self.admit(address) {
                        Some(slot) => {
                            let stream = GuardedStream {
                                inner: io,
                                _slot: slot,
                                idle: self.idle,
                                deadline: Box::pin(tokio::time::sleep(self.idle)),
                            };
                            return Ok((stream, local, remote, scheme));
                        }
                        None => {
                            if may_warn(&mut self.warned_cap) {
                                tracing::warn!(
                                    client = ?address,
                                    max = self.max_per_address,
                                    "a client address is at its cap of open connections \
                                     (http_max_connections_per_ip); closing its new ones"
                                );
                            }
                            drop(io);
                        }
                    }
                }
                Err(err) if exhausted(&err) => {
                    if may_warn(&mut self.warned_exhausted) {
                        tracing::warn!(
                            error = %err,
                            "cannot accept connections: out of file descriptors or buffers; \
                             pausing accepts until connections close"
                        );
                    }
                    tokio::time::sleep(EXHAUSTED_PAUSE).await;
                }
                Err(err) => return Err(err),
            }
        }
    }
}

/// One counted connection of an address, uncounted when the connection is dropped.
struct Slot {
    open: OpenByAddress,
    address: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// An accepted connection, counted against its address while it is open, whose reads fail
/// once it has been idle (no byte either way) for its idle timeout.
pub struct GuardedStream {
    inner: TcpStream,
    _slot: Option<Slot>,
    idle: Duration,
    /// When the connection is idle for too long; moved on by every byte read or written.
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl GuardedStream {
    fn active(&mut self) {
        let next = tokio::time::Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }

    /// `written`, having moved the deadline on when it wrote a byte.
    fn wrote(&mut self, written: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = written
            && n > 0
        {
            self.active();
        }
        written
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.active();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the connection was idle for longer than http_idle_timeout_seconds",
                ))),
                Poll::Pending => Poll::Pending,
            },
            ready => ready,
        }
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(written)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(written)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Raises the process's soft limit of open files to its hard limit (many systems start
/// services at 1,024, which a few hundred slow clients and the database's files exhaust);
/// answers the limit now in force, or `None` where it cannot be read.
pub fn raise_open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` and `setrlimit` only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    Some(limit.rlim_cur)
}
