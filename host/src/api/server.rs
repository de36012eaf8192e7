//! The HTTP server's parts: the routes, the request middleware (request ids, tracing spans, body
//! limits, NUL characters refused, cross-site cookie requests refused ([`super::csrf`]), error
//! bodies, panics, rate-limit headers). [`crate::app`]
//! builds the state and runs the server.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::FutureExt;
use poem::http::header;
use poem::middleware::Cors;
use poem::{Body, Endpoint, EndpointExt, IntoResponse, Request, Response, Route};
use poem_openapi::OperationId;
use tokio::io::{AsyncRead, ReadBuf};
use tracing::Instrument;

use super::error::{ApiError, BodyTooLarge, ErrorStyle, classify, payload_too_large};
use super::extract::RateSlot;
use super::state::AppState;
use crate::domain::ids::RequestId;

/// Every route of the service, wrapped in the request middleware.
pub fn routes(state: AppState) -> impl Endpoint<Output = Response> {
    let service = super::service();
    let document = super::openapi_json();
    // Swagger UI shows the document as served at /openapi.json (with what poem-openapi cannot
    // express added: X-Project-Id, header spellings, transport statuses), not poem-openapi's own;
    // its page embeds the generated text verbatim, so that text is swapped for the served one.
    let ui_html = service
        .swagger_ui_html()
        .replacen(&service.spec(), &document, 1);
    let ui = Route::new().at(
        "/",
        poem::endpoint::make_sync(move |_| poem::web::Html(ui_html.clone())),
    );
    let spec = poem::endpoint::make_sync(move |_| {
        poem::Response::builder()
            .content_type("application/json; charset=utf-8")
            .body(document.clone())
    });
    let max_body = state.settings().max_body_bytes;
    let max_upload = state.settings().uploads.max_bytes;
    let public_url: Arc<str> = state.settings().public_url().into();
    let dashboard_dir = state.settings().accounts.dashboard_dir.clone();
    Route::new()
        .nest("/docs", ui)
        .at("/openapi.json", spec)
        .at("/uploads/files/:name", poem::get(super::uploads::serve))
        .at(
            "/uploads/attachments/:name",
            poem::get(super::uploads::serve_attachment),
        )
        .at("/metrics", poem::get(super::metrics::scrape))
        .nest("/app", poem::get(super::dashboard::app(dashboard_dir)))
        .nest("/", service.around(super::dashboard::root))
        .with(Cors::new())
        .data(state)
        .around(move |ep, req| handle(ep, req, max_body, max_upload, public_url.clone()))
}

async fn handle<E: Endpoint>(
    ep: Arc<E>,
    mut req: Request,
    max_body: usize,
    max_upload: usize,
    public_url: Arc<str>,
) -> poem::Result<Response> {
    let started = Instant::now();
    let request_id = RequestId::generate().into_string();
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let style = ErrorStyle::for_path(&path);
    let slot = RateSlot::default();
    req.extensions_mut().insert(slot.clone());
    let span =
        tracing::info_span!("request", request_id = %request_id, method = %method, path = %path);

    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // The CSV import takes a 5 MB file plus its multipart framing.
    let max_body = if path == "/contacts/import" {
        max_body.max(crate::jobs::import::MAX_FILE_BYTES + 64 * 1024)
    } else if path == "/uploads/image" {
        // The image plus its multipart framing; the handler checks the image's own size.
        max_body.max(max_upload + 64 * 1024)
    } else if path == "/v1/send" {
        // 10 MB of attachments arrive base64-encoded, with the HTML and the rest of the body.
        max_body.max(super::send::MAX_REQUEST_BYTES)
    } else {
        max_body
    };
    let outcome = if declared.is_some_and(|n| n > max_body as u64) {
        Ok(Err((payload_too_large(), None)))
    } else if let Some(refused) = req.uri().query().and_then(super::nul::in_query) {
        Ok(Err((refused, None)))
    } else if let Some(refused) = super::csrf::refusal(&req, &public_url) {
        Ok(Err((refused, None)))
    } else {
        let body = Body::from_async_read(LimitedBody {
            inner: Box::pin(req.take_body().into_async_read()),
            left: max_body,
        });
        // A JSON body is read here, whole and within its limit, to refuse a NUL character in
        // it before any handler sees it; the handler then reads the same bytes.
        let body = if is_json(&req) {
            match body.into_bytes().await {
                Ok(bytes) => match super::nul::in_json_body(&bytes) {
                    Some(refused) => Err(refused),
                    None => Ok(Body::from(bytes)),
                },
                Err(e) => Err(classify(e.into())),
            }
        } else {
            Ok(body)
        };
        match body {
            Err(refused) => Ok(Err((refused, None))),
            Ok(body) => {
                req.set_body(body);
                AssertUnwindSafe(ep.call(req))
                    .catch_unwind()
                    .instrument(span.clone())
                    .await
                    .map(|r| {
                        r.map(IntoResponse::into_response).map_err(|e| {
                            let operation = e.data::<OperationId>().copied();
                            (classify(e), operation)
                        })
                    })
            }
        }
    };
    // The operation (the OpenAPI operation id; routes outside the document count as `other`),
    // a bounded label for the metrics.
    let mut operation = None;
    let mut refused = None;
    let mut response = match outcome {
        Ok(Ok(response)) => {
            operation = response.data::<OperationId>().copied();
            response
        }
        Ok(Err((err, op))) => {
            operation = op;
            refused = (err.status.as_u16() == 429).then(|| err.code.as_str());
            err.render(style, &request_id)
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            ApiError::internal(format_args!("handler panicked: {message}"))
                .render(style, &request_id)
        }
    };
    let headers = response.headers_mut();
    if let Ok(v) = request_id.parse() {
        headers.insert("X-Request-Id", v);
    }
    if let Some(rate) = slot.get() {
        headers.insert("RateLimit-Limit", rate.limit.into());
        headers.insert("RateLimit-Remaining", rate.remaining.into());
        headers.insert("RateLimit-Reset", rate.reset_secs.into());
    }
    let status = response.status().as_u16();
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    let operation = operation.map_or("other", |op| op.0);
    metrics::counter!("herald_http_requests_total", "operation" => operation, "status" => status.to_string())
        .increment(1);
    metrics::histogram!("herald_http_request_seconds", "operation" => operation)
        .record(elapsed_ms / 1000.0);
    if let Some(code) = refused {
        metrics::counter!("herald_refusals_total", "code" => code).increment(1);
    }
    span.in_scope(|| {
        if status >= 500 {
            tracing::error!(status, elapsed_ms, "request failed");
        } else {
            tracing::info!(status, elapsed_ms, "request");
        }
    });
    Ok(response)
}

/// Whether the request says its body is JSON (`application/json`, or a `+json` type).
fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| {
            let t = t.trim().to_ascii_lowercase();
            t == "application/json" || t.ends_with("+json")
        })
}

/// A request body that fails with [`BodyTooLarge`] once more than `left` bytes arrive.
struct LimitedBody {
    inner: Pin<Box<dyn AsyncRead + Send + 'static>>,
    left: usize,
}

impl AsyncRead for LimitedBody {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match this.inner.as_mut().poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = buf.filled().len() - before;
                if read > this.left {
                    this.left = 0;
                    return Poll::Ready(Err(std::io::Error::other(BodyTooLarge)));
                }
                this.left -= read;
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_becomes_a_500_in_the_error_shape() {
        let ep = Arc::new(poem::endpoint::make(|_req: Request| async move {
            if true {
                panic!("boom");
            }
            "unreachable"
        }));
        let req = Request::builder().uri_str("/contacts").finish();
        let resp = handle(ep.clone(), req, 1024, 1024, "http://localhost".into())
            .await
            .expect("a response, not a dropped connection");
        assert_eq!(resp.status(), 500);
        let id = resp
            .headers()
            .get("X-Request-Id")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let body: serde_json::Value =
            serde_json::from_slice(&resp.into_body().into_vec().await.unwrap()).unwrap();
        assert_eq!(body["error"]["code"], "INTERNAL_ERROR");
        assert_eq!(body["error"]["requestId"], id.as_str());
        assert!(
            !body.to_string().contains("boom"),
            "panic messages are logged, not shown"
        );

        // The public endpoints use their own error shape.
        let req = Request::builder().uri_str("/v1/send").finish();
        let resp = handle(ep, req, 1024, 1024, "http://localhost".into())
            .await
            .unwrap();
        let body: serde_json::Value =
            serde_json::from_slice(&resp.into_body().into_vec().await.unwrap()).unwrap();
        assert_eq!(body["code"], 500);
        assert_eq!(body["error"], "INTERNAL_ERROR");
        assert!(body["time"].is_i64());
    }
}
