//! Log setup: where log lines go, in which format, at which level; and,
//! with the `otel` feature, the spans exported as traces ([`traces`]).

use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

// The OpenTelemetry pipeline with the `otel` feature; without it, a
// stand-in that only says so when `OTEL_*` asks for traces.
#[cfg(feature = "otel")]
mod traces;
#[cfg(not(feature = "otel"))]
#[path = "logging/without_traces.rs"]
mod traces;

pub use traces::Traces;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; colour only on a terminal.
    Text,
    /// One JSON object per line, with the fields of the event and of the
    /// current span (plugin, object) at the top level, for log pipelines;
    /// with traces, the trace and span ids too.
    Json,
}

/// Log to stderr, filtered by `RUST_LOG` (or its alias `KUBEPLUG_LOG`;
/// default `info`). With `export` (a running host) and the `otel` feature,
/// spans go to an OTLP collector if the `OTEL_*` variables name one; flush
/// them with [`Traces::shutdown`] before exiting.
pub fn init_tracing(format: LogFormat, export: bool) -> anyhow::Result<Traces> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("RUST_LOG")
        .or_else(|_| EnvFilter::try_from_env("KUBEPLUG_LOG"))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let mut traces = if export {
        Traces::from_env()?
    } else {
        Traces::default()
    };
    // The log's filter is the log's alone: what a trace holds does not
    // depend on `RUST_LOG` (see `traces`).
    let _ = match traces.layer() {
        Some(spans) => tracing_subscriber::registry()
            .with(spans)
            .with(lines(format).with_filter(filter))
            .try_init(),
        None => tracing_subscriber::registry()
            .with(lines(format).with_filter(filter))
            .try_init(),
    };
    traces.announce();
    Ok(traces)
}

/// The layer that writes log lines to stderr in `format`.
fn lines<S>(format: LogFormat) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    use std::io::IsTerminal;
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => layer.with_ansi(std::io::stderr().is_terminal()).boxed(),
        LogFormat::Json => layer
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .map_event_format(traces::with_ids)
            .boxed(),
    }
}
