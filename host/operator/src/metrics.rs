//! The operator's metrics: reconciles, queues, loaded plugins, rollouts and
//! the plugin calls' memory budget.
//!
//! The kube plumbing below the operator counts its own (see
//! [`kubeplug_kube::informers::metrics`], [`kubeplug_kube::leader::metrics`],
//! [`kubeplug_kube::apply::metrics`], [`kubeplug_kube::identity::metrics`],
//! [`kubeplug_kube::health::metrics`]); `kubeplug run` registers them all in one
//! registry, served on `/metrics` (see [`kubeplug::admin`]).
//!
//! Beside its own, the operator counts what stock dashboards query, in a
//! registry without prefix: controller-runtime's
//! `controller_runtime_reconcile_total{controller,result}` (`success`,
//! `error`, `requeue`, `requeue_after`: see [`Ended`]),
//! `controller_runtime_reconcile_errors_total{controller}` and
//! `controller_runtime_reconcile_time_seconds{controller}`, and client-go's
//! workqueue families of each plugin's queue
//! ([`kubeplug_kube::queue::metrics`]). `controller` is the plugin's name.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use kubeplug_core::rollout::State;
use kubeplug_kube::queue::metrics::{QueueObserver, WorkqueueMetrics};

/// Buckets of `reconcile_duration_seconds`: 100 µs doubling 20 times, to
/// ~52 s. A healthy reconcile is a few ms with writes; the top reaches well
/// past a plugin call's timeout (2 s by default) plus its writes, so a call
/// that runs into its deadline is counted in a bucket, not only in +Inf.
fn reconcile_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0001, 2.0, 20)
}

/// controller-runtime's buckets of `controller_runtime_reconcile_time_seconds`.
const RUNTIME_RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// How a reconcile ended, as controller-runtime's `result` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Done; nothing asked for later.
    Success,
    /// Failed: retried with backoff.
    Error,
    /// Queued again at once (leadership lost mid-reconcile: whoever leads
    /// next reconciles it).
    Requeue,
    /// Done, and the plugin asked to be called again after a delay.
    RequeueAfter,
}

impl Ended {
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Success => "success",
            Ended::Error => "error",
            Ended::Requeue => "requeue",
            Ended::RequeueAfter => "requeue_after",
        }
    }

    const ALL: [Ended; 4] = [
        Ended::Success,
        Ended::Error,
        Ended::Requeue,
        Ended::RequeueAfter,
    ];
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerResultLabels {
    controller: String,
    result: String,
}

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
struct InfoLabels {
    plugin: String,
    version: String,
    digest: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    plugin: String,
    shard: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    plugin: String,
    /// `validate`, `mutate` or `convert`.
    webhook: String,
    /// `allowed`, `denied`, `patched`, `converted`, or why it failed.
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookKindLabels {
    plugin: String,
    webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AmountLabels {
    amount: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

/// The operator's metrics. Cheap to clone.
#[derive(Clone)]
pub struct OperatorMetrics {
    reconciles: Family<ResultLabels, Counter>,
    skipped: Family<PluginLabels, Counter>,
    duration: Family<PluginLabels, Histogram>,
    queue_depth: Family<PluginLabels, Gauge>,
    plugin_info: Family<InfoLabels, Gauge>,
    /// The info series currently set per plugin, to replace it on upgrade.
    info_current: Arc<Mutex<HashMap<String, InfoLabels>>>,
    load_failures: Family<PluginLabels, Counter>,
    child_clashes: Family<PluginLabels, Counter>,
    events_dropped: Family<PluginLabels, Counter>,
    webhook_requests: Family<WebhookLabels, Counter>,
    webhook_duration: Family<WebhookKindLabels, Histogram>,
    shadow_comparisons: Family<ResultLabels, Counter>,
    shadow_parents: Family<ShadowLabels, Gauge>,
    rollbacks: Family<PluginLabels, Counter>,
    shard_owned: Family<ShardLabels, Gauge>,
    shard_reconciles: Family<ShardLabels, Counter>,
    shard_queue_depth: Family<ShardLabels, Gauge>,
    call_memory: Family<AmountLabels, Gauge>,
    calls_waiting_for_memory: Gauge,
    call_memory_waits: Counter,
    call_memory_refusals: Family<ReasonLabels, Counter>,
    workqueue: WorkqueueMetrics,
    runtime_reconciles: Family<ControllerResultLabels, Counter>,
    runtime_errors: Family<ControllerLabels, Counter>,
    runtime_time: Family<ControllerLabels, Histogram>,
}

impl OperatorMetrics {
    /// The families: the operator's own in `registry`, those named as
    /// controller-runtime and client-go name them in `standard` (a registry
    /// without prefix).
    pub fn register(registry: &mut Registry, standard: &mut Registry) -> Self {
        let metrics = OperatorMetrics {
            reconciles: Family::default(),
            skipped: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(reconcile_buckets())),
            queue_depth: Family::default(),
            plugin_info: Family::default(),
            info_current: Default::default(),
            load_failures: Family::default(),
            child_clashes: Family::default(),
            events_dropped: Family::default(),
            webhook_requests: Family::default(),
            webhook_duration: Family::new_with_constructor(|| {
                // 100 µs .. ~13 s: up to the API server's longest webhook
                // timeout, so a deadline is counted in a bucket.
                Histogram::new(exponential_buckets(0.0001, 2.0, 18))
            }),
            shadow_comparisons: Family::default(),
            shadow_parents: Family::default(),
            rollbacks: Family::default(),
            shard_owned: Family::default(),
            shard_reconciles: Family::default(),
            shard_queue_depth: Family::default(),
            call_memory: Family::default(),
            calls_waiting_for_memory: Gauge::default(),
            call_memory_waits: Counter::default(),
            call_memory_refusals: Family::default(),
            workqueue: WorkqueueMetrics::register(standard),
            runtime_reconciles: Family::default(),
            runtime_errors: Family::default(),
            runtime_time: Family::new_with_constructor(|| {
                Histogram::new(RUNTIME_RECONCILE_BUCKETS)
            }),
        };
        metrics.register_standard(standard);
        metrics.register_own(registry);
        metrics
    }

    /// The families named as controller-runtime names them, with its help
    /// texts, so its dashboards read them.
    fn register_standard(&self, standard: &mut Registry) {
        let m = self;
        standard.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            m.runtime_reconciles.clone(),
        );
        standard.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            m.runtime_errors.clone(),
        );
        standard.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            m.runtime_time.clone(),
        );
    }

    /// The operator's own families.
    fn register_own(&self, registry: &mut Registry) {
        let m = self;
        registry.register(
            "reconciles",
            "Reconciles by plugin and result",
            m.reconciles.clone(),
        );
        // Apart from `reconciles`, which counts calls: a skip costs a hash,
        // no call and no write.
        registry.register(
            "reconciles_skipped",
            "Reconciles not called because the plugin's inputs were those of its last call that wrote nothing",
            m.skipped.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile latency including writes",
            m.duration.clone(),
        );
        registry.register(
            "queue_depth",
            "Keys waiting per plugin",
            m.queue_depth.clone(),
        );
        registry.register(
            "plugin_info",
            "Loaded plugins (1 = current version and state)",
            m.plugin_info.clone(),
        );
        registry.register(
            "plugin_load_failures",
            "Plugin files that failed to load",
            m.load_failures.clone(),
        );
        registry.register(
            "child_clashes",
            "Children not written because an object of that name exists and is not controlled by their parent",
            m.child_clashes.clone(),
        );
        registry.register(
            "events_dropped",
            "Plugin events not recorded: over the per-parent rate quota, or while too many waited to be posted",
            m.events_dropped.clone(),
        );
        registry.register(
            "webhook_requests",
            "Admission and conversion reviews answered, by plugin, webhook and result",
            m.webhook_requests.clone(),
        );
        registry.register(
            "webhook_duration_seconds",
            "Time to answer an admission or conversion review, plugin call included",
            m.webhook_duration.clone(),
        );
        registry.register(
            "shadow_comparisons",
            "Reconciles compared with the candidate in shadow, by result (same, differs, candidate_error)",
            m.shadow_comparisons.clone(),
        );
        registry.register(
            "shadow_parents",
            "Parents compared with the candidate in shadow, and those whose latest comparison differs",
            m.shadow_parents.clone(),
        );
        registry.register(
            "plugin_rollbacks",
            "New plugin versions rolled back automatically after failing their probation",
            m.rollbacks.clone(),
        );
        registry.register(
            "shard_owned",
            "Shards of sharded plugins this replica owns, their caches listed (1), or gave up (0)",
            m.shard_owned.clone(),
        );
        registry.register(
            "shard_reconciles",
            "Reconciles of sharded plugins' parents finished on this replica, by shard",
            m.shard_reconciles.clone(),
        );
        registry.register(
            "shard_queue_depth",
            "Parents of a sharded plugin's shard waiting in its queue on this replica (each second)",
            m.shard_queue_depth.clone(),
        );
        registry.register(
            "call_memory_bytes",
            "The host-wide memory budget of plugin calls: budget, reserved (by calls in flight), peak",
            m.call_memory.clone(),
        );
        registry.register(
            "calls_waiting_for_memory",
            "Plugin calls waiting for room in the host's memory budget now",
            m.calls_waiting_for_memory.clone(),
        );
        registry.register(
            "call_memory_waits",
            "Plugin calls that waited for room in the host's memory budget",
            m.call_memory_waits.clone(),
        );
        registry.register(
            "call_memory_refusals",
            "Plugin calls not run or stopped for lack of room in the host's memory budget (waited: gave up waiting; grow: grew past what was left)",
            m.call_memory_refusals.clone(),
        );
    }

    /// The memory budget's state, read at each scrape.
    pub fn call_memory(&self, stats: kubeplug_runtime::BudgetStats) {
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
            self.call_memory
                .get_or_create(&AmountLabels {
                    amount: amount.into(),
                })
                .set(value as i64);
        }
        self.calls_waiting_for_memory.set(stats.waiting as i64);
        let raise = |counter: &Counter, to: u64| {
            counter.inc_by(to.saturating_sub(counter.get()));
        };
        raise(&self.call_memory_waits, stats.waits);
        raise(
            &self.call_memory_refusals.get_or_create(&ReasonLabels {
                reason: "waited".into(),
            }),
            stats.timed_out,
        );
        raise(
            &self.call_memory_refusals.get_or_create(&ReasonLabels {
                reason: "grow".into(),
            }),
            stats.refused,
        );
    }

    /// A controller for `plugin` starts: its queue's series (see
    /// [`kubeplug_kube::queue::Queue::observed`]), and its
    /// controller-runtime series at zero, as controller-runtime sets them
    /// when a controller starts (a rate of errors is then 0, not absent).
    pub fn controller_started(&self, plugin: &str) -> QueueObserver {
        // controller-runtime's `Add(0)`.
        for ended in Ended::ALL {
            self.runtime_reconciles
                .get_or_create(&controller_result_labels(plugin, ended))
                .inc_by(0);
        }
        self.runtime_errors
            .get_or_create(&controller_labels(plugin))
            .inc_by(0);
        self.workqueue.queue(plugin)
    }

    /// A reconcile of `plugin` finished after `took`: `result` is kubeplug's
    /// label (`ok`, `not_leader` or the error's), `ended` controller-runtime's.
    pub fn reconciled(&self, plugin: &str, result: &str, ended: Ended, took: Duration) {
        self.reconciles
            .get_or_create(&ResultLabels {
                plugin: plugin.into(),
                result: result.into(),
            })
            .inc();
        self.duration
            .get_or_create(&plugin_labels(plugin))
            .observe(took.as_secs_f64());
        self.runtime_reconciled(plugin, ended, took);
    }

    /// A reconcile skipped: unchanged inputs (see `fence::unchanged`).
    /// Not a call, so not in `reconciles`; controller-runtime counts every
    /// pass of its reconciler, so it is a `success` there.
    pub fn skipped(&self, plugin: &str, took: Duration) {
        self.skipped.get_or_create(&plugin_labels(plugin)).inc();
        self.runtime_reconciled(plugin, Ended::Success, took);
    }

    fn runtime_reconciled(&self, plugin: &str, ended: Ended, took: Duration) {
        self.runtime_reconciles
            .get_or_create(&controller_result_labels(plugin, ended))
            .inc();
        if ended == Ended::Error {
            self.runtime_errors
                .get_or_create(&controller_labels(plugin))
                .inc();
        }
        self.runtime_time
            .get_or_create(&controller_labels(plugin))
            .observe(took.as_secs_f64());
    }

    /// Whether this replica owns `shard` of `plugin` (its caches listed).
    pub fn shard_owned(&self, plugin: &str, shard: u16, owned: bool) {
        self.shard_owned
            .get_or_create(&shard_labels(plugin, shard))
            .set(owned.into());
    }

    /// A reconcile of a parent of `plugin`'s `shard` finished here.
    pub fn shard_reconciled(&self, plugin: &str, shard: u16) {
        self.shard_reconciles
            .get_or_create(&shard_labels(plugin, shard))
            .inc();
    }

    /// Parents of `plugin`'s `shard` waiting in its queue.
    pub fn shard_queue_depth(&self, plugin: &str, shard: u16, depth: usize) {
        self.shard_queue_depth
            .get_or_create(&shard_labels(plugin, shard))
            .set(depth as i64);
    }

    pub fn queue_depth(&self, plugin: &str, depth: usize) {
        self.queue_depth
            .get_or_create(&plugin_labels(plugin))
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
        let mut current = self.info_current.lock();
        if let Some(old) = current.insert(plugin.to_string(), labels.clone()) {
            self.plugin_info.remove(&old);
        }
        self.plugin_info.get_or_create(&labels).set(1);
    }

    /// Forget a plugin that was removed.
    pub fn plugin_removed(&self, plugin: &str) {
        let mut current = self.info_current.lock();
        if let Some(old) = current.remove(plugin) {
            self.plugin_info.remove(&old);
        }
    }

    pub fn load_failed(&self, plugin: &str) {
        self.load_failures
            .get_or_create(&plugin_labels(plugin))
            .inc();
    }

    pub fn child_clash(&self, plugin: &str) {
        self.child_clashes
            .get_or_create(&plugin_labels(plugin))
            .inc();
    }

    /// One webhook review answered (`result`: see [`WebhookLabels`]).
    pub fn webhook_answered(&self, plugin: &str, webhook: &str, result: &str, took: Duration) {
        self.webhook_requests
            .get_or_create(&WebhookLabels {
                plugin: plugin.into(),
                webhook: webhook.into(),
                result: result.into(),
            })
            .inc();
        self.webhook_duration
            .get_or_create(&WebhookKindLabels {
                plugin: plugin.into(),
                webhook: webhook.into(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn events_dropped(&self, plugin: &str, count: usize) {
        self.events_dropped
            .get_or_create(&plugin_labels(plugin))
            .inc_by(count as u64);
    }

    pub fn shadow_compared(&self, plugin: &str, result: &str) {
        self.shadow_comparisons
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
                    self.shadow_parents.get_or_create(&labels).set(count as i64);
                }
                None => {
                    self.shadow_parents.remove(&labels);
                }
            }
        }
    }

    pub fn rolled_back(&self, plugin: &str) {
        self.rollbacks.get_or_create(&plugin_labels(plugin)).inc();
    }
}

fn shard_labels(plugin: &str, shard: u16) -> ShardLabels {
    ShardLabels {
        plugin: plugin.into(),
        shard: shard.to_string(),
    }
}

fn plugin_labels(plugin: &str) -> PluginLabels {
    PluginLabels {
        plugin: plugin.into(),
    }
}

fn controller_labels(plugin: &str) -> ControllerLabels {
    ControllerLabels {
        controller: plugin.into(),
    }
}

fn controller_result_labels(plugin: &str, ended: Ended) -> ControllerResultLabels {
    ControllerResultLabels {
        controller: plugin.into(),
        result: ended.as_str().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registries() -> (OperatorMetrics, Registry, Registry) {
        let (mut own, mut standard) = (Registry::default(), Registry::default());
        let metrics = OperatorMetrics::register(&mut own, &mut standard);
        (metrics, own, standard)
    }

    fn text(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn a_timed_out_reconcile_is_counted_below_inf() {
        let (m, own, standard) = registries();
        let timeout = kubeplug_core::contract::Limits::default().timeout;
        // A call cut at its deadline, and its writes after it.
        m.reconciled(
            "p",
            "timeout",
            Ended::Error,
            timeout + Duration::from_millis(50),
        );
        let own = text(&own);
        assert!(
            own.contains("reconcile_duration_seconds_bucket{le=\"1.6384\",plugin=\"p\"} 0\n"),
            "{own}"
        );
        assert!(
            own.contains("reconcile_duration_seconds_bucket{le=\"3.2768\",plugin=\"p\"} 1\n"),
            "{own}"
        );
        assert!(
            own.contains("reconcile_duration_seconds_bucket{le=\"52.4288\",plugin=\"p\"} 1\n"),
            "the top bucket: {own}"
        );
        let standard = text(&standard);
        assert!(
            standard.contains(
                "controller_runtime_reconcile_time_seconds_bucket{le=\"2.5\",controller=\"p\"} 1\n"
            ),
            "{standard}"
        );
    }

    #[test]
    fn reconciles_are_counted_by_controller_runtimes_result_and_skips_are_successes() {
        let (m, _, standard) = registries();
        let _queue = m.controller_started("p");
        let ms = Duration::from_millis(1);
        m.reconciled("p", "ok", Ended::Success, ms);
        m.reconciled("p", "ok", Ended::RequeueAfter, ms);
        m.reconciled("p", "not_leader", Ended::Requeue, ms);
        m.reconciled("p", "timeout", Ended::Error, ms);
        m.skipped("p", ms);
        let text = text(&standard);
        for (result, count) in [
            ("success", 2),
            ("error", 1),
            ("requeue", 1),
            ("requeue_after", 1),
        ] {
            let series = format!(
                "controller_runtime_reconcile_total{{controller=\"p\",result=\"{result}\"}} {count}\n"
            );
            assert!(text.contains(&series), "{series} in {text}");
        }
        assert!(
            text.contains("controller_runtime_reconcile_errors_total{controller=\"p\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("controller_runtime_reconcile_time_seconds_count{controller=\"p\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains("workqueue_depth{controller=\"p\",name=\"p\"} 0\n"),
            "{text}"
        );
    }

    #[test]
    fn a_started_controller_shows_every_result_at_zero() {
        let (m, _, standard) = registries();
        let _queue = m.controller_started("q");
        let text = text(&standard);
        for result in Ended::ALL {
            let series = format!(
                "controller_runtime_reconcile_total{{controller=\"q\",result=\"{}\"}} 0\n",
                result.as_str()
            );
            assert!(text.contains(&series), "{series} in {text}");
        }
    }
}
