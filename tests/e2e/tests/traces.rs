//! OpenTelemetry traces, from the host (`make host`; the `otel` feature is on by default):
//! a reconcile sent to an OTLP/HTTP receiver this test runs is one trace,
//! with the plugin call and the writes as its children, under the service
//! name the environment gives, sent at SIGTERM at the latest; the host's
//! JSON log lines of that reconcile carry its trace id. A collector that is
//! down costs the reconciles nothing and is said once.

use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubeplug_e2e::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::Value;

/// How long anything the host and the control plane do together may take.
const TIMEOUT: Duration = Duration::from_secs(90);

/// Export every 200 ms (the SDK's default is 5 s), to keep the test short.
const QUICK: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "200");

/// A span as received, with the name of the service that sent it.
#[derive(Clone)]
struct Received {
    service: String,
    span: Span,
}

/// An OTLP/HTTP receiver on a loopback port: answers `POST /v1/traces`
/// (protobuf, the exporter's default) and keeps the spans.
struct Receiver {
    port: u16,
    spans: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start() -> Self {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let port = loopback_server(spans.clone(), |stream, spans| {
            let _ = serve(stream, spans);
        });
        Receiver { port, spans }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }
}

/// Keep the spans of each protobuf export of one connection.
fn serve(stream: TcpStream, spans: &Mutex<Vec<Received>>) -> std::io::Result<()> {
    serve_trace_exports(stream, "application/x-protobuf", "", |body| {
        let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf request");
        keep(request, spans);
        true
    })
}

fn keep(request: ExportTraceServiceRequest, spans: &Mutex<Vec<Received>>) {
    let mut spans = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let attributes = resource_spans
            .resource
            .map(|r| r.attributes)
            .unwrap_or_default();
        let service = text(&attributes, "service.name").unwrap_or_default();
        for scope in resource_spans.scope_spans {
            spans.extend(scope.spans.into_iter().map(|span| Received {
                service: service.clone(),
                span,
            }));
        }
    }
}

/// The string value of attribute `key`.
fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        }
    })
}

fn attr(span: &Span, key: &str) -> Option<String> {
    text(&span.attributes, key)
}

/// Ids as OTLP/JSON and the host's logs write them.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A host's log, one JSON object per line.
fn json_log(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

#[test]
fn a_reconcile_is_one_trace_sent_by_sigterm_and_its_log_lines_carry_its_id() {
    install_crds();
    let ns = Namespace::new("traces");
    let dir = PluginDir::with(&["database"]);
    let receiver = Receiver::start();
    let host = Host::start_otel(
        &dir,
        &["--log-format", "json"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
            ("OTEL_SERVICE_NAME", "kubeplug-traces-e2e"),
            // Nothing is sent before the host stops: the spans it holds
            // are flushed at SIGTERM.
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
    );
    running(&host, "database");
    apply(&ns.name, &database("orders"));
    database_runs(&ns.name, "orders");
    let log = host.log.clone();
    assert!(host.terminate(), "the host exits cleanly");

    // The reconcile that created the children, and its children spans.
    let object = format!("{}/orders", ns.name);
    let spans = receiver.spans();
    let (reconcile, children) = spans
        .iter()
        .filter(|r| r.span.name == "reconcile")
        .filter(|r| attr(&r.span, "object").as_deref() == Some(object.as_str()))
        .find_map(|r| {
            let children: Vec<Span> = spans
                .iter()
                .filter(|c| c.span.parent_span_id == r.span.span_id)
                .map(|c| c.span.clone())
                .collect();
            let created = children
                .iter()
                .any(|c| c.name == "write" && attr(c, "verb").as_deref() == Some("create"));
            created.then(|| (r.clone(), children))
        })
        .unwrap_or_else(|| panic!("no trace of the first reconcile in {} spans", spans.len()));
    assert_eq!(reconcile.service, "kubeplug-traces-e2e");
    let span = &reconcile.span;
    for (key, value) in [
        ("plugin", "database"),
        ("kind", "Database"),
        ("namespace", ns.name.as_str()),
        ("result", "ok"),
    ] {
        assert_eq!(attr(span, key).as_deref(), Some(value), "{key}");
    }
    for child in &children {
        assert_eq!(child.trace_id, span.trace_id, "{} in the trace", child.name);
    }
    let calls: Vec<_> = children.iter().filter(|c| c.name == "call").collect();
    assert_eq!(calls.len(), 1, "one plugin call");
    assert_eq!(attr(calls[0], "function").as_deref(), Some("reconcile"));
    let writes: Vec<(String, String)> = children
        .iter()
        .filter(|c| c.name == "write")
        .map(|c| (attr(c, "verb").unwrap(), attr(c, "object").unwrap()))
        .collect();
    for (verb, what) in [
        ("apply", format!("StatefulSet {object}")),
        ("apply", format!("Service {object}")),
        ("create", format!("Secret {object}-credentials")),
        ("status", format!("Database {object}")),
    ] {
        assert!(
            writes.iter().any(|(v, w)| v == verb && *w == what),
            "{verb} {what} not in {writes:?}"
        );
    }

    // Its log lines carry its ids; every line of a reconcile carries some.
    let log = json_log(&log);
    let reconciles: Vec<&Value> = log
        .iter()
        .filter(|l| l["span"]["name"] == "reconcile")
        .collect();
    assert!(!reconciles.is_empty());
    for line in &reconciles {
        let (trace, span) = (line["trace_id"].as_str(), line["span_id"].as_str());
        assert!(
            trace.is_some_and(|t| t.len() == 32) && span.is_some_and(|s| s.len() == 16),
            "no trace ids: {line}"
        );
    }
    let mine: Vec<&&Value> = reconciles
        .iter()
        .filter(|l| l["trace_id"] == hex(&span.trace_id).as_str())
        .collect();
    assert!(
        mine.iter().any(|l| l["message"] == "child written"),
        "no line of the traced reconcile in the log"
    );
    for line in mine {
        assert_eq!(line["span"]["object"], object.as_str(), "{line}");
        assert_eq!(line["span_id"], hex(&span.span_id).as_str(), "{line}");
    }
}

#[test]
fn a_collector_that_is_down_slows_no_reconcile_and_is_reported_once() {
    install_crds();
    let ns = Namespace::new("traces-down");
    let dir = PluginDir::with(&["database"]);
    // Nothing listens there: every export is refused.
    let closed = free_port();
    let host = Host::start_otel(
        &dir,
        &[],
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &format!("http://127.0.0.1:{closed}"),
            ),
            // Retries included, an export gives up after five seconds: a
            // reconcile that waited for one would take that long, far
            // beyond what a reconcile takes on a busy machine.
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
            QUICK,
        ],
    );
    running(&host, "database");
    let failed = || {
        std::fs::read_to_string(&host.log)
            .unwrap_or_default()
            .matches("trace export failed")
            .count()
    };
    apply(&ns.name, &database("first"));
    database_runs(&ns.name, "first");
    eventually("the failed export in the log", TIMEOUT, || {
        (failed() > 0).then_some(())
    });
    // More spans, more failed exports: nothing more in the log.
    apply(&ns.name, &database("second"));
    database_runs(&ns.name, "second");
    for name in ["first", "second"] {
        for child in [
            format!("statefulset/{name}"),
            format!("service/{name}"),
            format!("secret/{name}-credentials"),
        ] {
            assert!(get_json(&ns.name, &child).is_some(), "{child} missing");
        }
    }
    // Long enough for the second database's spans to fail to export too
    // (each export takes five seconds to give up).
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(failed(), 1, "export failures said once");
    // No reconcile waited on an export (each takes five seconds to fail).
    let selector = r#"plugin="database""#;
    let took = host.metric("kubeplug_reconcile_duration_seconds_sum", selector);
    let reconciles = host.metric("kubeplug_reconcile_duration_seconds_count", selector);
    assert!(reconciles > 0.0);
    println!(
        "figures: {reconciles} reconciles took {:.3} s on average",
        took / reconciles
    );
    assert!(
        took / reconciles < 2.5,
        "{reconciles} reconciles took {took} s in all"
    );
}
