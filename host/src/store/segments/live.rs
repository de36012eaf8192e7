//! Live membership: the tracked segments of contacts that changed, re-evaluated and their
//! stored memberships written with their events.

use std::collections::{HashMap, HashSet};

use super::rows::{
    COLUMNS, CONTACT_COLUMNS, LiveContact, MembershipChange, RECONCILE_CHUNK,
    RECONCILE_WRITE_CHUNK, Segment, SegmentRow, TrackedSegment, membership_event,
};
use crate::domain::ids::{ContactId, ProjectId};
use crate::domain::segment::SegmentType;
use crate::domain::time::now_ms;
use crate::store::contacts::rows::ContactRow;
use crate::store::dialect::{BeginWrite, for_update, placeholders};
use crate::store::statements::Statements;
use crate::store::{Store, StoreError, StoreResult};
use crate::store::{on_db, on_db_write};

/// What [`Store::reconcile_contacts_segments`] decides on, read through `$conn` (a transaction's
/// connection) with `$lock` after the contacts' select: the [`LiveContact`] of each of
/// `$contacts` that still exists, in id order, with its events of the names `$names`, every
/// stored membership and its state for each topic of the project. Four queries, whatever the
/// number of contacts.
macro_rules! read_live {
    ($conn:expr, $project:expr, $contacts:expr, $names:expr, $lock:expr) => {{
        let ids: &[ContactId] = $contacts;
        let names: &[String] = $names;
        let contact_sql = format!(
            "SELECT {CONTACT_COLUMNS} FROM contacts c WHERE c.project_id = $1 AND c.id IN ({}) \
             ORDER BY c.id{}",
            placeholders(2, ids.len()),
            $lock
        );
        let mut q = sqlx::query_as(&contact_sql).bind($project.as_str());
        for id in ids {
            q = q.bind(id.as_str());
        }
        let rows: Vec<ContactRow> = q.fetch_all($conn).await?;
        let found: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        let mut events: HashMap<String, Vec<(String, u64, i64)>> = HashMap::new();
        let mut memberships: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
        if !found.is_empty() {
            if !names.is_empty() {
                let sql = format!(
                    "SELECT contact_id, name, count, last_at FROM event_summaries \
                     WHERE project_id = $1 AND contact_id IN ({}) AND name IN ({})",
                    placeholders(2, found.len()),
                    placeholders(2 + found.len(), names.len())
                );
                let mut q = sqlx::query_as(&sql).bind($project.as_str());
                for id in &found {
                    q = q.bind(id.as_str());
                }
                for n in names {
                    q = q.bind(n.as_str());
                }
                let stats: Vec<(String, String, i64, i64)> = q.fetch_all($conn).await?;
                for (contact, name, count, at) in stats {
                    events
                        .entry(contact)
                        .or_default()
                        .push((name, count.max(0) as u64, at));
                }
            }
            let sql = format!(
                "SELECT contact_id, segment_id FROM segment_members \
                 WHERE project_id = $1 AND contact_id IN ({})",
                placeholders(2, found.len())
            );
            let mut q = sqlx::query_as(&sql).bind($project.as_str());
            for id in &found {
                q = q.bind(id.as_str());
            }
            let rows: Vec<(String, String)> = q.fetch_all($conn).await?;
            for (contact, segment) in rows {
                memberships.entry(contact).or_default().insert(segment);
            }
        }
        // The project's topics and their defaults (at most 100), for `topic.<id>` conditions.
        let topics: Vec<(String, String)> = if found.is_empty() {
            Vec::new()
        } else {
            sqlx::query_as("SELECT id, default_subscription FROM topics WHERE project_id = $1")
                .bind($project.as_str())
                .fetch_all($conn)
                .await?
        };
        rows.into_iter()
            .map(|row| {
                let events = events.remove(&row.id).unwrap_or_default();
                let memberships = memberships.remove(&row.id).unwrap_or_default();
                let contact: crate::domain::contact::Contact = row.into();
                let topics = topics
                    .iter()
                    .map(|(id, default)| {
                        let default = crate::domain::topic::DefaultSubscription::parse(default)
                            .unwrap_or(crate::domain::topic::DefaultSubscription::OptOut);
                        let state = crate::domain::topic::effective(&contact.topics, id, default);
                        (id.clone(), state)
                    })
                    .collect();
                LiveContact {
                    contact,
                    events,
                    memberships,
                    topics,
                }
            })
            .collect::<Vec<LiveContact>>()
    }};
}

impl Store {
    /// The tracked dynamic segments of every project whose filters change with time alone
    /// ([`Filter::is_time_relative`]), in id order, for the periodic re-evaluation. A segment
    /// whose stored filter does not parse is left out (its `compute` reports it).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn time_relative_segments(&self) -> StoreResult<Vec<Segment>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM segments WHERE type = $1 AND track_membership ORDER BY id"
        );
        let rows: Vec<SegmentRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(SegmentType::Dynamic.as_str()).fetch_all(pool).await?
        });
        let mut segments = Vec::new();
        for row in rows {
            let segment = Segment::try_from(row)?;
            if matches!(segment.filter(), Ok(Some(f)) if f.is_time_relative()) {
                segments.push(segment);
            }
        }
        Ok(segments)
    }

    /// The project's tracked dynamic segments with their parsed filters, in id order (one
    /// indexed read).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn tracked_segments(&self, project: &ProjectId) -> StoreResult<Vec<TrackedSegment>> {
        let rows: Vec<SegmentRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&tracked_segments_sql())
                .bind(project.as_str())
                .bind(SegmentType::Dynamic.as_str())
                .fetch_all(pool)
                .await?
        });
        tracked(rows)
    }

    /// Re-evaluates the membership of `contacts` (of one project) in `segments` (tracked
    /// segments of the project, as [`Store::tracked_segments`] answered them): reads each
    /// contact, its event stats for the names the segments' filters reference and its stored
    /// memberships, and asks `decide`, per contact, whether it belongs to each segment (in the
    /// order given; `None` leaves that membership as it is). Most events change no membership,
    /// so this first happens on a read connection, without taking the writer, in three queries
    /// for up to [`RECONCILE_CHUNK`] contacts; only the contacts whose membership differs are
    /// read again, [`RECONCILE_WRITE_CHUNK`] to a write transaction that locks them (`FOR
    /// UPDATE`, in id order; `BEGIN IMMEDIATE` on SQLite), with the segments still tracked then,
    /// and for each change the `segment_members` row is inserted or deleted and one
    /// `segment.<slug>.entry` or `.exit` event written (data as compute's); each segment's
    /// `member_count` moves once per transaction by the sum of its changes. A change
    /// counts only when its row was really inserted or deleted, so a repeated call, or one
    /// racing a compute, fires nothing twice. Deleted contacts change nothing. Answers every
    /// change with its contact.
    #[tracing::instrument(level = "debug", skip_all, fields(contacts = contacts.len(), segments = segments.len()))]
    pub async fn reconcile_contacts_segments<F>(
        &self,
        project: &ProjectId,
        segments: &[TrackedSegment],
        contacts: &[ContactId],
        decide: F,
    ) -> StoreResult<Vec<(ContactId, MembershipChange)>>
    where
        F: Fn(&LiveContact, &[TrackedSegment]) -> Vec<Option<bool>>,
    {
        let mut changes = Vec::new();
        if segments.is_empty() {
            return Ok(changes);
        }
        let names: Vec<String> = segments
            .iter()
            .flat_map(|s| s.filter.event_names())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut unique: Vec<ContactId> = contacts.to_vec();
        unique.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        unique.dedup();
        for chunk in unique.chunks(RECONCILE_CHUNK) {
            let differing = on_db!(self.db(), pool => {
                let mut tx = pool.begin().await?;
                let live = read_live!(&mut *tx, project, chunk, &names, "");
                tx.rollback().await?;
                live.into_iter()
                    .filter(|l| differs(l, segments, &decide(l, segments)))
                    .map(|l| l.contact.id)
                    .collect::<Vec<ContactId>>()
            });
            if differing.is_empty() {
                continue;
            }
            for part in differing.chunks(RECONCILE_WRITE_CHUNK) {
                changes.extend(
                    self.write_membership_changes(project, segments, part, &names, &decide)
                        .await?,
                );
            }
        }
        Ok(changes)
    }

    /// The write half of [`Store::reconcile_contacts_segments`], for the contacts found to differ.
    async fn write_membership_changes<F>(
        &self,
        project: &ProjectId,
        segments: &[TrackedSegment],
        contacts: &[ContactId],
        names: &[String],
        decide: &F,
    ) -> StoreResult<Vec<(ContactId, MembershipChange)>>
    where
        F: Fn(&LiveContact, &[TrackedSegment]) -> Vec<Option<bool>>,
    {
        let count = "UPDATE segments SET member_count = member_count + $3 \
             WHERE project_id = $1 AND id = $2";
        let lock = for_update(self.db().backend());
        let now = now_ms();
        let changes = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let live = read_live!(&mut *tx, project, contacts, names, lock);
            // The ids of the segments still tracked now (one may have been untracked or deleted
            // since); their filters are the caller's.
            let current: HashSet<String> = sqlx::query_scalar(
                "SELECT id FROM segments WHERE project_id = $1 AND type = $2 AND track_membership",
            )
            .bind(project.as_str())
            .bind(SegmentType::Dynamic.as_str())
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
            // What each contact's answer changes (segment, contact, enters), in contact order.
            let mut wanted: Vec<(usize, &ContactId, bool)> = Vec::new();
            for contact in &live {
                let answers = decide(contact, segments);
                for (i, (segment, want)) in segments.iter().zip(answers).enumerate() {
                    let Some(want) = want else { continue };
                    if !current.contains(segment.id.as_str())
                        || want == contact.memberships.contains(segment.id.as_str())
                    {
                        continue;
                    }
                    wanted.push((i, &contact.contact.id, want));
                }
            }
            // The rows each statement wrote (a compute may have written one since the read),
            // by segment.
            let mut written: Vec<HashSet<String>> = vec![HashSet::new(); segments.len()];
            for (i, segment) in segments.iter().enumerate() {
                for enters in [true, false] {
                    let these: Vec<&str> = wanted
                        .iter()
                        .filter(|(s, _, e)| *s == i && *e == enters)
                        .map(|(_, c, _)| c.as_str())
                        .collect();
                    if these.is_empty() {
                        continue;
                    }
                    let at = enters.then_some(now);
                    written[i].extend(
                        tx.write_members(project.as_str(), segment.id.as_str(), &these, at)
                            .await?,
                    );
                }
            }
            // Each segment's count moves once per transaction (in id order, as every
            // transaction does), by the sum of its changes; the events go in one insert.
            let mut deltas: Vec<i64> = vec![0; segments.len()];
            let mut events = Vec::new();
            let mut changes = Vec::new();
            for (i, id, want) in wanted {
                if !written[i].contains(id.as_str()) {
                    continue;
                }
                let segment = &segments[i];
                deltas[i] += if want { 1 } else { -1 };
                events.push(membership_event(
                    project,
                    id.clone(),
                    segment.id.as_str(),
                    &segment.name,
                    want,
                    now,
                ));
                changes.push((
                    id.clone(),
                    MembershipChange {
                        segment_id: segment.id.clone(),
                        entered: want,
                    },
                ));
            }
            for (segment, delta) in segments.iter().zip(deltas) {
                if delta != 0 {
                    sqlx::query(count)
                        .bind(project.as_str())
                        .bind(segment.id.as_str())
                        .bind(delta)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.insert_events(&events).await?;
            tx.commit().await?;
            changes
        });
        Ok(changes)
    }
}

/// Whether `decide`'s answer (`wanted`) for `live` differs from its stored membership.
fn differs(live: &LiveContact, segments: &[TrackedSegment], wanted: &[Option<bool>]) -> bool {
    segments
        .iter()
        .zip(wanted)
        .any(|(s, want)| want.is_some_and(|want| want != live.memberships.contains(s.id.as_str())))
}

/// The tracked segments of `rows` with their parsed filters.
pub(super) fn tracked(rows: Vec<SegmentRow>) -> StoreResult<Vec<TrackedSegment>> {
    rows.into_iter()
        .map(|r| {
            let segment = Segment::try_from(r)?;
            let filter = segment.filter()?.ok_or_else(|| {
                StoreError::Corrupt(format!("tracked segment {} without a filter", segment.id))
            })?;
            Ok(TrackedSegment {
                id: segment.id,
                name: segment.name,
                filter,
            })
        })
        .collect()
}

/// The tracked dynamic segments of a project (`$1`; `$2` is the dynamic type), in id order.
fn tracked_segments_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM segments WHERE project_id = $1 AND type = $2 \
         AND track_membership ORDER BY id"
    )
}
