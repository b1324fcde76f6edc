//! A plugin's workers: each takes a parent's key from the queue, routes it
//! to the writer it is reconciled under, reconciles it in a span, hands the
//! live decision to a shadow's candidate if one runs, and settles the
//! result (see [`super::error_policy`]).

use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use super::{Shared, error_policy, shards};
use crate::fence::Fence;
use crate::reconcile::{self, Decided, Handed, ReconcileError};
use crate::shadow::{Job, Shadow};
use kubeplug_kube::apply::{WriteError, Writer};
use kubeplug_kube::informers::ObjectKey;
use kubeplug_kube::leader::Leadership;
use kubeplug_runtime::Plugin;

pub(super) async fn worker(shared: Arc<Shared>) {
    shared.sources.wait_synced().await;
    loop {
        // Only the leader writes; followers keep their caches warm. A
        // sharded plugin's keys are routed to their shard below.
        if shared.shards.is_none() {
            shared.leadership.wait().await;
        }
        let Some(key) = shared.queue.next().await else {
            return;
        };
        let (writer, leadership, shard) = match route(&shared, &key).await {
            Some(route) => route,
            None => {
                shared.queue.done(&key);
                continue;
            }
        };
        let plugin = shared.plugin.read().clone();
        let shadow = shared.shadow.read().clone();
        let name = plugin.name().to_string();
        // Every line of a reconcile carries these (as JSON fields with
        // `--log-format json`): which plugin, which kind, which object.
        let parent = &plugin.manifest().parent;
        let span = tracing::info_span!(
            "reconcile",
            plugin = %name,
            kind = %parent.kind,
            group = %parent.group,
            namespace = %key.namespace,
            // Not `name`: JSON logs put the span's own name under that key.
            object = %key,
            // How it ended (see `error_policy::settle`).
            result = tracing::field::Empty,
            "otel.status_code" = tracing::field::Empty,
        );
        span.in_scope(|| tracing::debug!("reconcile started"));
        let started = Instant::now();
        let mut handed = Handed::default();
        // Losing leadership cancels the reconcile at its next await point;
        // writes are also refused one by one (see `apply::Writer`).
        let result = tokio::select! {
            result = reconcile_once(&shared, &plugin, shadow.as_ref(), &writer, &key, &mut handed)
                .instrument(span.clone()) => result,
            () = leadership.lost() => Err(ReconcileError::Write(WriteError::NotLeader {
                what: "the reconcile".into(),
            })),
        };
        let took = started.elapsed();
        error_policy::settle(&shared, &plugin, &key, result, &handed, took, &span).await;
        if let Some(shard) = shard {
            shared.metrics.shard_reconciled(&name, shard);
        }
        shared.metrics.queue_depth(&name, shared.queue.len());
        shared.queue.done(&key);
    }
}

/// Reconcile the parent at `key` with `plugin`, and hand the live decision
/// to `shadow`'s candidate, if one runs, to compare in the background (never
/// written) while the reconcile goes on to write. What the plugin was
/// handed is left in `handed`.
async fn reconcile_once(
    shared: &Shared,
    plugin: &Plugin,
    shadow: Option<&Arc<Shadow>>,
    writer: &Writer,
    key: &ObjectKey,
    handed: &mut Handed,
) -> Result<reconcile::Outcome, ReconcileError> {
    let (sources, fence) = (&shared.sources, &shared.fence);
    let every_call = shadow.is_some();
    let decided = reconcile::decide(plugin, every_call, sources, writer, fence, key, handed);
    let live = match decided.await? {
        Decided::Done(outcome) => return Ok(outcome),
        Decided::Gone => {
            forget(shadow, fence, key);
            return Ok(reconcile::Outcome::default());
        }
        Decided::Live(live) => *live,
    };
    if let Some(shadow) = shadow {
        let (parent, request) = (live.inputs.parent.clone(), live.inputs.request.clone());
        let job = Job::new(
            key.clone(),
            fence.grant.clone(),
            parent,
            request,
            &live.decided,
        );
        shadow.submit(job, &fence.metrics);
    }
    reconcile::write(plugin.manifest(), live, sources, writer, fence, key).await
}

/// Forget what is kept per parent for `key` (deleted, or no longer this
/// replica's to reconcile).
pub(super) fn forget(shadow: Option<&Arc<Shadow>>, fence: &Fence, key: &ObjectKey) {
    if let Some(shadow) = shadow {
        shadow.forget(key);
    }
    fence.last_calls.forget(key);
    fence.echoes.forget(key);
    fence.references.forget(key);
}

/// The writer and leadership `key` is reconciled under; `None` when it is
/// not this replica's to reconcile: a sharded plugin's parent in a shard
/// held elsewhere (or still listing here), a stray (labelled here first if
/// its shard is this replica's) or a misplaced parent (relabelled; see
/// [`shards`]).
pub(super) async fn route(
    shared: &Shared,
    key: &ObjectKey,
) -> Option<(Writer, Leadership, Option<u16>)> {
    let Some(shards) = &shared.shards else {
        return Some((shared.writer.clone(), shared.leadership.clone(), None));
    };
    let parent = shared.sources.parent.get(&key.namespace, &key.name);
    let manifest = || shared.plugin.read().manifest().clone();
    if let shards::Route::Lane(lane) = shards.route(parent.as_deref()) {
        if let Some(shard) = shards.misplaced(key, lane) {
            shards::relabel(lane, &manifest(), key, shard).await;
            return None;
        }
        return Some((
            lane.writer().clone(),
            lane.leadership().clone(),
            Some(lane.shard()),
        ));
    }
    if parent.is_none() {
        let manifest = manifest();
        if shards.strays().get(&key.namespace, &key.name).is_some() {
            shards::label_stray(shards, &manifest, key).await;
        } else {
            // Deleted, or moved to a shard held elsewhere: forget it.
            shared.failing.forget(key);
            forget(shared.shadow.read().as_ref(), &shared.fence, key);
        }
    }
    None
}
