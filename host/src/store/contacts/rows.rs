//! The rows of `contacts` and `contact_fields`: their columns, the SQL text of contact and
//! field-type writes, and the planned contact writes [`ContactWrites`] that
//! [`crate::store::statements::Statements::write_contacts`] makes.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};
use sqlx::FromRow;
use sqlx::types::Json;

use super::plan::Plan;
use crate::domain::contact::Contact;
use crate::domain::custom_data::FieldType;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ContactId, ProjectId};

/// The columns of `contacts`, in the order of [`ContactRow`].
pub(in crate::store) const COLUMNS: &str =
    "id, project_id, email, subscribed, data, version, created_at, updated_at, topics";
/// How often a write by address reads again after another writer created the address.
pub(in crate::store) const MAX_ATTEMPTS: usize = 16;
/// The most contacts one statement of [`ContactWrites`] writes (9 values a row).
pub(in crate::store) const MAX_CONTACTS_PER_WRITE: usize = 500;
/// The most addresses one read of contacts by address names.
pub(super) const READ_CHUNK: usize = 500;

/// The reads of contacts by address in flight, per project, shared by concurrent sends.
pub(crate) type ContactReads =
    crate::store::rounds::Rounds<String, Vec<Contact>, Vec<EmailAddress>>;

/// Inserts `n` contacts, each unless its address is taken; answers the ids of those inserted.
/// Binds, a row: id, project, email, subscribed, data, version, created, updated, topics.
pub(in crate::store) fn insert_contacts_sql(n: usize) -> String {
    insert_contacts_from(1, n)
}

/// [`insert_contacts_sql`] with its placeholders numbered from `first`.
pub(in crate::store) fn insert_contacts_from(first: usize, n: usize) -> String {
    format!(
        "INSERT INTO contacts (id, project_id, email, subscribed, data, version, created_at, updated_at, topics) \
         VALUES {} ON CONFLICT (project_id, email) DO NOTHING RETURNING id",
        crate::store::dialect::value_rows(first, n, NEW_CONTACT_VALUES)
    )
}

/// The values [`insert_contacts_sql`] binds a row.
pub(in crate::store) const NEW_CONTACT_VALUES: usize = 9;

/// Writes the new state of `n` contacts. Binds, a row: id, project, email, subscribed, data,
/// version, updated, topics.
pub(in crate::store) fn update_contacts_sql(n: usize) -> String {
    format!(
        "WITH v (id, project_id, email, subscribed, data, version, updated_at, topics) AS (VALUES {}) \
         UPDATE contacts SET email = v.email, subscribed = v.subscribed, data = v.data, \
         version = v.version, updated_at = v.updated_at, topics = v.topics \
         FROM v WHERE contacts.project_id = v.project_id AND contacts.id = v.id",
        crate::store::dialect::value_rows(1, n, 8)
    )
}

/// Planned contact writes, made by [`Statements::write_contacts`](crate::store::statements::Statements::write_contacts) in one statement per kind:
/// each contact's last planned state, inserted when a plan created it. A group of writes in one
/// transaction (`group_commit`, the recipients of a send) writes its contacts this way instead of
/// one statement a write; a contact written several times is written once.
#[derive(Default)]
pub(crate) struct ContactWrites {
    pub(in crate::store) inserts: Vec<Contact>,
    pub(in crate::store) updates: Vec<Contact>,
    /// Where each contact's planned state is: `(inserted, index)`.
    at: HashMap<String, (bool, usize)>,
}

impl ContactWrites {
    /// Adds a plan: its contact's state replaces what was planned for it before.
    pub(in crate::store) fn add(&mut self, plan: &Plan) {
        let (contact, insert) = match plan {
            Plan::Keep(_) => return,
            Plan::Insert(c) => (c, true),
            Plan::Update { after, .. } => (after, false),
        };
        match self.at.get(contact.id.as_str()) {
            Some(&(true, i)) => self.inserts[i] = contact.clone(),
            Some(&(false, i)) => self.updates[i] = contact.clone(),
            None if insert => {
                let at = (true, self.inserts.len());
                self.at.insert(contact.id.as_str().to_string(), at);
                self.inserts.push(contact.clone());
            }
            None => {
                let at = (false, self.updates.len());
                self.at.insert(contact.id.as_str().to_string(), at);
                self.updates.push(contact.clone());
            }
        }
    }

    /// Whether nothing is planned.
    pub(in crate::store) fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// Forgets every plan (once written).
    pub(in crate::store) fn clear(&mut self) {
        self.inserts.clear();
        self.updates.clear();
        self.at.clear();
    }
}

#[derive(FromRow)]
pub(crate) struct ContactRow {
    pub(crate) id: String,
    project_id: String,
    email: String,
    subscribed: bool,
    data: Json<Map<String, Value>>,
    version: i64,
    created_at: i64,
    updated_at: i64,
    topics: Json<BTreeMap<String, bool>>,
}

impl From<ContactRow> for Contact {
    fn from(r: ContactRow) -> Contact {
        Contact {
            id: ContactId::from_trusted(r.id),
            project_id: ProjectId::from_trusted(r.project_id),
            email: EmailAddress::from_trusted(r.email),
            subscribed: r.subscribed,
            data: r.data.0,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
            topics: r.topics.0,
        }
    }
}

/// The field types first seen in `set`, as rows for `contact_fields`.
pub(crate) fn field_types(set: &Map<String, Value>) -> Vec<(&str, &'static str)> {
    set.iter()
        .filter_map(|(k, v)| FieldType::infer(v).map(|t| (k.as_str(), t.as_str())))
        .collect()
}

/// `INSERT … ON CONFLICT DO NOTHING` for the inferred types (the first type seen is kept); binds,
/// a row: project, key, type, now.
pub(in crate::store) fn field_types_sql(n: usize) -> String {
    let mut sql =
        String::from("INSERT INTO contact_fields (project_id, key, type, created_at) VALUES ");
    sql.push_str(&crate::store::dialect::value_rows(1, n, 4));
    sql.push_str(" ON CONFLICT (project_id, key) DO NOTHING");
    sql
}
