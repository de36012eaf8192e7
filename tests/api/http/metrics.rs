//! `GET /metrics`: off without a token, refused without the right one, and a Prometheus text
//! exposition (parsed with a Prometheus parser) of requests, jobs, deliveries, plugin calls and
//! the queue's gauges.

use reqwest::Method;
use serde_json::json;

use crate::http::domains::{verified_domain, with_dns};
use crate::support::dnsd::DnsServer;
use crate::support::harness::TestApp;

const TOKEN: &str = "scrape-secret";

async fn scrape(app: &TestApp, token: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new().get(app.url("/metrics"));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// The samples of `name` whose labels include every pair of `labels`.
fn samples<'a>(
    scrape: &'a prometheus_parse::Scrape,
    name: &str,
    labels: &[(&str, &str)],
) -> Vec<&'a prometheus_parse::Sample> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect()
}

fn value(sample: &prometheus_parse::Sample) -> f64 {
    match sample.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        _ => f64::NAN,
    }
}

#[tokio::test]
async fn metrics_are_off_without_a_token() {
    let app = TestApp::spawn().await;
    let (status, body) = scrape(&app, None).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn a_scrape_exposes_requests_jobs_deliveries_plugin_calls_and_gauges() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(|s| {
        with_dns(&dns)(s);
        s.metrics.token = Some(TOKEN.into());
    })
    .await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;
    p.contact(&app, "ann@example.com", json!({})).await;
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": "ann@example.com", "from": "hi@acme.test", "subject": "Hi", "body": "<p>Hi</p>" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string();
    crate::http::send::email_with_status(&app, &p, &id, "sent").await;
    let r = app.call(Method::GET, "/contacts", None, None).await;
    assert_eq!(r.status, 401);

    let (status, _) = scrape(&app, None).await;
    assert_eq!(status, 401);
    let (status, _) = scrape(&app, Some("wrong")).await;
    assert_eq!(status, 401);
    let (status, text) = scrape(&app, Some(TOKEN)).await;
    assert_eq!(status, 200);
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let parsed = prometheus_parse::Scrape::parse(lines).expect("Prometheus text format");

    let created = samples(
        &parsed,
        "herald_http_requests_total",
        &[("operation", "upsertContact"), ("status", "201")],
    );
    assert!(
        created.iter().map(|s| value(s)).sum::<f64>() >= 1.0,
        "{text}"
    );
    assert!(!samples(&parsed, "herald_http_requests_total", &[("status", "401")]).is_empty());
    let latency = samples(
        &parsed,
        "herald_http_request_seconds",
        &[("operation", "send")],
    );
    assert!(
        latency
            .iter()
            .any(|s| matches!(&s.value, prometheus_parse::Value::Histogram(b) if b.len() > 5)),
        "a latency histogram with buckets: {text}"
    );
    let runs = samples(
        &parsed,
        "herald_delivery_batches_total",
        &[("outcome", "ok")],
    );
    assert!(runs.iter().map(|s| value(s)).sum::<f64>() >= 1.0, "{text}");
    let sent = samples(&parsed, "herald_deliveries_total", &[("outcome", "sent")]);
    assert!(sent.iter().map(|s| value(s)).sum::<f64>() >= 1.0, "{text}");
    assert!(
        !samples(&parsed, "herald_transport_seconds", &[]).is_empty(),
        "{text}"
    );
    let calls = samples(
        &parsed,
        "herald_plugin_calls_total",
        &[("plugin", "outbox"), ("outcome", "ok")],
    );
    assert!(calls.iter().map(|s| value(s)).sum::<f64>() >= 1.0, "{text}");
    for gauge in [
        "herald_jobs_oldest_due_seconds",
        "herald_emails_queued",
        "herald_emails_oldest_due_seconds",
        "herald_outbox_pending",
        "herald_outbox_lag_seconds",
    ] {
        assert_eq!(samples(&parsed, gauge, &[]).len(), 1, "{gauge}: {text}");
    }
    let open = samples(&parsed, "herald_db_connections", &[("state", "open")]);
    assert!(value(open[0]) >= 1.0, "{text}");
}
