//! Assembling and running the HTTP server: state, routes, the request middleware (request ids,
//! tracing spans, body limits, error bodies, panics, rate-limit headers) and graceful shutdown.

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::FutureExt;
use poem::http::header;
use poem::listener::{Acceptor, Listener, TcpListener};
use poem::middleware::Cors;
use poem::{Body, Endpoint, EndpointExt, IntoResponse, Request, Response, Route};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

use crate::api;
use crate::api::error::{ApiError, BodyTooLarge, ErrorStyle, classify, payload_too_large};
use crate::api::extract::RateSlot;
use crate::app::AppState;
use crate::config::Settings;
use crate::domain::ids::RequestId;
use crate::events::{EventConsumer, EventDispatcher};
use crate::plugins::Plugins;
use crate::store::{Db, Store};

/// Starts the plugin platform, opens the database, applies migrations and builds the shared
/// state.
pub async fn build_state(settings: Settings) -> anyhow::Result<AppState> {
    if settings.domains.allow_unverified {
        tracing::warn!(
            "domains.allow_unverified is ON: mail may be sent from domains that are not verified, \
             unsigned. This is for development only; never run production like this."
        );
    }
    let plugin_settings = settings.plugins.clone();
    let data_dir = settings.data_dir.clone();
    // Loading compiles (or reads from the cache) every component: blocking work.
    let plugins =
        tokio::task::spawn_blocking(move || Plugins::start(&plugin_settings, &data_dir)).await??;
    let plugins = Arc::new(plugins);
    tracing::info!(loaded = plugins.list().len(), "plugins ready");
    let url = settings.database_url();
    let db = Db::connect(&url, settings.database_max_connections).await?;
    db.migrate().await?;
    let store = Store::new(db);
    let secret = match &settings.jwt_secret {
        Some(s) if !s.is_empty() => s.clone(),
        _ => store.setting_or_init("jwt_secret", random_secret).await?,
    };
    Ok(AppState::new(store, settings, plugins, &secret))
}

fn random_secret() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every route of the service, wrapped in the request middleware.
pub fn app(state: AppState) -> impl Endpoint<Output = Response> {
    let service = api::service();
    let ui = service.swagger_ui();
    let spec = service.spec_endpoint();
    let max_body = state.settings().max_body_bytes;
    Route::new()
        .nest("/docs", ui)
        .at("/openapi.json", spec)
        .at("/webhooks/notify", poem::post(api::notify::notify))
        .nest("/", service)
        .with(Cors::new())
        .data(state)
        .around(move |ep, req| handle(ep, req, max_body))
}

async fn handle<E: Endpoint>(
    ep: Arc<E>,
    mut req: Request,
    max_body: usize,
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
    } else if path == "/v1/send" {
        // 10 MB of attachments arrive base64-encoded, with the HTML and the rest of the body.
        max_body.max(crate::api::send::MAX_REQUEST_BYTES)
    } else {
        max_body
    };
    let outcome = if declared.is_some_and(|n| n > max_body as u64) {
        Ok(Err(payload_too_large()))
    } else {
        let body = req.take_body();
        req.set_body(Body::from_async_read(LimitedBody {
            inner: Box::pin(body.into_async_read()),
            left: max_body,
        }));
        AssertUnwindSafe(ep.call(req))
            .catch_unwind()
            .instrument(span.clone())
            .await
            .map(|r| r.map_err(classify))
    };
    let mut response = match outcome {
        Ok(Ok(output)) => output.into_response(),
        Ok(Err(err)) => err.render(style, &request_id),
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
    span.in_scope(|| {
        if status >= 500 {
            tracing::error!(status, elapsed_ms, "request failed");
        } else {
            tracing::info!(status, elapsed_ms, "request");
        }
    });
    Ok(response)
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

/// A server running in the background (used by `herald serve` and by the tests).
pub struct RunningServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The state it serves.
    pub state: AppState,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, waits for in-flight requests, closes the database.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await??;
        self.state.store().db().close().await;
        Ok(())
    }

    /// Waits until the server ends by itself (it does not, unless the listener fails).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        (&mut self.task).await??;
        Ok(())
    }
}

/// Builds the state, binds the listener and serves in a background task.
pub async fn spawn(settings: Settings) -> anyhow::Result<RunningServer> {
    spawn_with_consumers(settings, Vec::new()).await
}

/// [`spawn`] with event consumers registered on the dispatcher.
pub async fn spawn_with_consumers(
    settings: Settings,
    consumers: Vec<Arc<dyn EventConsumer>>,
) -> anyhow::Result<RunningServer> {
    let state = build_state(settings).await?;
    spawn_with_state(state, consumers).await
}

/// Serves prepared state in a background task, with the job workers, the event dispatcher and
/// periodic maintenance.
pub async fn spawn_with_state(
    state: AppState,
    consumers: Vec<Arc<dyn EventConsumer>>,
) -> anyhow::Result<RunningServer> {
    let settings = state.settings().clone();
    let acceptor = TcpListener::bind(settings.listen.clone())
        .into_acceptor()
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", settings.listen))?;
    let addr = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .ok_or_else(|| anyhow::anyhow!("listener has no socket address"))?;
    if settings.public_url.is_none() {
        // Links in emails must reach this server: without a configured public URL, use the
        // address actually bound (the configured one may say port 0).
        state.links().use_bound_url(&format!("http://{addr}"));
    }
    let (tx, rx) = oneshot::channel::<()>();
    let grace = Duration::from_secs(settings.shutdown_grace_seconds);
    let endpoint = app(state.clone());

    let (stop_tx, stop_rx) = watch::channel(false);
    let maintenance_state = state.clone();
    let mut maintenance_stop = stop_rx.clone();
    let maintenance = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    maintenance_state.rate_limiter().prune().await;
                    if let Err(err) = maintenance_state.store().prune_idempotency_keys().await {
                        tracing::warn!(error = %err, "could not prune idempotency keys");
                    }
                    if let Err(err) = maintenance_state.store().prune_send_windows().await {
                        tracing::warn!(error = %err, "could not prune send windows");
                    }
                }
                _ = maintenance_stop.changed() => break,
            }
        }
    });
    let workers = tokio::spawn(state.jobs().clone().run(stop_rx.clone()));
    let poll = Duration::from_millis(settings.jobs_poll_interval_ms.max(10));
    let dispatcher = EventDispatcher::new(
        state.store().clone(),
        consumers,
        poll,
        Duration::from_secs(60),
    );
    let dispatching = tokio::spawn(dispatcher.run(stop_rx));

    let task = tokio::spawn(async move {
        let result = poem::Server::new_with_acceptor(acceptor)
            .run_with_graceful_shutdown(
                endpoint,
                async move {
                    let _ = rx.await;
                },
                Some(grace),
            )
            .await;
        let _ = stop_tx.send(true);
        let _ = maintenance.await;
        if tokio::time::timeout(grace, workers).await.is_err() {
            tracing::warn!(
                "jobs still running at shutdown; they resume on the next start after their lease"
            );
        }
        let _ = dispatching.await;
        result
    });
    Ok(RunningServer {
        addr,
        state,
        shutdown: Some(tx),
        task,
    })
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
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
        let resp = handle(ep.clone(), req, 1024)
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
        let resp = handle(ep, req, 1024).await.unwrap();
        let body: serde_json::Value =
            serde_json::from_slice(&resp.into_body().into_vec().await.unwrap()).unwrap();
        assert_eq!(body["code"], 500);
        assert_eq!(body["error"], "INTERNAL_ERROR");
        assert!(body["time"].is_i64());
    }
}
