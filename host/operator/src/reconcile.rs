//! One reconcile: gather inputs → call the plugin → check the fence → write.

mod children;

use children::{Created, clash, create_child, create_once};
use std::sync::Arc;
use std::time::Duration;

use kube::core::DynamicObject;
use serde_json::{Value, json};
use tracing::Instrument as _;

pub use crate::error::{DENIED_RETRY_WITHIN, ReconcileError};
use crate::fence::Fence;
use crate::fence::unchanged::Fingerprint;
use crate::inputs::{Inputs, Sources, call_blocking, child_type, gather};
use kubeplug_core::manifest::Manifest;
use kubeplug_core::plan::{self, Action, Plan, TypedKey};
use kubeplug_kube::apply::{WriteError, Writer};
use kubeplug_kube::informers::{Object, ObjectKey};
use kubeplug_runtime::Plugin;
use kubeplug_runtime::Request;

/// What happened, for the worker's scheduling.
#[derive(Debug, Default)]
pub struct Outcome {
    pub requeue_after: Option<Duration>,
    /// The plugin was not called: its inputs are those of its last call
    /// that wrote nothing (see [`crate::fence::unchanged`]).
    pub skipped: bool,
}

/// What a reconcile handed the plugin, kept so that a failure can be
/// replayed offline (see [`crate::replay`]).
#[derive(Debug, Default)]
pub struct Handed {
    pub request: Option<Arc<Request>>,
    /// The call was `finalize`, not `reconcile`.
    pub finalize: bool,
}

fn finalizers(parent: &Value) -> Vec<String> {
    parent["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(String::from))
        .collect()
}

/// The span of a change (`add`, `remove`) to the plugin's finalizer on the
/// parent, around its write: in a trace it says why the parent was patched.
fn finalizer_span(change: &'static str) -> tracing::Span {
    tracing::debug_span!("finalizer", change)
}

/// A merge patch setting the finalizer list, guarded by resourceVersion so a
/// concurrent change to the list is never lost.
fn finalizers_patch(parent: &Value, list: Vec<String>) -> Value {
    json!({
        "metadata": {
            "finalizers": list,
            "resourceVersion": parent["metadata"]["resourceVersion"],
        }
    })
}

/// How a reconcile went up to the plugin's decision (see [`decide`]).
pub(crate) enum Decided {
    /// It ended before a decision: finalized, its finalizer added, or its
    /// inputs unchanged since a call that wrote nothing.
    Done(Outcome),
    /// The parent is gone from the cache: its children go through garbage
    /// collection, and what is kept for it is to be forgotten.
    Gone,
    /// The plugin decided (or failed to): what [`write`] writes, and what a
    /// shadow compares.
    Live(Box<Live>),
}

/// The live version's decision for a parent, and what it decided on.
pub(crate) struct Live {
    pub parent_obj: Arc<Object>,
    pub inputs: Inputs,
    /// The inputs' fingerprint, kept if the plan writes nothing.
    fingerprint: Fingerprint,
    pub decided: Result<Plan, ReconcileError>,
}

/// The first half of reconciling the parent at `key` with `plugin`:
/// gather its inputs, finalize a parent being deleted, add the finalizer,
/// skip unchanged inputs (unless `every_call`: a shadow compares live
/// decisions, so every parent is called while it runs), and call the
/// plugin. What the plugin was handed is left in `handed`.
pub(crate) async fn decide(
    plugin: &Plugin,
    every_call: bool,
    sources: &Sources,
    writer: &Writer,
    fence: &Fence,
    key: &ObjectKey,
    handed: &mut Handed,
) -> Result<Decided, ReconcileError> {
    let Some(parent_obj) = sources.parent.get(&key.namespace, &key.name) else {
        return Ok(Decided::Gone);
    };
    let inputs = gather(plugin, sources, fence, &parent_obj, Some(key)).await?;
    handed.request = Some(inputs.request.clone());

    if parent_obj.metadata.deletion_timestamp.is_some() {
        handed.finalize = true;
        let finalized = finalize(plugin, writer, fence, key, &parent_obj, &inputs).await?;
        return Ok(Decided::Done(finalized));
    }
    if add_finalizer(plugin, writer, &inputs.parent).await? {
        // The update comes back through the watch and reconciles again.
        return Ok(Decided::Done(Outcome::default()));
    }
    let fingerprint = fence.last_calls.fingerprint(plugin, &inputs.request);
    if !every_call && fence.last_calls.unchanged(key, &fingerprint) {
        tracing::debug!("inputs unchanged since the last call, which wrote nothing; not called");
        return Ok(Decided::Done(Outcome {
            skipped: true,
            ..Outcome::default()
        }));
    }
    fence.last_calls.forget(key);
    let decided = inputs.decide(plugin, fence).await;
    Ok(Decided::Live(Box::new(Live {
        parent_obj,
        inputs,
        fingerprint,
        decided,
    })))
}

/// Add the plugin's finalizer to `parent` if it declares one the parent
/// lacks; true if it was added.
async fn add_finalizer(
    plugin: &Plugin,
    writer: &Writer,
    parent: &Value,
) -> Result<bool, ReconcileError> {
    let manifest = plugin.manifest();
    let Some(finalizer) = &manifest.finalizer else {
        return Ok(false);
    };
    let mut list = finalizers(parent);
    if list.contains(finalizer) {
        return Ok(false);
    }
    list.push(finalizer.clone());
    writer
        .patch_parent(&manifest.parent, parent, &finalizers_patch(parent, list))
        .instrument(finalizer_span("add"))
        .await?;
    Ok(true)
}

/// The second half of a reconcile: write what the live version decided for
/// the parent at `key`: its children, prunes, status and parent patch, then
/// its events. A plan that writes nothing keeps its inputs' fingerprint, so
/// the same inputs are not called again (see [`crate::fence::unchanged`]).
pub(crate) async fn write(
    manifest: &Manifest,
    live: Live,
    sources: &Sources,
    writer: &Writer,
    fence: &Fence,
    key: &ObjectKey,
) -> Result<Outcome, ReconcileError> {
    let Live {
        parent_obj,
        inputs,
        fingerprint,
        decided,
    } = live;
    let plan = decided?;
    let parent = &inputs.parent;
    if !write_children(&plan, &parent_obj, sources, writer, fence, key).await? {
        return Ok(Outcome::default());
    }
    for gone in &plan.prune {
        let ty = child_type(manifest, gone);
        writer.delete_child(ty, gone).await?;
        tracing::info!(
            child_kind = %ty.kind,
            child = gone["metadata"]["name"].as_str().unwrap_or_default(),
            "child pruned"
        );
    }
    if !write_status(manifest, &plan, parent, writer, fence, key).await? {
        return Ok(Outcome::default());
    }
    if !patch_parent(manifest, &plan, parent, writer).await? {
        return Ok(Outcome::default());
    }
    fence.record(writer, &parent_obj, key, &plan.answer.events, "Reconcile");
    if plan.writes_nothing() {
        fence.last_calls.wrote_nothing(key, fingerprint);
    }
    Ok(Outcome {
        requeue_after: plan.requeue_after,
        skipped: false,
    })
}

/// Create or update the plan's children, sending what each step holds;
/// false if the reconcile ends here (the parent's namespace is being
/// deleted or is gone: the parent goes with it, so there is nothing left to
/// converge).
async fn write_children(
    plan: &Plan,
    parent_obj: &Object,
    sources: &Sources,
    writer: &Writer,
    fence: &Fence,
    key: &ObjectKey,
) -> Result<bool, ReconcileError> {
    let parent_uid = parent_obj.metadata.uid.clone().unwrap_or_default();
    for step in &plan.children {
        let Some(sent) = step.sent() else {
            continue;
        };
        let ty = &step.resource;
        let written = match &step.action {
            Action::Unchanged => continue,
            // Ours (controlled by this parent): update, guarded by its uid.
            Action::Update { .. } => writer.apply_child(ty, &sent, true).await,
            create @ (Action::Create | Action::CreateOnce) => {
                let created = if *create == Action::CreateOnce {
                    create_once(writer, step, &sent, &parent_uid).await
                } else {
                    create_child(writer, step, &sent, &parent_uid).await
                };
                match created {
                    Ok(Created::Applied(applied)) => Ok(*applied),
                    Ok(Created::Clash(owner)) => {
                        clash(fence, writer, parent_obj, key, step, &owner);
                        continue;
                    }
                    Err(ReconcileError::Write(error)) => Err(error),
                    Err(error) => return Err(error),
                }
            }
        };
        match written {
            Ok(applied) => {
                tracing::info!(
                    child_kind = %ty.kind,
                    child = applied.metadata.name.as_deref().unwrap_or_default(),
                    "child written"
                );
                sources.remember(ty, applied)
            }
            Err(error) if error.namespace_gone() => {
                tracing::debug!(%error, "namespace deleted; not creating children");
                return Ok(false);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(true)
}

/// Write the plan's status, if any; false if the parent was deleted after
/// the cache last saw it (nothing left to report).
async fn write_status(
    manifest: &Manifest,
    plan: &Plan,
    parent: &Value,
    writer: &Writer,
    fence: &Fence,
    key: &ObjectKey,
) -> Result<bool, ReconcileError> {
    let Some(status) = &plan.status else {
        return Ok(true);
    };
    match writer.apply_status(&manifest.parent, parent, status).await {
        Ok(version) => {
            tracing::info!("status written");
            if let Some(version) = version {
                fence.echoes.wrote(key, version);
            }
            Ok(true)
        }
        Err(error) if error.not_found() => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// Patch the parent as the plan says, if it does; false if the parent
/// changed since it was read.
///
/// Guarded by the resourceVersion the plugin saw: an answer computed from
/// a stale cache (e.g. "not stamped yet" while our own stamp is still on
/// its way through the watch) must not be written. On a conflict the newer
/// version is on its way and reconciles again.
async fn patch_parent(
    manifest: &Manifest,
    plan: &Plan,
    parent: &Value,
    writer: &Writer,
) -> Result<bool, ReconcileError> {
    let Some(patch) = &plan.parent_patch else {
        return Ok(true);
    };
    let mut patch = patch.clone();
    patch["metadata"]["resourceVersion"] = parent["metadata"]["resourceVersion"].clone();
    match writer.patch_parent(&manifest.parent, parent, &patch).await {
        Ok(()) => {
            tracing::info!("parent patched");
            Ok(true)
        }
        Err(error) if error.conflict() || error.not_found() => {
            tracing::debug!(%error, "parent changed since it was read; waiting for the newer version");
            Ok(false)
        }
        Err(error) => Err(error.into()),
    }
}

/// Call `finalize` on a parent being deleted that carries the plugin's
/// finalizer. The answer passes the same fence as a `reconcile` answer: its
/// events are held to the per-answer quota (over it, nothing is written) and
/// to the parent's budget, and it is called again no sooner than the
/// requeue floor.
async fn finalize(
    plugin: &Plugin,
    writer: &Writer,
    fence: &Fence,
    key: &ObjectKey,
    parent_obj: &Object,
    inputs: &Inputs,
) -> Result<Outcome, ReconcileError> {
    let (parent, request) = (&inputs.parent, inputs.request.clone());
    let manifest = plugin.manifest();
    let Some(finalizer) = &manifest.finalizer else {
        return Ok(Outcome::default());
    };
    let list = finalizers(parent);
    if !list.contains(finalizer) {
        return Ok(Outcome::default());
    }
    let finalized = {
        let plugin = plugin.clone();
        call_blocking("finalize", move || plugin.finalize(&request)).await?
    };
    let grant = &fence.grant;
    plan::fence_finalize(manifest, grant, &finalized)?;
    fence.record(writer, parent_obj, key, &finalized.events, "Finalize");
    if let Some(after) = plan::finalize_requeue_after(&finalized, grant.quotas.requeue_floor()) {
        return Ok(Outcome {
            requeue_after: Some(after),
            skipped: false,
        });
    }
    let rest: Vec<String> = list.into_iter().filter(|f| f != finalizer).collect();
    writer
        .patch_parent(&manifest.parent, parent, &finalizers_patch(parent, rest))
        .instrument(finalizer_span("remove"))
        .await?;
    Ok(Outcome::default())
}

#[cfg(test)]
mod tests;
