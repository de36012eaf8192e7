//! Logging and traces: structured `tracing` to stderr, as text or JSON, and, when
//! `traces.otlp_endpoint` is set, every span (request, job, plugin call, store call) exported
//! over OTLP/HTTP through `tracing-opentelemetry`. Without an endpoint nothing else changes.

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogFormat, Settings};

/// How long a stop waits for the trace exporter to send the spans still buffered.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Keeps the trace exporter running; [`Telemetry::shutdown`] (or dropping it) sends the spans
/// still buffered.
#[must_use = "dropping it stops the trace exporter"]
pub struct Telemetry {
    traces: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still buffered and stops the exporter.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        // The SDK's default wait is 5 s, which an export to a collector on a loaded machine (or
        // one still in flight when the stop began) can outlast, and then the last spans, the
        // requests the stop waited for among them, are lost with the process.
        if let Some(provider) = self.traces.take()
            && let Err(e) = provider.shutdown_with_timeout(SHUTDOWN_WAIT)
        {
            eprintln!("herald: the trace exporter did not flush: {e}");
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Installs the global subscriber. `RUST_LOG`, when set, wins over the `log` setting.
pub fn init(settings: &Settings) -> Telemetry {
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| {
        EnvFilter::try_new(&settings.log).unwrap_or_else(|_| EnvFilter::new("info"))
    });
    let ansi = std::io::stderr().is_terminal();
    let logs = match settings.log_format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .boxed(),
    }
    .with_filter(filter);
    let (traces, provider) = match traces(settings) {
        Ok(Some((layer, provider))) => (Some(layer), Some(provider)),
        Ok(None) => (None, None),
        Err(e) => {
            eprintln!("herald: traces are off: {e}");
            (None, None)
        }
    };
    let mut layers: Vec<TraceLayer> = vec![logs.boxed()];
    layers.extend(traces);
    let _ = tracing_subscriber::registry().with(layers).try_init();
    Telemetry { traces: provider }
}

type TraceLayer = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

/// The OTLP layer of `traces.otlp_endpoint`, if set: Herald's spans down to `debug` (store
/// calls), other crates' from `info`.
fn traces(
    settings: &Settings,
) -> Result<Option<(TraceLayer, opentelemetry_sdk::trace::SdkTracerProvider)>, String> {
    let Some(endpoint) = settings.traces.otlp_endpoint.as_deref() else {
        return Ok(None);
    };
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(match settings.traces.protocol {
            crate::config::OtlpProtocol::Json => Protocol::HttpJson,
            crate::config::OtlpProtocol::Protobuf => Protocol::HttpBinary,
        })
        .with_endpoint(url)
        .build()
        .map_err(|e| e.to_string())?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(settings.traces.service_name.clone())
        .build();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("herald");
    let spans = Targets::new()
        .with_target("herald", Level::DEBUG)
        .with_default(Level::INFO);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(spans)
        .boxed();
    Ok(Some((layer, provider)))
}
