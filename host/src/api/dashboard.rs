//! `/app/`: the dashboard, the single-page app of `web/` that `build.rs` builds into `web/dist`
//! and that is embedded here, so the binary serves it with no other file and no internet access.
//! Files with a content hash in their name (`assets/…`) are cached for a year; `index.html` is
//! revalidated on every load, and answers every other path under `/app/` (the app's own routes).
//! Every answer carries a Content-Security-Policy that allows scripts and requests from this
//! origin only (no inline script, no `eval`) and forbids framing. `GET /` sends a browser to
//! `/app/`. With `accounts.dashboard_dir` set, the files are read from that folder on each
//! request instead (a `web/dist` that `npm run build` rewrites while the dashboard is worked on).

use std::borrow::Cow;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use poem::http::{HeaderValue, Method, StatusCode, header};
use poem::{Endpoint, IntoResponse, Request, Response};
use rust_embed::RustEmbed;

/// The built dashboard (`web/dist`).
#[derive(RustEmbed)]
#[folder = "../web/dist"]
struct Assets;

/// The policy of every answer under `/app/`. Styles may be inline and images may come from any
/// `https:` site for one reason: the template preview shows an email as a mail client would, in
/// a sandboxed frame (`srcdoc`) that takes this policy, and emails are styled inline and show
/// images from their senders' sites. Scripts stay this origin's files only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self' 'unsafe-inline'; img-src 'self' data: https:; font-src 'self'; \
    connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

/// Where the app lives; its pages are links below it.
pub const PATH: &str = "/app";

/// The endpoint of `/app/`: the embedded files, or those of `dir` when one is given.
pub fn app(dir: Option<PathBuf>) -> impl Endpoint<Output = Response> {
    poem::endpoint::make_sync(move |req| serve(&req, dir.as_deref()))
}

/// A file of the app (its bytes and type), from the folder when one is given, else embedded.
fn file(dir: Option<&Path>, name: &str) -> Option<(Cow<'static, [u8]>, String)> {
    let Some(dir) = dir else {
        return Assets::get(name).map(|f| (f.data, f.metadata.mimetype().to_string()));
    };
    // Plain names only: no `..`, no root, so nothing outside the folder is read.
    let relative = Path::new(name);
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
    {
        return None;
    }
    let path = dir.join(relative);
    let data = std::fs::read(&path).ok()?;
    let mime = mime_guess::from_path(&path).first_or_octet_stream();
    Some((Cow::Owned(data), mime.to_string()))
}

/// A file of the app, or `index.html` for a path that names none (a page of the app).
fn serve(req: &Request, dir: Option<&Path>) -> Response {
    let path = req.uri().path().trim_start_matches('/');
    let (name, (data, mime)) = match file(dir, path).filter(|_| !path.is_empty()) {
        Some(found) => (path, found),
        // A missing hashed file is an old build's: a 404, not a page that is no script.
        None if path.starts_with("assets/") => {
            return secured(Response::builder().status(StatusCode::NOT_FOUND).body(()));
        }
        None => match file(dir, "index.html") {
            Some(found) => ("index.html", found),
            None => return secured(Response::builder().status(StatusCode::NOT_FOUND).body(())),
        },
    };
    let cache = if name.starts_with("assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    secured(
        Response::builder()
            .content_type(mime)
            .header(header::CACHE_CONTROL, cache)
            .body(data.into_owned()),
    )
}

fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// In front of the API: `GET /` from a browser (one that accepts `text/html`) goes to the
/// dashboard; every other request, and `/` for other clients (the 404 it always got), goes on.
pub async fn root<E: Endpoint>(ep: Arc<E>, req: Request) -> poem::Result<Response> {
    let html = || {
        req.headers()
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains("text/html"))
    };
    if req.method() == Method::GET && req.uri().path() == "/" && html() {
        return Ok(Response::builder()
            .status(StatusCode::FOUND)
            .header(header::LOCATION, format!("{PATH}/"))
            .finish());
    }
    ep.call(req).await.map(IntoResponse::into_response)
}
