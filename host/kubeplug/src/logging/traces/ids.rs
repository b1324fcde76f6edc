//! Trace ids in JSON log lines, so a log pipeline joins a reconcile's lines
//! to its trace: `trace_id` and `span_id`, in hex as OTLP writes them, on
//! every line logged inside a sampled span.
//!
//! Two halves: a layer beside the OpenTelemetry one keeps each sampled
//! span's ids in the span's extensions when it opens ([`Ids`]); the JSON
//! format then writes those of the innermost span the log shows
//! ([`with_ids`]). The format cannot ask OpenTelemetry itself, as that
//! takes the subscriber, which a layer is handed and a format is not.

use std::fmt;
use std::sync::OnceLock;

use opentelemetry::trace::{SpanId, TraceContextExt as _, TraceId};
use tracing::span::{Attributes, Id};
use tracing::{Dispatch, Event, Subscriber, dispatcher::WeakDispatch};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// A sampled span's ids, in its extensions.
#[derive(Clone, Copy)]
struct SpanIds {
    trace: TraceId,
    span: SpanId,
}

/// Keeps each sampled span's ids in its extensions. Placed after the
/// OpenTelemetry layer, and behind the same filter.
#[derive(Default)]
pub struct Ids {
    /// The subscriber, through which the span's OpenTelemetry context is
    /// found (weak: the subscriber owns this layer).
    dispatch: OnceLock<WeakDispatch>,
}

impl<S> Layer<S> for Ids
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, dispatch: &Dispatch) {
        let _ = self.dispatch.set(dispatch.downgrade());
    }

    fn on_new_span(&self, _: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(dispatch) = self.dispatch.get().and_then(WeakDispatch::upgrade) else {
            return;
        };
        // Starts the OpenTelemetry span (as entering it would): the sampler
        // decides now, and the ids exist from here on.
        let Some(context) = tracing_opentelemetry::get_otel_context(id, &dispatch) else {
            return;
        };
        let span = context.span();
        let span = span.span_context();
        if !span.is_sampled() {
            return;
        }
        let ids = SpanIds {
            trace: span.trace_id(),
            span: span.span_id(),
        };
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(ids);
        }
    }
}

/// The JSON event format `F`, with the ids of the innermost span that has
/// them first on each line.
pub fn with_ids<F>(format: F) -> WithIds<F> {
    WithIds(format)
}

/// See [`with_ids`].
pub struct WithIds<F>(F);

impl<S, N, F> FormatEvent<S, N> for WithIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let ids = ctx.event_scope().and_then(|mut scope| {
            scope.find_map(|span| span.extensions().get::<SpanIds>().copied())
        });
        let Some(ids) = ids else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        // The format writes one object: `{"timestamp":…}`.
        let rest = line.strip_prefix('{').ok_or(fmt::Error)?;
        let comma = if rest.starts_with('}') { "" } else { "," };
        write!(
            writer,
            r#"{{"trace_id":"{}","span_id":"{}"{comma}{rest}"#,
            ids.trace, ids.span
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
    use serde_json::Value;
    use std::sync::{Arc, Mutex};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    /// Log lines kept in memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl tracing_subscriber::fmt::MakeWriter<'_> for Lines {
        type Writer = Lines;

        fn make_writer(&self) -> Lines {
            self.clone()
        }
    }

    /// The JSON lines `log` writes, with spans sampled by `sampler`; and
    /// what `log` returns.
    fn logged<T>(sampler: Sampler, log: impl FnOnce() -> T) -> (Vec<Value>, T) {
        let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry()
            .with(
                tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer("test"))
                    .and_then(Ids::default()),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false)
                    .map_event_format(with_ids)
                    .with_writer(lines.clone()),
            );
        let returned = tracing::subscriber::with_default(subscriber, log);
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let parsed = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        (parsed, returned)
    }

    #[test]
    fn lines_inside_a_sampled_span_carry_its_ids_and_the_others_none() {
        let (lines, span) = logged(Sampler::AlwaysOn, || {
            tracing::info!("before");
            let span = tracing::info_span!("reconcile", object = "ns/a");
            span.in_scope(|| tracing::info!(child = "x", "inside"));
            span.context().span().span_context().clone()
        });
        assert!(lines[0].get("trace_id").is_none(), "{}", lines[0]);
        let inside = &lines[1];
        assert_eq!(inside["trace_id"], span.trace_id().to_string());
        assert_eq!(inside["span_id"], span.span_id().to_string());
        assert_eq!(inside["trace_id"].as_str().unwrap().len(), 32);
        // The rest of the line is as it was.
        assert_eq!(inside["message"], "inside");
        assert_eq!(inside["child"], "x");
        assert_eq!(inside["span"]["object"], "ns/a");
    }

    #[test]
    fn lines_inside_an_unsampled_span_carry_no_ids() {
        let (lines, ()) = logged(Sampler::AlwaysOff, || {
            tracing::info_span!("reconcile").in_scope(|| tracing::info!("inside"));
        });
        assert!(lines[0].get("trace_id").is_none(), "{}", lines[0]);
        assert_eq!(lines[0]["span"]["name"], "reconcile");
    }
}
