//! `POST /uploads/image` and the public files it serves.

use std::io::Cursor;

use herald::config::{Settings, UploadStorage};

use crate::support::harness::{Reply, TestApp, read};

/// An S3-compatible server to keep uploads in (`.ci/run` starts moto and sets this); without
/// it the same tests run on the local folder.
fn s3_url() -> Option<String> {
    std::env::var("HERALD_TEST_S3_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Where this run keeps uploads: a fresh bucket of the S3 server when there is one (created
/// with a plain `PUT /<bucket>`, as S3 does), else the data directory.
struct Storage {
    bucket: Option<String>,
}

impl Storage {
    async fn new() -> Storage {
        let Some(url) = s3_url() else {
            return Storage { bucket: None };
        };
        let bucket = format!("herald-{}", uuid::Uuid::new_v4().simple());
        let r = reqwest::Client::new()
            .put(format!("{url}/{bucket}"))
            .send()
            .await
            .expect("the S3 server answers");
        assert!(
            r.status().is_success(),
            "creating the bucket: {}",
            r.status()
        );
        Storage {
            bucket: Some(bucket),
        }
    }

    fn apply(&self, s: &mut Settings) {
        if let (Some(url), Some(bucket)) = (s3_url(), &self.bucket) {
            s.uploads.storage = UploadStorage::S3;
            s.uploads.s3_bucket = Some(bucket.clone());
            s.uploads.s3_endpoint = Some(url);
            s.uploads.s3_allow_http = true;
            s.uploads.s3_prefix = Some("images".into());
            s.uploads.s3_access_key_id = Some("test".into());
            s.uploads.s3_secret_access_key = Some("test".into());
        }
    }

    /// Checks that the file `name` holds `bytes` where this storage keeps it.
    async fn assert_holds(&self, app: &TestApp, name: &str, bytes: &[u8]) {
        let local = app.state().settings().data_dir.join("uploads").join(name);
        match (&self.bucket, s3_url()) {
            (Some(bucket), Some(url)) => {
                // Read back with an S3 client of its own, signed as S3 wants.
                use object_store::ObjectStore;
                let s3 = object_store::aws::AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_region("us-east-1")
                    .with_endpoint(url)
                    .with_allow_http(true)
                    .with_virtual_hosted_style_request(false)
                    .with_access_key_id("test")
                    .with_secret_access_key("test")
                    .build()
                    .unwrap();
                let path = object_store::path::Path::from(format!("images/{name}"));
                let got = s3.get(&path).await.expect("the object is in the bucket");
                assert_eq!(got.bytes().await.unwrap().to_vec(), bytes);
                assert!(!local.exists(), "nothing is written locally");
            }
            _ => assert_eq!(std::fs::read(&local).unwrap(), bytes),
        }
    }
}

fn png(width: u32, height: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(width, height, |x, y| image::Rgb([x as u8, y as u8, 7]));
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

async fn upload(app: &TestApp, key: &str, name: &str, content_type: &str, bytes: Vec<u8>) -> Reply {
    crate::http::jobs::upload_to(app, "/uploads/image", key, name, content_type, bytes).await
}

#[tokio::test]
async fn an_image_is_stored_once_by_its_content_and_served_publicly() {
    let storage = Storage::new().await;
    let app = TestApp::spawn_with(|s| storage.apply(s)).await;
    let p = app.project().await;
    let bytes = png(3, 2);
    // The declared name and type do not matter; the bytes do.
    let r = upload(
        &app,
        &p.secret_key,
        "logo.bin",
        "application/octet-stream",
        bytes.clone(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["contentType"], "image/png");
    assert_eq!(r.body["width"], 3);
    assert_eq!(r.body["height"], 2);
    assert_eq!(r.body["size"], bytes.len());
    let url = r.body["url"].as_str().unwrap().to_string();
    assert!(
        url.starts_with(app.base_url()) && url.ends_with(".png"),
        "{url}"
    );
    let again = upload(&app, &p.secret_key, "other.png", "image/png", bytes.clone()).await;
    assert_eq!(again.body["url"], url.as_str(), "same bytes, same URL");
    let name = url.rsplit('/').next().unwrap();
    storage.assert_holds(&app, name, &bytes).await;

    // Anyone can fetch it, with its type and a long cache.
    let got = reqwest::get(&url).await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers()["content-type"], "image/png");
    assert_eq!(
        got.headers()["cache-control"],
        "public, max-age=31536000, immutable"
    );
    assert_eq!(got.bytes().await.unwrap().to_vec(), bytes);
    for missing in [
        "/uploads/files/nothing.png",
        "/uploads/files/..%2Fherald.db",
        &format!("/uploads/files/{}.png", "0".repeat(64)),
    ] {
        let r = read(reqwest::get(app.url(missing)).await.unwrap()).await;
        r.assert_error(404, "NOT_FOUND");
    }

    // Not an image, and no key.
    let r = upload(
        &app,
        &p.secret_key,
        "fake.png",
        "image/png",
        b"GIF87 not really".to_vec(),
    )
    .await;
    r.assert_error(415, "INVALID_REQUEST_BODY");
    assert_eq!(r.error_fields(), vec!["file"]);
    // A PNG whose data is cut short decodes to nothing.
    let mut cut = png(64, 64);
    cut.truncate(cut.len() / 2);
    let r = upload(&app, &p.secret_key, "cut.png", "image/png", cut).await;
    r.assert_error(422, "VALIDATION_ERROR");
    let r = upload(&app, "", "x.png", "image/png", bytes).await;
    assert_eq!(r.status, 401, "{}", r.body);
    let config = app.get("/config", "").await;
    assert_eq!(config.body["uploadsEnabled"], true);
    assert_eq!(
        config.body["objectStorageEnabled"],
        storage.bucket.is_some()
    );
}

#[tokio::test]
async fn the_size_and_pixel_caps_hold() {
    let storage = Storage::new().await;
    let app = TestApp::spawn_with(|s| {
        storage.apply(s);
        s.uploads.max_pixels = 100;
        s.uploads.max_bytes = 2_000;
    })
    .await;
    let p = app.project().await;
    let r = upload(&app, &p.secret_key, "big.png", "image/png", png(11, 10)).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("11×10"),
        "{}",
        r.body
    );
    assert_eq!(
        upload(&app, &p.secret_key, "ok.png", "image/png", png(10, 10))
            .await
            .status,
        201
    );
    let noise: Vec<u8> = (0..5_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let r = upload(&app, &p.secret_key, "noise.png", "image/png", noise).await;
    r.assert_error(413, "PAYLOAD_TOO_LARGE");
}

/// A storage that fails is the server's trouble, not the caller's: 503 `SERVICE_UNAVAILABLE`
/// with `Retry-After`, for the upload and for reading a file back, within seconds (the S3
/// client's retries are bounded), never a 500.
#[tokio::test]
async fn a_storage_that_fails_is_a_503_with_retry_after() {
    // A bucket nobody answers for: a loopback port that was free a moment ago.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let app = TestApp::spawn_with(|s| {
        s.uploads.storage = UploadStorage::S3;
        s.uploads.s3_bucket = Some("nowhere".into());
        s.uploads.s3_endpoint = Some(format!("http://{closed}"));
        s.uploads.s3_allow_http = true;
        s.uploads.s3_access_key_id = Some("test".into());
        s.uploads.s3_secret_access_key = Some("test".into());
    })
    .await;
    let p = app.project().await;
    let started = std::time::Instant::now();
    let r = upload(&app, &p.secret_key, "a.png", "image/png", png(2, 2)).await;
    r.assert_error(503, "SERVICE_UNAVAILABLE");
    assert_eq!(r.header("Retry-After"), Some("1"), "{}", r.body);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "answered after {:?}",
        started.elapsed()
    );
    // What the caller sent is still checked first: not an image is the caller's 415.
    let r = upload(&app, &p.secret_key, "a.png", "image/png", b"no".to_vec()).await;
    r.assert_error(415, "INVALID_REQUEST_BODY");
    let name = format!("{}.png", "a".repeat(64));
    let r = read(
        reqwest::get(app.url(&format!("/uploads/files/{name}")))
            .await
            .unwrap(),
    )
    .await;
    r.assert_error(503, "SERVICE_UNAVAILABLE");
    assert_eq!(r.header("Retry-After"), Some("1"), "{}", r.body);

    // The uploads folder taken away from under the server (a file where the folder was).
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let dir = app.state().settings().data_dir.join("uploads");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a folder").unwrap();
    let r = upload(&app, &p.secret_key, "a.png", "image/png", png(2, 3)).await;
    r.assert_error(503, "SERVICE_UNAVAILABLE");
    assert_eq!(r.header("Retry-After"), Some("1"), "{}", r.body);
}
