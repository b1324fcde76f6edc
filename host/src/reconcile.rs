//! One reconcile: gather inputs → call the plugin → check the fence → write.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::core::DynamicObject;
use serde_json::{Value, json};

use crate::apply::{WriteError, Writer};
use crate::informers::{Informer, Key};
use crate::manifest::{Manifest, Related};
use crate::plan::{self, ObjectKey};
use crate::runtime::{CallError, Plugin, Request};

/// Why a reconcile failed. Each is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error(transparent)]
    Fence(#[from] plan::Fenced),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("the plugin call was cancelled or panicked in the host")]
    Join(#[from] tokio::task::JoinError),
}

impl ReconcileError {
    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            ReconcileError::Call(e) => e.label(),
            ReconcileError::Fence(_) => "fence",
            ReconcileError::Write(_) => "write",
            ReconcileError::Join(_) => "join",
        }
    }

    /// Event reason recorded on the parent.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Call(_) | ReconcileError::Join(_) => "PluginFailed",
            ReconcileError::Fence(_) => "FenceViolation",
            ReconcileError::Write(_) => "WriteFailed",
        }
    }
}

/// What happened, for the worker's scheduling.
#[derive(Debug, Default)]
pub struct Outcome {
    pub requeue_after: Option<Duration>,
}

/// The caches a reconcile reads from.
pub struct Sources {
    pub parent: Arc<Informer>,
    pub children: Vec<Arc<Informer>>,
    pub related: Vec<(Related, Arc<Informer>)>,
}

fn to_value(object: &DynamicObject) -> Value {
    serde_json::to_value(object).expect("a DynamicObject always serializes")
}

fn finalizers(parent: &Value) -> Vec<String> {
    parent["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(String::from))
        .collect()
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

impl Sources {
    /// Wait until every cache has listed once. Reconciling earlier would see
    /// no children, re-create them and write a wrong status.
    pub async fn wait_synced(&self) {
        self.parent.wait_synced().await;
        for informer in &self.children {
            informer.wait_synced().await;
        }
        for (_, informer) in &self.related {
            informer.wait_synced().await;
        }
    }

    /// Put a child the host just applied into its cache (see
    /// [`Informer::remember`]).
    fn remember(&self, ty: &crate::manifest::ApiResource, applied: DynamicObject) {
        if let Some(informer) = self.children.iter().find(|i| i.resource() == ty) {
            informer.remember(applied);
        }
    }

    fn observed(&self, uid: &str) -> Vec<Arc<DynamicObject>> {
        self.children
            .iter()
            .flat_map(|i| i.owned_by(uid))
            .filter(|o| {
                o.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| r.uid == uid && r.controller == Some(true))
            })
            .collect()
    }

    fn related(&self, namespace: &str, name: &str) -> Vec<Arc<DynamicObject>> {
        self.related
            .iter()
            .flat_map(|(related, informer)| {
                let ns = related.resource.namespaced.then_some(namespace);
                informer
                    .list(ns)
                    .into_iter()
                    .filter(|o| crate::controller::routes::matches(related, o, name))
            })
            .collect()
    }
}

async fn call_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CallError> + Send + 'static,
) -> Result<T, ReconcileError> {
    Ok(tokio::task::spawn_blocking(f).await??)
}

/// Reconcile the parent at `key` with `plugin`.
pub async fn reconcile(
    plugin: &Plugin,
    sources: &Sources,
    writer: &Writer,
    key: &Key,
) -> Result<Outcome, ReconcileError> {
    let manifest = plugin.manifest();
    let Some(parent_obj) = sources.parent.get(&key.0, &key.1) else {
        // Deleted: its children go through garbage collection.
        return Ok(Outcome::default());
    };
    let parent = to_value(&parent_obj);
    let uid = parent_obj.metadata.uid.clone().unwrap_or_default();
    let observed_objs = sources.observed(&uid);
    let observed: Vec<Value> = observed_objs.iter().map(|o| to_value(o)).collect();
    let related: Vec<String> = sources
        .related(&key.0, &key.1)
        .iter()
        .map(|o| serde_json::to_string(&**o).expect("a DynamicObject always serializes"))
        .collect();
    let request = Request::new(
        parent.to_string(),
        observed.iter().map(Value::to_string).collect(),
        related,
    );

    if parent_obj.metadata.deletion_timestamp.is_some() {
        return finalize(plugin, manifest, writer, &parent_obj, &parent, request).await;
    }
    if let Some(finalizer) = &manifest.finalizer {
        let mut list = finalizers(&parent);
        if !list.contains(finalizer) {
            list.push(finalizer.clone());
            writer
                .patch_parent(&manifest.parent, &parent, &finalizers_patch(&parent, list))
                .await?;
            // The update comes back through the watch and reconciles again.
            return Ok(Outcome::default());
        }
    }

    let desired = {
        let plugin = plugin.clone();
        call_blocking(move || plugin.reconcile(&request)).await?
    };
    let fence = |source| plan::Fenced {
        plugin: manifest.name.clone(),
        source,
    };
    let prepared = plan::children(manifest, &parent, &desired.children).map_err(fence)?;
    plan::check_mode(
        manifest,
        desired.parent_patch.is_some(),
        desired.status.is_some(),
    )
    .map_err(fence)?;

    let by_key: HashMap<ObjectKey, &Value> =
        observed.iter().map(|o| (ObjectKey::of(o), o)).collect();
    for child in &prepared {
        if plan::needs_apply(child, by_key.get(&ObjectKey::of(child)).copied()) {
            let ty = child_type(manifest, child);
            match writer.apply_child(ty, child).await {
                Ok(applied) => sources.remember(ty, applied),
                // The parent's namespace is being deleted or is gone: the
                // parent goes with it, so there is nothing left to converge.
                Err(error) if error.namespace_gone() => {
                    tracing::debug!(%error, "namespace deleted; not creating children");
                    return Ok(Outcome::default());
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
    for gone in plan::prune(manifest, &observed, &prepared) {
        writer
            .delete_child(child_type(manifest, gone), gone)
            .await?;
    }
    if let Some(status) = plan::status_update(&parent, desired.status.as_ref()) {
        match writer.apply_status(&manifest.parent, &parent, status).await {
            Ok(()) => {}
            // Deleted after the cache last saw it: nothing left to report.
            Err(error) if error.not_found() => return Ok(Outcome::default()),
            Err(error) => return Err(error.into()),
        }
    }
    if let Some(patch) = desired
        .parent_patch
        .as_ref()
        .and_then(|p| plan::parent_patch(&parent, &p.labels, &p.annotations))
    {
        // Guarded by the resourceVersion the plugin saw: an answer computed
        // from a stale cache (e.g. "not stamped yet" while our own stamp is
        // still on its way through the watch) must not be written. On a
        // conflict the newer version is on its way and reconciles again.
        let mut patch = patch;
        patch["metadata"]["resourceVersion"] = parent["metadata"]["resourceVersion"].clone();
        match writer.patch_parent(&manifest.parent, &parent, &patch).await {
            Ok(()) => {}
            Err(error) if error.conflict() || error.not_found() => {
                tracing::debug!(%error, "parent changed since it was read; waiting for the newer version");
                return Ok(Outcome::default());
            }
            Err(error) => return Err(error.into()),
        }
    }
    for event in &desired.events {
        writer.event(&parent_obj, event, "Reconcile").await;
    }
    Ok(Outcome {
        requeue_after: desired.requeue_after,
    })
}

/// The declared type of a child that passed the fence (or was observed
/// through a declared child informer).
fn child_type<'a>(manifest: &'a Manifest, child: &Value) -> &'a crate::manifest::ApiResource {
    manifest
        .child_type(
            child["apiVersion"].as_str().unwrap_or_default(),
            child["kind"].as_str().unwrap_or_default(),
        )
        .expect("children are checked against the manifest before writing")
}

/// Default wait before asking a plugin again whether cleanup is done.
const FINALIZE_RETRY: Duration = Duration::from_secs(5);

async fn finalize(
    plugin: &Plugin,
    manifest: &Manifest,
    writer: &Writer,
    parent_obj: &DynamicObject,
    parent: &Value,
    request: Request,
) -> Result<Outcome, ReconcileError> {
    let Some(finalizer) = &manifest.finalizer else {
        return Ok(Outcome::default());
    };
    let list = finalizers(parent);
    if !list.contains(finalizer) {
        return Ok(Outcome::default());
    }
    let finalized = {
        let plugin = plugin.clone();
        call_blocking(move || plugin.finalize(&request)).await?
    };
    for event in &finalized.events {
        writer.event(parent_obj, event, "Finalize").await;
    }
    if !finalized.done {
        return Ok(Outcome {
            requeue_after: Some(finalized.requeue_after.unwrap_or(FINALIZE_RETRY)),
        });
    }
    let rest: Vec<String> = list.into_iter().filter(|f| f != finalizer).collect();
    writer
        .patch_parent(&manifest.parent, parent, &finalizers_patch(parent, rest))
        .await?;
    Ok(Outcome::default())
}
