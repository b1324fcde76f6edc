//! One plugin's controller: subscriptions, queue, workers, backoff, resync.
//!
//! The controller subscribes to the shared informers its manifest needs
//! (`Sources::watch`), maps each change to parent keys (`triggers`,
//! [`routes`]), and runs `concurrency` workers (`worker`) that take keys
//! from the plugin's queue and [`crate::reconcile`] them.
//! The plugin behind a controller can be swapped while it runs
//! ([`Controller::upgrade`]): calls in flight finish on the old version.

mod error_policy;
mod failing;
mod overdue;
mod probation;
pub mod routes;
mod shards;
mod triggers;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::task::JoinHandle;

use crate::fence::{Fence, budget, echoes, references, unchanged};
use crate::inputs::{Serves, Sources};
use crate::metrics::OperatorMetrics;
use crate::replay::Ring;
use crate::serving::Serving;
use crate::shadow::Shadow;
use kubeplug_core::policy::Effective;
use kubeplug_core::rollback::RollbackSettings;
use kubeplug_core::rollout::{RolledBack, Rollout};
use kubeplug_kube::apply::Writer;
use kubeplug_kube::apply::metrics::ApplyMetrics;
use kubeplug_kube::identity::Access;
use kubeplug_kube::informers::{Informers, ObjectKey, ViewSubscription};
use kubeplug_kube::leader::{Elector, Leadership};
use kubeplug_kube::queue::{Debounce, Queue};
use kubeplug_runtime::{Event, Plugin};

/// Scheduling knobs shared by every controller of a host.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Workers per plugin: parents reconciled at once.
    pub concurrency: usize,
    /// First retry delay after a failure; doubles per consecutive failure.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Resync period for plugins whose manifest sets none.
    pub resync: Duration,
    /// Leader election per plugin; `None`: this replica always leads.
    pub elector: Option<Arc<Elector>>,
    /// How the changes of one parent are coalesced into one reconcile.
    pub debounce: Debounce,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            concurrency: 4,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(300),
            // Events drive reconciles; resync only repairs what was missed.
            resync: Duration::from_secs(600),
            elector: None,
            debounce: Debounce::default(),
        }
    }
}

impl Settings {
    /// Delay before retry number `failures` (1-based), without jitter.
    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
        self.backoff_base
            .saturating_mul(factor)
            .min(self.backoff_max)
    }

    /// [`Settings::backoff`] with ±20 % jitter, so that parents failing
    /// together (an API server outage) do not retry in lockstep.
    pub fn jittered_backoff(&self, failures: u32) -> Duration {
        self.backoff(failures)
            .mul_f64(0.8 + rand::random::<f64>() * 0.4)
    }
}

struct Shared {
    plugin: RwLock<Plugin>,
    /// A candidate version deciding beside the live one (see [`crate::shadow`]).
    shadow: RwLock<Option<Arc<Shadow>>>,
    /// The latest upgrade's probation, or its rollback (see [`kubeplug_core::rollback`]).
    rollout: Mutex<Rollout<Plugin, ObjectKey>>,
    /// Requests of recent failed calls, for replays (see [`crate::replay`]).
    replays: Arc<Ring>,
    queue: Arc<Queue<ObjectKey>>,
    sources: Sources,
    writer: Writer,
    fence: Fence,
    metrics: OperatorMetrics,
    settings: Settings,
    /// Failures per parent, shared by the plugin's workers (see [`failing`]).
    failing: failing::Failing,
    /// Calls past their deadline lately (see [`overdue`]).
    overdue: Mutex<overdue::Overdue>,
    /// The plugin's leadership when it is not sharded; when it is, a token
    /// that never leads (each shard has its own: see [`shards`]).
    leadership: Leadership,
    /// A sharded plugin's shards on this replica.
    shards: Option<shards::Shards>,
    counts: Counts,
}

impl Shared {
    /// The writer for `key`'s parent: the plugin's, or its shard's (one
    /// that writes nothing if this replica does not hold the shard).
    fn writer_for(&self, key: &ObjectKey) -> Writer {
        let Some(shards) = &self.shards else {
            return self.writer.clone();
        };
        let parent = self.sources.parent.get(&key.namespace, &key.name);
        match shards.route(parent.as_deref()) {
            shards::Route::Lane(lane) => lane.writer().clone(),
            shards::Route::Elsewhere => self.writer.clone(),
        }
    }
}

impl Serves for Shared {
    fn plugin(&self) -> Plugin {
        self.plugin.read().clone()
    }

    fn sources(&self) -> &Sources {
        &self.sources
    }

    fn fence(&self) -> &Fence {
        &self.fence
    }

    fn busy(&self) -> bool {
        self.queue.working()
    }
}

/// Reconciles finished by this controller (all versions of the plugin),
/// for the aggregated API's `plugins` objects.
#[derive(Default)]
struct Counts {
    reconciles: std::sync::atomic::AtomicU64,
    errors: std::sync::atomic::AtomicU64,
}

/// A running controller for one plugin.
pub struct Controller {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    /// A sharded plugin's tasks that take and give up its shards.
    lanes: Vec<JoinHandle<()>>,
    _subscriptions: Vec<ViewSubscription>,
    elector: Option<Arc<Elector>>,
}

/// Who a controller writes as and what it may do: the plugin's grant and a
/// client impersonating its ServiceAccount (see [`kubeplug_kube::identity`]).
pub struct Identity {
    pub grant: Effective,
    /// Writes go out as the plugin.
    pub client: kube::Client,
    /// Read checks, shared by the host's plugins.
    pub access: Arc<Access>,
}

impl Controller {
    /// Subscribe to the informers the plugin needs and start its workers.
    /// Writes use `identity`'s client.
    pub fn start(
        plugin: Plugin,
        identity: Identity,
        informers: &Arc<Informers>,
        metrics: OperatorMetrics,
        apply_metrics: ApplyMetrics,
        settings: Settings,
    ) -> Controller {
        let manifest = plugin.manifest().clone();
        let sharded = identity.grant.grant.shards > 1;
        let sources = Sources::watch(&manifest, &identity.grant, informers);
        sources.index_related();
        let shard_count = identity.grant.grant.shards;
        let leadership = match &settings.elector {
            _ if sharded => Leadership::never(),
            Some(elector) => elector.join(&manifest.name),
            None => Leadership::always(),
        };
        let writer = Writer::new(
            identity.client,
            &manifest.name,
            manifest.field_manager(),
            apply_metrics,
            leadership.clone(),
        );
        let fence = Fence {
            events: budget::EventBudget::new(identity.grant.quotas.events_per_parent_per_minute),
            last_calls: unchanged::LastCalls::new(&identity.grant),
            echoes: echoes::Echoes::default(),
            references: references::Referrers::default(),
            grant: Arc::new(identity.grant),
            access: identity.access,
            metrics: metrics.clone(),
        };
        let shards = sharded.then(|| {
            shards::Shards::new(
                shard_count,
                &manifest,
                settings.elector.as_ref(),
                &writer,
                informers,
            )
        });
        let queue = Queue::observed(
            settings.debounce,
            metrics.controller_started(&manifest.name),
        );
        let shared = Arc::new(Shared {
            plugin: RwLock::new(plugin),
            shadow: RwLock::new(None),
            rollout: Mutex::new(Rollout::default()),
            replays: Arc::new(Ring::default()),
            queue: queue.clone(),
            sources,
            writer,
            fence,
            metrics,
            settings: settings.clone(),
            failing: failing::Failing::default(),
            overdue: Mutex::default(),
            counts: Counts::default(),
            leadership,
            shards,
        });
        let subscriptions = triggers::subscribe(&shared, &manifest);
        let lanes = shards::Shards::start(&shared, informers.clone(), &manifest);

        let mut tasks: Vec<JoinHandle<()>> = (0..settings.concurrency.max(1))
            .map(|_| tokio::spawn(worker::worker(shared.clone())))
            .collect();
        tasks.push(tokio::spawn(resync(shared.clone())));
        tracing::info!(plugin = %manifest.name, version = %manifest.version, "controller started");
        Controller {
            shared,
            tasks,
            lanes,
            _subscriptions: subscriptions,
            elector: settings.elector.clone(),
        }
    }

    /// Why this plugin is not healthy, if so: the first informer it uses
    /// that cannot list or watch; or its calls keep running past their
    /// deadline; or most of its parents keep failing.
    pub fn problem(&self) -> Option<kubeplug_kube::informers::Problem> {
        let shared = &self.shared;
        shared
            .sources
            .problem()
            .or_else(|| shared.overdue.lock().problem())
            // A standby's failures are from when it led: the leader's
            // state is the plugin's.
            .or_else(|| {
                self.leading()
                    .then(|| {
                        shared
                            .failing
                            .problem(|k| shared.sources.parent.get(&k.namespace, &k.name).is_some())
                    })
                    .flatten()
            })
    }

    /// True once every cache the plugin reads has listed once.
    pub fn synced(&self) -> bool {
        self.shared.sources.synced()
    }

    /// True while this replica may write for the plugin (for a sharded
    /// plugin: for one of its shards at least).
    pub fn leading(&self) -> bool {
        match &self.shared.shards {
            Some(shards) => shards.leading(),
            None => self.shared.leadership.is_leader(),
        }
    }

    /// A sharded plugin's shard count and the shards this replica owns.
    pub fn shards(&self) -> Option<(u16, Vec<u16>)> {
        let shards = self.shared.shards.as_ref()?;
        Some((shards.count(), shards.owned()))
    }

    /// The grant the controller acts under.
    pub fn grant(&self) -> &Effective {
        &self.shared.fence.grant
    }

    /// The plugin version now serving.
    pub fn plugin(&self) -> Plugin {
        self.shared.plugin.read().clone()
    }

    /// Serve `plugin` from now on (it must have the [`same_shape`](kubeplug_core::manifest::same_shape)), and
    /// reconcile every parent again so the new logic converges the cluster.
    /// The version it replaces is kept until `plugin` passes its probation
    /// under `rollback` (`key`: the content key of its file).
    pub fn upgrade(&self, plugin: Plugin, key: String, rollback: RollbackSettings) {
        let previous = std::mem::replace(&mut *self.shared.plugin.write(), plugin.clone());
        self.shared
            .rollout
            .lock()
            .start(plugin, previous, key, rollback);
        self.shared.failing.clear();
        self.shared.fence.last_calls.forget_all();
        // The live version changed: what the shadow compared no longer holds.
        let shadow = self.shared.shadow.read().clone();
        if let Some(shadow) = shadow {
            self.set_shadow(Some(shadow.restarted()));
        }
        requeue_all(&self.shared);
    }

    /// Requests of this plugin's recent failed calls.
    pub fn replays(&self) -> Arc<Ring> {
        self.shared.replays.clone()
    }

    /// The version that was rolled back, while the previous one serves.
    pub fn rolled_back(&self) -> Option<RolledBack> {
        self.shared.rollout.lock().rolled_back().cloned()
    }

    /// Run `shadow`'s candidate beside the live version from now on (`None`:
    /// stop), and reconcile every parent so the comparison covers them all.
    /// The candidate must have the [`same_shape`](kubeplug_core::manifest::same_shape): it reads the live
    /// version's caches.
    pub fn set_shadow(&self, shadow: Option<Shadow>) {
        let started = shadow.is_some();
        if let Some(shadow) = &shadow {
            shadow.start_whatif(self.serving());
        }
        *self.shared.shadow.write() = shadow.map(Arc::new);
        self.shared
            .metrics
            .shadow_parents(self.plugin().name(), None);
        if started {
            requeue_all(&self.shared);
        }
    }

    /// The candidate in shadow, if any.
    pub fn shadow(&self) -> Option<Arc<Shadow>> {
        self.shared.shadow.read().clone()
    }

    /// Record `event` on the parents named `namespace/name` (or `name`)
    /// in `parents` that the caches hold, as the plugin's writer would
    /// (within the event budget).
    pub fn announce(&self, parents: &[String], event: &Event, action: &str) {
        let shared = &self.shared;
        for parent in parents {
            let (namespace, name) = parent.split_once('/').unwrap_or(("", parent));
            if let Some(object) = shared.sources.parent.get(namespace, name) {
                let key = ObjectKey::new(namespace, name);
                shared
                    .fence
                    .post(&shared.writer_for(&key), &object, event, action);
            }
        }
    }

    /// The serving face: what previews, what-ifs and webhooks reach the
    /// serving version through (see [`crate::serving`]).
    pub fn serving(&self) -> Serving {
        Serving::new(self.shared.clone())
    }

    /// Reconciles finished by this replica, and how many of them failed.
    pub fn counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let counts = &self.shared.counts;
        (counts.reconciles.load(Relaxed), counts.errors.load(Relaxed))
    }

    /// Parents waiting in the queue.
    pub fn queue_len(&self) -> usize {
        self.shared.queue.len()
    }

    /// Stop: no new reconciles start; reconciles in flight are abandoned at
    /// their next await point. Children stay as they are.
    pub fn stop(self) {
        self.shared.queue.close();
        for task in self.tasks.iter().chain(&self.lanes) {
            task.abort();
        }
        if let Some(elector) = &self.elector {
            let name = self.plugin().name().to_string();
            match self.shards() {
                Some((count, _)) => (0..count).for_each(|s| {
                    elector.leave(&kubeplug_kube::leader::balance::unit(&name, Some(s)))
                }),
                None => elector.leave(&name),
            }
        }
    }

    /// Stop for a host shutdown: no new reconciles start, those in flight
    /// get up to `grace` to finish (the host then releases its Leases, see
    /// [`Elector::shutdown`]).
    pub async fn shutdown(mut self, grace: Duration) {
        self.shared.queue.close();
        let tasks = std::mem::take(&mut self.tasks);
        // Workers return once the queue is closed and their reconcile is
        // done; the resync task (the last one) never returns by itself.
        let workers = &tasks[..tasks.len().saturating_sub(1)];
        if self.leading() {
            let finished = async {
                while !workers.iter().all(JoinHandle::is_finished) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            if tokio::time::timeout(grace, finished).await.is_err() {
                tracing::warn!(plugin = %self.plugin().name(), "reconciles still running at shutdown; abandoning them");
            }
        }
        for task in tasks.iter().chain(&self.lanes) {
            task.abort();
        }
    }
}

fn requeue_all(shared: &Shared) {
    for key in parent_keys(shared) {
        shared.queue.add(key);
    }
}

fn parent_keys(shared: &Shared) -> Vec<ObjectKey> {
    let manifest = shared.plugin.read().manifest().clone();
    shared
        .sources
        .parent
        .list(None)
        .iter()
        .filter_map(|parent| routes::parent_key(&manifest, parent))
        .collect()
}

/// A resync spreads its parents over a tenth of the period (at most a
/// minute), so a large fleet does not hit the API server at one instant.
fn resync_spread(period: Duration) -> Duration {
    (period / 10).min(Duration::from_secs(60))
}

async fn resync(shared: Arc<Shared>) {
    loop {
        let period = {
            let plugin = shared.plugin.read();
            plugin
                .manifest()
                .resync_seconds
                .map(|s| Duration::from_secs(s.max(1).into()))
                .unwrap_or(shared.settings.resync)
        };
        tokio::time::sleep(period).await;
        let spread = resync_spread(period);
        // A resync calls every parent, unchanged inputs or not.
        shared.fence.last_calls.forget_all();
        for key in parent_keys(&shared) {
            shared
                .queue
                .add_after(key, spread.mul_f64(rand::random::<f64>()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_failure_up_to_the_cap() {
        let s = Settings {
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(10),
            ..Settings::default()
        };
        assert_eq!(s.backoff(1), Duration::from_secs(1));
        assert_eq!(s.backoff(2), Duration::from_secs(2));
        assert_eq!(s.backoff(4), Duration::from_secs(8));
        assert_eq!(s.backoff(5), Duration::from_secs(10));
        assert_eq!(s.backoff(500), Duration::from_secs(10));
    }

    #[test]
    fn jittered_backoff_stays_within_a_fifth_of_the_backoff_and_varies() {
        let s = Settings {
            backoff_base: Duration::from_secs(10),
            ..Settings::default()
        };
        let delays: Vec<Duration> = (0..50).map(|_| s.jittered_backoff(1)).collect();
        assert!(
            delays
                .iter()
                .all(|d| *d >= Duration::from_secs(8) && *d <= Duration::from_secs(12))
        );
        assert!(delays.iter().any(|d| *d != delays[0]), "not in lockstep");
    }

    #[test]
    fn a_resync_is_spread_over_a_tenth_of_its_period_at_most_a_minute() {
        assert_eq!(
            resync_spread(Duration::from_secs(100)),
            Duration::from_secs(10)
        );
        assert_eq!(
            resync_spread(Duration::from_secs(3600)),
            Duration::from_secs(60)
        );
    }
}
