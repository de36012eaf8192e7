//! `POST /segments/preview`: who a filter selects now, before it is saved as a segment (the
//! dashboard's filter builder counts as it is edited).

use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde::Deserialize;
use serde_json::Value;

use super::ApiTags;
use super::contacts::ContactBody;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::segments::field_errors;
use super::state::AppState;
use crate::domain::segment::check_condition;

/// The most contacts a preview lists.
pub const MAX_PREVIEW_CONTACTS: u32 = 100;

/// `POST /segments/preview` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct PreviewSegment {
    /// The filter, as a dynamic segment's `condition`.
    pub condition: Value,
    /// How many of the matching contacts to list, 0 to 100 (default 10): 0 counts only.
    #[oai(nullable)]
    pub limit: Option<u32>,
}

/// Who a filter selects now.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct SegmentPreview {
    /// Contacts of the project the filter selects now.
    pub total: i64,
    /// The newest of them, at most `limit`.
    pub data: Vec<ContactBody>,
}

/// The segment preview endpoint.
#[derive(Default)]
pub struct SegmentPreviewApi;

#[OpenApi(tag = "ApiTags::Segments")]
impl SegmentPreviewApi {
    /// Preview a filter
    ///
    /// Counts the contacts a `condition` selects now and lists the newest of them, as a dynamic
    /// segment with that condition would: nothing is stored. A malformed filter is 422 with
    /// the path of each mistake (`condition.groups[0].filters[1].operator`), as
    /// `POST /segments` answers. The count reads the filter's matches each time: on a large
    /// project it takes as long as `POST /segments/:id/refresh` does.
    #[oai(
        path = "/segments/preview",
        method = "post",
        operation_id = "previewSegment"
    )]
    async fn preview(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<PreviewSegment>,
    ) -> Result<Json<SegmentPreview>, ApiError> {
        let req = body.0;
        let limit = req.limit.unwrap_or(10);
        let mut errors = Vec::new();
        if limit > MAX_PREVIEW_CONTACTS {
            errors.push(FieldError::new(
                "limit",
                "out_of_range",
                format!("{limit} contacts asked; ask for 0 to {MAX_PREVIEW_CONTACTS}"),
            ));
        }
        let filter = match check_condition(&req.condition) {
            Ok(filter) => Some(filter),
            Err(violations) => {
                errors.extend(field_errors(violations));
                None
            }
        };
        let Some(filter) = filter.filter(|_| errors.is_empty()) else {
            return Err(ApiError::validation(errors));
        };
        let project = auth.0.project_id();
        let (contacts, total) = state
            .store()
            .filter_preview(project, &filter, limit)
            .await?;
        Ok(Json(SegmentPreview {
            total,
            data: super::contacts::bodies(&state, project, contacts).await?,
        }))
    }
}
