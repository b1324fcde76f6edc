//! OpenTelemetry traces (the `otel` feature): the host's spans, sent over
//! OTLP/HTTP to the collector the standard `OTEL_*` variables name
//! ([`config`]).
//!
//! What a trace holds: a `reconcile` span per reconcile (plugin, kind,
//! group, namespace, object, result) and below it the plugin's `call`,
//! each `write` (apply, create, delete, status, patch) and each `finalizer`
//! change; a `webhook` review and an `api` request are traces of their
//! own. The spans below a reconcile are at debug level, so that log lines
//! at the default level keep the reconcile's fields. Traces take the
//! spans of the host's own crates at debug and above whatever `RUST_LOG`
//! says, and their warnings and errors as span events; other crates'
//! spans (kube's HTTP requests, hyper) stay out.
//!
//! Guarantees: a reconcile never waits on the collector. An ended span
//! joins a bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, 2,048) without
//! blocking, or is dropped when it is full (the SDK warns once); batches
//! are sent from the SDK's own thread ([`client`]); failed exports are
//! logged once per outage ([`reported`]). On exit the queue is flushed for
//! at most five seconds ([`Traces::shutdown`]).
//!
//! Caveats: OTLP/HTTP only (no gRPC), no compression, no client
//! certificates or extra CAs (HTTPS trusts the system's roots); a span is
//! sent once it ends, so a reconcile still running at a crash is lost.

mod client;
mod config;
mod ids;
mod reported;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_subscriber::filter::{self, LevelFilter};
use tracing_subscriber::{Layer, Registry};

use config::{Config, Protocol};
pub(super) use ids::with_ids;

/// The trace pipeline, when the environment asks for one.
#[derive(Default)]
pub struct Traces {
    /// The provider whose batch processor sends the spans, and its settings.
    exporting: Option<(SdkTracerProvider, Config)>,
    /// The layer that turns spans into OpenTelemetry ones, until the
    /// subscriber takes it.
    layer: Option<Box<dyn Layer<Registry> + Send + Sync>>,
}

impl Traces {
    /// The pipeline the `OTEL_*` variables ask for, or none.
    pub(super) fn from_env() -> anyhow::Result<Self> {
        let config =
            config::from_env(|name| std::env::var(name).ok()).context("cannot export traces")?;
        let Some(config) = config else {
            return Ok(Traces::default());
        };
        let provider = provider(&config)?;
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(env!("CARGO_PKG_NAME")))
            // Which module, where in it, on which thread: noise in every
            // span, and the module changes with refactors; the span's name
            // does not.
            .with_target(false)
            .with_location(false)
            .with_threads(false)
            .and_then(ids::Ids::default())
            .with_filter(host_spans())
            .boxed();
        Ok(Traces {
            exporting: Some((provider, config)),
            layer: Some(layer),
        })
    }

    pub(super) fn layer(&mut self) -> Option<Box<dyn Layer<Registry> + Send + Sync>> {
        self.layer.take()
    }

    /// Say where traces go, once logging works.
    pub(super) fn announce(&self) {
        if let Some((_, config)) = &self.exporting {
            tracing::info!(
                endpoint = %config.endpoint,
                protocol = config.protocol.name(),
                "exporting traces"
            );
        }
    }

    /// Send the spans still queued and stop: within the SDK's five seconds,
    /// so a SIGTERM with the collector gone still ends well inside a pod's
    /// grace period.
    pub fn shutdown(self) {
        if let Some((provider, _)) = self.exporting
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(%error, "spans still queued at exit may be lost");
        }
    }
}

/// A provider exporting to `config`'s collector through a batch processor,
/// its resource from the SDK's detectors (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`) with `kubeplug` as the default service name,
/// its sampler from `OTEL_TRACES_SAMPLER`, its queue from `OTEL_BSP_*`.
fn provider(config: &Config) -> anyhow::Result<SdkTracerProvider> {
    let protocol = match config.protocol {
        Protocol::Protobuf => opentelemetry_otlp::Protocol::HttpBinary,
        Protocol::Json => opentelemetry_otlp::Protocol::HttpJson,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client::Client::new(config.timeout)?)
        .with_endpoint(config.endpoint.as_str())
        .with_protocol(protocol)
        .with_timeout(config.timeout)
        .build()
        .context("failed to build the trace exporter")?;
    let mut resource = Resource::builder();
    if !config.names_service {
        resource = resource.with_service_name(env!("CARGO_PKG_NAME"));
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(reported::Reported::new(exporter))
        .with_resource(resource.build())
        .build())
}

/// What traces take: the spans of the host's own crates (`kubeplug*`) at
/// debug and above, and their warnings and errors as span events.
fn host_spans() -> filter::FilterFn<impl Fn(&tracing::Metadata<'_>) -> bool> {
    filter::filter_fn(|meta| {
        let most = if meta.is_span() {
            Level::DEBUG
        } else {
            Level::WARN
        };
        meta.target().starts_with("kubeplug") && *meta.level() <= most
    })
    .with_max_level_hint(LevelFilter::DEBUG)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::Tracer as _;
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::time::Duration;

    /// One OTLP/HTTP request, as a collector on a loopback port gets it:
    /// its request line, content type and body.
    fn received(protocol: Protocol) -> (String, String, Vec<u8>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let config = Config {
            endpoint: format!("http://{}/v1/traces", listener.local_addr().unwrap()),
            protocol,
            timeout: Duration::from_secs(5),
            names_service: false,
        };
        let provider = provider(&config).unwrap();
        provider.tracer("test").in_span("reconcile", |_| {});
        // Shut down from another thread: it waits for the export, which
        // waits for this one to answer.
        let flushed = std::thread::spawn(move || provider.shutdown());
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let (mut request_line, mut content_type, mut length) = (String::new(), None, 0);
        reader.read_line(&mut request_line).unwrap();
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            let Some((name, value)) = header.trim_end().split_once(": ") else {
                break;
            };
            match name.to_ascii_lowercase().as_str() {
                "content-type" => content_type = Some(value.to_string()),
                "content-length" => length = value.parse().unwrap(),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        write!(&stream, "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").unwrap();
        flushed.join().unwrap().expect("flushed at shutdown");
        (request_line, content_type.unwrap(), body)
    }

    #[test]
    fn spans_still_queued_at_shutdown_reach_the_collector_as_protobuf() {
        let (request_line, content_type, body) = received(Protocol::Protobuf);
        assert_eq!(request_line.trim_end(), "POST /v1/traces HTTP/1.1");
        assert_eq!(content_type, "application/x-protobuf");
        let body = String::from_utf8_lossy(&body);
        assert!(
            body.contains("reconcile") && body.contains("kubeplug"),
            "{body}"
        );
    }

    #[test]
    fn http_json_sends_the_same_spans_as_json() {
        let (_, content_type, body) = received(Protocol::Json);
        assert_eq!(content_type, "application/json");
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let spans = &body["resourceSpans"][0];
        assert_eq!(spans["scopeSpans"][0]["spans"][0]["name"], "reconcile");
        let service = spans["resource"]["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == "service.name")
            .unwrap();
        assert_eq!(service["value"]["stringValue"], "kubeplug");
    }
}
