//! Reads of a project's contacts by address.

use std::collections::HashMap;

use super::rows::{COLUMNS, ContactRow, READ_CHUNK};
use crate::domain::contact::Contact;
use crate::domain::email::EmailAddress;
use crate::domain::ids::ProjectId;
use crate::store::on_db;
use crate::store::{Store, StoreResult};

impl Store {
    /// The whole contacts of a project among `emails` (normalised). Concurrent reads of one
    /// project (the recipients of sends being planned) share a statement ([`crate::store::rounds`]):
    /// each is answered by a read that started after it asked.
    #[tracing::instrument(level = "debug", skip(self, emails))]
    pub async fn contacts_with_emails(
        &self,
        project: &ProjectId,
        emails: &[EmailAddress],
    ) -> StoreResult<Vec<Contact>> {
        if emails.is_empty() {
            return Ok(Vec::new());
        }
        self.contact_reads
            .gather(
                project.as_str().to_string(),
                emails.to_vec(),
                |asked| self.read_contacts_with_emails(project, asked),
                |found, _, mine| mine.iter().filter_map(|e| found.get(e).cloned()).collect(),
            )
            .await
    }

    /// Reads the contacts of a project among the addresses of `asked` (each caller's list), in
    /// statements of at most [`READ_CHUNK`] addresses; answers them by address.
    async fn read_contacts_with_emails(
        &self,
        project: &ProjectId,
        asked: Vec<Vec<EmailAddress>>,
    ) -> StoreResult<HashMap<EmailAddress, Contact>> {
        let mut emails: Vec<EmailAddress> = asked.into_iter().flatten().collect();
        emails.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        emails.dedup();
        let mut contacts = HashMap::with_capacity(emails.len());
        for chunk in emails.chunks(READ_CHUNK) {
            let sql = format!(
                "SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND email IN ({})",
                crate::store::dialect::placeholders(2, chunk.len())
            );
            let rows: Vec<ContactRow> = on_db!(self.db(), pool => {
                let mut q = sqlx::query_as(&sql).bind(project.as_str());
                for e in chunk {
                    q = q.bind(e.as_str());
                }
                q.fetch_all(pool).await?
            });
            contacts.extend(
                rows.into_iter()
                    .map(Contact::from)
                    .map(|c| (c.email.clone(), c)),
            );
        }
        Ok(contacts)
    }

    /// The contacts of a project among `emails` (normalised), as `(id, email)`.
    #[tracing::instrument(level = "debug", skip(self, emails))]
    pub async fn contacts_by_emails(
        &self,
        project: &ProjectId,
        emails: &[EmailAddress],
    ) -> StoreResult<Vec<(String, String)>> {
        if emails.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT id, email FROM contacts WHERE project_id = $1 AND email IN ({})",
            crate::store::dialect::placeholders(2, emails.len())
        );
        let rows: Vec<(String, String)> = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            for e in emails {
                q = q.bind(e.as_str());
            }
            q.fetch_all(pool).await?
        });
        Ok(rows)
    }
}
