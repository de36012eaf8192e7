//! CPU-heavy work (template compiling and rendering, MIME building, DKIM signing) off the async
//! workers: [`CpuPool::run`] runs it on tokio's blocking pool, at most one task per core at a
//! time, so an expensive request never holds an async worker (and `/health` and every other
//! request keep answering) and never takes more than the cores it is given.

use std::sync::Arc;

use tokio::sync::Semaphore;

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

impl CpuPool {
    /// Runs `work` on each of `items`, spread over at most one task a slot of the pool (a task
    /// an item would cost a hand-off between threads each), and returns the results in the
    /// items' order.
    pub async fn map<I, T, F>(&self, items: Vec<I>, work: F) -> Vec<T>
    where
        I: Send + 'static,
        T: Send + 'static,
        F: Fn(I) -> T + Clone + Send + 'static,
    {
        let per_task = items.len().div_ceil(self.width).max(1);
        let mut tasks = Vec::new();
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            let chunk: Vec<I> = items.by_ref().take(per_task).collect();
            let work = work.clone();
            tasks.push(self.run(move || chunk.into_iter().map(work).collect::<Vec<T>>()));
        }
        futures::future::join_all(tasks)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    async fn map_keeps_the_order_in_at_most_a_task_a_slot() {
        let pool = CpuPool::new(3);
        let threads = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
        let seen = threads.clone();
        let out = pool
            .map((0..10).collect(), move |i: u32| {
                seen.lock().unwrap().insert(std::thread::current().id());
                i * 3
            })
            .await;
        assert_eq!(out, (0..10).map(|i| i * 3).collect::<Vec<_>>());
        let used = threads.lock().unwrap().len();
        assert!((1..=3).contains(&used), "{used} threads");
        assert!(pool.map(Vec::<u32>::new(), |i| i).await.is_empty());
    }

    #[tokio::test]
    #[should_panic(expected = "boom")]
    async fn a_panic_resumes_in_the_caller() {
        CpuPool::new(1).run(|| panic!("boom")).await
    }
}
