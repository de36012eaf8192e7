//! Image uploads: the bytes must decode as a PNG, JPEG, GIF or WebP image within the size and
//! pixel caps (the dimensions are read from the header before anything is decoded, so a
//! decompression bomb costs nothing); the file is stored once under its SHA-256
//! (`<hash>.<ext>`) in the uploads folder, written to a temporary name and renamed, so a reader
//! never sees half a file. Decoding runs on the CPU pool, never on the async workers.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use image::{ImageFormat, ImageReader, Limits};
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

/// The uploads folder and its caps.
#[derive(Clone)]
pub struct Uploads {
    dir: PathBuf,
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
    /// Uploads stored in `dir`, at most `max_bytes` and `max_pixels` each, checked on `cpu`.
    pub fn new(dir: PathBuf, max_bytes: usize, max_pixels: u64, cpu: CpuPool) -> Uploads {
        Uploads {
            dir,
            max_bytes,
            max_pixels,
            cpu,
        }
    }

    /// The largest file accepted.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The folder files are served from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Checks and stores an image; the same bytes always get the same name.
    pub async fn store_image(&self, bytes: Vec<u8>) -> Result<StoredImage, UploadError> {
        if bytes.len() > self.max_bytes {
            return Err(UploadError::TooLarge {
                size: bytes.len(),
                max: self.max_bytes,
            });
        }
        let (max_pixels, dir) = (self.max_pixels, self.dir.clone());
        self.cpu
            .run(move || {
                let (content_type, ext, width, height) = check(&bytes, max_pixels)?;
                let name = format!("{}.{ext}", hex::encode(Sha256::digest(&bytes)));
                let path = dir.join(&name);
                if !path.exists() {
                    std::fs::create_dir_all(&dir)?;
                    let temp = dir.join(format!(".{name}.{}", uuid::Uuid::new_v4().simple()));
                    std::fs::write(&temp, &bytes)?;
                    std::fs::rename(&temp, &path)?;
                }
                Ok(StoredImage {
                    name,
                    content_type,
                    size: bytes.len(),
                    width,
                    height,
                })
            })
            .await
    }

    /// The bytes and content type of a stored file, `None` for any other name.
    pub async fn read(&self, name: &str) -> Option<(Vec<u8>, &'static str)> {
        let content_type = content_type_of(name)?;
        let bytes = tokio::fs::read(self.dir.join(name)).await.ok()?;
        Some((bytes, content_type))
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
    fn text_is_not_an_image() {
        assert!(matches!(
            check(b"hello, I am not a PNG", 100),
            Err(UploadError::NotAnImage)
        ));
    }
}
