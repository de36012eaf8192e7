//! The rows of one page of a cursor-paged list, newest first: those whose `id` precedes the
//! cursor's, in descending `id` order, one more than the page asks (to tell that more follow,
//! as [`Page::from_rows`] takes them), and the count of all of them on the first page only.

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

use super::{Store, StoreResult, on_db};
#[cfg(doc)]
use crate::domain::pagination::Page;
use crate::domain::pagination::PageRequest;

impl Store {
    /// `SELECT {columns} {from_where}` paged by `page`: `from_where` is `FROM … WHERE …` of one
    /// table whose key is `id`, with `$1..$n` bound to `binds` in order; the cursor's id is
    /// bound after them. Answers the rows and the count (0 after the first page).
    pub(super) async fn newest_first_rows<T>(
        &self,
        columns: &str,
        from_where: &str,
        binds: &[&str],
        page: &PageRequest,
    ) -> StoreResult<(Vec<T>, i64)>
    where
        T: for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow>,
        T: Send + Unpin,
    {
        let mut sql = format!("SELECT {columns} {from_where}");
        if page.after.is_some() {
            sql.push_str(&format!(" AND id < ${}", binds.len() + 1));
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", page.limit + 1));
        let count_sql = format!("SELECT COUNT(*) {from_where}");
        let rows = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql);
            for b in binds {
                q = q.bind(*b);
            }
            if let Some(after) = &page.after {
                q = q.bind(after);
            }
            let rows = q.fetch_all(pool).await?;
            let total = if page.is_first() {
                let mut c = sqlx::query_scalar(&count_sql);
                for b in binds {
                    c = c.bind(*b);
                }
                c.fetch_one(pool).await?
            } else {
                0
            };
            (rows, total)
        });
        Ok(rows)
    }
}
