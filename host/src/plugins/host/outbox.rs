//! The `outbox` capability: each message as an `.eml` file under the data directory, listed in
//! `index.jsonl`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::{CallState, timed};
use crate::plugins::bindings::imports::herald::plugin::outbox;

/// Why a message was not stored.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// The message id cannot name a file.
    #[error("`{0}` is not usable as a file name")]
    UnsafeId(String),
    /// Writing the file or the index failed.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The message's file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The outbox folder, and the lock that keeps its index's lines whole.
pub(super) struct Outbox {
    dir: PathBuf,
    index: Arc<Mutex<()>>,
}

impl Outbox {
    /// The outbox under `data_dir`.
    pub(super) fn new(data_dir: &Path) -> Outbox {
        Outbox {
            dir: data_dir.join("outbox"),
            index: Arc::new(Mutex::new(())),
        }
    }

    /// The folder the outbox writes to.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the message (atomically) and appends its line to the index; returns the file.
    ///
    /// The whole write is one task on the blocking pool, not one for each file operation: each
    /// `tokio::fs` call is a hand-off to a blocking thread and back, and the up to six of them a
    /// message (folder, file, rename, index open, append, flush) cost the workflow benchmark 10 %
    /// of the server's thread switches and 8 % of its CPU (`docs/benchmarks.md`).
    async fn store(
        &self,
        id: &str,
        sender: String,
        recipients: Vec<String>,
        message: Vec<u8>,
    ) -> Result<PathBuf, OutboxError> {
        if !safe_file_id(id) {
            return Err(OutboxError::UnsafeId(id.to_string()));
        }
        let dir = self.dir.clone();
        let path = dir.join(format!("{id}.eml"));
        let tmp = dir.join(format!(".{id}.eml.tmp"));
        let record = serde_json::json!({
            "id": id,
            "sender": sender,
            "recipients": recipients,
            "file": format!("{id}.eml"),
            "bytes": message.len(),
            "at": chrono::Utc::now().timestamp_millis(),
        });
        let line = format!("{record}\n");
        let index = Arc::clone(&self.index);
        let file = path.clone();
        let write = move || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            std::fs::write(&tmp, &message)?;
            std::fs::rename(&tmp, &file)?;
            // A poisoned lock only means another write panicked; the index is still whole lines.
            let _guard = index.lock().unwrap_or_else(PoisonError::into_inner);
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("index.jsonl"))?
                .write_all(line.as_bytes())
        };
        let written = tokio::task::spawn_blocking(write)
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        match written {
            Ok(()) => Ok(path),
            Err(source) => Err(OutboxError::Write { path, source }),
        }
    }
}

fn safe_file_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

impl outbox::Host for CallState {
    async fn store(
        &mut self,
        id: String,
        sender: String,
        recipients: Vec<String>,
        message: Vec<u8>,
    ) -> wasmtime::Result<Result<String, String>> {
        if !self.granted.grants.outbox {
            return Err(self.deny("outbox"));
        }
        let outbox = &self.services.outbox;
        let stored = timed(
            &mut self.io_time,
            outbox.store(&id, sender, recipients, message),
        )
        .await;
        Ok(stored
            .map(|path| path.display().to_string())
            .map_err(|e| e.to_string()))
    }
}
