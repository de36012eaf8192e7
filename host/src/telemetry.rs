//! Logging and traces: structured `tracing` to stderr, as text or JSON, and, when
//! `traces.otlp_endpoint` is set, every span (request, job, plugin call, store call) exported
//! over OTLP/HTTP through `tracing-opentelemetry`. Without an endpoint nothing else changes.

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, span};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
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
    .with_filter(AskedEachTime(filter));
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
        .with_filter(AskedEachTime(spans))
        .boxed();
    Ok(Some((layer, provider)))
}

/// A per-layer filter that is asked about every span and event, never only once per callsite.
///
/// `tracing-subscriber` hands a per-layer filter's answer to its layer through a thread-local
/// set by the last `enabled` call. A callsite whose interest is cached as `always` skips that
/// call, so its layer reads whatever the previous `enabled` call on the thread left, and any
/// crate that asks `enabled` with other metadata in between leaves a stale "no" there: sqlx does
/// after every query (`log::log_enabled!` through `tracing-log`), and lines such as "herald
/// listening on …" were then lost without a trace (tokio-rs/tracing#2519). Capping the interest
/// at `sometimes` makes every dispatch ask the filter first, which costs one filter check an
/// event.
struct AskedEachTime<F>(F);

impl<S, F: Filter<S>> Filter<S> for AskedEachTime<F> {
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        self.0.enabled(meta, cx)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.0.callsite_enabled(meta).is_never() {
            Interest::never()
        } else {
            Interest::sometimes()
        }
    }

    fn event_enabled(&self, event: &Event<'_>, cx: &Context<'_, S>) -> bool {
        self.0.event_enabled(event, cx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.0.max_level_hint()
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        self.0.on_new_span(attrs, id, ctx)
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        self.0.on_record(id, values, ctx)
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.0.on_enter(id, ctx)
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.0.on_exit(id, ctx)
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        self.0.on_close(id, ctx)
    }
}
