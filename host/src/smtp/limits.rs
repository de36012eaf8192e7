//! What one client address may do on a listener: hold a number of connections at once, and
//! start a number of messages a minute. The only state the SMTP server keeps in the process
//! (everything a message teaches Herald goes to the database); per instance, like the HTTP
//! listener's connection cap.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The counts of one listener.
pub struct ClientLimits {
    max_connections: usize,
    messages_per_minute: u32,
    state: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    connections: HashMap<IpAddr, usize>,
    /// The minute (since the epoch) `messages` counts; a new minute starts afresh.
    minute: u64,
    messages: HashMap<IpAddr, u32>,
}

/// A connection counted against its address until dropped.
pub struct Connection {
    limits: Arc<ClientLimits>,
    ip: IpAddr,
}

impl Drop for Connection {
    fn drop(&mut self) {
        let mut counts = self.limits.lock();
        if let Some(n) = counts.connections.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.connections.remove(&self.ip);
            }
        }
    }
}

impl ClientLimits {
    /// At most `max_connections` open connections and `messages_per_minute` messages a minute
    /// per address (0: no cap).
    pub fn new(max_connections: usize, messages_per_minute: u32) -> Arc<ClientLimits> {
        Arc::new(ClientLimits {
            max_connections,
            messages_per_minute,
            state: Mutex::new(Counts::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // A panic while counting leaves plain numbers behind: keep using them.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a new connection from `ip`, or `None` when the address holds its share already.
    pub fn connect(self: &Arc<ClientLimits>, ip: IpAddr) -> Option<Connection> {
        let mut counts = self.lock();
        let n = counts.connections.entry(ip).or_insert(0);
        if self.max_connections > 0 && *n >= self.max_connections {
            return None;
        }
        *n += 1;
        Some(Connection {
            limits: self.clone(),
            ip,
        })
    }

    /// Counts a message from `ip` at `now_ms`; false when it is over this minute's share.
    pub fn message(&self, ip: IpAddr, now_ms: i64) -> bool {
        if self.messages_per_minute == 0 {
            return true;
        }
        let minute = (now_ms.max(0) as u64) / 60_000;
        let mut counts = self.lock();
        if counts.minute != minute {
            counts.minute = minute;
            counts.messages.clear();
        }
        let n = counts.messages.entry(ip).or_insert(0);
        if *n >= self.messages_per_minute {
            return false;
        }
        *n += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_capped_per_address_and_freed_when_dropped() {
        let limits = ClientLimits::new(2, 0);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let first = limits.connect(a).unwrap();
        let _second = limits.connect(a).unwrap();
        assert!(limits.connect(a).is_none());
        assert!(limits.connect(b).is_some());
        drop(first);
        assert!(limits.connect(a).is_some());
    }

    #[test]
    fn messages_are_counted_per_address_and_minute() {
        let limits = ClientLimits::new(0, 2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "2001:db8::1".parse().unwrap();
        assert!(limits.message(a, 60_000));
        assert!(limits.message(a, 60_001));
        assert!(!limits.message(a, 119_999));
        assert!(limits.message(b, 119_999));
        assert!(limits.message(a, 120_000), "a new minute starts afresh");
    }
}
