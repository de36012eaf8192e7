//! Image uploads: the bytes must decode as a PNG, JPEG, GIF or WebP image within the size and
//! pixel caps (the dimensions are read from the header before anything is decoded, so a
//! decompression bomb costs nothing); the file is stored once under its SHA-256
//! (`<hash>.<ext>`) through `object_store`: in the uploads folder (written to a temporary name
//! and renamed, so a reader never sees half a file) or in an S3-compatible bucket. Decoding
//! runs on the CPU pool, never on the async workers.
//!
//! The attachments of received mail (`services::inbound_mail`) are kept in the same storage,
//! under `attachments/` and a random name each, whatever their content.

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use image::{ImageFormat, ImageReader, Limits};
use object_store::aws::AmazonS3ConfigKey;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, PutPayload, RetryConfig};
use sha2::{Digest, Sha256};

use super::cpu::CpuPool;

/// Why an upload was refused.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// More bytes than the cap.
    #[error("the image is {size} bytes; at most {max} are accepted")]
    TooLarge { size: usize, max: usize },
    /// Not one of the accepted formats.
    #[error("the file is not a PNG, JPEG, GIF or WebP image")]
    NotAnImage,
    /// More pixels than the cap.
    #[error("the image is {width}×{height} pixels; at most {max} pixels are accepted")]
    TooManyPixels { width: u32, height: u32, max: u64 },
    /// The header promised an image the bytes do not hold.
    #[error("the image cannot be decoded: {0}")]
    Corrupt(String),
    /// The file could not be stored.
    #[error("the image could not be stored: {0}")]
    Io(#[from] std::io::Error),
    /// The object store failed.
    #[error("the upload storage failed: {0}")]
    Storage(#[from] object_store::Error),
}

/// How long a connection to the bucket may take to open.
const S3_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Retries of a failed request to the bucket, and the time after which none is tried.
const S3_MAX_RETRIES: usize = 3;
const S3_RETRY_TIMEOUT: Duration = Duration::from_secs(10);

/// An S3-compatible bucket to keep uploads in.
#[derive(Clone, Debug, Default)]
pub struct S3Options {
    pub bucket: String,
    pub region: String,
    /// An S3-compatible endpoint; `None` is AWS.
    pub endpoint: Option<String>,
    /// Static credentials; `None` takes the usual AWS environment and instance credentials.
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// A key prefix inside the bucket.
    pub prefix: Option<String>,
    /// Allow `http://` endpoints.
    pub allow_http: bool,
}

/// A stored image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredImage {
    /// `<sha256>.<ext>`.
    pub name: String,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub content_type: &'static str,
    pub size: usize,
    pub width: u32,
    pub height: u32,
}

/// Where uploads are kept, and their caps.
#[derive(Clone)]
pub struct Uploads {
    store: Arc<dyn ObjectStore>,
    /// A key prefix (S3), empty for the local folder.
    prefix: String,
    /// `local` or `s3`.
    backend: &'static str,
    max_bytes: usize,
    max_pixels: u64,
    cpu: CpuPool,
}

/// The content type of an accepted format and the extension its files get.
fn kind(format: ImageFormat) -> Option<(&'static str, &'static str)> {
    match format {
        ImageFormat::Png => Some(("image/png", "png")),
        ImageFormat::Jpeg => Some(("image/jpeg", "jpg")),
        ImageFormat::Gif => Some(("image/gif", "gif")),
        ImageFormat::WebP => Some(("image/webp", "webp")),
        _ => None,
    }
}

/// The content type of a stored file's name, when the name is one this service gives.
pub fn content_type_of(name: &str) -> Option<&'static str> {
    let (hash, ext) = name.split_once('.')?;
    if hash.len() != 64
        || !hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    match ext {
        "png" => Some("image/png"),
        "jpg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "webp" => Some("image/webp"),
        _ => None,
    }
}

/// Whether `name` is one [`Uploads::store_attachment`] gives: 32 lower-case hex digits.
pub fn is_attachment_name(name: &str) -> bool {
    name.len() == 32
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks that `bytes` are one image within the caps; answers its type, extension and size.
fn check(
    bytes: &[u8],
    max_pixels: u64,
) -> Result<(&'static str, &'static str, u32, u32), UploadError> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|_| UploadError::NotAnImage)?;
    let (content_type, ext) = reader
        .format()
        .and_then(kind)
        .ok_or(UploadError::NotAnImage)?;
    let (width, height) = reader
        .into_dimensions()
        .map_err(|e| UploadError::Corrupt(e.to_string()))?;
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(UploadError::TooManyPixels {
            width,
            height,
            max: max_pixels,
        });
    }
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|_| UploadError::NotAnImage)?;
    let mut limits = Limits::default();
    limits.max_image_width = Some(width);
    limits.max_image_height = Some(height);
    limits.max_alloc = Some(max_pixels.saturating_mul(16));
    reader.limits(limits);
    reader
        .decode()
        .map_err(|e| UploadError::Corrupt(e.to_string()))?;
    Ok((content_type, ext, width, height))
}

impl Uploads {
    /// Uploads kept in the folder `dir` (created when missing), at most `max_bytes` and
    /// `max_pixels` each, checked on `cpu`.
    pub fn local(
        dir: PathBuf,
        max_bytes: usize,
        max_pixels: u64,
        cpu: CpuPool,
    ) -> Result<Uploads, UploadError> {
        std::fs::create_dir_all(&dir)?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(&dir)?;
        Ok(Uploads {
            store: Arc::new(store),
            prefix: String::new(),
            backend: "local",
            max_bytes,
            max_pixels,
            cpu,
        })
    }

    /// Uploads kept in an S3-compatible bucket.
    pub fn s3(
        options: &S3Options,
        max_bytes: usize,
        max_pixels: u64,
        cpu: CpuPool,
    ) -> Result<Uploads, UploadError> {
        // A bucket that cannot be reached fails the request within seconds (503), not after
        // the client's default of ten retries over three minutes, which would outlast the
        // caller's patience and the connection's idle timeout.
        let mut builder = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(&options.bucket)
            .with_region(&options.region)
            .with_allow_http(options.allow_http)
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                format!("{}s", S3_CONNECT_TIMEOUT.as_secs()),
            )
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: S3_MAX_RETRIES,
                retry_timeout: S3_RETRY_TIMEOUT,
            });
        if let Some(endpoint) = &options.endpoint {
            // Path-style requests (`<endpoint>/<bucket>/<key>`), which every S3-compatible
            // service answers.
            builder = builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false);
        }
        if let (Some(id), Some(secret)) = (&options.access_key_id, &options.secret_access_key) {
            builder = builder
                .with_access_key_id(id)
                .with_secret_access_key(secret);
        }
        let prefix = options
            .prefix
            .as_deref()
            .map(|p| p.trim_matches('/'))
            .filter(|p| !p.is_empty())
            .map(|p| format!("{p}/"))
            .unwrap_or_default();
        Ok(Uploads {
            store: Arc::new(builder.build()?),
            prefix,
            backend: "s3",
            max_bytes,
            max_pixels,
            cpu,
        })
    }

    /// The largest file accepted.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// `local` or `s3`.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    fn path(&self, name: &str) -> ObjectPath {
        ObjectPath::from(format!("{}{name}", self.prefix))
    }

    /// Checks and stores an image; the same bytes always get the same name and are stored
    /// once.
    pub async fn store_image(&self, bytes: Vec<u8>) -> Result<StoredImage, UploadError> {
        if bytes.len() > self.max_bytes {
            return Err(UploadError::TooLarge {
                size: bytes.len(),
                max: self.max_bytes,
            });
        }
        let max_pixels = self.max_pixels;
        let (bytes, image) = self
            .cpu
            .run(move || {
                let (content_type, ext, width, height) = check(&bytes, max_pixels)?;
                let name = format!("{}.{ext}", hex::encode(Sha256::digest(&bytes)));
                let image = StoredImage {
                    name,
                    content_type,
                    size: bytes.len(),
                    width,
                    height,
                };
                Ok::<_, UploadError>((bytes, image))
            })
            .await?;
        let path = self.path(&image.name);
        match self.store.head(&path).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => {
                self.store.put(&path, PutPayload::from(bytes)).await?;
            }
            Err(other) => return Err(other.into()),
        }
        Ok(image)
    }

    /// Stores an attachment of a received message (any content) under a new random name of 32
    /// hex digits, which is its URL's only secret: unlike images, the same bytes stored twice get
    /// two names, so that a name tells nothing of the content. Answers the name.
    pub async fn store_attachment(&self, bytes: Vec<u8>) -> Result<String, UploadError> {
        let mut token = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut token);
        let name = hex::encode(token);
        self.store
            .put(&self.attachment_path(&name), PutPayload::from(bytes))
            .await?;
        Ok(name)
    }

    /// Deletes a stored attachment (one that no received message refers to after all); a name
    /// this service never gives, or a file that is not there, is no error.
    pub async fn delete_attachment(&self, name: &str) -> Result<(), UploadError> {
        if !is_attachment_name(name) {
            return Ok(());
        }
        match self.store.delete(&self.attachment_path(name)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(other) => Err(other.into()),
        }
    }

    fn attachment_path(&self, name: &str) -> ObjectPath {
        ObjectPath::from(format!("{}attachments/{name}", self.prefix))
    }

    /// The bytes of a stored attachment; `None` for a name this service never gives or a file
    /// that is not there.
    pub async fn read_attachment(&self, name: &str) -> Result<Option<Vec<u8>>, UploadError> {
        if !is_attachment_name(name) {
            return Ok(None);
        }
        match self.store.get(&self.attachment_path(name)).await {
            Ok(found) => Ok(Some(found.bytes().await?.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(other) => Err(other.into()),
        }
    }

    /// The bytes and content type of a stored file; `None` for a name this service never gives
    /// or a file that is not there.
    pub async fn read(&self, name: &str) -> Result<Option<(Vec<u8>, &'static str)>, UploadError> {
        let Some(content_type) = content_type_of(name) else {
            return Ok(None);
        };
        match self.store.get(&self.path(name)).await {
            Ok(found) => Ok(Some((found.bytes().await?.to_vec(), content_type))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(other) => Err(other.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_this_service_gives_are_served() {
        let hash = "a".repeat(64);
        assert_eq!(content_type_of(&format!("{hash}.png")), Some("image/png"));
        assert_eq!(content_type_of(&format!("{hash}.jpg")), Some("image/jpeg"));
        assert_eq!(content_type_of(&format!("{hash}.svg")), None);
        assert_eq!(content_type_of("../../etc/passwd"), None);
        assert_eq!(content_type_of(&format!("{}.png", "A".repeat(64))), None);
        assert_eq!(content_type_of(&format!("{}.png", "a".repeat(63))), None);
    }

    #[test]
    fn only_attachment_names_this_service_gives_are_read() {
        assert!(is_attachment_name(&"0f".repeat(16)));
        assert!(!is_attachment_name(&"0F".repeat(16)));
        assert!(!is_attachment_name(&"0f".repeat(15)));
        assert!(!is_attachment_name("../../../../etc/passwd"));
        assert!(!is_attachment_name(&format!("{}.png", "a".repeat(28))));
    }

    #[tokio::test]
    async fn a_deleted_attachment_is_gone_and_deleting_it_again_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let uploads = Uploads::local(dir.path().to_path_buf(), 1024, 100, CpuPool::new(1)).unwrap();
        let kept = uploads.store_attachment(b"kept".to_vec()).await.unwrap();
        let gone = uploads.store_attachment(b"gone".to_vec()).await.unwrap();
        uploads.delete_attachment(&gone).await.unwrap();
        assert_eq!(uploads.read_attachment(&gone).await.unwrap(), None);
        uploads.delete_attachment(&gone).await.unwrap();
        uploads.delete_attachment("../../etc/passwd").await.unwrap();
        assert_eq!(
            uploads.read_attachment(&kept).await.unwrap().as_deref(),
            Some(&b"kept"[..])
        );
    }

    #[test]
    fn text_is_not_an_image() {
        assert!(matches!(
            check(b"hello, I am not a PNG", 100),
            Err(UploadError::NotAnImage)
        ));
    }
}
