//! A job's rows: its states, its payloads, a new job, a lease and what a claim or a read answers.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use crate::domain::ids::{DomainId, JobId, ProjectId};
use crate::store::{StoreError, StoreResult};

/// States of a job.
pub mod state {
    /// Waiting for its `run_at`.
    pub const QUEUED: &str = "queued";
    /// Claimed by a worker.
    pub const RUNNING: &str = "running";
    /// Finished; `result` holds the outcome.
    pub const COMPLETED: &str = "completed";
    /// Gave up; `last_error` says why.
    pub const FAILED: &str = "failed";
}

/// The parameters of one kind of job, stored as JSON in `jobs.payload` when the job is queued
/// and read back as the same type by its handler.
pub trait JobPayload: Serialize + DeserializeOwned {
    /// The payload as stored.
    fn to_json(&self) -> StoreResult<Value> {
        serde_json::to_value(self).map_err(|e| StoreError::Corrupt(format!("job payload: {e}")))
    }
}

/// A free-form payload, for job kinds registered outside the crate (and tests).
impl JobPayload for Value {}

/// The payload of a `domains.check` job: `{"domainId": …}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainCheckPayload {
    /// The domain to check.
    #[serde(serialize_with = "id_text", deserialize_with = "domain_id")]
    pub domain_id: DomainId,
}

impl JobPayload for DomainCheckPayload {}

/// The payload of the bulk contact jobs: `{"contactIds": […]}`, the ids as the caller sent them
/// (unknown ones are reported in the result).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BulkPayload {
    /// The contacts to change.
    #[serde(default)]
    pub contact_ids: Vec<String>,
}

impl JobPayload for BulkPayload {}

/// The payload of a `contacts.import` job: `{"filename": …}` (the file itself is the job's
/// input).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImportPayload {
    /// The uploaded file's name, if it had one.
    pub filename: Option<String>,
}

impl JobPayload for ImportPayload {}

fn id_text<S: Serializer>(id: &impl std::fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

fn domain_id<'de, D: Deserializer<'de>>(d: D) -> Result<DomainId, D::Error> {
    String::deserialize(d).map(DomainId::from_trusted)
}

/// A worker's claim on a running job: every write of the job's state names it, and does nothing
/// once another claim holds the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub job: JobId,
    /// This claim: the worker that made it and a random token of its own, so that two claims of
    /// one job by the same instance (after a lapsed lease) are told apart.
    pub worker: String,
}

/// A queue with queued work, as the loose index scan reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueHead {
    /// `<project id> <kind>`, the queue a job waits in (see `jobs::fairness`); the project is empty for system jobs.
    pub queue: String,
    /// When its earliest job is due, unix ms.
    pub next_run_at: i64,
}

impl QueueHead {
    /// The project the queue belongs to, if any.
    pub fn project(&self) -> Option<&str> {
        self.queue
            .split_once(' ')
            .map(|(p, _)| p)
            .filter(|p| !p.is_empty())
    }

    /// The kind of its jobs.
    pub fn kind(&self) -> &str {
        self.queue.split_once(' ').map_or("", |(_, k)| k)
    }
}

/// The queue name of a job of `kind` in `project`.
pub fn queue_of(project: Option<&str>, kind: &str) -> String {
    format!("{} {kind}", project.unwrap_or(""))
}

/// A job to enqueue.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// What handler runs it.
    pub kind: String,
    /// The project it belongs to.
    pub project_id: Option<ProjectId>,
    /// Its parameters, a [`JobPayload`] as stored.
    pub payload: Value,
    /// A large input (a CSV file), kept apart from the payload.
    pub input: Option<Vec<u8>>,
    /// How many attempts before it fails for good.
    pub max_attempts: i32,
    /// Earliest start, unix ms.
    pub run_at: i64,
}

/// A job as the API shows it.
#[derive(Clone, Debug, FromRow)]
pub struct JobRecord {
    pub id: String,
    pub project_id: Option<String>,
    pub kind: String,
    /// `queued`, `running`, `completed` or `failed`.
    pub state: String,
    /// 0..=100.
    pub progress: i32,
    /// The handler's outcome.
    pub result: Option<Json<Value>>,
    /// The last checkpoint a handler saved.
    pub checkpoint: Option<Json<Value>>,
    /// Attempts so far.
    pub attempts: i32,
    /// The last error.
    pub last_error: Option<String>,
    /// Created, unix ms.
    pub created_at: i64,
    /// Finished, unix ms.
    pub finished_at: Option<i64>,
}

/// A job claimed by a worker.
#[derive(Clone, Debug)]
pub struct ClaimedJob {
    pub id: JobId,
    pub project_id: Option<ProjectId>,
    pub kind: String,
    /// Its parameters (read them with `JobContext::payload`).
    pub payload: Value,
    /// Where a previous attempt got to.
    pub checkpoint: Option<Value>,
    /// Attempts, this one included.
    pub attempts: i32,
    /// The attempt limit.
    pub max_attempts: i32,
    /// This claim's own id (the worker and a random token), which its [`Lease`] names.
    pub claim: String,
}

#[derive(FromRow)]
pub(in crate::store) struct ClaimedRow {
    id: String,
    project_id: Option<String>,
    kind: String,
    payload: Json<Value>,
    checkpoint: Option<Json<Value>>,
    attempts: i32,
    max_attempts: i32,
    locked_by: String,
}

impl From<ClaimedRow> for ClaimedJob {
    fn from(r: ClaimedRow) -> ClaimedJob {
        ClaimedJob {
            id: JobId::from_trusted(r.id),
            project_id: r.project_id.map(ProjectId::from_trusted),
            kind: r.kind,
            payload: r.payload.0,
            checkpoint: r.checkpoint.map(|c| c.0),
            attempts: r.attempts,
            max_attempts: r.max_attempts,
            claim: r.locked_by,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn payloads_keep_the_stored_json_shape() {
        let domain = DomainId::generate();
        let stored = json!({ "domainId": domain.as_str() });
        let check = DomainCheckPayload {
            domain_id: domain.clone(),
        };
        assert_eq!(check.to_json().unwrap(), stored);
        assert_eq!(
            serde_json::from_value::<DomainCheckPayload>(stored).unwrap(),
            check
        );

        let bulk = BulkPayload {
            contact_ids: vec!["cnt_a".into(), "cnt_garbage".into()],
        };
        let stored = json!({ "contactIds": ["cnt_a", "cnt_garbage"] });
        assert_eq!(bulk.to_json().unwrap(), stored);
        assert_eq!(serde_json::from_value::<BulkPayload>(stored).unwrap(), bulk);

        let import = ImportPayload {
            filename: Some("list.csv".into()),
        };
        assert_eq!(import.to_json().unwrap(), json!({ "filename": "list.csv" }));
        assert_eq!(
            ImportPayload { filename: None }.to_json().unwrap(),
            json!({ "filename": null })
        );
    }
}
