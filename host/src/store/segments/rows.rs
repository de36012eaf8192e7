//! A segment and its rows: what is stored of it, written, counted and reconciled, and the
//! events of a change of membership.

use herald_filter::{Dialect, Filter, Scope};
use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use crate::domain::contact::Contact;
use crate::domain::event::StoredEvent;
use crate::domain::ids::{ContactId, EventId, ProjectId, SegmentId};
use crate::domain::segment::{
    SegmentType, entry_event_name, exit_event_name, membership_event_data,
};
use crate::store::{Backend, StoreError, StoreResult};

/// The fingerprint of a dynamic segment's filter that a cached member count was made with.
pub(super) fn condition_hash(condition: &Value) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(condition.to_string().as_bytes()))
}

/// How many entries (then exits) one transaction of a compute writes.
pub const COMPUTE_CHUNK: usize = 500;

/// How many contacts (or members, for exits) one window of a compute spans at most: every
/// chunk's scan stays inside a window, so a sparse segment's compute holds the writer briefly.
pub const COMPUTE_WINDOW: usize = 5_000;

/// How many contacts one read (and at most one write transaction) of live re-evaluation takes.
pub const RECONCILE_CHUNK: usize = 250;

/// How many contacts whose membership changes one write transaction of live re-evaluation
/// takes: each may enter or leave every tracked segment, with an event each, and SQLite's one
/// writer is held meanwhile.
pub const RECONCILE_WRITE_CHUNK: usize = 50;

/// The job kind of the periodic re-evaluation of time-relative tracked segments; a singleton
/// (a unique index allows one queued or running, across instances).
pub const REEVALUATE_KIND: &str = "segments.reevaluate";

/// The columns of `contacts c`, in the order of `ContactRow`.
pub(super) const CONTACT_COLUMNS: &str = "c.id, c.project_id, c.email, c.subscribed, c.data, c.version, c.created_at, c.updated_at, c.topics";

pub(super) const COLUMNS: &str = "id, project_id, name, description, type, condition, track_membership, \
     member_count, created_at, updated_at";

/// A stored segment.
#[derive(Clone, Debug)]
pub struct Segment {
    pub id: SegmentId,
    pub project_id: ProjectId,
    pub name: String,
    pub description: Option<String>,
    pub segment_type: SegmentType,
    /// The filter of a dynamic segment (as sent; valid when stored).
    pub condition: Option<Value>,
    /// Whether compute stores the members of a dynamic segment and records entries and exits.
    pub track_membership: bool,
    /// The count of the last compute, refresh or static change.
    pub member_count: i64,
    /// Created, unix ms.
    pub created_at: i64,
    /// Last changed, unix ms.
    pub updated_at: i64,
}

impl Segment {
    /// The parsed filter of a dynamic segment (`None` for a static one).
    pub fn filter(&self) -> StoreResult<Option<Filter>> {
        match (&self.segment_type, &self.condition) {
            (SegmentType::Dynamic, Some(c)) => herald_filter::parse(c, Scope::Contacts)
                .map(Some)
                .map_err(|_| StoreError::Corrupt(format!("condition of segment {}", self.id))),
            (SegmentType::Dynamic, None) => Err(StoreError::Corrupt(format!(
                "dynamic segment {} without a condition",
                self.id
            ))),
            (SegmentType::Static, _) => Ok(None),
        }
    }
}

#[derive(FromRow)]
pub(super) struct SegmentRow {
    id: String,
    project_id: String,
    name: String,
    description: Option<String>,
    #[sqlx(rename = "type")]
    pub(super) segment_type: String,
    condition: Option<Json<Value>>,
    track_membership: bool,
    member_count: i64,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<SegmentRow> for Segment {
    type Error = StoreError;

    fn try_from(r: SegmentRow) -> Result<Segment, StoreError> {
        let segment_type = SegmentType::parse(&r.segment_type)
            .ok_or_else(|| StoreError::Corrupt(format!("segment type `{}`", r.segment_type)))?;
        Ok(Segment {
            id: SegmentId::from_trusted(r.id),
            project_id: ProjectId::from_trusted(r.project_id),
            name: r.name,
            description: r.description,
            segment_type,
            condition: r.condition.map(|c| c.0),
            track_membership: r.track_membership,
            member_count: r.member_count,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// A new segment (validated).
#[derive(Clone, Debug)]
pub struct NewSegment {
    pub name: String,
    pub description: Option<String>,
    pub segment_type: SegmentType,
    /// Required for a dynamic segment, absent for a static one.
    pub condition: Option<Value>,
    pub track_membership: bool,
}

/// A change (validated); `None` keeps a field, `Some(None)` clears the description.
#[derive(Clone, Debug, Default)]
pub struct SegmentPatch {
    pub name: Option<String>,
    pub description: Option<Option<String>>,
    /// A new filter (dynamic segments only).
    pub condition: Option<Value>,
    pub track_membership: Option<bool>,
}

/// What a compute changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ComputeOutcome {
    /// Contacts that entered (events `segment.<slug>.entry`).
    pub added: i64,
    /// Contacts that left (events `segment.<slug>.exit`).
    pub removed: i64,
    /// Members after the compute.
    pub total: i64,
}

/// A tracked dynamic segment with its parsed filter, for live re-evaluation.
#[derive(Clone, Debug)]
pub struct TrackedSegment {
    pub id: SegmentId,
    pub name: String,
    pub filter: Filter,
}

/// What live re-evaluation sees of one contact, read inside its transaction: the contact, its
/// events by name (only the names the tracked filters reference) and the ids of every segment
/// it is a stored member of.
#[derive(Clone, Debug)]
pub struct LiveContact {
    pub contact: Contact,
    /// Count and latest `created_at` per event name.
    pub events: Vec<(String, u64, i64)>,
    /// Every `segment_members` row of the contact (static and tracked segments).
    pub memberships: std::collections::BTreeSet<String>,
    /// Its state for each topic of the project (`domain::topic::effective`), by topic id.
    pub topics: std::collections::BTreeMap<String, bool>,
}

/// One change live re-evaluation made: the contact entered or left a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipChange {
    pub segment_id: SegmentId,
    /// `true` for an entry, `false` for an exit.
    pub entered: bool,
}

/// The filter's dialect on a backend.
pub(in crate::store) fn dialect(backend: Backend) -> Dialect {
    match backend {
        Backend::Sqlite => Dialect::Sqlite,
        Backend::Postgres => Dialect::Postgres,
    }
}

/// The `segment.<slug>.entry` (or `.exit`) event of `contact` for the segment `id` named `name`.
pub(super) fn membership_event(
    project: &ProjectId,
    contact: ContactId,
    id: &str,
    name: &str,
    entered: bool,
    now: i64,
) -> StoredEvent {
    StoredEvent {
        id: EventId::generate(),
        project_id: project.clone(),
        contact_id: Some(contact),
        contact_email: None,
        name: if entered {
            entry_event_name(name)
        } else {
            exit_event_name(name)
        },
        data: membership_event_data(id, name),
        created_at: now,
    }
}
