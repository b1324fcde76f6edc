//! The operator's metrics: reconciles, queues, loaded plugins, rollouts and
//! the plugin calls' memory budget.
//!
//! The kube plumbing below the operator counts its own (see
//! [`kubeplug_kube::informers::metrics`], [`kubeplug_kube::leader::metrics`],
//! [`kubeplug_kube::apply::metrics`], [`kubeplug_kube::identity::metrics`],
//! [`kubeplug_kube::health::metrics`]); `kubeplug run` registers them all in one
//! registry, served on `/metrics` (see [`kubeplug::admin`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use kubeplug_core::rollout::State;

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
}

impl OperatorMetrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = OperatorMetrics {
            reconciles: Family::default(),
            skipped: Family::default(),
            duration: Family::new_with_constructor(|| {
                // 100 µs .. ~1.6 s: a healthy reconcile is a few ms with writes.
                Histogram::new(exponential_buckets(0.0001, 2.0, 15))
            }),
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
        };
        let m = &metrics;
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
        metrics
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

    pub fn reconciled(&self, plugin: &str, result: &str, took: Duration) {
        self.reconciles
            .get_or_create(&ResultLabels {
                plugin: plugin.into(),
                result: result.into(),
            })
            .inc();
        self.duration
            .get_or_create(&plugin_labels(plugin))
            .observe(took.as_secs_f64());
    }

    /// A reconcile skipped: unchanged inputs (see `reconcile::unchanged`).
    pub fn skipped(&self, plugin: &str) {
        self.skipped.get_or_create(&plugin_labels(plugin)).inc();
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
        let mut current = self.info_current.lock().expect("metrics lock");
        if let Some(old) = current.insert(plugin.to_string(), labels.clone()) {
            self.plugin_info.remove(&old);
        }
        self.plugin_info.get_or_create(&labels).set(1);
    }

    /// Forget a plugin that was removed.
    pub fn plugin_removed(&self, plugin: &str) {
        let mut current = self.info_current.lock().expect("metrics lock");
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
