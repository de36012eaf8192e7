//! The "view in browser" page's reads: an email's rendered draft, which a delivery keeps (instead
//! of dropping it as for any other email) when the draft is marked viewable (its content used
//! `{{viewInBrowserUrl}}`: [`KEPT_DRAFT`]), until the periodic maintenance drops it after the
//! retention (`sending.view_in_browser_days`).

use crate::store::{Store, StoreResult, on_db, on_db_write};

/// How a viewable draft is marked in its JSON (`MessageDraft::view`, written only when true):
/// a key of the draft's own object, which no string inside it can spell, since their quotes
/// are escaped.
pub(crate) const KEPT_DRAFT: &str = "%\"view\":true%";

/// The draft column's value after a delivery: kept when viewable, else dropped.
pub(crate) fn draft_after_delivery() -> String {
    format!("CASE WHEN draft LIKE '{KEPT_DRAFT}' THEN draft ELSE NULL END")
}

impl Store {
    /// The rendered draft of the email `id` (any project's: the signed link is the credential),
    /// while it is kept; `None` for an unknown email, a suppressed one (never sent), or one
    /// whose draft is gone.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn email_draft(&self, id: &str) -> StoreResult<Option<String>> {
        let draft: Option<Option<String>> = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT draft FROM emails WHERE id = $1 AND status <> 'suppressed'")
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(draft.flatten())
    }

    /// Drops the drafts kept for the "view in browser" page of emails created before `before`
    /// (unix ms), at most 1,000 a call (maintenance calls it every minute); answers how many.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn prune_kept_drafts(&self, before: i64) -> StoreResult<u64> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "UPDATE emails SET draft = NULL WHERE id IN (SELECT id FROM emails \
                 WHERE draft IS NOT NULL AND status <> 'queued' AND created_at < $1 LIMIT 1000)",
            )
            .bind(before)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }
}
