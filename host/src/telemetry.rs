//! Metrics, health endpoints and tracing setup.
//!
//! `/metrics` (Prometheus text), `/healthz` (the process is up), `/readyz`
//! (every watch has listed once, kubert's `initialized` habit), `/plugins`
//! (what is loaded: versions, digests, states, last errors, as JSON),
//! `/plugins/<plugin>/replays[/<namespace>/<name>]` (failed calls kept for
//! replay, see [`crate::replay`]; loopback clients only).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::rollout::State;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    plugin: String,
    /// `ok` or a short error label (see `CallError::label`).
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    plugin: String,
    /// `compared` (parents compared) or `differing` (parents whose latest
    /// comparison differs).
    parents: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    plugin: String,
    verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    plugin: String,
    version: String,
    digest: String,
    state: String,
}

struct Inner {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    duration: Family<PluginLabels, Histogram>,
    writes: Family<WriteLabels, Counter>,
    reads: Family<WriteLabels, Counter>,
    access_reviews: Counter,
    queue_depth: Family<PluginLabels, Gauge>,
    plugin_info: Family<InfoLabels, Gauge>,
    /// The info series currently set per plugin, to replace it on upgrade.
    info_current: std::sync::Mutex<std::collections::HashMap<String, InfoLabels>>,
    load_failures: Family<PluginLabels, Counter>,
    child_clashes: Family<PluginLabels, Counter>,
    events_dropped: Family<PluginLabels, Counter>,
    leading: Family<PluginLabels, Gauge>,
    watch_errors: Family<ResourceLabels, Counter>,
    cached_objects: Family<ResourceLabels, Gauge>,
    cached_bytes: Family<ResourceLabels, Gauge>,
    cache_left_out: Family<ResourceLabels, Gauge>,
    api_reachable: Gauge,
    shadow_comparisons: Family<ResultLabels, Counter>,
    shadow_parents: Family<ShadowLabels, Gauge>,
    rollbacks: Family<PluginLabels, Counter>,
    call_memory: Family<AmountLabels, Gauge>,
    calls_waiting_for_memory: Gauge,
    call_memory_waits: Counter,
    call_memory_refusals: Family<ReasonLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AmountLabels {
    amount: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

/// The host's metrics. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kubeplug");
        let reconciles = Family::<ResultLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles by plugin and result",
            reconciles.clone(),
        );
        let duration = Family::<PluginLabels, Histogram>::new_with_constructor(|| {
            // 100 µs .. ~1.6 s: a healthy reconcile is a few ms with writes.
            Histogram::new(exponential_buckets(0.0001, 2.0, 15))
        });
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile latency including writes",
            duration.clone(),
        );
        let writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "api_writes",
            "API writes by plugin and verb",
            writes.clone(),
        );
        let reads = Family::<WriteLabels, Counter>::default();
        registry.register(
            "api_reads",
            "API reads made inside reconciles (watches and caches aside), by plugin and verb",
            reads.clone(),
        );
        let access_reviews = Counter::default();
        registry.register(
            "access_reviews",
            "SubjectAccessReviews sent to check what a plugin may read (answers are cached)",
            access_reviews.clone(),
        );
        let queue_depth = Family::<PluginLabels, Gauge>::default();
        registry.register(
            "queue_depth",
            "Keys waiting per plugin",
            queue_depth.clone(),
        );
        let plugin_info = Family::<InfoLabels, Gauge>::default();
        registry.register(
            "plugin_info",
            "Loaded plugins (1 = current version and state)",
            plugin_info.clone(),
        );
        let load_failures = Family::<PluginLabels, Counter>::default();
        registry.register(
            "plugin_load_failures",
            "Plugin files that failed to load",
            load_failures.clone(),
        );
        let child_clashes = Family::<PluginLabels, Counter>::default();
        registry.register(
            "child_clashes",
            "Children not written because an object of that name exists and is not controlled by their parent",
            child_clashes.clone(),
        );
        let events_dropped = Family::<PluginLabels, Counter>::default();
        registry.register(
            "events_dropped",
            "Plugin events not recorded: over the per-parent rate quota",
            events_dropped.clone(),
        );
        let leading = Family::<PluginLabels, Gauge>::default();
        registry.register(
            "leading",
            "1 while this replica holds the plugin's Lease and may write",
            leading.clone(),
        );
        let watch_errors = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "watch_errors",
            "Failed lists and watches by resource (each is retried)",
            watch_errors.clone(),
        );
        let cached_objects = Family::<ResourceLabels, Gauge>::default();
        registry.register(
            "cached_objects",
            "Objects in the shared cache by resource",
            cached_objects.clone(),
        );
        let cached_bytes = Family::<ResourceLabels, Gauge>::default();
        registry.register(
            "cached_bytes",
            "Bytes of the objects in the shared cache by resource (their JSON text and a fixed overhead each)",
            cached_bytes.clone(),
        );
        let cache_left_out = Family::<ResourceLabels, Gauge>::default();
        registry.register(
            "cache_left_out_objects",
            "Objects a watch delivered but its cache left out, over its byte budget (--watch-cache-bytes); the plugins reading it are degraded",
            cache_left_out.clone(),
        );
        let api_reachable = Gauge::default();
        registry.register(
            "api_reachable",
            "1 while the API server answers the host's health checks",
            api_reachable.clone(),
        );
        let shadow_comparisons = Family::<ResultLabels, Counter>::default();
        registry.register(
            "shadow_comparisons",
            "Reconciles compared with the candidate in shadow, by result (same, differs, candidate_error)",
            shadow_comparisons.clone(),
        );
        let shadow_parents = Family::<ShadowLabels, Gauge>::default();
        registry.register(
            "shadow_parents",
            "Parents compared with the candidate in shadow, and those whose latest comparison differs",
            shadow_parents.clone(),
        );
        let rollbacks = Family::<PluginLabels, Counter>::default();
        registry.register(
            "plugin_rollbacks",
            "New plugin versions rolled back automatically after failing their probation",
            rollbacks.clone(),
        );
        let call_memory = Family::<AmountLabels, Gauge>::default();
        registry.register(
            "call_memory_bytes",
            "The host-wide memory budget of plugin calls: budget, reserved (by calls in flight), peak",
            call_memory.clone(),
        );
        let calls_waiting_for_memory = Gauge::default();
        registry.register(
            "calls_waiting_for_memory",
            "Plugin calls waiting for room in the host's memory budget now",
            calls_waiting_for_memory.clone(),
        );
        let call_memory_waits = Counter::default();
        registry.register(
            "call_memory_waits",
            "Plugin calls that waited for room in the host's memory budget",
            call_memory_waits.clone(),
        );
        let call_memory_refusals = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "call_memory_refusals",
            "Plugin calls not run or stopped for lack of room in the host's memory budget (waited: gave up waiting; grow: grew past what was left)",
            call_memory_refusals.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                reconciles,
                duration,
                writes,
                reads,
                access_reviews,
                queue_depth,
                plugin_info,
                info_current: Default::default(),
                load_failures,
                child_clashes,
                events_dropped,
                leading,
                watch_errors,
                cached_objects,
                cached_bytes,
                cache_left_out,
                api_reachable,
                shadow_comparisons,
                shadow_parents,
                rollbacks,
                call_memory,
                calls_waiting_for_memory,
                call_memory_waits,
                call_memory_refusals,
            }),
        }
    }

    /// The memory budget's state, read at each scrape.
    pub fn call_memory(&self, stats: crate::runtime::BudgetStats) {
        let i = &self.inner;
        let total = if stats.total == usize::MAX {
            0
        } else {
            stats.total
        };
        for (amount, value) in [
            ("budget", total),
            ("reserved", stats.used),
            ("peak", stats.peak),
        ] {
            i.call_memory
                .get_or_create(&AmountLabels {
                    amount: amount.into(),
                })
                .set(value as i64);
        }
        i.calls_waiting_for_memory.set(stats.waiting as i64);
        let raise = |counter: &Counter, to: u64| {
            counter.inc_by(to.saturating_sub(counter.get()));
        };
        raise(&i.call_memory_waits, stats.waits);
        raise(
            &i.call_memory_refusals.get_or_create(&ReasonLabels {
                reason: "waited".into(),
            }),
            stats.timed_out,
        );
        raise(
            &i.call_memory_refusals.get_or_create(&ReasonLabels {
                reason: "grow".into(),
            }),
            stats.refused,
        );
    }

    pub fn reconciled(&self, plugin: &str, result: &str, took: Duration) {
        self.inner
            .reconciles
            .get_or_create(&ResultLabels {
                plugin: plugin.into(),
                result: result.into(),
            })
            .inc();
        self.inner
            .duration
            .get_or_create(&PluginLabels {
                plugin: plugin.into(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn read(&self, plugin: &str, verb: &str) {
        self.inner
            .reads
            .get_or_create(&WriteLabels {
                plugin: plugin.into(),
                verb: verb.into(),
            })
            .inc();
    }

    pub fn access_review(&self) {
        self.inner.access_reviews.inc();
    }

    pub fn write(&self, plugin: &str, verb: &str) {
        self.inner
            .writes
            .get_or_create(&WriteLabels {
                plugin: plugin.into(),
                verb: verb.into(),
            })
            .inc();
    }

    pub fn queue_depth(&self, plugin: &str, depth: usize) {
        self.inner
            .queue_depth
            .get_or_create(&PluginLabels {
                plugin: plugin.into(),
            })
            .set(depth as i64);
    }

    /// Record which version of `plugin` is current, replacing the old series.
    pub fn plugin_info(&self, plugin: &str, version: &str, digest: &str, state: State) {
        let labels = InfoLabels {
            plugin: plugin.into(),
            version: version.into(),
            digest: digest.into(),
            state: state.as_str().into(),
        };
        let mut current = self.inner.info_current.lock().expect("metrics lock");
        if let Some(old) = current.insert(plugin.to_string(), labels.clone()) {
            self.inner.plugin_info.remove(&old);
        }
        self.inner.plugin_info.get_or_create(&labels).set(1);
    }

    /// Forget a plugin that was removed.
    pub fn plugin_removed(&self, plugin: &str) {
        let mut current = self.inner.info_current.lock().expect("metrics lock");
        if let Some(old) = current.remove(plugin) {
            self.inner.plugin_info.remove(&old);
        }
    }

    pub fn load_failed(&self, plugin: &str) {
        self.inner
            .load_failures
            .get_or_create(&PluginLabels {
                plugin: plugin.into(),
            })
            .inc();
    }

    pub fn child_clash(&self, plugin: &str) {
        self.inner
            .child_clashes
            .get_or_create(&PluginLabels {
                plugin: plugin.into(),
            })
            .inc();
    }

    pub fn events_dropped(&self, plugin: &str, count: usize) {
        self.inner
            .events_dropped
            .get_or_create(&PluginLabels {
                plugin: plugin.into(),
            })
            .inc_by(count as u64);
    }

    pub fn leading(&self, plugin: &str, leading: bool) {
        self.inner
            .leading
            .get_or_create(&PluginLabels {
                plugin: plugin.into(),
            })
            .set(i64::from(leading));
    }

    pub fn watch_error(&self, resource: &str) {
        self.inner
            .watch_errors
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .inc();
    }

    pub fn cached_objects(&self, resource: &str, count: usize, bytes: usize, left_out: usize) {
        let labels = ResourceLabels {
            resource: resource.into(),
        };
        self.inner
            .cached_objects
            .get_or_create(&labels)
            .set(count as i64);
        self.inner
            .cached_bytes
            .get_or_create(&labels)
            .set(bytes as i64);
        self.inner
            .cache_left_out
            .get_or_create(&labels)
            .set(left_out as i64);
    }

    /// Forget the cache gauge of an informer that stopped.
    pub fn informer_stopped(&self, resource: &str) {
        let labels = ResourceLabels {
            resource: resource.into(),
        };
        self.inner.cached_objects.remove(&labels);
        self.inner.cached_bytes.remove(&labels);
        self.inner.cache_left_out.remove(&labels);
    }

    pub fn shadow_compared(&self, plugin: &str, result: &str) {
        self.inner
            .shadow_comparisons
            .get_or_create(&ResultLabels {
                plugin: plugin.into(),
                result: result.into(),
            })
            .inc();
    }

    /// Parents compared and differing in shadow; `None`: no shadow now.
    pub fn shadow_parents(&self, plugin: &str, counts: Option<(usize, usize)>) {
        for (parents, count) in [
            ("compared", counts.map(|c| c.0)),
            ("differing", counts.map(|c| c.1)),
        ] {
            let labels = ShadowLabels {
                plugin: plugin.into(),
                parents: parents.into(),
            };
            match count {
                Some(count) => {
                    self.inner
                        .shadow_parents
                        .get_or_create(&labels)
                        .set(count as i64);
                }
                None => {
                    self.inner.shadow_parents.remove(&labels);
                }
            }
        }
    }

    pub fn rolled_back(&self, plugin: &str) {
        self.inner
            .rollbacks
            .get_or_create(&PluginLabels {
                plugin: plugin.into(),
            })
            .inc();
    }

    pub fn api_reachable(&self, reachable: bool) {
        self.inner.api_reachable.set(i64::from(reachable));
    }

    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// What the HTTP endpoints read from the rest of the host.
pub struct Probes {
    pub metrics: Metrics,
    /// Run before each `/metrics` scrape to refresh gauges derived from
    /// live state (a plugin's state in `plugin_info`), so a scrape never
    /// disagrees with `/plugins` read a moment before.
    pub refresh: Box<dyn Fn() + Send + Sync>,
    /// Ok when the host can serve; else why not.
    pub ready: Box<dyn Fn() -> Result<(), String> + Send + Sync>,
    /// `/plugins`: with `detail`, everything (file paths, error text a
    /// plugin may have written); without, what is safe to show anyone who
    /// can reach the port.
    pub plugins: Box<dyn Fn(Detail) -> serde_json::Value + Send + Sync>,
    /// `/plugins/<plugin>/replays`: `(plugin, None)` lists its failure
    /// captures, `(plugin, Some("ns/name"))` is one of them; `None`: the
    /// plugin keeps none (or not that one).
    pub replays: Replays,
    /// Set once the host is stopping: `/readyz` answers 503.
    pub stopping: std::sync::atomic::AtomicBool,
}

/// See [`Probes::replays`].
pub type Replays = Box<dyn Fn(&str, Option<&str>) -> Option<serde_json::Value> + Send + Sync>;

/// Why only loopback clients get captures: they hold cluster data.
pub const REPLAYS_LOOPBACK_ONLY: &str =
    "replays are served to loopback clients only (kubectl port-forward)";

/// How much of `/plugins` a client sees.
///
/// Only a connection from loopback gets [`Detail::Full`]: in a pod that is
/// the pod itself or `kubectl port-forward`, which RBAC guards
/// (`pods/portforward`); kubelet probes, Prometheus and every other pod get
/// [`Detail::Summary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    Summary,
    Full,
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}

fn route(probes: &Probes, path: &str, detail: Detail) -> Response<Full<Bytes>> {
    match path {
        "/metrics" => {
            (probes.refresh)();
            respond(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                probes.metrics.encode(),
            )
        }
        "/healthz" | "/livez" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if probes.stopping.load(std::sync::atomic::Ordering::Relaxed) => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "shutting down\n".into(),
        ),
        "/readyz" => match (probes.ready)() {
            Ok(()) => respond(StatusCode::OK, "text/plain", "ok\n".into()),
            Err(why) => respond(StatusCode::SERVICE_UNAVAILABLE, "text/plain", why + "\n"),
        },
        "/plugins" => respond(
            StatusCode::OK,
            "application/json",
            serde_json::to_string_pretty(&(probes.plugins)(detail)).unwrap_or_default() + "\n",
        ),
        _ => match replay_path(path) {
            Some(_) if detail != Detail::Full => respond(
                StatusCode::FORBIDDEN,
                "text/plain",
                format!("{REPLAYS_LOOPBACK_ONLY}\n"),
            ),
            Some((plugin, parent)) => match (probes.replays)(plugin, parent) {
                Some(body) => respond(
                    StatusCode::OK,
                    "application/json",
                    serde_json::to_string_pretty(&body).unwrap_or_default() + "\n",
                ),
                None => respond(
                    StatusCode::NOT_FOUND,
                    "text/plain",
                    match parent {
                        None => format!("plugin {plugin} is not served here\n"),
                        Some(parent) => format!(
                            "no failure of {parent} is kept for plugin {plugin} (or the plugin is not served here)\n"
                        ),
                    },
                ),
            },
            None => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        },
    }
}

/// `/plugins/<plugin>/replays[/<namespace>/<name> | /<name>]` as the plugin
/// and the parent (`namespace/name` or `name`).
fn replay_path(path: &str) -> Option<(&str, Option<&str>)> {
    let rest = path.strip_prefix("/plugins/")?;
    let (plugin, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("replays")?;
    if plugin.is_empty() {
        return None;
    }
    match rest {
        "" | "/" => Some((plugin, None)),
        _ => {
            let parent = rest.strip_prefix('/')?;
            let parts: Vec<&str> = parent.split('/').collect();
            (parts.len() <= 2 && parts.iter().all(|p| !p.is_empty()))
                .then_some((plugin, Some(parent)))
        }
    }
}

/// Bounds on one HTTP connection: a client that sends nothing, or keeps a
/// connection open forever, must not pile up tasks and sockets.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Longest wait for a request's headers.
    pub header_read: Duration,
    /// Longest life of one connection (keep-alive included).
    pub connection: Duration,
    /// At shutdown, how long answers in flight may take to finish.
    pub drain: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_read: Duration::from_secs(10),
            connection: Duration::from_secs(120),
            drain: Duration::from_secs(2),
        }
    }
}

/// The next connection. An `accept` error (e.g. out of file descriptors) is
/// logged and retried: it never ends a listener, nor the host.
pub async fn accept(listener: &tokio::net::TcpListener) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) => {
                tracing::warn!(addr = ?listener.local_addr().ok(), %error, "accepting a connection failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

fn detail_for(peer: SocketAddr) -> Detail {
    if peer.ip().to_canonical().is_loopback() {
        Detail::Full
    } else {
        Detail::Summary
    }
}

/// Serve the endpoints on `addr` until `stop` turns true, then finish the
/// answers in flight (see [`serve_on`]).
pub async fn serve(
    addr: SocketAddr,
    probes: Arc<Probes>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz, /plugins (and replays to loopback clients)");
    serve_on(listener, probes, HttpLimits::default(), stop).await;
    Ok(())
}

/// Serve on a bound listener until `stop` turns true. An `accept` error
/// (e.g. out of file descriptors) is logged and retried: it never ends the
/// host. At stop, the listener closes, idle keep-alive connections are
/// closed, and answers in flight get [`HttpLimits::drain`] to finish.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    probes: Arc<Probes>,
    limits: HttpLimits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = accept(&listener) => accepted,
            _ = stopped(&mut stop) => break,
        };
        // Reap finished connections so the set stays small.
        while connections.try_join_next().is_some() {}
        let detail = detail_for(peer);
        let (probes, mut stop) = (probes.clone(), stop.clone());
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let response = route(&probes, req.uri().path(), detail);
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            let served = async {
                tokio::select! {
                    _ = connection.as_mut() => {}
                    _ = stopped(&mut stop) => {
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.as_mut().await;
                    }
                }
            };
            let _ = tokio::time::timeout(limits.connection, served).await;
        });
    }
    drop(listener);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.drain, drained).await.is_err() {
        tracing::info!("HTTP answers still in flight at shutdown were cut");
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; colour only on a terminal.
    Text,
    /// One JSON object per line, with the fields of the event and of the
    /// current span (plugin, object) at the top level, for log pipelines.
    Json,
}

/// Log to stderr, filtered by `RUST_LOG` (or its alias `KUBEPLUG_LOG`;
/// default `info`).
pub fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("RUST_LOG")
        .or_else(|_| EnvFilter::try_from_env("KUBEPLUG_LOG"))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn server(limits: HttpLimits) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let probes = Arc::new(Probes {
            metrics: Metrics::new(),
            refresh: Box::new(|| {}),
            ready: Box::new(|| Err("not yet".into())),
            plugins: Box::new(|detail| serde_json::json!({ "full": detail == Detail::Full })),
            replays: Box::new(|plugin, parent| {
                (plugin == "database").then(|| match parent {
                    None => serde_json::json!([]),
                    Some(parent) => serde_json::json!({ "parent": parent }),
                })
            }),
            stopping: Default::default(),
        });
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(serve_on(listener, probes, limits, stopped));
        // Keep the server up for the test's life.
        std::mem::forget(stop);
        addr
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn a_silent_client_is_dropped_and_others_are_served() {
        let addr = server(HttpLimits {
            header_read: Duration::from_millis(300),
            connection: Duration::from_secs(5),
            ..HttpLimits::default()
        })
        .await;
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(3), silent.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "the silent connection was closed");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn readyz_says_why_the_host_is_not_ready() {
        let addr = server(HttpLimits::default()).await;
        let response = get(addr, "/readyz").await;
        assert!(response.starts_with("HTTP/1.1 503"), "{response}");
        assert!(response.ends_with("not yet\n"), "{response}");
    }

    #[tokio::test]
    async fn loopback_clients_get_details_and_no_one_else() {
        let addr = server(HttpLimits::default()).await;
        assert!(get(addr, "/plugins").await.contains("\"full\": true"));
        assert_eq!(Detail::Full, detail_for("127.0.0.1:1".parse().unwrap()));
        assert_eq!(
            Detail::Full,
            detail_for("[::ffff:127.0.0.1]:1".parse().unwrap())
        );
        assert_eq!(Detail::Full, detail_for("[::1]:1".parse().unwrap()));
        assert_eq!(Detail::Summary, detail_for("10.1.2.3:1".parse().unwrap()));
    }

    #[tokio::test]
    async fn replays_are_served_to_loopback_clients() {
        let addr = server(HttpLimits::default()).await;
        let list = get(addr, "/plugins/database/replays").await;
        assert!(list.starts_with("HTTP/1.1 200"), "{list}");
        assert!(list.ends_with("[]\n"), "{list}");
        let one = get(addr, "/plugins/database/replays/default/db").await;
        assert!(one.contains("\"parent\": \"default/db\""), "{one}");
        let cluster = get(addr, "/plugins/database/replays/node-1").await;
        assert!(cluster.contains("\"parent\": \"node-1\""), "{cluster}");
        let missing = get(addr, "/plugins/other/replays/default/db").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        assert!(missing.contains("no failure of default/db"), "{missing}");
        for path in [
            "/plugins/database/replays/a/b/c",
            "/plugins/database/replays//b",
            "/plugins//replays",
            "/plugins/database/replayss",
        ] {
            assert!(get(addr, path).await.starts_with("HTTP/1.1 404"), "{path}");
        }
    }

    #[test]
    fn replays_are_refused_to_everyone_else() {
        let probes = Probes {
            metrics: Metrics::new(),
            refresh: Box::new(|| {}),
            ready: Box::new(|| Ok(())),
            plugins: Box::new(|_| serde_json::json!([])),
            replays: Box::new(|_, _| Some(serde_json::json!({ "secret": "cluster data" }))),
            stopping: Default::default(),
        };
        for path in [
            "/plugins/database/replays",
            "/plugins/database/replays/default/db",
        ] {
            let response = route(&probes, path, Detail::Summary);
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path}");
            assert_eq!(route(&probes, path, Detail::Full).status(), StatusCode::OK);
        }
    }

    #[tokio::test]
    async fn kubeplug_replay_reads_what_the_listener_serves() {
        let addr = server(HttpLimits::default()).await;
        let base = format!("http://{addr}");
        assert!(
            crate::replay::fetch::list(&base, "database")
                .await
                .unwrap()
                .is_empty()
        );
        let error = crate::replay::fetch::list(&base, "other")
            .await
            .unwrap_err();
        assert!(
            error
                .to_string()
                .ends_with("404: plugin other is not served here"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_capture_fetched_is_the_capture_kept() {
        use crate::replay::{Ring, fetch};
        let ring = Arc::new(Ring::default());
        let kept = crate::replay::tests::capture("default/db", "plugin database trapped: x");
        ring.record(kept.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let probes = Arc::new(Probes {
            metrics: Metrics::new(),
            refresh: Box::new(|| {}),
            ready: Box::new(|| Ok(())),
            plugins: Box::new(|_| serde_json::json!([])),
            replays: Box::new(move |_, parent| match parent {
                None => serde_json::to_value(ring.list()).ok(),
                Some(parent) => serde_json::to_value(ring.get(parent)?).ok(),
            }),
            stopping: Default::default(),
        });
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(serve_on(listener, probes, HttpLimits::default(), stopped));
        let listed = fetch::list(&base, "database").await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].error, kept.error);
        let fetched = fetch::capture(&base, "database", "default/db")
            .await
            .unwrap();
        assert_eq!(fetched, kept);
    }

    #[tokio::test]
    async fn stop_closes_the_listener_and_lets_an_answer_finish() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let probes = Arc::new(Probes {
            metrics: Metrics::new(),
            refresh: Box::new(|| {}),
            ready: Box::new(|| Ok(())),
            plugins: Box::new(|_| serde_json::json!([])),
            replays: Box::new(|_, _| None),
            stopping: Default::default(),
        });
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(serve_on(
            listener,
            probes.clone(),
            HttpLimits::default(),
            stopped,
        ));
        // An idle keep-alive connection must not hold the shutdown up.
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = idle.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        probes
            .stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(get(addr, "/readyz").await.contains("shutting down"));
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(1), server)
            .await
            .expect("the server stops at once with only idle connections")
            .unwrap();
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "listener closed"
        );
    }
}
