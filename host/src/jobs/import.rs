//! CSV import of contacts. The file is parsed as a stream of records; every 500 records are
//! upserted in one transaction together with the job's checkpoint (records consumed and the
//! result so far), so a job resumed after a crash continues after its last committed chunk.
//!
//! Rows: a header row is required and matched case-insensitively; `email` is required;
//! `subscribed` takes true/false/1/0/yes/no; every other column becomes a `data` key whose value
//! is typed by the custom data rules (canonical numbers become numbers, true/false booleans,
//! empty cells are ignored). A bad row is reported in the result with its line number and never
//! fails the job.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value, json};

use super::{JobContext, JobError, JobHandler};
use crate::domain::contact::ContactUpsert;
use crate::domain::custom_data::DataPatch;
use crate::domain::email::EmailAddress;
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

/// Why a file is not an importable CSV; shown to the caller at upload time.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CsvError {
    /// Not UTF-8 text.
    #[error("the file is not a UTF-8 CSV text file")]
    NotText,
    /// No header row.
    #[error("the file is empty; it needs a header row with an `email` column")]
    Empty,
    /// No email column.
    #[error("the header row has no `email` column (found: {0})")]
    NoEmailColumn(String),
    /// The header could not be parsed.
    #[error("the header row is not valid CSV: {0}")]
    Malformed(String),
    /// More data columns than a contact may have keys.
    #[error("the header row has {0} data columns; at most {max} are accepted", max = crate::domain::custom_data::MAX_KEYS)]
    TooManyColumns(usize),
}

/// The columns of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Columns {
    email: usize,
    subscribed: Option<usize>,
    data: Vec<(usize, String)>,
}

fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// Checks a file and reads its header; used at upload time and by the job.
pub fn columns(bytes: &[u8]) -> Result<Columns, CsvError> {
    let bytes = strip_bom(bytes);
    let text = std::str::from_utf8(bytes).map_err(|_| CsvError::NotText)?;
    if text.contains('\0') {
        return Err(CsvError::NotText);
    }
    if text.trim().is_empty() {
        return Err(CsvError::Empty);
    }
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| CsvError::Malformed(e.to_string()))?
        .clone();
    let mut email = None;
    let mut subscribed = None;
    let mut data = Vec::new();
    for (i, h) in headers.iter().enumerate() {
        let name = h.trim();
        match name.to_ascii_lowercase().as_str() {
            "" => {}
            "email" => email = Some(i),
            "subscribed" => subscribed = Some(i),
            _ => data.push((i, name.to_string())),
        }
    }
    let email = email.ok_or_else(|| {
        CsvError::NoEmailColumn(headers.iter().map(str::trim).collect::<Vec<_>>().join(", "))
    })?;
    if data.len() > crate::domain::custom_data::MAX_KEYS {
        return Err(CsvError::TooManyColumns(data.len()));
    }
    Ok(Columns {
        email,
        subscribed,
        data,
    })
}

/// A cell typed by the custom data rules.
fn typed(cell: &str) -> Value {
    let t = cell.trim();
    match t.to_ascii_lowercase().as_str() {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    let canonical_int = t.parse::<i64>().ok().filter(|n| n.to_string() == t);
    if let Some(n) = canonical_int {
        return Value::Number(n.into());
    }
    let leading_zero = |s: &str| s.starts_with('0') && s.len() > 1 && !s.starts_with("0.");
    let unsigned = t.strip_prefix('-').unwrap_or(t);
    let looks_decimal = !unsigned.starts_with(['+', '.'])
        && !unsigned.ends_with('.')
        && !leading_zero(unsigned)
        && unsigned.contains('.')
        && unsigned.chars().all(|c| c.is_ascii_digit() || c == '.');
    if looks_decimal && let Some(n) = t.parse::<f64>().ok().and_then(Number::from_f64) {
        return Value::Number(n);
    }
    Value::String(cell.to_string())
}

fn parse_subscribed(cell: &str) -> Result<Option<bool>, String> {
    match cell.trim().to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "true" | "1" | "yes" => Ok(Some(true)),
        "false" | "0" | "no" => Ok(Some(false)),
        other => Err(format!(
            "`subscribed` must be true/false/1/0/yes/no, not `{other}`"
        )),
    }
}

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

fn row(cols: &Columns, rec: &csv::StringRecord) -> Result<ContactUpsert, (Option<String>, String)> {
    let raw_email = rec.get(cols.email).unwrap_or("").trim().to_string();
    if raw_email.is_empty() {
        return Err((None, "the email cell is empty".into()));
    }
    let email =
        EmailAddress::parse(&raw_email).map_err(|e| (Some(raw_email.clone()), e.to_string()))?;
    let subscribed = match cols.subscribed {
        Some(i) => {
            parse_subscribed(rec.get(i).unwrap_or("")).map_err(|e| (Some(raw_email.clone()), e))?
        }
        None => None,
    };
    let mut data = Map::new();
    for (i, key) in &cols.data {
        if let Some(cell) = rec.get(*i) {
            data.insert(
                key.clone(),
                if cell.is_empty() {
                    Value::String(String::new())
                } else {
                    typed(cell)
                },
            );
        }
    }
    let data = DataPatch::parse(data).map_err(|e| (Some(raw_email.clone()), e.to_string()))?;
    Ok(ContactUpsert {
        email,
        subscribed,
        subscribed_default: true,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_rules() {
        assert!(matches!(
            columns(b"name,plan\nann,pro"),
            Err(CsvError::NoEmailColumn(_))
        ));
        assert_eq!(columns(b""), Err(CsvError::Empty));
        assert_eq!(
            columns(b"\x89PNG\r\n\x1a\n\x00\x00"),
            Err(CsvError::NotText)
        );
        let c = columns(b"\xEF\xBB\xBFName, EMAIL ,Subscribed,plan\n").unwrap();
        assert_eq!(c.email, 1);
        assert_eq!(c.subscribed, Some(2));
        assert_eq!(
            c.data,
            vec![(0, "Name".to_string()), (3, "plan".to_string())]
        );
    }

    #[test]
    fn cells_are_typed() {
        assert_eq!(typed("42"), json!(42));
        assert_eq!(typed("-3"), json!(-3));
        assert_eq!(typed("1.5"), json!(1.5));
        assert_eq!(typed("007"), json!("007"));
        assert_eq!(typed("+1"), json!("+1"));
        assert_eq!(typed("TRUE"), json!(true));
        assert_eq!(typed("2024-05-01"), json!("2024-05-01"));
        assert_eq!(typed("1e5"), json!("1e5"));
        assert_eq!(parse_subscribed("Yes"), Ok(Some(true)));
        assert_eq!(parse_subscribed("0"), Ok(Some(false)));
        assert!(parse_subscribed("maybe").is_err());
    }
}
