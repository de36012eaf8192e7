//! `GET /metrics`: Prometheus text exposition of what Herald counts as it works (requests by
//! operation and status with latency histograms; job runs by kind and outcome; deliveries and
//! delivery batches by outcome and transport latency; plugin calls by plugin and outcome with
//! duration; 429 refusals by code) and of gauges read at each scrape (live jobs by kind and
//! state, the age of the oldest due job, the queued emails and the age of the oldest due one,
//! the event outbox's lag, the database pool). Off (404) until
//! `metrics.token` is set; a scraper sends it as `Authorization: Bearer <token>`.
//!
//! Counters and histograms are per instance: scrape every instance. The gauges read the shared
//! database, so every instance reports the same queue.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use poem::http::StatusCode;
use poem::web::Data;
use poem::{Request, Response, handler};

use super::error::{ApiError, ErrorCode};
use super::extract::constant_time_eq;
use super::state::AppState;

/// Histogram buckets, in seconds: 1 ms to 30 s.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process's metrics recorder (once; later calls reuse it). `None` when another
/// recorder was installed first (an embedding program's own).
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new().set_buckets(&BUCKETS).ok()?;
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            Some(handle)
        })
        .as_ref()
}

fn refused(status: StatusCode, code: ErrorCode, message: &str) -> poem::Error {
    ApiError::new(status, code, message).into()
}

/// The scrape.
#[handler]
pub async fn scrape(req: &Request, state: Data<&AppState>) -> poem::Result<Response> {
    let Some(token) = state
        .settings()
        .metrics
        .token
        .as_deref()
        .filter(|t| !t.is_empty())
    else {
        return Err(refused(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            "metrics are off; set metrics.token to turn them on",
        ));
    };
    let sent = req
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "));
    let matches = sent.is_some_and(|s| constant_time_eq(s.as_bytes(), token.as_bytes()));
    if !matches {
        return Err(refused(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "send the metrics token as `Authorization: Bearer <metrics.token>`",
        ));
    }
    let Some(handle) = install() else {
        return Err(ApiError::internal("another metrics recorder is installed").into());
    };
    let gauges = state.store().gauges().await.map_err(ApiError::from)?;
    for (kind, job_state, n) in &gauges.jobs {
        metrics::gauge!("herald_jobs", "kind" => kind.clone(), "state" => job_state.clone())
            .set(*n as f64);
    }
    metrics::gauge!("herald_jobs_oldest_due_seconds").set(gauges.oldest_due_seconds);
    metrics::gauge!("herald_emails_queued").set(gauges.emails_queued as f64);
    metrics::gauge!("herald_emails_oldest_due_seconds").set(gauges.emails_oldest_due_seconds);
    metrics::gauge!("herald_outbox_pending").set(gauges.outbox_pending as f64);
    metrics::gauge!("herald_outbox_lag_seconds").set(gauges.outbox_lag_seconds);
    metrics::gauge!("herald_db_connections", "state" => "open").set(f64::from(gauges.pool_open));
    metrics::gauge!("herald_db_connections", "state" => "idle").set(f64::from(gauges.pool_idle));
    Ok(Response::builder()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(handle.render()))
}
