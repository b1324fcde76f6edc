//! One watch and one cache per resource type, shared by every plugin.
//!
//! Two plugins that read Pods cost one Pods watch. Types come from plugin
//! manifests at run time, so objects are `DynamicObject`s. Controllers
//! subscribe a handler to an informer; the handler maps a changed object to
//! the parent keys to reconcile (see `controller::routes`).
//!
//! Guarantees: a subscriber sees every object that exists when it subscribes,
//! and then every change. After a watch error or an expired resource version
//! (410) the watcher relists; objects deleted meanwhile are still delivered as
//! deletions, so no event is lost.

pub mod cache;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource as KubeApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

pub use cache::{Cache, Key, key_of};

use crate::manifest::ApiResource;

/// Called for every object that changes (or is deleted) in an informer.
pub type Handler = Arc<dyn Fn(&DynamicObject) + Send + Sync>;

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

/// A watch and cache of one resource type.
pub struct Informer {
    resource: ApiResource,
    cache: RwLock<Cache>,
    handlers: RwLock<Vec<(u64, Handler)>>,
    next_id: AtomicU64,
    synced: watch::Sender<bool>,
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
            .expect("handlers lock")
            .retain(|(id, _)| *id != self.id);
    }
}

impl Informer {
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// Call `handler` for every object now cached and for every later change.
    pub fn subscribe(self: &Arc<Self>, handler: Handler) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Register first, then replay: a change racing with the replay is
        // delivered twice at worst, never lost; queues de-duplicate.
        self.handlers
            .write()
            .expect("handlers lock")
            .push((id, handler.clone()));
        for object in self.cache.read().expect("cache lock").list(None) {
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
        let object = self.typed(object);
        let (ns, name) = key_of(&object);
        let mut cache = self.cache.write().expect("cache lock");
        if cache.get(&ns, &name).is_none() {
            cache.apply(Arc::new(object));
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.cache.read().expect("cache lock").get(namespace, name)
    }

    pub fn owned_by(&self, uid: &str) -> Vec<Arc<DynamicObject>> {
        self.cache.read().expect("cache lock").owned_by(uid)
    }

    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<DynamicObject>> {
        self.cache.read().expect("cache lock").list(namespace)
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Wait until the first list has completed.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    fn notify(&self, object: &DynamicObject) {
        let handlers: Vec<Handler> = self
            .handlers
            .read()
            .expect("handlers lock")
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
        let event = match event {
            Event::Apply(o) => Event::Apply(self.typed(o)),
            Event::Delete(o) => Event::Delete(self.typed(o)),
            Event::InitApply(o) => Event::InitApply(self.typed(o)),
            other => other,
        };
        match event {
            Event::Apply(object) => {
                let object = Arc::new(object);
                self.cache
                    .write()
                    .expect("cache lock")
                    .apply(object.clone());
                self.notify(&object);
            }
            Event::Delete(object) => {
                self.cache.write().expect("cache lock").delete(&object);
                self.notify(&object);
            }
            Event::Init => self.cache.write().expect("cache lock").init(),
            Event::InitApply(object) => {
                let object = Arc::new(object);
                self.cache
                    .write()
                    .expect("cache lock")
                    .init_apply(object.clone());
                self.notify(&object);
            }
            Event::InitDone => {
                let vanished = self.cache.write().expect("cache lock").init_done();
                for object in vanished {
                    self.notify(&object);
                }
                self.synced.send_replace(true);
            }
        }
    }

    async fn run(self: Arc<Self>, client: Client) {
        let api: Api<DynamicObject> = Api::all_with(client, &kube_resource(&self.resource));
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => self.handle(event),
                Err(error) => log_watch_error(&self.resource, &error),
            }
        }
    }
}

use watcher::watcher;

/// A 403 needs a person to fix RBAC: warn. Anything else is retried: debug.
fn log_watch_error(resource: &ApiResource, error: &watcher::Error) {
    let forbidden = matches!(
        error,
        watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            if s.code == 403
    );
    if forbidden {
        tracing::warn!(%resource, %error, "watch forbidden; check the host's RBAC");
    } else {
        tracing::debug!(%resource, %error, "watch failed; retrying");
    }
}

/// All informers of the host, started on first use.
pub struct Informers {
    client: Client,
    informers: Mutex<HashMap<ApiResource, Arc<Informer>>>,
}

impl Informers {
    pub fn new(client: Client) -> Self {
        Informers {
            client,
            informers: Mutex::new(HashMap::new()),
        }
    }

    /// The informer for `resource`, started if this is the first use.
    pub fn informer(&self, resource: &ApiResource) -> Arc<Informer> {
        let mut informers = self.informers.lock().expect("informers lock");
        if let Some(informer) = informers.get(resource) {
            return informer.clone();
        }
        let informer = Arc::new(Informer {
            resource: resource.clone(),
            cache: RwLock::new(Cache::default()),
            handlers: RwLock::new(Vec::new()),
            next_id: AtomicU64::new(0),
            synced: watch::Sender::new(false),
        });
        tracing::info!(%resource, "starting watch");
        tokio::spawn(informer.clone().run(self.client.clone()));
        informers.insert(resource.clone(), informer.clone());
        informer
    }

    /// True once every informer started so far has listed once.
    pub fn all_synced(&self) -> bool {
        self.informers
            .lock()
            .expect("informers lock")
            .values()
            .all(|i| i.is_synced())
    }
}
