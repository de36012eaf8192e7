//! `/contacts/fields/:field/…`: values, usage and deletion of a field.

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;

use super::ApiTags;
use super::error::ApiError;
use super::extract::SecretKeyAuth;
use super::state::AppState;
use super::usage::UsageBody;
use crate::store::contacts::ContactColumn;
use crate::store::usage::UsageOf;

/// A value of a field and how many contacts have it.
#[derive(Object)]
pub struct FieldValue {
    /// The value.
    pub value: Value,
    /// Contacts with it.
    pub count: i64,
}

/// Distinct values of a field.
#[derive(Object)]
pub struct FieldValues {
    /// The field.
    pub field: String,
    /// Values, most common first.
    pub values: Vec<FieldValue>,
}

/// Where a field is referenced.
#[derive(Object)]
pub struct FieldUsage {
    /// The field.
    pub field: String,
    /// The segments, campaigns and workflows that use it.
    #[oai(flatten)]
    pub usage: UsageBody,
}

/// The result of deleting a field.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct FieldDeleted {
    /// The field.
    pub field: String,
    /// Contacts that had it.
    pub contacts_updated: u64,
}

/// A field named in a path: `subscribed`, another standard field, or `data.<path>`.
enum FieldRef {
    Standard(&'static str),
    Custom(Vec<String>),
}

impl FieldRef {
    /// The field as filters name it.
    fn filter_field(self) -> herald_filter::Field {
        use herald_filter::Field;
        match self {
            FieldRef::Custom(keys) => Field::Data(keys),
            FieldRef::Standard("email") => Field::Email,
            FieldRef::Standard("subscribed") => Field::Subscribed,
            FieldRef::Standard("createdAt") => Field::CreatedAt,
            FieldRef::Standard(_) => Field::UpdatedAt,
        }
    }
}

/// The field a path names: a standard one by name, or `data.<path>`, the keys of the path joined
/// by `.` with a `.` inside a key written `\.` and a `\` written `\\` (as `GET /contacts/fields`
/// lists them and filters name them).
fn field_ref(field: &str) -> Result<FieldRef, ApiError> {
    if let Some(path) = field.strip_prefix("data.") {
        let keys = herald_filter::split_path(path).map_err(|e| {
            ApiError::invalid_field(
                "field",
                "invalid",
                format!("{e} (a custom field is `data.<key>`, e.g. data.plan, as GET /contacts/fields lists it)"),
            )
        })?;
        return Ok(FieldRef::Custom(keys));
    }
    match field {
        "email" => Ok(FieldRef::Standard("email")),
        "subscribed" => Ok(FieldRef::Standard("subscribed")),
        "createdAt" => Ok(FieldRef::Standard("createdAt")),
        "updatedAt" => Ok(FieldRef::Standard("updatedAt")),
        _ => Err(ApiError::not_found("field")
            .suggest("standard fields are bare (email, subscribed, createdAt, updatedAt); custom ones are data.<key>, as GET /contacts/fields lists them")),
    }
}

/// The field endpoints.
#[derive(Default)]
pub struct ContactFieldsApi;

#[OpenApi(tag = "ApiTags::Contacts")]
impl ContactFieldsApi {
    /// Values of a field
    ///
    /// Distinct values of a standard field or of a custom field (`data.<key>`, dotted paths reach
    /// nested data; a `.` inside a key is written `\.` and a `\` is written `\\`, as
    /// `GET /contacts/fields` lists them), most common first: `email` in address order (each is one
    /// contact's), `createdAt` and `updatedAt` then newest first.
    #[oai(
        path = "/contacts/fields/:field/values",
        method = "get",
        operation_id = "contactFieldValues"
    )]
    async fn values(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The field, e.g. `data.plan`, `data.utm\.source` (the key `utm.source`) or `email`.
        field: Path<String>,
        /// Most values to return, 1 to 100 (default 20).
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
    ) -> Result<Json<FieldValues>, ApiError> {
        let project = auth.0.project_id();
        let limit = i64::from(limit.0.unwrap_or(20));
        let column = |column| state.store().column_values(project, column, limit);
        let values = match field_ref(&field)? {
            FieldRef::Standard("subscribed") => state.store().subscribed_values(project).await?,
            FieldRef::Standard("email") => column(ContactColumn::Email).await?,
            FieldRef::Standard("createdAt") => column(ContactColumn::CreatedAt).await?,
            FieldRef::Standard(_) => column(ContactColumn::UpdatedAt).await?,
            FieldRef::Custom(keys) => state.store().data_values(project, &keys, limit).await?,
        };
        Ok(Json(FieldValues {
            field: field.0,
            values: values
                .into_iter()
                .map(|v| FieldValue {
                    value: v.value,
                    count: v.count,
                })
                .collect(),
        }))
    }

    /// Where a field is used
    ///
    /// The segments, campaigns and workflows (with the step) that reference the field: a
    /// condition on it (`data.plan` also counts conditions on `data.plan.<more>`), or a workflow
    /// step that sets it.
    #[oai(
        path = "/contacts/fields/:field/usage",
        method = "get",
        operation_id = "contactFieldUsage"
    )]
    async fn usage(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The field, e.g. `data.plan` or `subscribed`.
        field: Path<String>,
    ) -> Result<Json<FieldUsage>, ApiError> {
        let target = field_ref(&field)?.filter_field();
        let usage = state
            .store()
            .usage(auth.0.project_id(), UsageOf::Field(&target))
            .await?;
        Ok(Json(FieldUsage {
            field: field.0,
            usage: usage.into(),
        }))
    }

    /// Delete a custom field
    ///
    /// Removes `data.<key>` from every contact of the project. Segments and workflows that
    /// reference it are not changed; their conditions on it stop matching.
    #[oai(
        path = "/contacts/fields/:field",
        method = "delete",
        operation_id = "deleteContactField"
    )]
    async fn delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        field: Path<String>,
    ) -> Result<Json<FieldDeleted>, ApiError> {
        let keys = match field_ref(&field)? {
            FieldRef::Custom(keys) => keys,
            FieldRef::Standard(name) => {
                return Err(ApiError::invalid_field(
                    "field",
                    "standard",
                    format!("`{name}` is a standard field and cannot be deleted"),
                ));
            }
        };
        let n = state
            .store()
            .delete_data_field(auth.0.project_id(), &keys)
            .await?;
        Ok(Json(FieldDeleted {
            field: field.0,
            contacts_updated: n,
        }))
    }
}
