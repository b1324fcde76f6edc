//! One reconcile: gather inputs → call the plugin → check the fence → write.

mod children;

use children::{Created, clash, create_child, create_once};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::DynamicObject;
use serde_json::{Value, json};
use tracing::Instrument as _;

pub use crate::error::{DENIED_RETRY_WITHIN, ReconcileError};
use crate::fence::Fence;
use crate::inputs::{Inputs, Sources, call_blocking, child_type, decide, gather};
use crate::shadow::Shadow;
use kubeplug_core::plan::{self, Action, TypedKey};
use kubeplug_kube::apply::{WriteError, Writer};
use kubeplug_kube::informers::{Object, ObjectKey};
use kubeplug_kube::report::format_chain;
use kubeplug_runtime::{Plugin, Request};

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

/// Reconcile the parent at `key` with `plugin`, and with `shadow`'s
/// candidate beside it (compared, never written). What the plugin was
/// handed is left in `handed`.
/// Forget what is kept per parent for `key` (deleted, or no longer this
/// replica's to reconcile).
pub(crate) fn forget(shadow: Option<&Arc<Shadow>>, fence: &Fence, key: &ObjectKey) {
    if let Some(shadow) = shadow {
        shadow.forget(key);
    }
    fence.last_calls.forget(key);
    fence.echoes.forget(key);
    fence.references.forget(key);
}

pub async fn reconcile(
    plugin: &Plugin,
    shadow: Option<&Arc<Shadow>>,
    sources: &Sources,
    writer: &Writer,
    fence: &Fence,
    key: &ObjectKey,
    handed: &mut Handed,
) -> Result<Outcome, ReconcileError> {
    let manifest = plugin.manifest();
    let Some(parent_obj) = sources.parent.get(&key.namespace, &key.name) else {
        // Deleted: its children go through garbage collection.
        forget(shadow, fence, key);
        return Ok(Outcome::default());
    };
    let Inputs {
        parent,
        observed,
        request,
    } = gather(plugin, sources, fence, &parent_obj, Some(key)).await?;
    let parent_uid = parent_obj.metadata.uid.clone().unwrap_or_default();
    handed.request = Some(request.clone());

    if parent_obj.metadata.deletion_timestamp.is_some() {
        handed.finalize = true;
        return finalize(plugin, writer, fence, key, &parent_obj, &parent, request).await;
    }
    if let Some(finalizer) = &manifest.finalizer {
        let mut list = finalizers(&parent);
        if !list.contains(finalizer) {
            list.push(finalizer.clone());
            writer
                .patch_parent(&manifest.parent, &parent, &finalizers_patch(&parent, list))
                .instrument(finalizer_span("add"))
                .await?;
            // The update comes back through the watch and reconciles again.
            return Ok(Outcome::default());
        }
    }

    // A shadow compares live decisions: every parent is called while it runs.
    let inputs = fence.last_calls.fingerprint(plugin, &request);
    if shadow.is_none() && fence.last_calls.unchanged(key, &inputs) {
        tracing::debug!("inputs unchanged since the last call, which wrote nothing; not called");
        return Ok(Outcome {
            skipped: true,
            ..Outcome::default()
        });
    }
    fence.last_calls.forget(key);
    let decided = decide(plugin, fence, &parent, &observed, request.clone()).await;
    if let Some(shadow) = shadow {
        // The candidate decides on the same request in the background; this
        // reconcile goes on at once.
        let live = match &decided {
            Ok(plan) => Ok(plan.clone()),
            Err(error) => Err(format_chain(error)),
        };
        let (grant, parent, handed) = (fence.grant.clone(), parent.clone(), request.clone());
        let job = crate::shadow::Job {
            key: key.clone(),
            request,
            live,
            check: Box::new(move |plugin, desired| {
                // Parsed again here, off the reconcile's path: a waiting
                // comparison holds only the request's texts.
                let observed = handed
                    .observed
                    .iter()
                    .filter_map(|text| serde_json::from_str(text).ok())
                    .collect::<Vec<Value>>();
                plan::decide(plugin.manifest(), &grant, &parent, &observed, desired)
                    .map_err(|error| format_chain(&error))
            }),
        };
        shadow.submit(job, &fence.metrics);
    }
    let plan = decided?;
    let writes_nothing = plan.writes_nothing();

    for step in &plan.children {
        let child = &step.child;
        let ty = child_type(manifest, child);
        let written = match &step.action {
            Action::Unchanged => continue,
            // Ours (controlled by this parent): update, guarded by its uid.
            Action::Update { uid, .. } => {
                writer
                    .apply_child(ty, &plan::guarded(child, uid.as_deref()), true)
                    .await
            }
            create @ (Action::Create | Action::CreateOnce) => {
                let created = if *create == Action::CreateOnce {
                    create_once(writer, ty, child, &parent_uid).await
                } else {
                    create_child(writer, ty, child, &parent_uid).await
                };
                match created {
                    Ok(Created::Applied(applied)) => Ok(*applied),
                    Ok(Created::Clash(owner)) => {
                        clash(fence, writer, &parent_obj, key, ty, child, &owner);
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
            // The parent's namespace is being deleted or is gone: the
            // parent goes with it, so there is nothing left to converge.
            Err(error) if error.namespace_gone() => {
                tracing::debug!(%error, "namespace deleted; not creating children");
                return Ok(Outcome::default());
            }
            Err(error) => return Err(error.into()),
        }
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
    if let Some(status) = &plan.status {
        match writer.apply_status(&manifest.parent, &parent, status).await {
            Ok(version) => {
                tracing::info!("status written");
                if let Some(version) = version {
                    fence.echoes.wrote(key, version);
                }
            }
            // Deleted after the cache last saw it: nothing left to report.
            Err(error) if error.not_found() => return Ok(Outcome::default()),
            Err(error) => return Err(error.into()),
        }
    }
    if let Some(patch) = &plan.parent_patch {
        // Guarded by the resourceVersion the plugin saw: an answer computed
        // from a stale cache (e.g. "not stamped yet" while our own stamp is
        // still on its way through the watch) must not be written. On a
        // conflict the newer version is on its way and reconciles again.
        let mut patch = patch.clone();
        patch["metadata"]["resourceVersion"] = parent["metadata"]["resourceVersion"].clone();
        match writer.patch_parent(&manifest.parent, &parent, &patch).await {
            Ok(()) => tracing::info!("parent patched"),
            Err(error) if error.conflict() || error.not_found() => {
                tracing::debug!(%error, "parent changed since it was read; waiting for the newer version");
                return Ok(Outcome::default());
            }
            Err(error) => return Err(error.into()),
        }
    }
    fence.record(writer, &parent_obj, key, &plan.answer.events, "Reconcile");
    if writes_nothing {
        fence.last_calls.wrote_nothing(key, inputs);
    }
    Ok(Outcome {
        requeue_after: plan.requeue_after,
        skipped: false,
    })
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
    parent: &Value,
    request: Arc<Request>,
) -> Result<Outcome, ReconcileError> {
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
