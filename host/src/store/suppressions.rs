//! A project's suppression list (`suppressions`) and the soft bounces counted towards it
//! (`soft_bounces`). The list is read where emails are committed: every insert of emails looks
//! its recipients up in it in the same transaction ([`LISTED_SQL`], run by
//! `statements::listed_emails`), so no path of sending can pass it by. Entries are added by the
//! API, by hard bounces and complaints and by the soft-bounce rule
//! (`services::delivery_events`, written by `store::delivery_events`).

use super::dialect::{like_escape, placeholders, value_rows};
use super::{Store, StoreResult, on_db};
use crate::domain::ids::ProjectId;
use crate::domain::pagination::{Page, PageRequest};
use crate::domain::suppression::SuppressionReason;

/// One entry of a project's list.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct Suppression {
    /// The address, lower-case.
    pub email: String,
    /// `HARD_BOUNCE`, `COMPLAINT` or `MANUAL`.
    pub reason: String,
    /// What the bounce or complaint said, or the caller's note.
    pub detail: Option<String>,
    /// The email whose bounce or complaint added it.
    pub email_id: Option<String>,
    /// When it was added.
    pub created_at: i64,
    /// Its position in the list, for the cursor of the page it ends.
    #[sqlx(skip)]
    pub key: String,
}

/// An entry to add.
#[derive(Clone, Debug)]
pub struct NewSuppression<'a> {
    /// The address, lower-case.
    pub email: &'a str,
    pub reason: SuppressionReason,
    pub detail: Option<&'a str>,
    pub email_id: Option<&'a str>,
}

/// The position of an entry in the list (newest first): `<created_at>:<email>`, the cursor's
/// content.
pub fn list_key(created_at: i64, email: &str) -> String {
    format!("{created_at}:{email}")
}

/// A position written by [`list_key`], or `None`.
pub fn parse_list_key(key: &str) -> Option<(i64, &str)> {
    let (at, email) = key.split_once(':')?;
    let at: i64 = at.parse().ok()?;
    (!email.is_empty()).then_some((at, email))
}

/// The most addresses one lookup ([`listed_sql`]) names.
pub(crate) const MAX_LISTED_PER_SELECT: usize = 500;

/// The entries of the projects `$1…$projects` for the addresses that follow them (`addresses`
/// placeholders): project, address, reason. One seek of the primary key a pair.
pub(crate) fn listed_sql(projects: usize, addresses: usize) -> String {
    format!(
        "SELECT project_id, email, reason FROM suppressions WHERE project_id IN ({}) AND email IN ({})",
        placeholders(1, projects),
        placeholders(1 + projects, addresses)
    )
}

/// Inserts entries (project, email, reason, detail, email id, created), leaving those listed
/// already as they are.
pub(super) fn insert_sql(n: usize) -> String {
    format!(
        "INSERT INTO suppressions (project_id, email, reason, detail, email_id, created_at) \
         VALUES {} ON CONFLICT (project_id, email) DO NOTHING",
        value_rows(1, n, 6)
    )
}

impl Store {
    /// A page of `project`'s list, newest first (then by address, descending), of the
    /// addresses containing `search` (case-insensitive) when given. The search walks the
    /// project's entries in the `suppressions_by_time` index, which holds the address, until
    /// the page is full: linear in the project's list, which bounces and complaints grow by one
    /// entry each.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn list_suppressions(
        &self,
        project: &ProjectId,
        page: &PageRequest,
        search: Option<&str>,
    ) -> StoreResult<Page<Suppression>> {
        let after = page.after.as_deref().and_then(parse_list_key);
        // Addresses are stored lower-case.
        let pattern = search.map(|s| format!("%{}%", like_escape(&s.to_lowercase())));
        let mut filter = String::from("project_id = $1");
        if pattern.is_some() {
            filter.push_str(" AND email LIKE $2 ESCAPE '\\'");
        }
        let next = if pattern.is_some() { 3 } else { 2 };
        let mut sql = format!(
            "SELECT email, reason, detail, email_id, created_at FROM suppressions WHERE {filter}"
        );
        if after.is_some() {
            sql.push_str(&format!(
                " AND (created_at < ${next} OR (created_at = ${next} AND email < ${}))",
                next + 1
            ));
        }
        sql.push_str(&format!(
            " ORDER BY created_at DESC, email DESC LIMIT {}",
            page.limit + 1
        ));
        let count_sql = format!("SELECT COUNT(*) FROM suppressions WHERE {filter}");
        let (rows, total): (Vec<Suppression>, i64) = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            let mut c = sqlx::query_scalar(&count_sql).bind(project.as_str());
            if let Some(pattern) = &pattern {
                q = q.bind(pattern);
                c = c.bind(pattern);
            }
            if let Some((at, email)) = after {
                q = q.bind(at).bind(email);
            }
            let rows = q.fetch_all(pool).await?;
            let total = if page.is_first() {
                c.fetch_one(pool).await?
            } else {
                0
            };
            (rows, total)
        });
        let items = rows
            .into_iter()
            .map(|mut s| {
                s.key = list_key(s.created_at, &s.email);
                s
            })
            .collect();
        Ok(Page::from_rows(items, page, total, |s| s.key.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_keys_round_trip() {
        let key = list_key(1_700_000_000_000, "a:b@example.com");
        assert_eq!(
            parse_list_key(&key),
            Some((1_700_000_000_000, "a:b@example.com"))
        );
        assert_eq!(parse_list_key("x:a@example.com"), None);
        assert_eq!(parse_list_key("12:"), None);
        assert_eq!(parse_list_key("12"), None);
    }
}
