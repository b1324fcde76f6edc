//! A sharded plugin's shards on this replica (grant `shards: N`, N > 1).
//!
//! The plugin's parents are split into N shards by the `kubeplug.io/shard`
//! label (see [`kubeplug_core::shard`]); each shard has its own Lease
//! (`kubeplug-<plugin>.shard-<i>`), balanced across replicas by the
//! [`Elector`](kubeplug_kube::leader::Elector) like whole plugins are. While
//! this replica owns a shard, a [`Lane`] holds it:
//!
//! - its caches: watches of the parents and children labelled with the
//!   shard, filtered by the API server, added to the plugin's views when the
//!   shard is taken and removed when it is lost, so a replica caches its
//!   share and no more. Related kinds, which the host cannot label, are
//!   watched whole, except the Pods of a `shardPods` grant: the host labels
//!   the pod templates of the children it writes, so their Pods carry the
//!   shard and are watched per shard like the children
//!   ([`kubeplug_core::shard::narrows`]);
//! - its fence: a writer gated by the shard's Lease, so writes for a shard
//!   stop at its renew deadline, whatever else this replica leads;
//! - its strays: a parent with no shard label (new) or one out of range (the
//!   shard count changed) is labelled by the owner of the shard its name
//!   hashes to, and then moves into that shard's watch; a parent in range but
//!   not where its name hashes (labelled by hand, or under another count) is
//!   relabelled by the owner of the shard it sits in. So a parent's label is
//!   always the hash of its namespace and name.
//!
//! A parent is reconciled only once its shard's caches have listed: before,
//! its children would look missing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::json;
use tokio::task::JoinHandle;

use super::Shared;
use kubeplug_core::manifest::{ApiResource, Manifest};
use kubeplug_core::shard::{SHARD_LABEL, is_stray, narrows, shard_label, shard_of};
use kubeplug_kube::apply::Writer;
use kubeplug_kube::informers::{Informer, Informers, Object, ObjectKey, Scope, View};
use kubeplug_kube::leader::{Elector, Leadership, balance};

/// The shards of one plugin on this replica.
pub(crate) struct Shards {
    count: u16,
    lanes: Vec<Arc<Lane>>,
    /// Parents no shard holds (no label, or one out of range), metadata only.
    strays: View,
}

/// One shard while this replica campaigns for it.
pub(crate) struct Lane {
    shard: u16,
    leadership: Leadership,
    writer: Writer,
    /// Its caches have listed since it was last taken.
    ready: AtomicBool,
}

impl Lane {
    pub(crate) fn shard(&self) -> u16 {
        self.shard
    }

    pub(crate) fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    pub(crate) fn writer(&self) -> &Writer {
        &self.writer
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && self.leadership.is_leader()
    }
}

/// Where a key goes in a sharded plugin.
pub(crate) enum Route<'a> {
    /// Its shard is owned here and its caches are ready.
    Lane(&'a Lane),
    /// Not in any shard this replica holds (deleted, another replica's, or
    /// its shard is still listing): nothing to write here.
    Elsewhere,
}

/// The label selector entry of shard `shard`.
fn label(shard: u16) -> (String, String) {
    (SHARD_LABEL.to_string(), shard.to_string())
}

impl Shards {
    /// Campaign for every shard of `manifest`'s plugin (through `elector`,
    /// or own them all when there is none) and watch its strays.
    pub(crate) fn new(
        count: u16,
        manifest: &Manifest,
        elector: Option<&Arc<Elector>>,
        writer: &Writer,
        informers: &Informers,
    ) -> Shards {
        let lanes = (0..count)
            .map(|shard| {
                let leadership = elector.map_or_else(Leadership::always, |e| {
                    e.join(&balance::unit(&manifest.name, Some(shard)))
                });
                Arc::new(Lane {
                    shard,
                    writer: writer.fenced_by(leadership.clone()),
                    leadership,
                    ready: AtomicBool::new(false),
                })
            })
            .collect();
        let values: Vec<String> = (0..count).map(|s| s.to_string()).collect();
        let scopes: Vec<Scope> = Scope::for_plugin(manifest, &manifest.parent, Vec::new(), true)
            .into_iter()
            .map(|scope| Scope {
                not_in: Some((SHARD_LABEL.to_string(), values.clone())),
                ..scope
            })
            .collect();
        Shards {
            count,
            lanes,
            strays: informers.view(&manifest.parent, &scopes),
        }
    }

    pub(crate) fn count(&self) -> u16 {
        self.count
    }

    /// Shards this replica owns now (leading, caches listed).
    pub(crate) fn owned(&self) -> Vec<u16> {
        self.lanes
            .iter()
            .filter(|l| l.ready())
            .map(|l| l.shard)
            .collect()
    }

    /// True while this replica leads at least one shard.
    pub(crate) fn leading(&self) -> bool {
        self.lanes.iter().any(|l| l.leadership.is_leader())
    }

    /// The lane of `parent`'s shard, if this replica holds it ready.
    pub(crate) fn route<'a>(&'a self, parent: Option<&Object>) -> Route<'a> {
        let lane = parent
            .and_then(|p| shard_label(p.metadata.labels.as_ref()))
            .and_then(|s| self.lanes.get(s as usize));
        match lane {
            Some(lane) if lane.ready() => Route::Lane(lane),
            _ => Route::Elsewhere,
        }
    }

    /// Start one task per shard: take its caches when its Lease is won, give
    /// them up when it is lost. The tasks hold the controller weakly.
    pub(crate) fn start(
        shared: &Arc<Shared>,
        informers: Arc<Informers>,
        manifest: &Manifest,
    ) -> Vec<JoinHandle<()>> {
        let Some(shards) = &shared.shards else {
            return Vec::new();
        };
        shards
            .lanes
            .iter()
            .map(|lane| {
                tokio::spawn(hold(
                    Arc::downgrade(shared),
                    lane.clone(),
                    informers.clone(),
                    manifest.clone(),
                ))
            })
            .chain([tokio::spawn(depths(
                Arc::downgrade(shared),
                manifest.name.clone(),
            ))])
            .collect()
    }

    /// The stray parents (see the module doc).
    pub(crate) fn strays(&self) -> &View {
        &self.strays
    }
}

/// Hold `lane`'s shard whenever this replica wins its Lease.
async fn hold(shared: Weak<Shared>, lane: Arc<Lane>, informers: Arc<Informers>, m: Manifest) {
    let own = (
        kubeplug_core::plan::PLUGIN_LABEL.to_string(),
        m.name.clone(),
    );
    loop {
        lane.leadership.wait().await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let shard = label(lane.shard);
        let sources = &strong.sources;
        // Each watch of the shard: into its view, and awaited below.
        let mut listing = Vec::new();
        let mut watch = |view: &View, resource: &ApiResource, labels, metadata_only| {
            let added: Vec<_> = Scope::for_plugin(&m, resource, labels, metadata_only)
                .iter()
                .map(|scope| informers.informer(resource, scope))
                .collect();
            view.add(added.clone());
            listing.extend(added);
        };
        let parent_metadata_only = m.reads_metadata_only(&m.parent);
        watch(
            &sources.parent,
            &m.parent,
            vec![shard.clone()],
            parent_metadata_only,
        );
        for (view, child) in sources.children.iter().zip(&m.children) {
            watch(view, child, vec![own.clone(), shard.clone()], false);
        }
        // Related Pods made from the shard's children's pod templates.
        for (related, view) in &sources.related {
            if narrows(&strong.fence.grant.grant, related) {
                let mut labels = Scope::literal_labels(related);
                labels.push(shard.clone());
                let metadata_only = m.reads_metadata_only(&related.resource);
                watch(view, &related.resource, labels, metadata_only);
            }
        }
        let synced = async {
            for informer in &listing {
                informer.wait_synced().await;
            }
        };
        let kept = tokio::select! {
            () = synced => true,
            () = lane.leadership.lost() => false,
        };
        drop(listing);
        if kept {
            lane.ready.store(true, Ordering::Release);
            strong.metrics.shard_owned(&m.name, lane.shard, true);
            tracing::info!(plugin = %m.name, shard = lane.shard, "shard taken: its caches have listed");
            // Parents that arrived while it listed were set aside.
            for parent in strong.sources.parent.list(None) {
                if shard_label(parent.metadata.labels.as_ref()) == Some(lane.shard)
                    && let Some(key) = super::routes::parent_key(&m, &parent)
                {
                    strong.queue.add(key);
                }
            }
            // Strays that hash to it were set aside too.
            if let Some(shards) = &strong.shards {
                for stray in shards.strays.list(None) {
                    if let Some(key) = super::routes::parent_key(&m, &stray) {
                        strong.queue.add(key);
                    }
                }
            }
            drop(strong);
            lane.leadership.lost().await;
        } else {
            drop(strong);
        }
        lane.ready.store(false, Ordering::Release);
        let Some(strong) = shared.upgrade() else {
            return;
        };
        strong.metrics.shard_owned(&m.name, lane.shard, false);
        // Whoever owns it next may have written meanwhile.
        strong.fence.last_calls.forget_all();
        let leaving = |i: &Informer| i.scope().labels.contains(&shard);
        strong.sources.parent.remove(leaving);
        for view in &strong.sources.children {
            view.remove(leaving);
        }
        for (_, view) in &strong.sources.related {
            view.remove(leaving);
        }
        tracing::info!(plugin = %m.name, shard = lane.shard, "shard given up: its caches are dropped");
    }
}

/// Every second, the queue's waiting parents per shard this replica owns
/// (`kubeplug_shard_queue_depth`): a walk of the queue, off the workers'
/// path.
async fn depths(shared: Weak<Shared>, plugin: String) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let Some(shards) = &strong.shards else {
            return;
        };
        let mut depth = vec![0usize; shards.count as usize];
        for key in strong.queue.waiting() {
            let parent = strong.sources.parent.get(&key.namespace, &key.name);
            if let Some(shard) = parent.and_then(|p| shard_label(p.metadata.labels.as_ref()))
                && let Some(d) = depth.get_mut(shard as usize)
            {
                *d += 1;
            }
        }
        for lane in &shards.lanes {
            let waiting = if lane.ready() {
                depth[lane.shard as usize]
            } else {
                0
            };
            strong
                .metrics
                .shard_queue_depth(&plugin, lane.shard, waiting);
        }
    }
}

/// Label a stray parent with the shard its name hashes to, if this replica
/// owns that shard (with the owner's writer: fenced by its Lease). The label
/// moves it into that shard's watch, which queues it again.
pub(crate) async fn label_stray(shards: &Shards, m: &Manifest, key: &ObjectKey) {
    let Some(stray) = shards.strays.get(&key.namespace, &key.name) else {
        return;
    };
    if !is_stray(shard_label(stray.metadata.labels.as_ref()), shards.count) {
        return;
    }
    let shard = shard_of(&key.namespace, &key.name, shards.count);
    let Some(lane) = shards.lanes.get(shard as usize).filter(|l| l.ready()) else {
        return;
    };
    relabel(lane, m, key, shard).await;
}

impl Shards {
    /// The shard `key`'s name hashes to, if its parent sits in `lane`'s
    /// shard but belongs elsewhere (labelled by hand, or under another shard
    /// count). The label always equals the hash, so what belongs to a parent
    /// (its related objects) can be placed by the parent's name alone.
    pub(crate) fn misplaced(&self, key: &ObjectKey, lane: &Lane) -> Option<u16> {
        let shard = shard_of(&key.namespace, &key.name, self.count);
        (shard != lane.shard).then_some(shard)
    }
}

/// Label `key`'s parent with `shard`, through `lane`'s writer: a stray's
/// (the owner of the shard it hashes to) or a misplaced parent's (the owner
/// of the shard it sits in; the label moves it to its own).
pub(crate) async fn relabel(lane: &Lane, m: &Manifest, key: &ObjectKey, shard: u16) {
    let parent = json!({"metadata": {"namespace": key.namespace, "name": key.name}});
    let patch = json!({"metadata": {"labels": {SHARD_LABEL: shard.to_string()}}});
    match lane.writer.patch_parent(&m.parent, &parent, &patch).await {
        Ok(()) => tracing::debug!(parent = %key, shard, "parent labelled with its shard"),
        Err(error) => {
            tracing::warn!(parent = %key, shard, %error, "cannot label the parent with its shard; retried when it changes")
        }
    }
}
