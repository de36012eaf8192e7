//! The writes a committed step run makes beside its own: sends and contact updates.

use serde_json::Value;

use super::commit::{EFFECT_ENDPOINT, EffectWrite};
use crate::domain::contact::{Contact, ContactChange};
use crate::domain::event::{StoredEvent, SubscriptionSource};
use crate::domain::ids::{ContactId, ProjectId};
use crate::store::statements::Statements;
use crate::store::{Store, StoreError, StoreResult};

impl Store {
    /// Writes the sends among a round's `effects` inside its commit, all in one statement per
    /// table ([`crate::store::emails::write_sends_in`]); the field types they record are added to
    /// `learned`.
    pub(super) async fn write_sends<DB>(
        &self,
        tx: &mut sqlx::Transaction<'_, DB>,
        effects: &[(&str, &EffectWrite)],
        now: i64,
        learned: &mut Vec<(String, Vec<(String, &'static str)>)>,
    ) -> StoreResult<()>
    where
        DB: sqlx::Database,
        for<'t> sqlx::Transaction<'t, DB>: Statements,
        for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
        for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
        for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        let mut owned = Vec::new();
        for (project, effect) in effects {
            if let EffectWrite::SendEmail {
                send,
                key,
                response,
            } = effect
            {
                let types = self.known_fields.unknown(project, &send.types());
                let idempotency = crate::store::idempotency::IdempotentWrite {
                    key: key.as_str(),
                    endpoint: EFFECT_ENDPOINT,
                    request_hash: key.as_str(),
                    status: 200,
                    response,
                };
                owned.push((
                    ProjectId::from_trusted(project.to_string()),
                    send,
                    types,
                    idempotency,
                ));
            }
        }
        if owned.is_empty() {
            return Ok(());
        }
        let sends: Vec<crate::store::emails::SendWrite<'_>> = owned
            .iter()
            .map(
                |(project, send, types, idempotency)| crate::store::emails::SendWrite {
                    project,
                    send,
                    types,
                    idempotency: Some(idempotency),
                },
            )
            .collect();
        if !crate::store::emails::write_sends_in(tx, &sends, now).await? {
            // A new recipient's address was taken by a concurrent write since the check: the
            // whole round is retried (it finds the contact then).
            return Err(StoreError::Conflict(crate::store::Conflict::Busy));
        }
        for (project, _, types, _) in &owned {
            if !types.is_empty() {
                let types = types.iter().map(|(k, t)| (k.to_string(), *t)).collect();
                learned.push((project.to_string(), types));
            }
        }
        Ok(())
    }

    /// Makes the `UPDATE_CONTACT` writes among a round's `effects` inside its commit, in their
    /// order, with one statement of each kind for those of a project
    /// ([`crate::store::contacts::change_contacts_in`]; a send is written by [`Store::write_sends`]:
    /// nothing here); the field types they record are added to `learned`. Nothing is written
    /// for a contact deleted meanwhile.
    pub(super) async fn write_updates<DB>(
        &self,
        tx: &mut sqlx::Transaction<'_, DB>,
        effects: &[(&str, &EffectWrite)],
        lock: &str,
        learned: &mut Vec<(String, Vec<(String, &'static str)>)>,
    ) -> StoreResult<()>
    where
        DB: sqlx::Database,
        for<'t> sqlx::Transaction<'t, DB>: Statements,
        for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
        for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
        for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'r> crate::store::contacts::ContactRow: sqlx::FromRow<'r, DB::Row>,
    {
        let mut projects: Vec<&str> = Vec::new();
        for (project, effect) in effects {
            if matches!(effect, EffectWrite::UpdateContact { .. }) && !projects.contains(project) {
                projects.push(project);
            }
        }
        for project in projects {
            let updates: Vec<(&ContactId, &ContactChange, &String, &Value)> = effects
                .iter()
                .filter(|(p, _)| *p == project)
                .filter_map(|(_, effect)| match effect {
                    EffectWrite::UpdateContact {
                        contact,
                        change,
                        key,
                        response,
                    } => Some((contact, &**change, key, response)),
                    EffectWrite::SendEmail { .. } => None,
                })
                .collect();
            // Each replays the response recorded with its effect.
            let responders: Vec<_> = updates
                .iter()
                .map(|(_, _, _, response)| {
                    let recorded = (*response).clone();
                    move |_: &Contact, _: Option<&StoredEvent>| recorded.clone()
                })
                .collect();
            let changes: Vec<crate::store::contacts::GroupChange<'_>> = updates
                .iter()
                .zip(&responders)
                .map(
                    |((contact, change, key, _), respond)| crate::store::contacts::GroupChange {
                        id: contact,
                        change,
                        effects: crate::store::contacts::Effects {
                            source: SubscriptionSource::Workflow,
                            reason: None,
                            event: None,
                            idempotency: Some(crate::store::idempotency::IdempotentWrite {
                                key,
                                endpoint: EFFECT_ENDPOINT,
                                request_hash: key,
                                status: 200,
                                response: respond as &crate::store::contacts::Respond,
                            }),
                        },
                        types: self.known_fields.unknown(
                            project,
                            &crate::store::contacts::field_types(&change.data.set),
                        ),
                    },
                )
                .collect();
            let project_id = ProjectId::from_trusted(project.to_string());
            let types =
                crate::store::contacts::change_contacts_in(tx, &project_id, &changes, lock).await?;
            if !types.is_empty() {
                learned.push((project.to_string(), types));
            }
        }
        Ok(())
    }
}
