//! What a plugin is handed for a parent, gathered in one place: the caches
//! a controller reads ([`Sources`]), the read checks and references asked
//! first (`gather`), and the one way a call is decided (`plan`), which
//! reconciles, previews and what-ifs share.

use std::sync::Arc;

use kube::core::DynamicObject;
use serde_json::Value;
use tracing::Instrument as _;

use crate::error::ReconcileError;
use crate::fence::Fence;
use kubeplug_core::inputs::{self as selection, Parent, Seen};
use kubeplug_core::manifest::{ApiResource, Manifest, Related};
use kubeplug_core::plan::{self, FenceError, Plan};
use kubeplug_core::policy::Effective;
use kubeplug_core::reference::{self, Reference, Target};
use kubeplug_kube::informers::{Informers, Object, ObjectKey, Scope, View};
use kubeplug_runtime::{CallError, Plugin, Request};

/// The caches a reconcile reads from, each in the plugin's scopes.
pub struct Sources {
    pub parent: View,
    pub children: Vec<View>,
    pub related: Vec<(Related, View)>,
    /// One per referenced kind, in the plugin's namespaces.
    pub referenced: Vec<View>,
}

impl Sources {
    /// The caches the plugin reads, each kind in the plugin's namespaces only.
    /// Children: only those carrying the label the host puts on every child it
    /// writes for this plugin, so a plugin that makes StatefulSets does not
    /// cache everyone's. Related kinds: filtered by the fixed part of their
    /// selector.
    pub(crate) fn watch(
        manifest: &Manifest,
        grant: &Effective,
        informers: &Arc<Informers>,
    ) -> Sources {
        let view = |resource: &ApiResource, labels, metadata_only| {
            let scopes = Scope::for_plugin(manifest, resource, labels, metadata_only);
            informers.view(resource, &scopes)
        };
        // A sharded plugin's parents and children are watched per shard
        // while this replica holds it (see `shards`): its views start empty.
        let sharded = grant.grant.shards > 1;
        let sharded_view = |resource: &ApiResource, labels, metadata_only| {
            if sharded {
                View::new(resource.clone(), Vec::new())
            } else {
                view(resource, labels, metadata_only)
            }
        };
        let own = vec![(
            kubeplug_core::plan::PLUGIN_LABEL.to_string(),
            manifest.name.clone(),
        )];
        Sources {
            // Metadata-only where the plugin says it reads no more (validated:
            // a decorator's parent, related kinds).
            parent: sharded_view(
                &manifest.parent,
                Vec::new(),
                manifest.reads_metadata_only(&manifest.parent),
            ),
            children: manifest
                .children
                .iter()
                .map(|c| sharded_view(c, own.clone(), false))
                .collect(),
            // Related Pods of a `shardPods` grant are watched per shard too
            // (see `kubeplug_core::shard::narrows`); other related kinds whole.
            related: manifest
                .related
                .iter()
                .map(|r| {
                    let metadata_only = manifest.reads_metadata_only(&r.resource);
                    let view = if kubeplug_core::shard::narrows(&grant.grant, r) {
                        View::new(r.resource.clone(), Vec::new())
                    } else {
                        view(&r.resource, Scope::literal_labels(r), metadata_only)
                    };
                    (r.clone(), view)
                })
                .collect(),
            // Whole kinds in the plugin's namespaces: a name or selector
            // differs per parent, and one watch serves them all.
            referenced: manifest
                .references
                .iter()
                .map(|kind| view(kind, Vec::new(), manifest.reads_metadata_only(kind)))
                .collect(),
        }
    }

    /// Wait until every cache has listed once. Reconciling earlier would see
    /// no children, re-create them and write a wrong status.
    pub async fn wait_synced(&self) {
        for view in self.all() {
            view.wait_synced().await;
        }
    }

    /// True once every cache has listed once.
    pub fn synced(&self) -> bool {
        self.all().all(|v| v.is_synced())
    }

    /// The first cache that cannot list or watch, and why.
    pub fn problem(&self) -> Option<kubeplug_kube::informers::Problem> {
        self.all().find_map(|v| v.problem())
    }

    fn all(&self) -> impl Iterator<Item = &View> {
        std::iter::once(&self.parent)
            .chain(&self.children)
            .chain(self.related.iter().map(|(_, i)| i))
            .chain(&self.referenced)
    }

    /// The objects `references` find, each once, with its referenced kind.
    fn find(&self, references: &[Reference]) -> Vec<(ApiResource, Arc<Object>)> {
        let mut found: Vec<(ApiResource, Arc<Object>)> = Vec::new();
        for reference in references {
            let Some(view) = self
                .referenced
                .iter()
                .find(|v| v.resource() == &reference.resource)
            else {
                continue;
            };
            let namespace = reference.namespace.as_deref();
            let objects = match &reference.target {
                Target::Name(name) => view
                    .get(namespace.unwrap_or_default(), name)
                    .into_iter()
                    .collect(),
                Target::Labels(_) => view.list(namespace),
            };
            for object in objects {
                let hit = reference.finds(
                    object
                        .metadata
                        .namespace
                        .as_deref()
                        .filter(|ns| !ns.is_empty()),
                    object.metadata.name.as_deref().unwrap_or_default(),
                    object.metadata.labels.as_ref(),
                );
                if hit && !found.iter().any(|(_, o)| Arc::ptr_eq(o, &object)) {
                    found.push((reference.resource.clone(), object));
                }
            }
        }
        found
    }

    /// Put a child the host just applied into its cache (see
    /// [`kubeplug_kube::informers::Informer::remember`]).
    pub(crate) fn remember(
        &self,
        ty: &kubeplug_core::manifest::ApiResource,
        applied: DynamicObject,
    ) {
        if let Some(view) = self.children.iter().find(|v| v.resource() == ty) {
            view.remember(applied);
        }
    }

    /// The children `parent` controls (see [`selection::observed`]), looked
    /// up by its uid in its namespace (see [`View::owned_by`]).
    pub(crate) fn observed(&self, parent: &Parent) -> Vec<Arc<Object>> {
        self.children
            .iter()
            .flat_map(|i| i.owned_by(parent.namespace, parent.uid))
            .filter(|o| is_observed(parent, o))
            .collect()
    }

    /// The related objects of `parent` (see [`selection::related`]). A
    /// selector entry naming the parent is looked up by its label index
    /// (see [`Sources::index_related`]); the others were filtered by the
    /// API server, and every entry is checked again here.
    pub(crate) fn related(&self, parent: &Parent) -> Vec<Arc<Object>> {
        let (namespace, name) = (parent.namespace.unwrap_or_default(), parent.name);
        self.related
            .iter()
            .flat_map(|(related, view)| {
                let namespaced = related.resource.namespaced;
                let candidates = match related.parent_name_key() {
                    Some(key) if namespaced => view.labelled(namespace, key, name),
                    _ => view.list(namespaced.then_some(namespace)),
                };
                candidates
                    .into_iter()
                    .filter(|o| selection::related(related, parent, &seen(o)))
            })
            .collect()
    }

    /// Index related objects by the label that names their parent, so a
    /// reconcile finds a Database's Pods without scanning its namespace.
    pub fn index_related(&self) {
        for (related, view) in &self.related {
            if let Some(key) = related.parent_name_key() {
                view.index_label(key);
            }
        }
    }
}

/// `object` as input selection sees it.
/// Whether `object`, of one of the plugin's child kinds, is one of
/// `parent`'s observed children: [`selection::observed`] over its metadata.
/// `render` applies the same rule to files (`kubeplug_kit::render`).
pub fn is_observed(parent: &Parent, object: &Object) -> bool {
    let owners = object.metadata.owner_references.iter().flatten();
    let owners = owners.map(|r| (r.uid.as_str(), r.controller));
    selection::observed(parent, &seen(object), owners)
}

fn seen(object: &Object) -> Seen<'_> {
    Seen {
        namespace: object.metadata.namespace.as_deref(),
        labels: object.metadata.labels.as_ref(),
    }
}

/// Call the plugin's `function` (`f`) on a blocking thread, in a `call`
/// span: a step of the reconcile's trace, in which the plugin's own log
/// lines (written on that thread) fall too. At debug level, so that log
/// lines at the default level keep the reconcile's fields.
pub(crate) async fn call_blocking<T: Send + 'static>(
    function: &'static str,
    f: impl FnOnce() -> Result<T, CallError> + Send + 'static,
) -> Result<T, ReconcileError> {
    let span = tracing::debug_span!("call", function);
    let inside = span.clone();
    Ok(tokio::task::spawn_blocking(move || inside.in_scope(f))
        .instrument(span)
        .await??)
}

/// What the plugin is handed for a parent.
pub(crate) struct Inputs {
    pub parent: Value,
    /// The children it controls, as the caches hold them.
    pub observed: Vec<Value>,
    pub request: Arc<Request>,
}

impl Inputs {
    /// Call the plugin on these inputs and decide what its answer writes
    /// (see [`decide`]).
    pub(crate) async fn decide(
        &self,
        plugin: &Plugin,
        fence: &Fence,
    ) -> Result<Plan, ReconcileError> {
        decide(
            plugin,
            fence,
            &self.parent,
            &self.observed,
            self.request.clone(),
        )
        .await
    }
}

/// The parent, its observed children, related objects and the objects it
/// references (`referenced`, after the related ones, each once), as one
/// request.
///
/// The texts are the caches' own, shared: nothing is serialized here. The
/// parent and children are also parsed, for the comparisons that follow.
pub(crate) fn inputs(
    sources: &Sources,
    parent_obj: &Object,
    referenced: &[(ApiResource, Arc<Object>)],
) -> Inputs {
    let parent = parent_obj.to_value();
    let meta = &parent_obj.metadata;
    let selecting = Parent {
        name: meta.name.as_deref().unwrap_or_default(),
        namespace: meta.namespace.as_deref().filter(|ns| !ns.is_empty()),
        uid: meta.uid.as_deref().unwrap_or_default(),
    };
    let observed_objects = sources.observed(&selecting);
    let observed: Vec<Value> = observed_objects.iter().map(|o| o.to_value()).collect();
    let related_objects = sources.related(&selecting);
    let also_related = |o: &Arc<Object>| {
        o.metadata.uid.is_some()
            && related_objects
                .iter()
                .any(|r| r.metadata.uid == o.metadata.uid)
    };
    let related = related_objects
        .iter()
        .chain(
            referenced
                .iter()
                .map(|(_, o)| o)
                .filter(|o| !also_related(o)),
        )
        .map(|o| o.json().clone())
        .collect();
    let request = Request::new(
        parent_obj.json().clone(),
        observed_objects.iter().map(|o| o.json().clone()).collect(),
        related,
    );
    Inputs {
        parent,
        observed,
        request: Arc::new(request),
    }
}

/// Everything a call for `parent_obj` is handed, once the plugin's
/// ServiceAccount is known to read it all: the one way a reconcile and a
/// preview gather their inputs. `key` is the parent's when the answer is
/// lived by (a reconcile): its references are then remembered and indexed.
pub(crate) async fn gather(
    plugin: &Plugin,
    sources: &Sources,
    fence: &Fence,
    parent_obj: &Object,
    key: Option<&ObjectKey>,
) -> Result<Inputs, ReconcileError> {
    let manifest = plugin.manifest();
    let namespace = parent_obj.metadata.namespace.clone().unwrap_or_default();
    fence.check_reads(manifest, &namespace).await?;
    let referenced = referenced(plugin, sources, fence, parent_obj, key).await?;
    Ok(inputs(sources, parent_obj, &referenced))
}

/// The objects `parent_obj` references, found in the caches. The plugin is
/// asked once per version of the parent and of itself (references are a
/// function of the parent and config alone); its answer is held to the
/// fence, and a namespace other than the parent's (only a cluster-scoped
/// parent may name one) is checked against the plugin's reads.
async fn referenced(
    plugin: &Plugin,
    sources: &Sources,
    fence: &Fence,
    parent_obj: &Object,
    key: Option<&ObjectKey>,
) -> Result<Vec<(ApiResource, Arc<Object>)>, ReconcileError> {
    if !plugin.references_objects() {
        return Ok(Vec::new());
    }
    let manifest = plugin.manifest();
    let version = parent_obj
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let asked_of = plugin_identity(plugin);
    let cached = key.and_then(|k| fence.references.cached(k, &version, &asked_of));
    let references: Arc<[Reference]> = match cached {
        Some(references) => references,
        None => {
            let asked = {
                let (plugin, parent) = (plugin.clone(), parent_obj.json().clone());
                call_blocking("references", move || plugin.references(&parent)).await?
            };
            let namespace = parent_obj
                .metadata
                .namespace
                .as_deref()
                .filter(|ns| !ns.is_empty());
            let checked =
                reference::check(manifest, namespace, asked).map_err(|e| plan::Fenced {
                    plugin: manifest.name.clone(),
                    source: FenceError::from(e),
                })?;
            for r in checked
                .iter()
                .filter(|r| r.namespace.as_deref() != namespace)
            {
                let ns = r.namespace.as_deref().unwrap_or_default();
                fence
                    .access
                    .check(&fence.grant, "list", &r.resource, ns)
                    .await?;
            }
            checked.into()
        }
    };
    let found = sources.find(&references);
    if let Some(key) = key {
        fence
            .references
            .record(key, &version, &asked_of, references, &found);
    }
    Ok(found)
}

/// Which plugin a parent's references were asked of: its bytes and its
/// configuration (a new one of either may name other objects).
fn plugin_identity(plugin: &Plugin) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    plugin.config().hash(&mut hasher);
    format!("{}/{:016x}", plugin.digest(), hasher.finish())
}

/// Where a call's inputs come from: a running controller's serving
/// version, caches and fence. The controller implements it, so what
/// gathers and decides never imports the controller.
pub trait Serves: Send + Sync {
    /// The plugin version serving now.
    fn plugin(&self) -> Plugin;
    fn sources(&self) -> &Sources;
    fn fence(&self) -> &Fence;
    /// Live reconciles are waiting or running: background work (a what-if)
    /// waits for them.
    fn busy(&self) -> bool;
}

/// What one call of `plugin` for `parent_obj` would write now, read from
/// `serving`'s caches and held to its fence, nothing written and nothing
/// remembered: gather, then decide, as a reconcile does between its own
/// steps. Previews and what-ifs decide here; `plugin` is the serving
/// version or a candidate of its shape (the serving face guards it).
pub(crate) async fn plan(
    plugin: &Plugin,
    serving: &dyn Serves,
    parent_obj: &Object,
) -> Result<(Inputs, Plan), ReconcileError> {
    let (sources, fence) = (serving.sources(), serving.fence());
    let inputs = gather(plugin, sources, fence, parent_obj, None).await?;
    let plan = inputs.decide(plugin, fence).await?;
    Ok((inputs, plan))
}

/// Call the plugin and decide what its answer writes for `parent`, whose
/// controlled children are `observed` (see [`plan::decide`]).
async fn decide(
    plugin: &Plugin,
    fence: &Fence,
    parent: &Value,
    observed: &[Value],
    request: Arc<Request>,
) -> Result<Plan, ReconcileError> {
    let desired = {
        let plugin = plugin.clone();
        call_blocking("reconcile", move || plugin.reconcile(&request)).await?
    };
    Ok(plan::decide(
        plugin.manifest(),
        &fence.grant,
        parent,
        observed,
        desired,
    )?)
}

/// The declared type of a child that passed the fence (or was observed
/// through a declared child informer).
pub(crate) fn child_type<'a>(
    manifest: &'a Manifest,
    child: &Value,
) -> &'a kubeplug_core::manifest::ApiResource {
    manifest
        .child_type(
            child["apiVersion"].as_str().unwrap_or_default(),
            child["kind"].as_str().unwrap_or_default(),
        )
        .expect("children are checked against the manifest before writing")
}
