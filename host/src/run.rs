//! `kubeplug run`: wire the operator together and run it until a signal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::cli::{PolicyArgs, RuntimeArgs};
use crate::controller::Settings;
use crate::identity::Access;
use crate::informers::Informers;
use crate::leader::LeaseSettings;
use crate::registry::{Registry, Wiring};
use crate::telemetry::{self, Metrics, Probes};

#[derive(Args)]
pub struct RunArgs {
    /// Directory of plugin `.wasm` files (and optional `<stem>.yaml` settings).
    #[arg(long, env = "KUBEPLUG_PLUGINS")]
    plugins: PathBuf,
    /// Address for /metrics, /healthz, /readyz and /plugins.
    #[arg(long, env = "KUBEPLUG_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Parents reconciled at once, per plugin.
    #[arg(long, default_value_t = Settings::default().concurrency)]
    concurrency: usize,
    /// Resync period for plugins whose manifest sets none, in seconds.
    #[arg(long, default_value_t = Settings::default().resync.as_secs())]
    resync_seconds: u64,
    /// Elect a leader per plugin through a Lease, so that several replicas
    /// can run with one writer per plugin.
    #[arg(long, env = "KUBEPLUG_LEADER_ELECT")]
    leader_elect: bool,
    /// Namespace of the Leases (default: the pod's namespace, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// Rescan the plugin directory at least this often, in seconds, even
    /// without change notifications.
    #[arg(long, default_value_t = 30)]
    rescan_seconds: u64,
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// Initial scans, [`crate::registry::SETTLE`] apart, waiting for fresh files
/// before reporting ready (10 s). A file that keeps changing for longer is
/// loaded by the watcher once it settles.
const INITIAL_SCAN_RETRIES: usize = 20;

/// How long readiness waits for the plugins present at start to load (each
/// load is bounded by its compile quota; a slower one is served once done).
const INITIAL_LOAD_WAIT: Duration = Duration::from_secs(120);

/// How long reconciles in flight may run on after SIGTERM: well inside the
/// 30 s Kubernetes waits before killing a pod.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?
        .block_on(serve(args))
}

async fn serve(args: RunArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.plugins.is_dir(),
        "plugin directory {} does not exist",
        args.plugins.display()
    );
    let policy = Arc::new(args.policy.watch()?);
    let config = kube::Config::infer()
        .await
        .context("failed to find Kubernetes credentials (kubeconfig or in-cluster)")?;
    let client = kube::Client::try_from(config.clone())
        .context("failed to connect to Kubernetes (kubeconfig or in-cluster)")?;
    let runtime = Arc::new(args.runtime.bounded_runtime()?);
    let informers = Arc::new(Informers::new(client.clone()));
    let metrics = Metrics::new();
    let settings = Settings {
        concurrency: args.concurrency,
        resync: Duration::from_secs(args.resync_seconds.max(1)),
        lease: args.leader_elect.then(|| {
            let identity = std::env::var("POD_NAME")
                .or_else(|_| std::env::var("HOSTNAME"))
                .map(|h| format!("{h}-{}", std::process::id()))
                .unwrap_or_else(|_| format!("kubeplug-{}", std::process::id()));
            LeaseSettings::new(args.lease_namespace.clone(), identity)
        }),
        ..Settings::default()
    };
    {
        let policy = policy.current();
        tracing::info!(
            strict = policy.strict,
            identity_namespace = %policy.identity_namespace,
            granted = ?policy.service_accounts(),
            "policy loaded"
        );
    }
    let registry = Arc::new(Registry::new(
        args.plugins.clone(),
        Wiring {
            runtime,
            informers: informers.clone(),
            access: Arc::new(Access::new(client.clone())),
            client,
            config,
            policy,
            metrics: metrics.clone(),
            settings,
        },
    ));

    let scanned = Arc::new(AtomicBool::new(false));
    let probes = Arc::new(Probes {
        metrics: metrics.clone(),
        ready: {
            let (informers, scanned) = (informers.clone(), scanned.clone());
            Box::new(move || scanned.load(Ordering::Relaxed) && informers.all_synced())
        },
        plugins: {
            let registry = registry.clone();
            Box::new(move || serde_json::to_value(registry.status()).unwrap_or_default())
        },
    });
    let server = tokio::spawn(telemetry::serve(args.listen, probes));

    // A scan skips files younger than SETTLE (perhaps still being written).
    // Plugins copied in just before start are the common case: wait for
    // them, so that ready means every plugin present at start is loaded.
    let mut again = registry.sync().await;
    for _ in 0..INITIAL_SCAN_RETRIES {
        if !again {
            break;
        }
        tokio::time::sleep(crate::registry::SETTLE).await;
        again = registry.sync().await;
    }
    registry.loaded(INITIAL_LOAD_WAIT).await;
    scanned.store(true, Ordering::Relaxed);
    tracing::info!(dir = %args.plugins.display(), plugins = registry.status().len(), "initial plugin scan done");
    let watcher = tokio::spawn(
        registry
            .clone()
            .watch(Duration::from_secs(args.rescan_seconds.max(1)), again),
    );
    let queue_gauges = {
        let (registry, metrics) = (registry.clone(), metrics.clone());
        tokio::spawn(async move {
            loop {
                for (plugin, len) in registry.queue_lengths() {
                    metrics.queue_depth(&plugin, len);
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        })
    };

    tokio::select! {
        result = server => {
            result.context("metrics server task failed")?
                .with_context(|| format!("failed to serve on {}", args.listen))?;
        }
        _ = shutdown_signal() => tracing::info!("shutting down"),
    }
    watcher.abort();
    queue_gauges.abort();
    registry.shutdown(SHUTDOWN_GRACE).await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
