//! One watch and one cache per resource type and [`Scope`], shared by every
//! plugin that reads the same.
//!
//! Two plugins that read Pods in the same namespaces cost one Pods watch.
//! Types come from plugin manifests at run time: objects arrive as
//! `DynamicObject`s and are cached as [`Object`]s (metadata plus JSON text).
//! Controllers subscribe a handler to an informer; the handler maps a
//! changed object to the parent keys to reconcile (see
//! `controller::routes`). A plugin reads a kind through a [`View`]: its
//! informers of that kind, one per namespace it is bound to.
//!
//! Guarantees: a subscriber sees every object that exists when it subscribes,
//! and then every change. After a watch error or an expired resource version
//! (410) the watcher relists; objects deleted meanwhile are still delivered as
//! deletions, so no event is lost.
//!
//! Informers are reference-counted: the map holds weak references, each
//! controller holds strong ones, and the watch stops when the last controller
//! using it goes away. Each informer reports its health: a list or watch the
//! API server refuses for good (403: RBAC; 404: kind not served, e.g. a
//! missing CRD) is a [`Problem`] the plugins using it report as `degraded`.
//!
//! Each cache holds at most a byte budget ([`DEFAULT_WATCH_BYTES`], `kubeplug
//! run --watch-cache-bytes`): anyone who may create objects with a watch's
//! labels decides how much it would hold otherwise. Objects beyond it are left
//! out (see [`cache`]), the plugins reading it are `degraded` with the reason
//! while it lasts, and once what was left out fits again the informer relists
//! (at most every [`RELIST_INTERVAL`]) to fetch it.

pub mod cache;
pub mod metrics;
pub mod object;
pub mod scope;
pub mod view;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, ApiResource as KubeApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

pub use cache::{Cache, LeftOut};
pub use kubeplug_core::key::ObjectKey;
pub use object::Object;
pub use scope::Scope;
pub use view::{View, ViewSubscription};

use self::metrics::InformerMetrics;
use kubeplug_core::manifest::ApiResource;

/// Bytes one watch caches at most, by default: 64 MiB, some 10,000 Secrets or
/// ConfigMaps of a few KiB, or 16,000 Pods. A host's 1,000 Databases cache
/// ~2 MiB of parents and ~4 MiB of their Pods, well below.
pub const DEFAULT_WATCH_BYTES: usize = 64 << 20;

/// The shortest time between two relists of one informer to fetch what its
/// budget left out: a list costs the API server, and whoever fills the cache
/// could otherwise make the host relist at every deletion.
pub const RELIST_INTERVAL: Duration = Duration::from_secs(10);

/// Called for every object that changes (or is deleted) in an informer.
pub type Handler = Arc<dyn Fn(&Object) + Send + Sync>;

/// The kube-rs description of one of our resource types.
pub fn kube_resource(r: &ApiResource) -> KubeApiResource {
    KubeApiResource {
        group: r.group.clone(),
        version: r.version.clone(),
        api_version: r.api_version(),
        kind: r.kind.clone(),
        plural: r.plural.clone(),
    }
}

/// A watch and cache of one resource type in one scope.
pub struct Informer {
    resource: ApiResource,
    scope: Scope,
    /// `resource` and `scope`, for logs and metrics.
    label: String,
    cache: RwLock<Cache>,
    handlers: RwLock<Vec<(u64, Handler)>>,
    next_id: AtomicU64,
    synced: watch::Sender<bool>,
    problem: Mutex<Option<Problem>>,
    /// When the informer last relisted to fetch what its budget left out.
    relisted: Mutex<Option<Instant>>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
    metrics: InformerMetrics,
}

/// Why an informer cannot list or watch right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub message: String,
    /// Needs a person (RBAC, a missing CRD); transient errors are retried
    /// and only reported while they last.
    pub persistent: bool,
}

impl Drop for Informer {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
        self.metrics.informer_stopped(&self.label);
        tracing::info!(resource = %self.label, "watch stopped: no plugin uses it any more");
    }
}

/// Drop to stop receiving changes.
pub struct Subscription {
    informer: Arc<Informer>,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.informer
            .handlers
            .write()
            .retain(|(id, _)| *id != self.id);
    }
}

impl Informer {
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Call `handler` for every object now cached and for every later change.
    pub fn subscribe(self: &Arc<Self>, handler: Handler) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Register first, then replay: a change racing with the replay is
        // delivered twice at worst, never lost; queues de-duplicate.
        self.handlers.write().push((id, handler.clone()));
        for object in self.cache.read().list(None) {
            handler(&object);
        }
        Subscription {
            informer: self.clone(),
            id,
        }
    }

    /// Read-your-writes for objects this host just created: cache `object`
    /// unless the watch already delivered it. A reconcile that runs before
    /// the watch catches up must not create the object again (for a
    /// generated Secret that would rotate its password). Subscribers are not
    /// notified; the watch event that follows does that.
    pub fn remember(&self, object: DynamicObject) {
        let object = Object::new(self.typed(object));
        let key = object.key();
        let mut cache = self.cache.write();
        if cache.get(&key.namespace, &key.name).is_none() {
            let was = cache.left_out();
            cache.apply(Arc::new(object));
            self.budget_changed(was, cache.left_out(), cache.budget());
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Object>> {
        self.cache.read().get(namespace, name)
    }

    /// See [`Cache::owned_by`].
    pub fn owned_by(&self, namespace: Option<&str>, uid: &str) -> Vec<Arc<Object>> {
        self.cache.read().owned_by(namespace, uid)
    }

    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<Object>> {
        self.cache.read().list(namespace)
    }

    /// See [`Cache::labelled`].
    pub fn labelled(&self, namespace: &str, key: &str, value: &str) -> Vec<Arc<Object>> {
        self.cache.read().labelled(namespace, key, value)
    }

    /// See [`Cache::index_label`].
    pub fn index_label(&self, key: &str) {
        self.cache.write().index_label(key);
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Why the informer cannot list or watch now, or leaves objects out of
    /// its cache (its byte budget), if so.
    pub fn problem(&self) -> Option<Problem> {
        if let Some(problem) = self.problem.lock().clone() {
            return Some(problem);
        }
        let cache = self.cache.read();
        let left_out = cache.left_out()?;
        Some(Problem {
            message: format!(
                "the cache of {} is over its budget of {} bytes (--watch-cache-bytes): {}{} objects ({} bytes) with its labels are not cached, so the plugins reading it see part of them; delete them or raise the budget",
                self.label,
                cache.budget(),
                if left_out.more { "more than " } else { "" },
                left_out.objects,
                left_out.bytes,
            ),
            persistent: true,
        })
    }

    /// Log a cache going over its budget, or back under it.
    fn budget_changed(&self, was: Option<LeftOut>, now: Option<LeftOut>, budget: usize) {
        match (was, now) {
            (None, Some(left_out)) => tracing::warn!(
                resource = %self.label,
                budget,
                objects = left_out.objects,
                "cache over its byte budget: objects left out, the plugins reading it are degraded"
            ),
            (Some(_), None) => {
                tracing::info!(resource = %self.label, budget, "cache back within its byte budget")
            }
            _ => {}
        }
    }

    /// True (once per [`RELIST_INTERVAL`] at most) when objects left out of
    /// the cache would fit now: the watch must list again to get them.
    fn relist_due(&self) -> bool {
        if !self.cache.read().wants_relist() {
            return false;
        }
        let mut relisted = self.relisted.lock();
        if relisted.is_some_and(|at| at.elapsed() < RELIST_INTERVAL) {
            return false;
        }
        *relisted = Some(Instant::now());
        true
    }

    /// Wait until the first list has completed.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    fn notify(&self, object: &Object) {
        let handlers: Vec<Handler> = self
            .handlers
            .read()
            .iter()
            .map(|(_, h)| h.clone())
            .collect();
        for handler in handlers {
            handler(object);
        }
    }

    /// List responses may omit `apiVersion`/`kind` on items; plugins and
    /// ownerReferences need them, and the informer knows them.
    fn typed(&self, mut object: DynamicObject) -> DynamicObject {
        if object.types.as_ref().is_none_or(|t| t.kind.is_empty()) {
            object.types = Some(kube::core::TypeMeta {
                api_version: self.resource.api_version(),
                kind: self.resource.kind.clone(),
            });
        }
        object
    }

    fn handle(&self, event: Event<DynamicObject>) {
        if let Some(problem) = self.problem.lock().take() {
            tracing::info!(resource = %self.resource, was = %problem.message, "watch recovered");
        }
        // Each object is turned into its cached form once, here; the
        // decoded tree is dropped at the end of this event.
        let cached = |o: DynamicObject| Arc::new(Object::new(self.typed(o)));
        let was = self.cache.read().left_out();
        match event {
            Event::Apply(object) => {
                let object = cached(object);
                self.cache.write().apply(object.clone());
                self.notify(&object);
            }
            Event::Delete(object) => {
                let object = cached(object);
                self.cache.write().delete(&object.key());
                self.notify(&object);
            }
            Event::Init => self.cache.write().init(),
            Event::InitApply(object) => {
                let object = cached(object);
                self.cache.write().init_apply(object.clone());
                self.notify(&object);
            }
            Event::InitDone => {
                let vanished = self.cache.write().init_done();
                for object in vanished {
                    self.notify(&object);
                }
                self.synced.send_replace(true);
            }
        }
        let (count, bytes, left_out, budget) = {
            let cache = self.cache.read();
            (cache.len(), cache.bytes(), cache.left_out(), cache.budget())
        };
        self.budget_changed(was, left_out, budget);
        self.metrics
            .cached_objects(&self.label, count, bytes, left_out.map_or(0, |l| l.objects));
    }

    /// Watch until the informer is dropped. Holds only a weak reference,
    /// so that dropping the last controller's reference stops it. Starts a
    /// new watch (a relist) when objects its budget left out would fit.
    async fn run(this: Weak<Self>, client: Client, resource: ApiResource, scope: Scope) {
        loop {
            let mut events = Self::events(client.clone(), &resource, &scope);
            let mut check = tokio::time::interval(RELIST_INTERVAL);
            check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let event = tokio::select! {
                    event = events.next() => event,
                    _ = check.tick() => {
                        let Some(informer) = this.upgrade() else {
                            return;
                        };
                        if informer.relist_due() {
                            break;
                        }
                        continue;
                    }
                };
                let Some(event) = event else {
                    return;
                };
                let Some(informer) = this.upgrade() else {
                    return;
                };
                match event {
                    Ok(event) => informer.handle(event),
                    Err(error) => informer.failed(&error),
                }
                if informer.relist_due() {
                    break;
                }
            }
            tracing::info!(resource = %format!("{resource}{scope}"), "relisting: objects left out of the cache fit its budget now");
        }
    }

    /// The list-then-watch stream of `resource` in `scope`.
    fn events(
        client: Client,
        resource: &ApiResource,
        scope: &Scope,
    ) -> futures::stream::BoxStream<'static, Result<Event<DynamicObject>, watcher::Error>> {
        let kind = kube_resource(resource);
        let namespace = scope.namespace.as_deref().filter(|_| resource.namespaced);
        let config = scope.watcher_config();
        if scope.metadata_only {
            // `PartialObjectMeta` makes kube ask for metadata only (the API
            // server sends `PartialObjectMetadata`); bodies never arrive.
            let api: Api<PartialObjectMeta<DynamicObject>> = match namespace {
                Some(ns) => Api::namespaced_with(client, ns, &kind),
                None => Api::all_with(client, &kind),
            };
            watcher(api, config)
                .map_ok(metadata_event)
                .default_backoff()
                .boxed()
        } else {
            let api: Api<DynamicObject> = match namespace {
                Some(ns) => Api::namespaced_with(client, ns, &kind),
                None => Api::all_with(client, &kind),
            };
            watcher(api, config).default_backoff().boxed()
        }
    }

    /// Record a failed list or watch. It is retried with backoff; the first
    /// failure of a streak is a warning, repeats are debug.
    fn failed(&self, error: &watcher::Error) {
        self.metrics.watch_error(&self.label);
        let Some(problem) = classify(&self.label, error) else {
            tracing::info!(resource = %self.label, %error, "watch expired (410 Gone); relisting");
            return;
        };
        let mut current = self.problem.lock();
        if current.as_ref() != Some(&problem) {
            tracing::warn!(resource = %self.label, %error, problem = %problem.message, "list or watch failed; retrying");
        } else {
            tracing::debug!(resource = %self.label, %error, "list or watch failed again; retrying");
        }
        *current = Some(problem);
    }
}

use watcher::watcher;

/// A metadata-only event with its object as a `DynamicObject` with no body;
/// types are filled in by [`Informer::typed`] (the API server's are
/// `meta.k8s.io/v1 PartialObjectMetadata`).
fn metadata_event(event: Event<PartialObjectMeta<DynamicObject>>) -> Event<DynamicObject> {
    let object = |o: PartialObjectMeta<DynamicObject>| DynamicObject {
        types: None,
        metadata: o.metadata,
        data: serde_json::Value::Object(serde_json::Map::new()),
    };
    match event {
        Event::Apply(o) => Event::Apply(object(o)),
        Event::Delete(o) => Event::Delete(object(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(object(o)),
        Event::InitDone => Event::InitDone,
    }
}

/// What a failed list or watch means for the plugins that need it; `None`
/// for an expired resource version, which the watcher handles by relisting.
fn classify(resource: &str, error: &watcher::Error) -> Option<Problem> {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
        watcher::Error::WatchError(s) => Some(s.code),
        _ => None,
    };
    // One line, in the API server's words (kube's own text adds its Status
    // in Debug form).
    let error = crate::report::format_chain(error);
    Some(match status {
        Some(410) => return None,
        Some(403) => Problem {
            message: format!(
                "the host may not list or watch {resource}: check the host's RBAC ({error})"
            ),
            persistent: true,
        },
        Some(404) => Problem {
            message: format!(
                "the API server does not serve {resource}: is its CRD installed? ({error})"
            ),
            persistent: true,
        },
        _ => Problem {
            message: format!("cannot list or watch {resource}: {error}"),
            persistent: false,
        },
    })
}

/// All informers of the host, started on first use and stopped when unused.
pub struct Informers {
    client: Client,
    metrics: InformerMetrics,
    /// Bytes each informer's cache holds at most.
    budget: usize,
    informers: Mutex<HashMap<(ApiResource, Scope), Weak<Informer>>>,
}

impl Informers {
    pub fn new(client: Client, metrics: InformerMetrics) -> Self {
        Informers {
            client,
            metrics,
            budget: DEFAULT_WATCH_BYTES,
            informers: Mutex::new(HashMap::new()),
        }
    }

    /// Each informer's cache holds at most `bytes` (default
    /// [`DEFAULT_WATCH_BYTES`]).
    pub fn with_watch_budget(mut self, bytes: usize) -> Self {
        self.budget = bytes;
        self
    }

    /// The informer for `resource` in `scope`, started if nobody uses it
    /// yet. It runs while a returned reference is alive.
    pub fn informer(&self, resource: &ApiResource, scope: &Scope) -> Arc<Informer> {
        let mut informers = self.informers.lock();
        informers.retain(|_, i| i.strong_count() > 0);
        let key = (resource.clone(), scope.clone());
        if let Some(informer) = informers.get(&key).and_then(Weak::upgrade) {
            return informer;
        }
        let label = format!("{resource}{scope}");
        let informer = Arc::new(Informer {
            resource: resource.clone(),
            scope: scope.clone(),
            label: label.clone(),
            cache: RwLock::new(Cache::with_budget(self.budget)),
            handlers: RwLock::new(Vec::new()),
            next_id: AtomicU64::new(0),
            synced: watch::Sender::new(false),
            problem: Mutex::new(None),
            relisted: Mutex::new(None),
            task: Mutex::new(None),
            metrics: self.metrics.clone(),
        });
        tracing::info!(resource = %label, "starting watch");
        let task = tokio::spawn(Informer::run(
            Arc::downgrade(&informer),
            self.client.clone(),
            resource.clone(),
            scope.clone(),
        ));
        *informer.task.lock() = Some(task.abort_handle());
        informers.insert(key, Arc::downgrade(&informer));
        informer
    }

    /// `resource` in every scope of `scopes`, as one view.
    pub fn view(&self, resource: &ApiResource, scopes: &[Scope]) -> View {
        View::new(
            resource.clone(),
            scopes
                .iter()
                .map(|scope| self.informer(resource, scope))
                .collect(),
        )
    }
}
