//! What the two native Database controllers share (`native-database`, the
//! naive baseline, and `native-database-reflector`): the counters the
//! operator bench reads, logging, recording the logic's events, the error
//! type. Each includes it with `#[path]`; it is not a binary of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};

pub const NAME_LABEL: &str = "app.kubernetes.io/name";
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";

/// What a controller did, logged as `reconciles=N failures=N reads=N
/// writes=N` (the bench's `req/rec` is (reads + writes) / reconciles).
#[derive(Default)]
pub struct Counters {
    pub reconciles: AtomicU64,
    pub failures: AtomicU64,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
}

impl Counters {
    pub fn log(&self, what: &str) {
        tracing::info!(
            reconciles = self.reconciles.load(Relaxed),
            failures = self.failures.load(Relaxed),
            reads = self.reads.load(Relaxed),
            writes = self.writes.load(Relaxed),
            "{what}"
        );
    }
}

/// A controller's state, as far as the shared parts need it.
pub trait Counted {
    fn counters(&self) -> &Counters;
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("database plugin: {0}")]
    Plugin(#[from] kubeplug_sdk::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("unexpected child kind {0:?}")]
    Kind(String),
}

/// Log to stderr at `RUST_LOG`'s level (default `info`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Log the counters as `<what>` on every SIGUSR1 (how the bench reads them).
pub fn log_on_usr1<S: Counted + Send + Sync + 'static>(st: Arc<S>, what: &'static str) {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut usr1 = signal(SignalKind::user_defined1()).expect("installing a SIGUSR1 handler");
        while usr1.recv().await.is_some() {
            st.counters().log(what);
        }
    });
}

/// Record the logic's events on the Database, each counted as a write.
/// Failures are logged: an event is worth less than the reconcile.
pub async fn record_events(
    recorder: &Recorder,
    reference: &ObjectReference,
    events: &[kubeplug_sdk::Event],
    counters: &Counters,
    name: &str,
) {
    for event in events {
        counters.writes.fetch_add(1, Relaxed);
        let event = Event {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: event.reason.clone(),
            note: Some(event.message.clone()),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, reference).await {
            tracing::warn!(%name, error = %e, "failed to record event");
        }
    }
}

/// Drive a controller's results until it stops (on SIGTERM or Ctrl-C), then
/// log the counters as `stopped`.
pub async fn run_to_end<T, E: std::fmt::Display>(
    results: impl futures::Stream<Item = Result<T, E>>,
    counters: &Counters,
    stopped: &str,
) {
    use futures::StreamExt;
    results
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "controller");
            }
            std::future::ready(())
        })
        .await;
    counters.log(stopped);
}

/// Server-side apply `status` to the Database `ns/name`, counted as a write.
pub async fn apply_status(
    client: &kube::Client,
    database: &kube::api::ApiResource,
    (ns, name): (&str, &str),
    status: serde_json::Value,
    params: &kube::api::PatchParams,
    counters: &Counters,
) -> Result<(), Error> {
    let body = serde_json::json!({
        "apiVersion": database.api_version,
        "kind": database.kind,
        "metadata": { "name": name, "namespace": ns },
        "status": status,
    });
    counters.writes.fetch_add(1, Relaxed);
    kube::Api::<DynamicObject>::namespaced_with(client.clone(), ns, database)
        .patch_status(name, params, &kube::api::Patch::Apply(&body))
        .await?;
    Ok(())
}

/// Count the failure and retry in 5 s.
pub fn error_policy<S: Counted>(db: Arc<DynamicObject>, error: &Error, st: Arc<S>) -> Action {
    st.counters().failures.fetch_add(1, Relaxed);
    tracing::warn!(database = %db.name_any(), %error, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}
