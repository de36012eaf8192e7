//! CPU-heavy work (template compiling and rendering, MIME building, DKIM signing) off the async
//! workers: [`CpuPool::run`] runs it on tokio's blocking pool, at most one task per core at a
//! time, so an expensive request never holds an async worker (and `/health` and every other
//! request keep answering) and never takes more than the cores it is given.
//!
//! One exception, for work that is small by construction: a send's template that
//! [`parse_is_small`] is compiled, and one of at most [`INLINE_SOURCE_BYTES`] rendered for one
//! recipient whose variables take at most [`INLINE_VARIABLE_BYTES`], on the async worker that
//! handles the request, within [`INLINE_RENDER`] (a rendering that would pass those limits stops
//! there and is done again on the pool). Each is at most about 100 µs at its limits, a few µs
//! for a short email. A trip to the pool and back wakes two threads, which costs more than such
//! work itself (`cargo bench -p herald --bench cpu`; `docs/benchmarks.md`, "Small sends
//! rendered where they are handled").

use herald_content::template::RenderLimits;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

/// The largest subject and body, together, rendered on the async worker that asks: it bounds
/// the expressions a rendering evaluates (each at least five bytes, `{{a}}`).
pub const INLINE_SOURCE_BYTES: usize = 2 * 1024;
/// The largest subject and body, together, parsed on the async worker that asks: parsing
/// costs about 100 ns a byte (`cargo bench -p herald --bench cpu`).
pub const INLINE_PARSE_BYTES: usize = 512;
/// The most parsing done on the async worker that asks, as the text's bytes times its
/// expressions (`{{`): the `handlebars` parser reads the text from its start for each element,
/// so with many expressions its time follows that product (6-12 ms for 4 KB of 819).
pub const INLINE_PARSE_WORK: usize = 4 * 1024;

/// Whether parsing `subject` and `body` is small enough to be done on the async worker that
/// asks: at most [`INLINE_PARSE_BYTES`] and [`INLINE_PARSE_WORK`].
pub fn parse_is_small(subject: &str, body: &str) -> bool {
    let bytes = subject.len() + body.len();
    bytes <= INLINE_PARSE_BYTES
        && bytes * (subject.matches("{{").count() + body.matches("{{").count()) <= INLINE_PARSE_WORK
}

/// The most a recipient's data (its contact's and the request's) may take, counted by
/// [`json_size_within`], for its email to be rendered on the async worker.
pub const INLINE_VARIABLE_BYTES: usize = 4 * 1024;
/// What a rendering on the async worker may produce and loop before it stops and is done again
/// on the pool.
pub const INLINE_RENDER: RenderLimits = RenderLimits {
    bytes: 16 * 1024,
    steps: 2_000,
};

/// Whether the JSON object of `entries` takes at most `budget` bytes (its keys, strings and
/// numbers, with a byte for each punctuation): stops counting past the budget, so the check
/// costs at most the budget's worth of the entries.
pub fn json_size_within<'a>(
    entries: impl IntoIterator<Item = (&'a String, &'a serde_json::Value)>,
    budget: usize,
) -> bool {
    use serde_json::Value;
    fn left(value: &Value, budget: usize) -> Option<usize> {
        let take = |n: usize, b: usize| b.checked_sub(n);
        match value {
            Value::Null | Value::Bool(_) => take(5, budget),
            Value::Number(_) => take(24, budget),
            Value::String(s) => take(s.len() + 2, budget),
            Value::Array(items) => items
                .iter()
                .try_fold(take(2, budget)?, |b, v| left(v, take(1, b)?)),
            Value::Object(map) => map
                .iter()
                .try_fold(take(2, budget)?, |b, (k, v)| left(v, take(k.len() + 4, b)?)),
        }
    }
    entries
        .into_iter()
        .try_fold(budget.checked_sub(2), |b, (k, v)| {
            Some(b.and_then(|b| left(v, b.checked_sub(k.len() + 4)?)))
        })
        .flatten()
        .is_some()
}

/// A bounded gate in front of `tokio::task::spawn_blocking`. Cheap to clone (one semaphore).
#[derive(Clone, Debug)]
pub struct CpuPool {
    permits: Arc<Semaphore>,
    width: usize,
}

impl CpuPool {
    /// A pool running at most `tasks` closures at once (at least one).
    pub fn new(tasks: usize) -> CpuPool {
        CpuPool {
            permits: Arc::new(Semaphore::new(tasks.max(1))),
            width: tasks.max(1),
        }
    }

    /// A pool as wide as the machine's cores.
    pub fn sized_to_cores() -> CpuPool {
        CpuPool::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Runs `work` on the blocking pool once a slot is free, and returns its result. A panic in
    /// `work` resumes in the caller, as if it had run inline. When the runtime shuts down before
    /// `work` ran, the caller never resumes (it is being dropped with the runtime).
    pub async fn run<T, F>(&self, work: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // The semaphore is never closed, so acquiring only waits.
        let _permit = self.permits.acquire().await;
        match tokio::task::spawn_blocking(work).await {
            Ok(value) => value,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: the runtime is shutting down and drops its tasks, this caller among
            // them; there is no result to give, so wait to be dropped instead of panicking.
            Err(_) => std::future::pending().await,
        }
    }
}

/// How long one task of [`CpuPool::map`] runs items before it gives its slot back (and waits
/// for it again behind the work queued meanwhile), at least one item a task, on a pool that
/// requests share.
pub const TURN: Duration = Duration::from_millis(5);

impl CpuPool {
    /// The most closures this pool runs at once.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Runs `work` on each of `items` and returns the results in the items' order. The items
    /// are split into at most `lanes` runs of neighbours (at most the pool's width), each run
    /// on the pool in turns of `turn` (at least one item a turn): cheap items share a task (a
    /// task an item would cost a hand-off between threads each), and with a short turn costly
    /// ones give their slot back after each, so one caller's many items never keep other work
    /// off the pool for long. `Duration::MAX`: a lane runs in one task, first come first served.
    pub async fn map<I, T, F>(&self, lanes: usize, turn: Duration, items: Vec<I>, work: F) -> Vec<T>
    where
        I: Send + 'static,
        T: Send + 'static,
        F: Fn(I) -> T + Clone + Send + 'static,
    {
        let per_lane = items.len().div_ceil(lanes.clamp(1, self.width)).max(1);
        let mut runs = Vec::new();
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            let lane: VecDeque<I> = items.by_ref().take(per_lane).collect();
            runs.push(self.lane(lane, turn, work.clone()));
        }
        futures::future::join_all(runs)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// One lane of [`CpuPool::map`]: its items in order, a turn at a time.
    async fn lane<I, T, F>(&self, mut left: VecDeque<I>, turn: Duration, work: F) -> Vec<T>
    where
        I: Send + 'static,
        T: Send + 'static,
        F: Fn(I) -> T + Clone + Send + 'static,
    {
        let mut done = Vec::with_capacity(left.len());
        while !left.is_empty() {
            let work = work.clone();
            let (out, rest) = self
                .run(move || {
                    let started = Instant::now();
                    let mut out = Vec::new();
                    while let Some(item) = left.pop_front() {
                        out.push(work(item));
                        if started.elapsed() >= turn {
                            break;
                        }
                    }
                    (out, left)
                })
                .await;
            done.extend(out);
            left = rest;
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_size_within_counts_the_object_as_json_and_stops_past_the_budget() {
        let object = |v: serde_json::Value| v.as_object().unwrap().clone();
        let small = object(serde_json::json!({ "a": "xyz", "b": [1, true, null], "c": {} }));
        let written = serde_json::to_string(&small).unwrap().len();
        // Counted at least as the JSON is written (numbers at their widest).
        assert!(json_size_within(&small, 100));
        assert!(!json_size_within(&small, written - 1));
        let large = object(serde_json::json!({ "a": "x".repeat(10_000) }));
        assert!(!json_size_within(&large, 4096));
        assert!(json_size_within(&large, 10_010));
        assert!(json_size_within(&serde_json::Map::new(), 2));
        assert!(!json_size_within(&serde_json::Map::new(), 1));
    }
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_at_most_its_width_at_once() {
        let pool = CpuPool::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (pool, running, most) = (pool.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    pool.run(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        running.fetch_sub(1, Ordering::SeqCst);
                        i * 2
                    })
                    .await
                })
            })
            .collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap());
        }
        assert_eq!(results, (0..8).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn map_keeps_the_order_in_at_most_a_task_a_lane() {
        let pool = CpuPool::new(3);
        let tasks = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
        let seen = tasks.clone();
        let out = pool
            .map(8, TURN, (0..10).collect(), move |i: u32| {
                seen.lock().unwrap().insert(std::thread::current().id());
                i * 3
            })
            .await;
        assert_eq!(out, (0..10).map(|i| i * 3).collect::<Vec<_>>());
        // Cheap items: one task a lane, and no more lanes than the pool is wide.
        let used = tasks.lock().unwrap().len();
        assert!((1..=3).contains(&used), "{used} threads");
        assert!(pool.map(2, TURN, Vec::<u32>::new(), |i| i).await.is_empty());
        let one_lane = pool
            .map(1, Duration::MAX, (0..5).collect(), |i: u32| i + 1)
            .await;
        assert_eq!(one_lane, vec![1, 2, 3, 4, 5]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_map_of_costly_items_lets_other_work_in_between() {
        let pool = CpuPool::new(1);
        let slow = pool.clone();
        let map = tokio::spawn(async move {
            let out = slow
                .map(1, TURN, vec![40u64; 4], |ms| {
                    std::thread::sleep(Duration::from_millis(ms));
                    ms
                })
                .await;
            (out, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let other_done = pool.run(Instant::now).await;
        let (out, map_done) = map.await.unwrap();
        assert_eq!(out, vec![40; 4]);
        assert!(
            other_done + Duration::from_millis(60) < map_done,
            "the other work ran after one item, not after the whole map"
        );
    }

    #[tokio::test]
    #[should_panic(expected = "boom")]
    async fn a_panic_resumes_in_the_caller() {
        CpuPool::new(1).run(|| panic!("boom")).await
    }
}
