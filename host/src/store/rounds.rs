//! Rounds: one statement shared by the concurrent callers that ask the same thing.
//!
//! The first caller of a key leads a round: it runs the statement. Callers of that key that
//! arrive while the round is in flight wait for the *next* round, which the leader hands to the
//! first of them when its own ends, and which answers them all with one statement. So every
//! caller is answered by a statement that started after it arrived (it sees every write that
//! committed before it asked), and under load a key costs one statement a round trip instead of
//! one a caller. Nothing is kept between rounds: a key with no round in flight has no entry.
//!
//! The rate limiter's shared counters (`hits = hits + n`, each hit given its own number) and the
//! lookups of a project by its API key and of the verified domains a sender may use go through
//! rounds.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;

use tokio::sync::oneshot;

/// What a waiting caller is told.
enum Turn<T> {
    /// Its answer.
    Answered(T),
    /// It leads the next round.
    Lead,
}

/// The rounds in flight, per key, with the callers waiting for the next one.
pub struct Rounds<K, T> {
    waiting: Mutex<HashMap<K, Vec<oneshot::Sender<Turn<T>>>>>,
}

impl<K, T> std::fmt::Debug for Rounds<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rounds").finish_non_exhaustive()
    }
}

impl<K, T> Default for Rounds<K, T> {
    fn default() -> Self {
        Rounds {
            waiting: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone, T> Rounds<K, T> {
    /// Answers one caller of `key`: `run(n)` is the round's statement for `n` callers, and
    /// `share(&result, i)` the answer of its `i`-th caller (the leader is 0). A caller whose
    /// round failed, or whose leader was dropped with it, runs the statement for itself alone.
    pub async fn join<R, E, F, Fut>(
        &self,
        key: K,
        run: F,
        share: impl Fn(&R, usize) -> T,
    ) -> Result<T, E>
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let waiting = {
            let mut rounds = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            match rounds.entry(key.clone()) {
                Entry::Occupied(mut e) => {
                    let (tx, rx) = oneshot::channel();
                    e.get_mut().push(tx);
                    Some(rx)
                }
                Entry::Vacant(e) => {
                    e.insert(Vec::new());
                    None
                }
            }
        };
        if let Some(rx) = waiting {
            match rx.await {
                Ok(Turn::Answered(answer)) => return Ok(answer),
                Ok(Turn::Lead) => {}
                // The round failed or its leader was dropped with this caller taken.
                Err(_) => return run(1).await.map(|r| share(&r, 0)),
            }
        }
        let lead = Leader { rounds: self, key };
        let waiters = lead.take();
        let result = run(1 + waiters.len()).await;
        // Hand the next round on before answering this one's callers.
        drop(lead);
        let result = result?;
        for (i, waiter) in waiters.into_iter().enumerate() {
            let _ = waiter.send(Turn::Answered(share(&result, i + 1)));
        }
        Ok(share(&result, 0))
    }
}

/// The leader of a round; dropped (also when its caller is), it hands the next round to the
/// first caller still waiting, or ends the rounds of its key.
struct Leader<'a, K: Eq + Hash, T> {
    rounds: &'a Rounds<K, T>,
    key: K,
}

impl<K: Eq + Hash, T> Leader<'_, K, T> {
    /// The callers that queued since the last round.
    fn take(&self) -> Vec<oneshot::Sender<Turn<T>>> {
        let mut rounds = self
            .rounds
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        rounds
            .get_mut(&self.key)
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

impl<K: Eq + Hash, T> Drop for Leader<'_, K, T> {
    fn drop(&mut self) {
        let mut rounds = self
            .rounds
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some(waiting) = rounds.get_mut(&self.key) else {
            return;
        };
        while !waiting.is_empty() {
            if waiting.remove(0).send(Turn::Lead).is_ok() {
                return;
            }
        }
        rounds.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn callers_that_arrive_during_a_round_share_the_next_one_and_each_get_their_share() {
        let rounds: Arc<Rounds<&'static str, usize>> = Arc::default();
        let statements = Arc::new(AtomicUsize::new(0));
        let total = Arc::new(AtomicUsize::new(0));
        let (open_tx, open_rx) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let rounds = rounds.clone();
            let statements = statements.clone();
            let total = total.clone();
            let open = open_rx.clone();
            tasks.push(tokio::spawn(async move {
                rounds
                    .join(
                        "k",
                        |n| {
                            let statements = statements.clone();
                            let total = total.clone();
                            let mut open = open.clone();
                            async move {
                                statements.fetch_add(1, Ordering::SeqCst);
                                let _ = open.wait_for(|o| *o).await;
                                Ok::<_, ()>(total.fetch_add(n, Ordering::SeqCst) + n)
                            }
                        },
                        |&end, i| end + 1 - (i + 1),
                    )
                    .await
            }));
        }
        // Every task has queued behind the first round before it is let through.
        tokio::task::yield_now().await;
        while rounds.waiting.lock().unwrap().get("k").map_or(0, Vec::len) < 19 {
            tokio::task::yield_now().await;
        }
        open_tx.send(true).unwrap();
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap().unwrap());
        }
        answers.sort_unstable();
        assert_eq!(answers, (1..=20).collect::<Vec<_>>());
        assert_eq!(statements.load(Ordering::SeqCst), 2);
        assert!(rounds.waiting.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_failed_round_lets_each_waiting_caller_run_alone() {
        let rounds: Arc<Rounds<u8, u8>> = Arc::default();
        let (open_tx, open_rx) = tokio::sync::watch::channel(false);
        let leader = {
            let rounds = rounds.clone();
            let open = open_rx.clone();
            tokio::spawn(async move {
                rounds
                    .join(
                        1,
                        |_| {
                            let mut open = open.clone();
                            async move {
                                let _ = open.wait_for(|o| *o).await;
                                Err::<u8, &str>("lost")
                            }
                        },
                        |r, _| *r,
                    )
                    .await
            })
        };
        while !rounds.waiting.lock().unwrap().contains_key(&1) {
            tokio::task::yield_now().await;
        }
        let waiter = {
            let rounds = rounds.clone();
            tokio::spawn(async move {
                rounds
                    .join(1, |n| async move { Ok::<u8, &str>(n as u8) }, |r, _| *r)
                    .await
            })
        };
        while rounds.waiting.lock().unwrap().get(&1).map_or(0, Vec::len) < 1 {
            tokio::task::yield_now().await;
        }
        open_tx.send(true).unwrap();
        assert_eq!(leader.await.unwrap(), Err("lost"));
        // The waiter was handed the next round and ran it for itself.
        assert_eq!(waiter.await.unwrap(), Ok(1));
        assert!(rounds.waiting.lock().unwrap().is_empty());
    }
}
