//! Rounds: one statement shared by the concurrent callers that ask the same thing.
//!
//! The first caller of a key leads a round: it runs the statement. Callers of that key that
//! arrive while the round is in flight wait for the *next* round, which the leader hands to the
//! first of them when its own ends, and which answers them all with one statement. So every
//! caller is answered by a statement that started after it arrived (it sees every write that
//! committed before it asked), and under load a key costs one statement a round trip instead of
//! one a caller. Nothing is kept between rounds: a key with no round in flight has no entry.
//!
//! A caller may bring an input of its own ([`Rounds::gather`]): the round's statement is then run
//! for the inputs of all its callers at once (the contacts of several sends' recipients read by
//! one `IN (…)`), and each caller is given its share of the answer.
//!
//! The rate limiter's shared counters (`hits = hits + n`, each hit given its own number), the
//! lookups of a project by its API key and of the verified domains a sender may use, and the
//! reads of a send's recipients (per project) go through rounds.

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

/// A caller waiting for the next round: its input and where its turn is told.
type Waiter<I, T> = (I, oneshot::Sender<Turn<T>>);

/// The rounds in flight, per key, with the callers waiting for the next one and their inputs
/// (`I`, none by default).
pub struct Rounds<K, T, I = ()> {
    waiting: Mutex<HashMap<K, Vec<Waiter<I, T>>>>,
}

impl<K, T, I> std::fmt::Debug for Rounds<K, T, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rounds").finish_non_exhaustive()
    }
}

impl<K, T, I> Default for Rounds<K, T, I> {
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
        self.gather(key, (), |inputs| run(inputs.len()), |r, i, _| share(r, i))
            .await
    }
}

impl<K: Eq + Hash + Clone, T, I: Clone> Rounds<K, T, I> {
    /// Answers one caller of `key` with `input`: `run(inputs)` is the round's statement for the
    /// inputs of its callers (the leader's first), and `share(&result, i, &input)` the answer of
    /// its `i`-th caller. A caller whose round failed, or whose leader was dropped with it, runs
    /// the statement for its own input alone.
    pub async fn gather<R, E, F, Fut>(
        &self,
        key: K,
        input: I,
        run: F,
        share: impl Fn(&R, usize, &I) -> T,
    ) -> Result<T, E>
    where
        F: Fn(Vec<I>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let waiting = {
            let mut rounds = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            match rounds.entry(key.clone()) {
                Entry::Occupied(mut e) => {
                    let (tx, rx) = oneshot::channel();
                    e.get_mut().push((input.clone(), tx));
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
                Err(_) => {
                    return run(vec![input.clone()]).await.map(|r| share(&r, 0, &input));
                }
            }
        }
        let lead = Leader { rounds: self, key };
        let (inputs, waiters): (Vec<I>, Vec<_>) = lead.take().into_iter().unzip();
        let result = run(std::iter::once(input.clone())
            .chain(inputs.iter().cloned())
            .collect())
        .await;
        // Hand the next round on before answering this one's callers.
        drop(lead);
        let result = result?;
        for (i, (waiter, their)) in waiters.into_iter().zip(&inputs).enumerate() {
            let _ = waiter.send(Turn::Answered(share(&result, i + 1, their)));
        }
        Ok(share(&result, 0, &input))
    }
}

/// The leader of a round; dropped (also when its caller is), it hands the next round to the
/// first caller still waiting, or ends the rounds of its key.
struct Leader<'a, K: Eq + Hash, T, I> {
    rounds: &'a Rounds<K, T, I>,
    key: K,
}

impl<K: Eq + Hash, T, I> Leader<'_, K, T, I> {
    /// The callers that queued since the last round.
    fn take(&self) -> Vec<Waiter<I, T>> {
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

impl<K: Eq + Hash, T, I> Drop for Leader<'_, K, T, I> {
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
            if waiting.remove(0).1.send(Turn::Lead).is_ok() {
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

    #[tokio::test]
    async fn gathered_inputs_are_read_by_one_round_and_each_caller_gets_its_own_share() {
        let rounds: Arc<Rounds<&'static str, Vec<u32>, Vec<u32>>> = Arc::default();
        let statements = Arc::new(AtomicUsize::new(0));
        let (open_tx, open_rx) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for caller in 0..10u32 {
            let rounds = rounds.clone();
            let statements = statements.clone();
            let open = open_rx.clone();
            tasks.push(tokio::spawn(async move {
                // Caller c asks for c and 100 + c; the "table" holds the even numbers.
                rounds
                    .gather(
                        "project",
                        vec![caller, 100 + caller],
                        |inputs| {
                            let statements = statements.clone();
                            let mut open = open.clone();
                            async move {
                                statements.fetch_add(1, Ordering::SeqCst);
                                let _ = open.wait_for(|o| *o).await;
                                let asked: Vec<u32> = inputs.into_iter().flatten().collect();
                                Ok::<_, ()>(asked.into_iter().filter(|n| n % 2 == 0).collect())
                            }
                        },
                        |found: &Vec<u32>, _, mine| {
                            found.iter().copied().filter(|n| mine.contains(n)).collect()
                        },
                    )
                    .await
                    .map(|found| (caller, found))
            }));
        }
        tokio::task::yield_now().await;
        while rounds
            .waiting
            .lock()
            .unwrap()
            .get("project")
            .map_or(0, Vec::len)
            < 9
        {
            tokio::task::yield_now().await;
        }
        open_tx.send(true).unwrap();
        for task in tasks {
            let (caller, found) = task.await.unwrap().unwrap();
            let want: Vec<u32> = if caller % 2 == 0 {
                vec![caller, 100 + caller]
            } else {
                vec![]
            };
            assert_eq!(found, want, "caller {caller}");
        }
        // The first caller's round, then one round for the nine that queued behind it.
        assert_eq!(statements.load(Ordering::SeqCst), 2);
        assert!(rounds.waiting.lock().unwrap().is_empty());
    }
}
