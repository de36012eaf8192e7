//! The `outbox` capability: each message as an `.eml` file under the data directory, listed in
//! `index.jsonl`.

use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;

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
    index: tokio::sync::Mutex<()>,
}

impl Outbox {
    /// The outbox under `data_dir`.
    pub(super) fn new(data_dir: &Path) -> Outbox {
        Outbox {
            dir: data_dir.join("outbox"),
            index: tokio::sync::Mutex::new(()),
        }
    }

    /// The folder the outbox writes to.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the message (atomically) and appends its line to the index; returns the file.
    async fn store(
        &self,
        id: &str,
        sender: String,
        recipients: Vec<String>,
        message: &[u8],
    ) -> Result<PathBuf, OutboxError> {
        if !safe_file_id(id) {
            return Err(OutboxError::UnsafeId(id.to_string()));
        }
        let dir = &self.dir;
        let path = dir.join(format!("{id}.eml"));
        let write = async {
            tokio::fs::create_dir_all(dir).await?;
            let tmp = dir.join(format!(".{id}.eml.tmp"));
            tokio::fs::write(&tmp, message).await?;
            tokio::fs::rename(&tmp, &path).await?;
            let record = serde_json::json!({
                "id": id,
                "sender": sender,
                "recipients": recipients,
                "file": format!("{id}.eml"),
                "bytes": message.len(),
                "at": chrono::Utc::now().timestamp_millis(),
            });
            let _guard = self.index.lock().await;
            let mut index = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("index.jsonl"))
                .await?;
            index.write_all(format!("{record}\n").as_bytes()).await?;
            index.flush().await?;
            Ok::<_, std::io::Error>(())
        };
        match write.await {
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
            outbox.store(&id, sender, recipients, &message),
        )
        .await;
        Ok(stored
            .map(|path| path.display().to_string())
            .map_err(|e| e.to_string()))
    }
}
