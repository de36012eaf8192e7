//! Opens and clicks, as the open pixel and the click redirects report them.
//!
//! The first open and the first click of an email are written at once, as one write
//! transaction each ([`Store::record_email_event`]): the history entry, `opened_at` or
//! `clicked_at`, the status, which the activity feed, the statistics and the segments read.
//! Every later hit only adds to the email's count (`opens`, `clicks`), and those are not worth a
//! write each: the pixel and the redirects answer anyone, without a key and without a limit, and
//! on SQLite every write of every tenant waits for the one writer. So a later hit is added to a
//! counter in memory and the counters are written together, one transaction per flush
//! ([`Store::add_email_counts`]): every [`FLUSH_EVERY`], at once when [`FLUSH_AT`] emails have
//! counts waiting, and when the server stops. The write adds (`open_count = open_count + n`), so
//! instances that share one PostgreSQL database each add their own.
//!
//! Whether an email's first open is already recorded is a read (never the writer), and then
//! remembered (it never changes back), so that a burst of opens of one email costs neither a read
//! nor a write per hit; a click reads its link anyway, and whether the first click is recorded
//! comes with it.
//!
//! Bounds: at most [`MAX_PENDING`] emails have counts waiting (a hit for another email past that
//! is written at once, as before), and at most 2 × [`MAX_KNOWN`] emails are remembered as opened.
//! What an abrupt end of the process (a crash, `SIGKILL`) loses is the counts of later hits since
//! the last flush, at most [`FLUSH_EVERY`] of them; a flush that fails keeps its counts for the
//! next one. First opens and clicks are never held back.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::store::emails::{EmailCounts, status};
use crate::store::{Store, StoreError};

/// How often the counts of later opens and clicks are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Emails with counts waiting that make a flush start at once.
pub const FLUSH_AT: usize = 1_000;

/// Emails with counts waiting at most; a later hit of another email is written at once.
pub const MAX_PENDING: usize = 10_000;

/// Emails remembered as opened in each of the two generations of that memory.
pub const MAX_KNOWN: usize = 50_000;

/// Later opens and clicks counted in memory and written in batches.
#[derive(Clone)]
pub struct Engagement {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    pending: Mutex<HashMap<String, Counts>>,
    opened: Mutex<Known>,
    wake: Notify,
}

#[derive(Clone, Copy, Default)]
struct Counts {
    opens: u32,
    clicks: u32,
}

/// Emails whose first open is recorded, in two generations: when the current one is full it
/// becomes the previous one (the one before is forgotten), so the memory is bounded and the
/// emails opened lately stay in it.
#[derive(Default)]
struct Known {
    current: HashSet<String>,
    previous: HashSet<String>,
}

impl Known {
    fn contains(&self, id: &str) -> bool {
        self.current.contains(id) || self.previous.contains(id)
    }

    fn insert(&mut self, id: &str) {
        if self.contains(id) {
            return;
        }
        if self.current.len() >= MAX_KNOWN {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(id.to_string());
    }
}

/// What [`Engagement::count`] did with a hit.
enum Counted {
    /// Added to the counts waiting.
    Added,
    /// Added, and enough emails wait for a flush to start now.
    FlushSoon,
    /// No room for another email: written at once.
    Full,
}

#[derive(Clone, Copy)]
enum Kind {
    Open,
    Click,
}

impl Engagement {
    /// Counts over `store`; [`Engagement::run`] writes them.
    pub fn new(store: Store) -> Engagement {
        Engagement {
            inner: Arc::new(Inner {
                store,
                pending: Mutex::new(HashMap::new()),
                opened: Mutex::new(Known::default()),
                wake: Notify::new(),
            }),
        }
    }

    /// An open of the email `email_id` (from a genuine token): the first recorded at once, a
    /// later one counted. Failures are logged: the pixel is answered anyway.
    pub async fn open(&self, email_id: &str) {
        let store = &self.inner.store;
        if self.known_opened(email_id) {
            self.count(email_id, Kind::Open).await;
            return;
        }
        match store.email_opened(email_id).await {
            Ok(None) => {}
            Ok(Some(true)) => {
                self.remember_opened(email_id);
                self.count(email_id, Kind::Open).await;
            }
            Ok(Some(false)) => {
                match store
                    .record_email_event(email_id, status::OPENED, None, None)
                    .await
                {
                    Ok(Some(_)) => self.remember_opened(email_id),
                    Ok(None) => {}
                    Err(err) => tracing::warn!(error = %err, "could not record an open"),
                }
            }
            Err(err) => tracing::warn!(error = %err, "could not read whether an email was opened"),
        }
    }

    /// A click of the `index`th link of the email `email_id` (from a genuine token): the link,
    /// or `None` when the email has no such link. The first click is recorded at once, a later
    /// one counted; a failure to record is logged (the redirect is answered anyway).
    pub async fn click(&self, email_id: &str, index: usize) -> Result<Option<String>, StoreError> {
        let Some((url, clicked)) = self.inner.store.email_link(email_id, index).await? else {
            return Ok(None);
        };
        if clicked {
            self.count(email_id, Kind::Click).await;
        } else if let Err(err) = self
            .inner
            .store
            .record_email_event(email_id, status::CLICKED, Some(&url), None)
            .await
        {
            tracing::warn!(error = %err, "could not record a click");
        }
        Ok(Some(url))
    }

    fn known_opened(&self, email_id: &str) -> bool {
        lock(&self.inner.opened).contains(email_id)
    }

    fn remember_opened(&self, email_id: &str) {
        lock(&self.inner.opened).insert(email_id);
    }

    /// Adds a later hit to the email's counter, or writes it at once when [`MAX_PENDING`] other
    /// emails are waiting already.
    async fn count(&self, email_id: &str, kind: Kind) {
        let counted = {
            let mut pending = lock(&self.inner.pending);
            let room = pending.len() < MAX_PENDING;
            match pending.get_mut(email_id) {
                Some(counts) => {
                    add(counts, kind);
                    Counted::Added
                }
                None if room => {
                    let mut counts = Counts::default();
                    add(&mut counts, kind);
                    pending.insert(email_id.to_string(), counts);
                    if pending.len() >= FLUSH_AT {
                        Counted::FlushSoon
                    } else {
                        Counted::Added
                    }
                }
                None => Counted::Full,
            }
        };
        match counted {
            Counted::Added => {}
            Counted::FlushSoon => self.inner.wake.notify_one(),
            Counted::Full => {
                self.inner.wake.notify_one();
                let mut counts = Counts::default();
                add(&mut counts, kind);
                let row = [to_row(email_id.to_string(), counts)];
                if let Err(err) = self.inner.store.add_email_counts(&row).await {
                    tracing::warn!(error = %err, "could not count an open or click");
                }
            }
        }
    }

    /// Writes the counts waiting, in one transaction; answers how many emails they were. Counts
    /// whose write failed wait for the next flush.
    pub async fn flush(&self) -> usize {
        let taken = std::mem::take(&mut *lock(&self.inner.pending));
        if taken.is_empty() {
            return 0;
        }
        let rows: Vec<EmailCounts> = taken
            .iter()
            .map(|(id, counts)| to_row(id.clone(), *counts))
            .collect();
        match self.inner.store.add_email_counts(&rows).await {
            Ok(()) => rows.len(),
            Err(err) => {
                tracing::warn!(error = %err, emails = rows.len(), "could not write counted opens and clicks; retrying with the next flush");
                let mut pending = lock(&self.inner.pending);
                for (id, counts) in taken {
                    let entry = pending.entry(id).or_default();
                    entry.opens = entry.opens.saturating_add(counts.opens);
                    entry.clicks = entry.clicks.saturating_add(counts.clicks);
                }
                0
            }
        }
    }

    /// Writes the counts every [`FLUSH_EVERY`] (sooner when many emails wait) until `stop` turns
    /// true, then once more.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(FLUSH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.inner.wake.notified() => {}
                _ = stop.changed() => break,
            }
            self.flush().await;
        }
        self.flush().await;
    }
}

fn add(counts: &mut Counts, kind: Kind) {
    match kind {
        Kind::Open => counts.opens = counts.opens.saturating_add(1),
        Kind::Click => counts.clicks = counts.clicks.saturating_add(1),
    }
}

fn to_row(email_id: String, counts: Counts) -> EmailCounts {
    EmailCounts {
        email_id,
        opens: counts.opens.min(i32::MAX as u32) as i32,
        clicks: counts.clicks.min(i32::MAX as u32) as i32,
    }
}

/// The lock, also after a panic elsewhere (the maps stay consistent: each change is one call).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opened_memory_keeps_two_generations_and_forgets_the_oldest() {
        let mut known = Known::default();
        for i in 0..MAX_KNOWN {
            known.insert(&format!("eml_{i}"));
        }
        assert!(known.contains("eml_0"));
        // The next one starts a new generation: the full one is still remembered.
        known.insert("eml_new");
        assert!(known.contains("eml_0") && known.contains("eml_new"));
        assert_eq!(known.current.len(), 1);
        // A remembered email is not inserted again.
        known.insert("eml_0");
        assert_eq!(known.current.len(), 1);
        // When the new generation fills, the oldest is forgotten.
        for i in 0..MAX_KNOWN {
            known.insert(&format!("later_{i}"));
        }
        assert!(!known.contains("eml_0"));
        assert!(known.contains(&format!("later_{}", MAX_KNOWN - 1)));
        assert!(known.current.len() + known.previous.len() <= 2 * MAX_KNOWN);
    }

    #[test]
    fn counts_past_the_column_are_capped() {
        let row = to_row(
            "eml_1".into(),
            Counts {
                opens: u32::MAX,
                clicks: 3,
            },
        );
        assert_eq!((row.opens, row.clicks), (i32::MAX, 3));
    }
}
