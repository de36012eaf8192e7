//! A listener's memory budget for message data (`inbound.memory_mb`, `submission.memory_mb`): a
//! semaphore of bytes that every session of the listener takes from as its message's buffer
//! grows, a chunk at a time, and gives back when the message is handled or the session ends.
//! A message whose next chunk finds no room is not buffered: the rest of its data is read and
//! dropped, and it is answered `452 4.3.1` (RFC 3463: insufficient system storage), which a
//! sending server retries later. So however many clients send at once, the listener never
//! holds more message data than its budget (beside each session's small read buffer).
//!
//! Taking never waits: a session that would wait for room would hold its client and its room
//! both, and the client retries anyway.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The bytes all sessions of a listener may hold at once.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    taken: AtomicUsize,
}

/// Bytes of a [`Budget`] held by one message; given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            taken: AtomicUsize::new(0),
        })
    }

    /// The bytes no message holds now.
    pub fn available(&self) -> usize {
        self.limit
            .saturating_sub(self.taken.load(Ordering::Acquire))
    }

    /// A hold of nothing yet, for one message.
    pub fn hold(self: &Arc<Budget>) -> Held {
        Held {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Takes `n` bytes when that many are left.
    fn take(&self, n: usize) -> bool {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |taken| {
                taken.checked_add(n).filter(|t| *t <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        self.taken.fetch_sub(n, Ordering::AcqRel);
    }
}

impl Held {
    /// Makes the hold cover `total` bytes, taking what it lacks; false (nothing taken) when the
    /// budget has not that much left.
    pub fn cover(&mut self, total: usize) -> bool {
        let more = total.saturating_sub(self.bytes);
        if more == 0 {
            return true;
        }
        if !self.budget.take(more) {
            return false;
        }
        self.bytes += more;
        true
    }

    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_take_what_is_left_and_give_it_back_when_dropped() {
        let budget = Budget::new(100);
        let mut a = budget.hold();
        let mut b = budget.hold();
        assert!(a.cover(60));
        assert!(a.cover(40), "covered already");
        assert_eq!(a.bytes(), 60);
        assert!(!b.cover(50), "only 40 left");
        assert_eq!(b.bytes(), 0, "nothing taken by a refusal");
        assert!(b.cover(40));
        assert_eq!(budget.available(), 0);
        drop(a);
        assert_eq!(budget.available(), 60);
        assert!(b.cover(100));
        drop(b);
        assert_eq!(budget.available(), 100);
    }

    #[test]
    fn concurrent_holds_never_pass_the_limit() {
        let budget = Budget::new(1_000);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let budget = budget.clone();
                std::thread::spawn(move || {
                    let mut got = 0;
                    for _ in 0..1_000 {
                        let mut held = budget.hold();
                        if held.cover(300) {
                            assert!(budget.available() <= 700);
                            got += 1;
                        }
                    }
                    got
                })
            })
            .collect();
        let got: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(got > 0);
        assert_eq!(budget.available(), 1_000);
    }
}
