//! One reconcile: gather inputs → call the plugin → check the fence → write.

pub mod budget;
mod children;
pub mod echoes;
pub mod references;
pub mod unchanged;

use children::{Created, clash, create_child, create_once};
use std::sync::Arc;
use std::time::Duration;

use kube::core::DynamicObject;
use serde_json::{Value, json};
use tracing::Instrument as _;

use crate::metrics::OperatorMetrics;
use crate::shadow::Shadow;
use budget::EventBudget;
use kubeplug_core::manifest::{ApiResource, Manifest, Related};
use kubeplug_core::plan::{self, Action, FenceError, Plan, TypedKey};
use kubeplug_core::policy::Effective;
use kubeplug_core::reference::{self, Reference, Target};
use kubeplug_kube::apply::{WriteError, Writer};
use kubeplug_kube::identity::{Access, AccessError};
use kubeplug_kube::informers::{Object, ObjectKey, View};
use kubeplug_kube::owner::controller_of;
use kubeplug_kube::report::format_chain;
use kubeplug_runtime::{CallError, Event, Plugin, Request};

/// See [`ReconcileError::retry_within`].
pub const DENIED_RETRY_WITHIN: Duration = Duration::from_secs(30);

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
    #[error(transparent)]
    Access(#[from] AccessError),
}

impl ReconcileError {
    /// True if the reconcile stopped because this replica lost leadership.
    pub fn not_leader(&self) -> bool {
        matches!(self, ReconcileError::Write(e) if e.not_leader())
    }

    /// The longest its retry may wait: a refused read is the platform's to
    /// fix, and checking it again costs one cached SubjectAccessReview, so a
    /// rule the platform adds takes effect within this, however long the
    /// parent failed.
    pub fn retry_within(&self) -> Option<Duration> {
        matches!(self, ReconcileError::Access(AccessError::Denied { .. }))
            .then_some(DENIED_RETRY_WITHIN)
    }

    /// The server's `Retry-After` on the write that failed, if it
    /// throttled it: the retry waits at least that long.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ReconcileError::Write(e) => e.retry_after(),
            _ => None,
        }
    }

    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            ReconcileError::Call(e) => e.label(),
            ReconcileError::Fence(_) => "fence",
            ReconcileError::Write(_) => "write",
            ReconcileError::Join(_) => "join",
            ReconcileError::Access(_) => "read_denied",
        }
    }

    /// Event reason recorded on the parent.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Call(_) | ReconcileError::Join(_) => "PluginFailed",
            ReconcileError::Fence(_) => "FenceViolation",
            ReconcileError::Write(_) => "WriteFailed",
            ReconcileError::Access(_) => "ReadDenied",
        }
    }
}

/// What happened, for the worker's scheduling.
#[derive(Debug, Default)]
pub struct Outcome {
    pub requeue_after: Option<Duration>,
    /// The plugin was not called: its inputs are those of its last call
    /// that wrote nothing (see [`unchanged`]).
    pub skipped: bool,
}

impl ReconcileError {
    /// True if the plugin is to blame: it failed, trapped, ran out of time
    /// or memory, or answered outside its fence. Not the API server's or
    /// RBAC's failures, which a new plugin version cannot cause.
    pub fn plugin_fault(&self) -> bool {
        match self {
            ReconcileError::Call(e) => e.plugin_fault(),
            ReconcileError::Fence(_) => true,
            _ => false,
        }
    }
}

/// What a reconcile handed the plugin, kept so that a failure can be
/// replayed offline (see [`crate::replay`]).
#[derive(Debug, Default)]
pub struct Handed {
    pub request: Option<Arc<Request>>,
    /// The call was `finalize`, not `reconcile`.
    pub finalize: bool,
}

/// The plugin's side of the fence at run time: its grant, the read checks
/// made for its ServiceAccount, and its event budget.
pub struct Fence {
    /// Shared with shadow comparisons, which finish after the reconcile.
    pub grant: Arc<Effective>,
    pub access: Arc<Access>,
    pub events: EventBudget,
    pub metrics: OperatorMetrics,
    /// Each parent's last call that wrote nothing (see [`unchanged`]).
    pub last_calls: unchanged::LastCalls,
    /// The resourceVersions of our own status writes (see [`echoes`]).
    pub echoes: echoes::Echoes,
    /// What each parent names, and who names what (see [`references`]).
    pub references: references::Referrers,
}

impl Fence {
    /// Record `events` on the parent at `key` within its budget (see
    /// [`EventBudget`]); the rest are dropped and counted. Every event an
    /// answer causes goes through here: a reconcile's, a finalize's, a
    /// `ChildClash` warning.
    pub(crate) fn record(
        &self,
        writer: &Writer,
        parent: &Object,
        key: &ObjectKey,
        events: &[Event],
        action: &str,
    ) {
        let allowed = self.events.take(key, events.len());
        for event in &events[..allowed] {
            self.post(writer, parent, event, action);
        }
        if allowed < events.len() {
            self.metrics
                .events_dropped(writer.plugin(), events.len() - allowed);
        }
    }

    /// Queue one event on `parent`, outside any budget (the host's own
    /// warnings: a failed reconcile, a rollback); counted if the writer's
    /// queue is full and it is dropped.
    pub(crate) fn post(&self, writer: &Writer, parent: &Object, event: &Event, action: &str) {
        if !writer.event(parent, event, action) {
            self.metrics.events_dropped(writer.plugin(), 1);
        }
    }

    /// Ok if the plugin's ServiceAccount may read everything this reconcile
    /// would hand it in `namespace`: the parent, its children's kinds, the
    /// related and referenced kinds.
    pub(crate) async fn check_reads(
        &self,
        manifest: &Manifest,
        namespace: &str,
    ) -> Result<(), AccessError> {
        let access = &self.access;
        access
            .check(&self.grant, "get", &manifest.parent, namespace)
            .await?;
        for child in &manifest.children {
            access.check(&self.grant, "list", child, namespace).await?;
        }
        for related in &manifest.related {
            access
                .check(&self.grant, "list", &related.resource, namespace)
                .await?;
        }
        for kind in &manifest.references {
            access.check(&self.grant, "list", kind, namespace).await?;
        }
        Ok(())
    }
}

/// The caches a reconcile reads from, each in the plugin's scopes.
pub struct Sources {
    pub parent: View,
    pub children: Vec<View>,
    pub related: Vec<(Related, View)>,
    /// One per referenced kind, in the plugin's namespaces.
    pub referenced: Vec<View>,
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

impl Sources {
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
    fn remember(&self, ty: &kubeplug_core::manifest::ApiResource, applied: DynamicObject) {
        if let Some(view) = self.children.iter().find(|v| v.resource() == ty) {
            view.remember(applied);
        }
    }

    /// The children a parent of `namespace` (`None`: cluster-scoped)
    /// with `uid` controls, from its namespace only (see
    /// [`View::owned_by`]): a uid is a claim anyone can make.
    pub(crate) fn observed(&self, namespace: Option<&str>, uid: &str) -> Vec<Arc<Object>> {
        self.children
            .iter()
            .flat_map(|i| i.owned_by(namespace, uid))
            .filter(|o| controller_of(&o.metadata).is_some_and(|r| r.uid == uid))
            .collect()
    }

    /// The related objects of the parent `namespace/name`. A selector
    /// entry naming the parent is looked up by its label index (see
    /// [`Sources::index_related`]); the others were filtered by the API
    /// server, and every entry is checked again here.
    pub(crate) fn related(&self, namespace: &str, name: &str) -> Vec<Arc<Object>> {
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
                    .filter(|o| related.selects(o.metadata.labels.as_ref(), name))
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
    pub request: Request,
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
    let uid = parent_obj.metadata.uid.as_deref().unwrap_or_default();
    let namespace = parent_obj
        .metadata
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty());
    let observed_objects = sources.observed(namespace, uid);
    let observed: Vec<Value> = observed_objects.iter().map(|o| o.to_value()).collect();
    let related_objects = sources.related(
        parent_obj.metadata.namespace.as_deref().unwrap_or_default(),
        parent_obj.metadata.name.as_deref().unwrap_or_default(),
    );
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
        request,
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

/// Call the plugin and decide what its answer writes for `parent`, whose
/// controlled children are `observed` (see [`plan::decide`]).
pub(crate) async fn decide(
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
    let request = Arc::new(request);
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
