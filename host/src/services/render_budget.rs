//! The render budget (`sending.render_memory_mb`): the memory that rendered messages may take at
//! once in this process while they wait for their commit (up to 50 of a `/v1/send`, a group of
//! a campaign batch), counted in kilobytes of what each rendering produced.
//!
//! A request counts each message it renders into its [`RenderRoom`] as it goes, from the room
//! it reserved and then from the budget's free room, never waiting while it holds any: when the
//! budget has no room for the next message, the request drops what it rendered, gives its room
//! back and waits (for at most [`RENDER_WAIT`] in all) for as much as its first try measured, at
//! once, then renders again. A request that holds nothing while it waits never keeps another
//! from finishing, so there is no deadlock. A request whose messages would take more than the
//! whole budget fails alone ([`RenderBudgetError::OverBudget`]) as soon as it renders past it;
//! the room is given back when the [`RenderRoom`] (held until the commit) is dropped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default render budget (`sending.render_memory_mb`), in megabytes.
pub const DEFAULT_RENDER_MB: u64 = 256;

/// How long a request waits in all for room in the render budget before it gives up
/// ([`RenderBudgetError::Busy`]).
pub const RENDER_WAIT: Duration = Duration::from_secs(10);

/// Why rendered messages could not be held.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RenderBudgetError {
    /// The request's messages take more than the whole budget: they can never be held at once.
    #[error(
        "the messages rendered for this request take {kb} KB or more, over the {budget_kb} KB \
         that the server holds at once (the setting `sending.render_memory_mb`); nothing was sent"
    )]
    OverBudget {
        /// What the request's messages took when it stopped, with the one over the budget.
        kb: u64,
        /// Of which the one message that went over.
        message_kb: u64,
        /// The budget.
        budget_kb: u32,
    },
    /// The budget has no room now for the next message (the holder gives its room back, then
    /// waits with [`RenderBudget::reserve`]).
    #[error("the render budget has no room now")]
    NoRoom,
    /// No room was found within [`RENDER_WAIT`].
    #[error(
        "the server is rendering as much as it holds at once (the setting \
         `sending.render_memory_mb`) and found no room for this request within {} seconds; \
         nothing was sent",
        RENDER_WAIT.as_secs()
    )]
    Busy,
}

impl RenderBudgetError {
    /// One message alone is over the whole budget: it can never be held, whatever waits.
    pub fn message_over_budget(&self) -> bool {
        matches!(self, RenderBudgetError::OverBudget { message_kb, budget_kb, .. }
            if *message_kb > u64::from(*budget_kb))
    }
}

/// The budget of one process; cheap to clone (the clones share it).
#[derive(Clone)]
pub struct RenderBudget {
    room: Arc<Semaphore>,
    kb: u32,
}

impl RenderBudget {
    /// A budget of `megabytes` (at least 1).
    pub fn new(megabytes: u64) -> RenderBudget {
        let kb = u32::try_from(megabytes.saturating_mul(1024))
            .unwrap_or(u32::MAX >> 3)
            .clamp(1024, u32::MAX >> 3);
        RenderBudget {
            room: Arc::new(Semaphore::new(kb as usize)),
            kb,
        }
    }

    /// The budget, in kilobytes.
    pub fn kb(&self) -> u32 {
        self.kb
    }

    /// The room free now, in kilobytes.
    pub fn free_kb(&self) -> usize {
        self.room.available_permits()
    }

    /// A holding of nothing yet: what it renders is counted from the free room, without waiting.
    pub fn holding(&self) -> RenderRoom {
        self.holding_of(None)
    }

    /// A holding of `kb` (at most the whole budget) reserved at once, after waiting for it until
    /// `deadline`; [`RenderBudgetError::Busy`] past it. The caller must hold no other room of
    /// this budget while it waits.
    pub async fn reserve(
        &self,
        kb: u32,
        deadline: tokio::time::Instant,
    ) -> Result<RenderRoom, RenderBudgetError> {
        let kb = kb.clamp(1, self.kb);
        let wait = self.room.clone().acquire_many_owned(kb);
        match tokio::time::timeout_at(deadline, wait).await {
            Ok(Ok(permit)) => Ok(self.holding_of(Some(permit))),
            // Never closed; timed out.
            Ok(Err(_)) | Err(_) => Err(RenderBudgetError::Busy),
        }
    }

    fn holding_of(&self, permit: Option<OwnedSemaphorePermit>) -> RenderRoom {
        RenderRoom(Arc::new(Room {
            budget: self.clone(),
            held: Mutex::new(Held {
                permit,
                ..Held::default()
            }),
        }))
    }
}

/// The room one request's rendered messages hold in the budget, given back when the last clone
/// is dropped (after the commit); cheap to clone into the rendering tasks.
#[derive(Clone)]
pub struct RenderRoom(Arc<Room>);

struct Room {
    budget: RenderBudget,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    permit: Option<OwnedSemaphorePermit>,
    /// What the messages counted take.
    used_kb: u64,
    /// How many messages were counted.
    messages: u64,
    /// What the messages rendered took when the room ran short (those counted and the one that
    /// did not fit), and how many they were: the measure of the next reservation.
    short: Option<(u64, u64)>,
}

impl RenderRoom {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.0.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a rendered message of `bytes` into this holding: from its reserved room, then from
    /// the budget's free room without waiting. [`RenderBudgetError::NoRoom`] when the budget has
    /// none, [`RenderBudgetError::OverBudget`] when the holding would take more than the whole
    /// budget; after either (but for one message alone over the budget), every message is
    /// refused with `NoRoom`, so that no more is rendered for nothing.
    pub fn take(&self, bytes: usize) -> Result<(), RenderBudgetError> {
        let budget = &self.0.budget;
        let kb = (bytes as u64).div_ceil(1024).max(1);
        let mut held = self.held();
        if held.short.is_some() {
            return Err(RenderBudgetError::NoRoom);
        }
        let total = held.used_kb + kb;
        if total > u64::from(budget.kb) {
            // Nothing more is kept after what is not one message alone over the budget.
            if kb <= u64::from(budget.kb) {
                held.short = Some((total, held.messages + 1));
            }
            return Err(RenderBudgetError::OverBudget {
                kb: total,
                message_kb: kb,
                budget_kb: budget.kb,
            });
        }
        let reserved = held.permit.as_ref().map_or(0, |p| p.num_permits()) as u64;
        if total > reserved {
            // At most the budget, so within u32.
            let more = u32::try_from(total - reserved).unwrap_or(u32::MAX);
            match budget.room.clone().try_acquire_many_owned(more) {
                Ok(permit) => match &mut held.permit {
                    Some(p) => p.merge(permit),
                    None => held.permit = Some(permit),
                },
                Err(_) => {
                    held.short = Some((total, held.messages + 1));
                    return Err(RenderBudgetError::NoRoom);
                }
            }
        }
        held.used_kb = total;
        held.messages += 1;
        Ok(())
    }

    /// Whether the room ran short: a message rendered now would not be kept.
    pub fn is_short(&self) -> bool {
        self.held().short.is_some()
    }

    /// What `messages` like those rendered so far would take, in kilobytes, at most the whole
    /// budget: the room to reserve before rendering them again.
    pub fn estimate(&self, messages: usize) -> u32 {
        let held = self.held();
        let (kb, counted) = held.short.unwrap_or((held.used_kb, held.messages));
        let kb = kb.saturating_mul(messages as u64).div_ceil(counted.max(1));
        u32::try_from(kb)
            .unwrap_or(u32::MAX)
            .clamp(1, self.0.budget.kb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soon() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_millis(50)
    }

    #[test]
    fn messages_are_counted_until_the_budget_is_full() {
        let budget = RenderBudget::new(1);
        let room = budget.holding();
        room.take(600 * 1024).unwrap();
        assert_eq!(budget.free_kb(), 424);
        let other = budget.holding();
        assert_eq!(other.take(500 * 1024), Err(RenderBudgetError::NoRoom));
        assert!(other.is_short());
        // Once short, nothing more is kept, even what would fit.
        assert_eq!(other.take(1), Err(RenderBudgetError::NoRoom));
        assert_eq!(other.estimate(4), 1024, "at most the budget");
        assert_eq!(other.estimate(1), 500);
        drop(room);
        assert_eq!(budget.free_kb(), 1024, "given back when dropped");
    }

    #[test]
    fn a_holding_over_the_whole_budget_fails() {
        let budget = RenderBudget::new(1);
        let room = budget.holding();
        room.take(1000 * 1024).unwrap();
        let e = room.take(100 * 1024).unwrap_err();
        assert_eq!(
            e,
            RenderBudgetError::OverBudget {
                kb: 1100,
                message_kb: 100,
                budget_kb: 1024
            }
        );
        assert!(!e.message_over_budget());
        assert!(e.to_string().contains("sending.render_memory_mb"), "{e}");
        let alone = budget.holding().take(2 << 20).unwrap_err();
        assert!(alone.message_over_budget());
    }

    #[tokio::test]
    async fn a_reservation_waits_for_room_then_is_counted_from() {
        let budget = RenderBudget::new(1);
        let first = budget.holding();
        first.take(800 * 1024).unwrap();
        assert_eq!(
            budget.reserve(400, soon()).await.err(),
            Some(RenderBudgetError::Busy)
        );
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move {
                budget
                    .reserve(400, tokio::time::Instant::now() + Duration::from_secs(5))
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        let reserved = waiting.await.unwrap().unwrap();
        assert_eq!(budget.free_kb(), 624);
        reserved.take(300 * 1024).unwrap();
        reserved.take(100 * 1024).unwrap();
        assert_eq!(budget.free_kb(), 624, "counted from the reservation");
        reserved.take(24 * 1024).unwrap();
        assert_eq!(budget.free_kb(), 600, "then from the free room");
    }
}
