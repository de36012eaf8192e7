//! `POST /uploads/image` and the public `/uploads/files/<name>` files it creates.

use poem::http::StatusCode;
use poem_openapi::payload::Json;
use poem_openapi::types::multipart::Upload;
use poem_openapi::{ApiResponse, Multipart, Object, OpenApi};

use super::ApiTags;
use super::error::{ApiError, ErrorCode, FieldError};
use super::extract::SecretKeyAuth;
use super::state::AppState;
use crate::services::uploads::UploadError;

/// An image upload.
#[derive(Multipart)]
pub struct ImageForm {
    /// The image: PNG, JPEG, GIF or WebP, at most `uploads.max_bytes` (5 MB) and
    /// `uploads.max_pixels` (40 million pixels).
    pub file: Upload,
}

/// A stored image.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct UploadedImage {
    /// The public URL to use in template bodies; the same bytes always get the same URL.
    pub url: String,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`, from the bytes (not the name).
    pub content_type: String,
    /// Bytes.
    pub size: u64,
    /// Pixels.
    pub width: u32,
    /// Pixels.
    pub height: u32,
}

#[derive(ApiResponse)]
enum UploadResponse {
    /// Stored.
    #[oai(status = 201)]
    Created(Json<UploadedImage>),
}

fn refused(err: UploadError) -> ApiError {
    match err {
        e @ UploadError::TooLarge { .. } => {
            super::error::payload_too_large().suggest(e.to_string())
        }
        e @ UploadError::NotAnImage => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::InvalidRequestBody,
            e.to_string(),
        )
        .with_errors(vec![FieldError::new(
            "file",
            "not_an_image",
            "upload a PNG, JPEG, GIF or WebP image",
        )]),
        e @ UploadError::TooManyPixels { .. } => {
            ApiError::invalid_field("file", "too_many_pixels", e.to_string())
        }
        e @ UploadError::Corrupt(_) => {
            ApiError::invalid_field("file", "invalid_image", e.to_string())
        }
        e @ (UploadError::Io(_) | UploadError::Storage(_)) => ApiError::storage_unavailable(e),
    }
}

/// The upload endpoints.
#[derive(Default)]
pub struct UploadsApi;

#[OpenApi(tag = "ApiTags::Uploads")]
impl UploadsApi {
    /// Upload an image
    ///
    /// Multipart field `file`. The bytes must decode as a PNG, JPEG, GIF or WebP image (the file
    /// name and declared type do not count): 415 otherwise, 413 over `uploads.max_bytes`, 422
    /// over `uploads.max_pixels` or when it does not decode. Stored under its SHA-256 and served
    /// publicly at the answered URL with its content type and a year-long immutable cache. 503
    /// with `Retry-After` when the upload storage cannot be reached or refuses the file.
    #[oai(path = "/uploads/image", method = "post", operation_id = "uploadImage")]
    async fn upload_image(
        &self,
        _auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        form: ImageForm,
    ) -> Result<UploadResponse, ApiError> {
        let uploads = state.uploads();
        if form.file.size() > uploads.max_bytes() {
            return Err(refused(UploadError::TooLarge {
                size: form.file.size(),
                max: uploads.max_bytes(),
            }));
        }
        let bytes = form
            .file
            .into_vec()
            .await
            .map_err(|e| ApiError::bad_request(format!("the upload could not be read: {e}")))?;
        let stored = uploads.store_image(bytes).await.map_err(refused)?;
        Ok(UploadResponse::Created(Json(UploadedImage {
            url: format!("{}/uploads/files/{}", state.links().base(), stored.name),
            content_type: stored.content_type.to_string(),
            size: stored.size as u64,
            width: stored.width,
            height: stored.height,
        })))
    }
}

/// `GET /uploads/files/<name>`: a stored image with its content type, cached for a year (the name is
/// the content's hash, so it never changes); 404 for any other name.
#[poem::handler]
pub async fn serve(
    poem::web::Path(name): poem::web::Path<String>,
    state: poem::web::Data<&AppState>,
) -> poem::Result<poem::Response> {
    let found = state
        .uploads()
        .read(&name)
        .await
        .map_err(ApiError::storage_unavailable)?;
    match found {
        Some((bytes, content_type)) => Ok(poem::Response::builder()
            .content_type(content_type)
            .header("Cache-Control", "public, max-age=31536000, immutable")
            .header("X-Content-Type-Options", "nosniff")
            .body(bytes)),
        None => Err(ApiError::not_found("upload").into()),
    }
}

/// `GET /uploads/attachments/<name>`: an attachment of a received message (the URL of its
/// `email.received` event), always as a download (`application/octet-stream`, never rendered
/// by the browser, whatever the sender called it); 404 for any other name.
#[poem::handler]
pub async fn serve_attachment(
    poem::web::Path(name): poem::web::Path<String>,
    state: poem::web::Data<&AppState>,
) -> poem::Result<poem::Response> {
    let found = state
        .uploads()
        .read_attachment(&name)
        .await
        .map_err(ApiError::storage_unavailable)?;
    match found {
        Some(bytes) => Ok(poem::Response::builder()
            .content_type("application/octet-stream")
            .header("Content-Disposition", "attachment")
            .header("Cache-Control", "private, max-age=31536000, immutable")
            .header("X-Content-Type-Options", "nosniff")
            .header("Content-Security-Policy", "sandbox")
            .body(bytes)),
        None => Err(ApiError::not_found("attachment").into()),
    }
}
