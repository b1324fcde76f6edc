//! `kubeplug run`: wire the operator together and run it until a signal.

mod clients;
mod metrics;
mod probes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use tokio::task::JoinHandle;

use crate::admin::{self, HttpLimits, Probes};
use crate::args::RunArgs;
use crate::args::duration::GoDuration;
use crate::drain;
use clients::Clients;
use kubeplug_api::limits::PreviewLimits;
use kubeplug_api::tls::CertSource;
use kubeplug_core::policy::PolicyFiles;
use kubeplug_kube::health::ApiHealth;
use kubeplug_kube::identity::Access;
use kubeplug_kube::informers::Informers;
use kubeplug_kube::leader::{Elector, LeaseSettings};
use kubeplug_kube::queue::Debounce;
use kubeplug_operator::controller::Settings;
use kubeplug_operator::metrics::OperatorMetrics;
use kubeplug_operator::registry::{Registry, Wiring};
use kubeplug_runtime::{Runtime, budget};
use metrics::HostMetrics;
use probes::probes;

/// Initial scans, [`kubeplug_operator::registry::SETTLE`] apart, waiting for fresh files
/// before reporting ready (10 s). A file that keeps changing for longer is
/// loaded by the watcher once it settles.
const INITIAL_SCAN_RETRIES: usize = 20;

/// How long readiness waits for the plugins present at start to load (each
/// load is bounded by its compile quota; a slower one is served once done).
const INITIAL_LOAD_WAIT: Duration = Duration::from_secs(120);

/// How long the first pull of the plugin artifacts may hold the start
/// back (see [`crate::artifacts`]).
const ARTIFACTS_AT_START: Duration = Duration::from_secs(60);

/// How long reconciles in flight may run on after SIGTERM: well inside the
/// 30 s Kubernetes waits before killing a pod.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long the background tasks (file watcher, gauges) may take to stop: they stop at their next await point.
const TASKS_DRAIN: Duration = Duration::from_secs(1);

/// How long the servers may take to stop: the admin server's own bound on
/// answers in flight ([`HttpLimits::drain`]), and a second to spare.
const SERVERS_DRAIN: Duration = HttpLimits::default_drain().saturating_add(Duration::from_secs(1));

/// The host's memory split (see [`kubeplug_runtime::budget`]) from the flag,
/// the container's limit or the machine's memory.
fn memory_plan(flag_mib: Option<u64>, compiles: usize) -> anyhow::Result<budget::Plan> {
    let (limit, source) = match flag_mib {
        Some(mib) => (mib << 20, "--memory-limit-mib"),
        None => match budget::container_limit() {
            Some(limit) => (limit, "the container's memory limit"),
            None => (
                budget::machine_memory()
                    .context("cannot read the machine's memory; set --memory-limit-mib")?,
                "the machine's memory",
            ),
        },
    };
    anyhow::ensure!(
        limit > budget::HOST_RESERVE,
        "a memory limit of {} MiB leaves nothing for plugins beside the host's own {} MiB",
        limit >> 20,
        budget::HOST_RESERVE >> 20
    );
    let plan = budget::Plan::for_limit(limit, compiles);
    tracing::info!(
        limit_mib = limit >> 20,
        source,
        calls_mib = plan.calls >> 20,
        compile_mib = plan.compile_each >> 20,
        compiles,
        "memory budget"
    );
    Ok(plan)
}

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
    let identity = replica_identity();
    let metrics = HostMetrics::new();
    // Every client reports its answers and failures here: readiness
    // follows what the host sends anyway, no polling.
    let health = Arc::new(ApiHealth::new(metrics.health.clone()));
    let clients = Clients::build(&args, &identity, &metrics, &health).await?;
    let plan = memory_plan(args.memory_limit_mib, args.runtime.compiles)?;
    let runtime = Arc::new(args.runtime.serving_runtime(plan)?);
    match runtime.pool_slots() {
        Some(slots) => tracing::info!(slots, "instances from a pool"),
        None => tracing::info!("instances mapped on demand (no pool)"),
    }
    let elector = leadership(&args, &identity, &clients, &metrics)?;
    log_policy(&policy);
    if let Some(dir) = &args.settings {
        anyhow::ensure!(
            dir.is_dir(),
            "settings directory {} does not exist",
            dir.display()
        );
    }
    let provenance = Arc::new(kubeplug_operator::registry::Provenance::default());
    let registry = registry(
        &args,
        &runtime,
        &clients,
        &metrics,
        &policy,
        &elector,
        &provenance,
    );

    // Background tasks end on `tasks`; the servers on `servers`, last, so
    // that liveness answers while reconciles in flight finish.
    let (tasks, tasks_watch) = drain::channel();
    let (servers, servers_watch) = drain::channel();
    let operator_metrics = metrics.operator.clone();
    let scanned = Arc::new(AtomicBool::new(false));
    let probes = Arc::new(probes(
        metrics.registries(),
        &registry,
        &runtime,
        (&health, &clients.host),
        &scanned,
        &operator_metrics,
    ));
    let own_certs = serving_certs(&args, &clients, &tasks_watch).await?;
    let mut api = match args.api_listen {
        Some(listen) => Some(aggregated_api(
            &args,
            listen,
            cert_source("--api-listen", (&args.api_cert, &args.api_key), &own_certs)?,
            &clients,
            &registry,
            &identity,
            &servers_watch,
        )?),
        None => None,
    };
    let mut webhooks = webhook_server(
        &args,
        &own_certs,
        &registry,
        &operator_metrics,
        runtime.memory_budget(),
        &servers_watch,
    )?;
    let mut admin = tokio::spawn(admin::serve(args.listen, probes.clone(), servers_watch));

    if let Some(file) = &args.plugin_artifacts {
        pull_artifacts(file, &args, &registry, &policy, provenance, &tasks_watch).await;
    }
    let again = initial_scan(&registry, &args).await;
    scanned.store(true, Ordering::Relaxed);
    tokio::spawn(
        tasks_watch.clone().run_until(
            registry
                .clone()
                .watch(args.rescan.0.max(Duration::from_secs(1)), again),
        ),
    );
    tokio::spawn(tasks_watch.run_until(report_gauges(registry.clone(), operator_metrics)));

    tokio::select! {
        result = ended(&mut webhooks) => {
            result.context("webhook server task failed")??;
        }
        result = &mut admin => {
            result.context("metrics server task failed")?
                .with_context(|| format!("failed to serve on {}", args.listen))?;
        }
        result = ended(&mut api) => {
            result.context("aggregated API task failed")??;
        }
        _ = shutdown_signal() => tracing::info!("shutting down"),
    }
    shut_down(&probes, tasks, &registry, elector, servers, admin).await;
    Ok(())
}

/// The host's shutdown, in order: not ready, background tasks, workers,
/// Leases, servers.
async fn shut_down(
    probes: &Probes,
    tasks: drain::Signal,
    registry: &Registry,
    elector: Option<Arc<Elector>>,
    servers: drain::Signal,
    admin: JoinHandle<std::io::Result<()>>,
) {
    // Not ready from now on; liveness keeps answering while reconciles in
    // flight finish, so the kubelet does not kill the pod mid-shutdown.
    probes.stopping.store(true, Ordering::Relaxed);
    if !tasks.drain(TASKS_DRAIN).await {
        tracing::warn!("background tasks still running at shutdown");
    }
    // Workers first, then the Leases: a Lease handed back while a worker
    // still writes would let the next leader write beside it.
    registry.shutdown(SHUTDOWN_GRACE).await;
    if let Some(elector) = elector {
        elector.shutdown().await;
    }
    if !servers.drain(SERVERS_DRAIN).await {
        tracing::info!("servers still answering at shutdown were cut");
    }
    if let Ok(Err(error)) = admin.await {
        tracing::warn!(%error, "HTTP server ended with an error");
    }
}

/// The plugin registry, wired to the host's runtime, caches, clients,
/// metrics, policy and leadership.
fn registry(
    args: &RunArgs,
    runtime: &Arc<Runtime>,
    clients: &Clients,
    metrics: &HostMetrics,
    policy: &Arc<PolicyFiles>,
    elector: &Option<Arc<Elector>>,
    provenance: &Arc<kubeplug_operator::registry::Provenance>,
) -> Arc<Registry> {
    let informers = Arc::new(
        Informers::new(clients.host.clone(), metrics.informers.clone())
            .with_watch_budget(args.watch_cache_bytes),
    );
    Arc::new(Registry::new(
        args.plugins.clone(),
        args.settings.clone(),
        Wiring {
            runtime: runtime.clone(),
            informers,
            access: Arc::new(Access::new(clients.host.clone(), metrics.access.clone())),
            client: clients.host.clone(),
            config: clients.config.clone(),
            client_settings: clients.settings.clone(),
            policy: policy.clone(),
            metrics: metrics.operator.clone(),
            apply_metrics: metrics.apply.clone(),
            settings: Settings {
                concurrency: args.concurrency,
                resync: args.resync.0.max(Duration::from_secs(1)),
                elector: elector.clone(),
                debounce: {
                    let (quiet, max) = args.debounce();
                    Debounce { quiet, max }
                },
                ..Settings::default()
            },
            namespaces: (!args.namespaces.is_empty()).then(|| args.namespaces.clone()),
            promotions: kubeplug_operator::registry::Record::new(
                clients.host.clone(),
                &args.lease_namespace,
            ),
            max_plugin_bytes: args.max_plugin_bytes,
            provenance: provenance.clone(),
        },
    ))
}

/// The webhook server (`--webhook-listen`), if asked for, ending when
/// `servers` drain.
fn webhook_server(
    args: &RunArgs,
    own_certs: &Option<crate::certs::Current>,
    registry: &Arc<Registry>,
    operator_metrics: &OperatorMetrics,
    budget: &Arc<budget::MemoryBudget>,
    servers: &drain::Watch,
) -> anyhow::Result<Option<JoinHandle<anyhow::Result<()>>>> {
    Ok(match args.webhook_listen {
        Some(listen) => {
            let settings = crate::webhooks::WebhookSettings {
                listen,
                cert: cert_source(
                    "--webhook-listen",
                    (&args.webhook_cert, &args.webhook_key),
                    own_certs,
                )?,
                client_ca: args.webhook_client_ca.clone(),
                client_names: args.webhook_client_name.clone(),
            };
            let (registry, metrics, budget, mut drain) = (
                registry.clone(),
                operator_metrics.clone(),
                budget.clone(),
                servers.clone(),
            );
            Some(tokio::spawn(async move {
                tokio::select! {
                    served = crate::webhooks::serve(settings, registry, metrics, budget) => served,
                    () = drain.signaled() => Ok(()),
                }
            }))
        }
        None => None,
    })
}

/// The plugins named in `--plugin-artifacts`, pulled now (within
/// [`ARTIFACTS_AT_START`]) and then as the file changes, until `tasks`
/// drain.
async fn pull_artifacts(
    file: &std::path::Path,
    args: &RunArgs,
    registry: &Arc<Registry>,
    policy: &Arc<PolicyFiles>,
    provenance: Arc<kubeplug_operator::registry::Provenance>,
    tasks: &drain::Watch,
) {
    let mut puller = crate::artifacts::Puller::new(
        file.to_path_buf(),
        registry.clone(),
        policy.clone(),
        provenance,
        args.max_plugin_bytes,
    );
    // The plugins named at start count as present at start (readiness
    // waits for them), within a bound: a registry that does not answer
    // must not keep the host from serving the others.
    if tokio::time::timeout(ARTIFACTS_AT_START, puller.sync())
        .await
        .is_err()
    {
        tracing::warn!(
            "pulling the plugin artifacts took over {ARTIFACTS_AT_START:?}; going on, they load as they arrive"
        );
    }
    tokio::spawn(tasks.clone().run_until(puller.run()));
}

/// Waits for `task` to end; never, when there is none.
async fn ended<T>(task: &mut Option<JoinHandle<T>>) -> Result<T, tokio::task::JoinError> {
    match task.as_mut() {
        Some(task) => task.await,
        None => std::future::pending().await,
    }
}

/// Who this replica is, for Leases and user agents: the pod's name (or the
/// host's) and the process id.
fn replica_identity() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .map(|h| format!("{h}-{}", std::process::id()))
        .unwrap_or_else(|_| format!("kubeplug-{}", std::process::id()))
}

/// With `--leader-elect`, an elector per host (one Lease per plugin).
fn leadership(
    args: &RunArgs,
    identity: &str,
    clients: &Clients,
    metrics: &HostMetrics,
) -> anyhow::Result<Option<Arc<Elector>>> {
    if !args.leader_elect {
        return Ok(None);
    }
    let lease = LeaseSettings {
        duration: positive("--lease-duration", args.lease_duration)?,
        renew_deadline: positive("--renew-deadline", args.renew_deadline)?,
        retry: positive("--retry-period", args.retry_period)?,
        ..LeaseSettings::new(args.lease_namespace.clone(), identity.to_string())
    };
    lease
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid leader election timing: {e}"))?;
    Ok(Some(Elector::start(
        clients.leases.clone(),
        lease,
        metrics.leader.clone(),
    )))
}

fn log_policy(policy: &PolicyFiles) {
    let policy = policy.current();
    tracing::info!(
        strict = policy.strict,
        identity_namespace = %policy.identity_namespace,
        granted = ?policy.service_accounts(),
        "policy loaded"
    );
}

/// With `--serving-certs-secret`, the host's own certificate (made or read,
/// its bundle injected), kept current by a task until the tasks drain.
async fn serving_certs(
    args: &RunArgs,
    clients: &Clients,
    tasks: &drain::Watch,
) -> anyhow::Result<Option<crate::certs::Current>> {
    let Some(secret) = &args.serving_certs_secret else {
        return Ok(None);
    };
    let settings = crate::certs::CertSettings {
        secret: secret.clone(),
        services: crate::certs::inject::Services {
            namespace: args.lease_namespace.clone(),
            names: args.serving_cert_services.clone(),
        },
        lifetimes: crate::certs::issue::Lifetimes::for_serving({
            let validity = args.serving_cert_validity.0;
            // Renewed with a third left: anything shorter would churn.
            anyhow::ensure!(
                validity >= Duration::from_secs(60),
                "--serving-cert-validity must be at least 1m"
            );
            validity
        }),
        check: positive("--serving-certs-check", args.serving_certs_check)?,
        targets: crate::certs::inject::Targets {
            api_services: args.inject_ca_apiservice.clone(),
            validating_webhooks: args.inject_ca_validating_webhook.clone(),
            mutating_webhooks: args.inject_ca_mutating_webhook.clone(),
            crds: args.inject_ca_crd.clone(),
        },
    };
    // A client of its own: a few requests a minute, never queued behind
    // the reconciles'.
    let client = Clients::own(&clients.config, &clients.settings, "serving-certs")
        .context("failed to build the serving certificates' client")?;
    let (current, keep) = crate::certs::start(client, settings)
        .await
        .with_context(|| {
            format!(
                "cannot make or read the serving certificate in Secret {}/{secret}",
                args.lease_namespace
            )
        })?;
    tokio::spawn(tasks.clone().run_until(keep));
    Ok(Some(current))
}

/// Where `listener`'s certificate comes from: its files, or the host's own.
fn cert_source(
    listener: &str,
    (cert, key): (&Option<std::path::PathBuf>, &Option<std::path::PathBuf>),
    own: &Option<crate::certs::Current>,
) -> anyhow::Result<CertSource> {
    match (cert, key, own) {
        (Some(cert), Some(key), _) => Ok(CertSource::Files {
            cert: cert.clone(),
            key: key.clone(),
        }),
        (_, _, Some(current)) => Ok(CertSource::Managed(current.clone())),
        _ => anyhow::bail!(
            "{listener} needs a serving certificate: its --*-cert and --*-key files, or --serving-certs-secret"
        ),
    }
}

/// Serve the aggregated API on `listen` until the servers drain, and track
/// who leads for it.
fn aggregated_api(
    args: &RunArgs,
    listen: SocketAddr,
    cert: CertSource,
    clients: &Clients,
    registry: &Arc<Registry>,
    identity: &str,
    drain: &drain::Watch,
) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
    // The aggregated API's requests (its users' SubjectAccessReviews, the
    // front proxy's settings, who leads) go out on a client of their own
    // too: what its callers cause is limited by its own rate limit, not
    // taken from the reconciles'.
    let client = Clients::own(&clients.config, &clients.settings, "aggregated-api")
        .context("failed to build the aggregated API's client")?;
    let tracker = kubeplug_api::Tracker::new();
    let leases = args.leader_elect.then(|| kubeplug_api::tracker::Leases {
        client: client.clone(),
        namespace: args.lease_namespace.clone(),
    });
    tokio::spawn(
        drain.clone().run_until(tracker.clone().run(
            registry.clone(),
            leases,
            identity.to_string(),
        )),
    );
    let settings = kubeplug_api::ApiSettings {
        listen,
        cert,
        previews: PreviewLimits {
            per_user_rate: args.preview_rate,
            per_user_burst: args.preview_burst,
            per_user_in_flight: args.preview_concurrency,
            in_flight: args.previews_in_flight,
        },
    };
    let (registry, mut drain) = (registry.clone(), drain.clone());
    Ok(tokio::spawn(async move {
        tokio::select! {
            served = kubeplug_api::serve(settings, client, tracker, registry) => Ok(served?),
            () = drain.signaled() => Ok(()),
        }
    }))
}

/// Scan the plugin directory until no file is too fresh to load, then wait
/// for the loads. True if a fresh file is still waiting (the watcher
/// rescans for it).
///
/// A scan skips files younger than SETTLE (perhaps still being written).
/// Plugins copied in just before start are the common case: wait for them,
/// so that ready means every plugin present at start is loaded.
async fn initial_scan(registry: &Arc<Registry>, args: &RunArgs) -> bool {
    let mut again = registry.sync().await;
    for _ in 0..INITIAL_SCAN_RETRIES {
        if !again {
            break;
        }
        tokio::time::sleep(kubeplug_operator::registry::SETTLE).await;
        again = registry.sync().await;
    }
    registry.loaded(INITIAL_LOAD_WAIT).await;
    tracing::info!(dir = %args.plugins.display(), plugins = registry.status().len(), "initial plugin scan done");
    again
}

/// Refresh the queue depths and plugin states every few seconds.
async fn report_gauges(registry: Arc<Registry>, metrics: OperatorMetrics) {
    loop {
        for (plugin, len) in registry.queue_lengths() {
            metrics.queue_depth(&plugin, len);
        }
        registry.report_states();
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// A duration flag that must not be zero.
fn positive(flag: &str, value: GoDuration) -> anyhow::Result<Duration> {
    if value.0.is_zero() {
        anyhow::bail!("{flag} must be longer than 0s");
    }
    Ok(value.0)
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
