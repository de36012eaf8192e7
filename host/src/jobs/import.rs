//! CSV import of contacts. The file is parsed as a stream of records; every 500 records are
//! upserted in one transaction together with the job's checkpoint (records consumed and the
//! result so far), so a job resumed after a crash continues after its last committed chunk.
//!
//! Rows are read by `herald_content::csv` (the header rules, typed cells, one contact per row);
//! a bad row is reported in the result with its line number and never fails the job.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub use herald_content::csv::{Columns, CsvError, columns};
use herald_content::csv::{Row, strip_bom};

use super::{JobContext, JobError, JobHandler};
use crate::domain::contact::ContactUpsert;
use crate::store::bulk::RowOutcome;

/// Job kind of an import.
pub const KIND: &str = "contacts.import";
/// Largest accepted file.
pub const MAX_FILE_BYTES: usize = 5 * 1024 * 1024;
/// Records per transaction.
pub const CHUNK: usize = 500;
/// Chunks between refreshes of the database's planner statistics.
pub const STATISTICS_EVERY: usize = 40;
/// Row errors kept in the result (all are counted).
pub const MAX_ERRORS: usize = 1000;

/// The result of an import, also its checkpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ImportResult {
    /// Data rows read.
    pub total: u64,
    /// Rows imported.
    pub succeeded: u64,
    /// Rows rejected.
    pub failed: u64,
    /// Contacts created.
    pub created: u64,
    /// Contacts that existed (changed or not).
    pub updated: u64,
    /// The first rejected rows.
    pub errors: Vec<Value>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Checkpoint {
    records_done: u64,
    result: ImportResult,
}

/// Runs imports.
pub struct ImportContacts;

impl JobHandler for ImportContacts {
    fn kinds(&self) -> &'static [&'static str] {
        &[KIND]
    }

    fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>> {
        Box::pin(run(ctx))
    }
}

async fn run(ctx: JobContext) -> Result<(), JobError> {
    let project = ctx.project()?;
    let input = ctx
        .store
        .job_input(&ctx.lease.job)
        .await?
        .ok_or_else(|| JobError::Fail("the job has no file".into()))?;
    let cols = columns(&input).map_err(|e| JobError::Fail(e.to_string()))?;
    let mut checkpoint: Checkpoint = ctx.checkpoint().unwrap_or_default();
    let bytes = strip_bom(&input);
    let len = bytes.len().max(1) as u64;
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(bytes);
    let mut records = reader.records();
    let mut consumed: u64 = 0;
    // Skip what previous attempts committed.
    while consumed < checkpoint.records_done {
        if records.next().is_none() {
            break;
        }
        consumed += 1;
    }
    let mut chunks = 0usize;
    loop {
        if chunks.is_multiple_of(STATISTICS_EVERY) {
            ctx.store.refresh_contact_statistics().await?;
        }
        chunks += 1;
        let mut rows: Vec<ContactUpsert> = Vec::with_capacity(CHUNK);
        let mut result = checkpoint.result.clone();
        let mut taken = 0;
        let mut position = 0;
        for record in records.by_ref() {
            taken += 1;
            let line = consumed + taken as u64 + 1;
            result.total += 1;
            match record {
                Err(e) => reject(&mut result, line, None, e.to_string()),
                Ok(rec) => {
                    position = rec.position().map(|p| p.byte()).unwrap_or(0);
                    match row(&cols, &rec) {
                        Ok(upsert) => rows.push(upsert),
                        Err((email, error)) => reject(&mut result, line, email, error),
                    }
                }
            }
            if taken == CHUNK {
                break;
            }
        }
        if taken == 0 {
            break;
        }
        let records_done = consumed + taken as u64;
        let finished = taken < CHUNK;
        let progress = if finished {
            99
        } else {
            ((position * 100) / len).min(99) as i32
        };
        // The chunk's contacts and the checkpoint that counts them commit together.
        let counted = |outcomes: &[RowOutcome]| {
            let mut result = result.clone();
            for o in outcomes {
                result.succeeded += 1;
                match o {
                    RowOutcome::Created => result.created += 1,
                    RowOutcome::Updated | RowOutcome::Unchanged => result.updated += 1,
                }
            }
            Checkpoint {
                records_done,
                result,
            }
        };
        let saved = ctx
            .store
            .import_chunk(&project, &ctx.lease, &rows, |o| json!(counted(o)), progress)
            .await?;
        let Some(outcomes) = saved else {
            return Err(JobError::LeaseLost);
        };
        checkpoint = counted(&outcomes);
        consumed = records_done;
        if finished {
            break;
        }
    }
    if !ctx
        .store
        .complete_job(&ctx.lease, &json!(checkpoint.result))
        .await?
    {
        return Err(JobError::LeaseLost);
    }
    Ok(())
}

fn reject(result: &mut ImportResult, line: u64, email: Option<String>, error: String) {
    result.failed += 1;
    if result.errors.len() < MAX_ERRORS {
        let mut e = Map::new();
        e.insert("row".into(), json!(line));
        if let Some(email) = email {
            e.insert("email".into(), json!(email));
        }
        e.insert("error".into(), json!(error));
        result.errors.push(Value::Object(e));
    }
}

/// A row as a contact upsert (created subscribed unless the file says otherwise).
fn row(cols: &Columns, rec: &csv::StringRecord) -> Result<ContactUpsert, (Option<String>, String)> {
    let Row {
        email,
        subscribed,
        data,
    } = herald_content::csv::row(cols, rec)?;
    Ok(ContactUpsert {
        email,
        subscribed,
        subscribed_default: true,
        resubscribe: true,
        data,
        topics: Vec::new(),
    })
}
