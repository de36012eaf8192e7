//! `/contacts/fields/:field/…`: values, usage and deletion of a field.

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;

use super::ApiTags;
use super::error::ApiError;
use super::extract::SecretKeyAuth;
use super::state::AppState;

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
    /// Segments whose filters use it (segments arrive in a later release; none exist yet).
    pub segments: Vec<String>,
    /// Campaigns whose audience filter uses it (campaigns arrive in a later release).
    pub campaigns: Vec<String>,
    /// Workflows whose conditions or updates use it (workflows arrive in a later release).
    pub workflows: Vec<String>,
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

fn field_ref(field: &str) -> Result<FieldRef, ApiError> {
    if let Some(path) = field.strip_prefix("data.") {
        let keys: Vec<String> = path.split('.').map(str::to_string).collect();
        if keys.iter().any(|k| k.is_empty()) {
            return Err(ApiError::invalid_field(
                "field",
                "invalid",
                "a custom field is `data.<key>`, e.g. data.plan",
            ));
        }
        return Ok(FieldRef::Custom(keys));
    }
    match field {
        "email" => Ok(FieldRef::Standard("email")),
        "subscribed" => Ok(FieldRef::Standard("subscribed")),
        "createdAt" => Ok(FieldRef::Standard("createdAt")),
        "updatedAt" => Ok(FieldRef::Standard("updatedAt")),
        _ => Err(ApiError::not_found("field")
            .suggest("standard fields are bare (email, subscribed); custom ones are data.<key>")),
    }
}

/// The field endpoints.
#[derive(Default)]
pub struct ContactFieldsApi;

#[OpenApi(tag = "ApiTags::Contacts")]
impl ContactFieldsApi {
    /// Values of a field
    ///
    /// Distinct values of `subscribed` or of a custom field (`data.<key>`, dotted paths reach
    /// nested data), most common first.
    #[oai(
        path = "/contacts/fields/:field/values",
        method = "get",
        operation_id = "contactFieldValues"
    )]
    async fn values(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The field, e.g. `data.plan`.
        field: Path<String>,
        /// Most values to return, 1 to 100 (default 20).
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
    ) -> Result<Json<FieldValues>, ApiError> {
        let project = auth.0.project_id();
        let values = match field_ref(&field)? {
            FieldRef::Standard("subscribed") => state.store().subscribed_values(project).await?,
            FieldRef::Standard(_) => {
                return Err(ApiError::invalid_field(
                    "field",
                    "unsupported",
                    "values are listed for subscribed and data.<key> fields",
                ));
            }
            FieldRef::Custom(keys) => {
                state
                    .store()
                    .data_values(project, &keys, i64::from(limit.0.unwrap_or(20)))
                    .await?
            }
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
    /// Segments, campaigns and workflows that reference the field. Those resources arrive in
    /// later releases; until then the lists are empty.
    #[oai(
        path = "/contacts/fields/:field/usage",
        method = "get",
        operation_id = "contactFieldUsage"
    )]
    async fn usage(
        &self,
        _auth: SecretKeyAuth,
        field: Path<String>,
    ) -> Result<Json<FieldUsage>, ApiError> {
        field_ref(&field)?;
        Ok(Json(FieldUsage {
            field: field.0,
            segments: vec![],
            campaigns: vec![],
            workflows: vec![],
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
