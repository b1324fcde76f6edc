//! Traces in a build without the `otel` feature: none. A host whose
//! environment names a collector says so once, at start, rather than
//! leaving someone to wonder where the traces went.

use tracing_subscriber::{Layer, Registry};

/// The variables that turn export on in an `otel` build.
const ENDPOINTS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// No traces; only the endpoint variable that asked for them, if any.
#[derive(Debug, Default)]
pub struct Traces {
    asked: Option<&'static str>,
}

impl Traces {
    pub(super) fn from_env() -> anyhow::Result<Self> {
        let asked = ENDPOINTS
            .into_iter()
            .find(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()));
        Ok(Traces { asked })
    }

    pub(super) fn layer(&mut self) -> Option<Box<dyn Layer<Registry> + Send + Sync>> {
        None
    }

    pub(super) fn announce(&self) {
        if let Some(variable) = self.asked {
            tracing::warn!(
                variable,
                "built without otel: no traces are exported (build with `--features otel`)"
            );
        }
    }

    pub fn shutdown(self) {}
}

/// The JSON log format as it is: without traces there are no ids to add.
pub(super) fn with_ids<F>(format: F) -> F {
    format
}
