//! The SQL text of a change of a segment's stored members
//! ([`Statements::write_members`](crate::store::statements::Statements::write_members)).

use crate::store::dialect::placeholders;

/// The most contacts one membership statement names ([`add_members_sql`],
/// [`remove_members_sql`]; `Statements::write_members`).
pub(in crate::store) const MEMBERS_PER_STATEMENT: usize = 500;

/// Adds `n` contacts to a segment of a project at a time, leaving members as they are; binds,
/// a row: segment, contact, project, time (each placeholder once and in order:
/// `dialect::bound_in_order`). Returns the contact of each row added.
pub(in crate::store) fn add_members_sql(n: usize) -> String {
    let rows = crate::store::dialect::value_rows(1, n, 4);
    format!(
        "INSERT INTO segment_members (segment_id, contact_id, project_id, added_at) VALUES {rows} \
         ON CONFLICT (segment_id, contact_id) DO NOTHING RETURNING contact_id"
    )
}

/// Removes `n` contacts (`$3`…) from a segment (`$2`) of a project (`$1`); returns the contact
/// of each row removed.
pub(in crate::store) fn remove_members_sql(n: usize) -> String {
    format!(
        "DELETE FROM segment_members WHERE project_id = $1 AND segment_id = $2 \
         AND contact_id IN ({}) RETURNING contact_id",
        placeholders(3, n)
    )
}
