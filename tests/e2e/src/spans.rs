//! A collector of the host's spans: an OTLP/HTTP receiver of JSON
//! (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`) on a loopback port, for tests
//! that measure what the host did from its traces (each span's start and
//! end, to the nanosecond, on the machine's clock).
//!
//! `tests/traces.rs` has a receiver of its own, of protobuf: it tests the
//! exporter's default protocol and the trace's shape.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// One span as received.
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    /// Its string attributes (`plugin`, `webhook`, `function`...).
    pub attributes: BTreeMap<String, String>,
    /// Hex, as OTLP/JSON writes them; the parent's is empty for a root.
    pub span_id: String,
    pub parent_span_id: String,
    /// Nanoseconds since the Unix epoch.
    pub start: u128,
    pub end: u128,
    /// The names of its events (the host's warnings and errors within it).
    pub events: Vec<String>,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    pub fn duration(&self) -> Duration {
        let nanos = self.end.saturating_sub(self.start);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// The receiver; it runs until the test ends.
pub struct Receiver {
    port: u16,
    spans: Arc<Mutex<Vec<Span>>>,
}

impl Receiver {
    pub fn start() -> Self {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let port = crate::loopback_server(spans.clone(), |stream, spans| {
            let _ = serve(stream, spans);
        });
        Receiver { port, spans }
    }

    /// The host's environment that sends its spans here: JSON, every
    /// 200 ms, and a queue long enough that none is dropped (the SDK's
    /// default holds 2,048 ended spans).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json".into()),
            ("OTEL_SERVICE_NAME", "kubeplug-e2e".into()),
            ("OTEL_BSP_SCHEDULE_DELAY", "200".into()),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "65536".into()),
        ]
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("spans lock").clone()
    }
}

/// Keep the spans of each JSON export of one connection.
fn serve(stream: TcpStream, spans: &Mutex<Vec<Span>>) -> std::io::Result<()> {
    crate::serve_trace_exports(
        stream,
        "application/json",
        "{}",
        |body| match serde_json::from_slice::<Value>(body) {
            Ok(request) => {
                keep(&request, spans);
                true
            }
            Err(_) => false,
        },
    )
}

/// The spans of an `ExportTraceServiceRequest` in OTLP/JSON.
fn keep(request: &Value, spans: &Mutex<Vec<Span>>) {
    let list = |v: &Value, key: &str| v[key].as_array().cloned().unwrap_or_default();
    let mut kept = spans.lock().expect("spans lock");
    for resource in list(request, "resourceSpans") {
        for scope in list(&resource, "scopeSpans") {
            kept.extend(list(&scope, "spans").iter().map(span));
        }
    }
}

fn span(s: &Value) -> Span {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    // A 64-bit integer is a string in OTLP/JSON; a number is accepted too.
    let nanos = |v: &Value| {
        v.as_str()
            .and_then(|t| t.parse().ok())
            .or_else(|| v.as_u64().map(u128::from))
            .unwrap_or_default()
    };
    let attributes = s["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| Some((text(&a["key"]), a["value"]["stringValue"].as_str()?.into())))
        .collect();
    let events = s["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| text(&e["name"]))
        .collect();
    Span {
        name: text(&s["name"]),
        events,
        attributes,
        span_id: text(&s["spanId"]),
        parent_span_id: text(&s["parentSpanId"]),
        start: nanos(&s["startTimeUnixNano"]),
        end: nanos(&s["endTimeUnixNano"]),
    }
}
