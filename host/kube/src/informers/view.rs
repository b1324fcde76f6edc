//! A plugin's view of one kind: the informers of its scopes (one per
//! namespace it is bound to, or one for all), read as one cache.
//!
//! A sharded plugin's view changes while it runs: the informers of a shard
//! (filtered by its label) join when this replica takes the shard and leave
//! when it gives it up ([`View::add`], [`View::remove`]). Handlers
//! subscribed to the view follow: each is subscribed to every informer that
//! joins, and its subscriptions go with an informer that leaves, so its
//! watch stops once nobody else uses it.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use kube::core::DynamicObject;
use parking_lot::RwLock;

use super::{Handler, Informer, Object, Problem, Subscription};
use kubeplug_core::manifest::ApiResource;

/// The informers of one kind a plugin reads, one per [`super::Scope`].
/// Clones share the same informers.
#[derive(Clone)]
pub struct View {
    resource: ApiResource,
    inner: Arc<RwLock<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// Each informer with the subscriptions of the view's handlers to it,
    /// by handler id.
    informers: Vec<(Arc<Informer>, BTreeMap<u64, Subscription>)>,
    /// Handlers subscribed to the view, by id.
    handlers: BTreeMap<u64, Handler>,
    next_id: u64,
    /// Label keys indexed on every informer (see [`View::index_label`]).
    indexed: Vec<String>,
}

/// Drop to stop a handler receiving the view's changes.
pub struct ViewSubscription {
    inner: Weak<RwLock<Inner>>,
    id: u64,
}

impl Drop for ViewSubscription {
    fn drop(&mut self) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let mut inner = inner.write();
        inner.handlers.remove(&self.id);
        for (_, subscriptions) in &mut inner.informers {
            subscriptions.remove(&self.id);
        }
    }
}

impl View {
    /// A view of `resource` over `informers` (all of that type; none for a
    /// sharded plugin that owns no shard yet).
    pub fn new(resource: ApiResource, informers: Vec<Arc<Informer>>) -> View {
        let view = View {
            resource,
            inner: Arc::default(),
        };
        view.add(informers);
        view
    }

    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The informers now in the view.
    pub fn informers(&self) -> Vec<Arc<Informer>> {
        let inner = self.inner.read();
        inner.informers.iter().map(|(i, _)| i.clone()).collect()
    }

    /// Add `informers` to the view: the view's label indexes are built on
    /// them and its handlers see each of their objects now and every change.
    pub fn add(&self, informers: Vec<Arc<Informer>>) {
        let handlers: Vec<(u64, Handler)> = {
            let mut inner = self.inner.write();
            for informer in &informers {
                debug_assert_eq!(informer.resource(), &self.resource);
                for key in &inner.indexed {
                    informer.index_label(key);
                }
                inner.informers.push((informer.clone(), BTreeMap::new()));
            }
            inner
                .handlers
                .iter()
                .map(|(id, h)| (*id, h.clone()))
                .collect()
        };
        // Subscribing replays the cache into each handler: done outside the
        // view's lock, since a handler may read this view.
        for informer in informers {
            for (id, handler) in &handlers {
                self.subscribed(&informer, *id, informer.subscribe(handler.clone()));
            }
        }
    }

    /// Keep `subscription` (of handler `id` to `informer`) while both are in
    /// the view.
    fn subscribed(&self, informer: &Arc<Informer>, id: u64, subscription: Subscription) {
        let mut inner = self.inner.write();
        if !inner.handlers.contains_key(&id) {
            return;
        }
        if let Some((_, subscriptions)) = inner
            .informers
            .iter_mut()
            .find(|(i, _)| Arc::ptr_eq(i, informer))
        {
            subscriptions.insert(id, subscription);
        }
    }

    /// Take the informers `leaving` picks out of the view (its handlers stop
    /// hearing from them); returns how many left.
    pub fn remove(&self, leaving: impl Fn(&Informer) -> bool) -> usize {
        let mut inner = self.inner.write();
        let before = inner.informers.len();
        inner.informers.retain(|(i, _)| !leaving(i));
        before - inner.informers.len()
    }

    /// The informers that hold objects of `namespace`.
    fn covering(&self, namespace: &str) -> Vec<Arc<Informer>> {
        let namespaced = self.resource.namespaced;
        let inner = self.inner.read();
        inner
            .informers
            .iter()
            .map(|(i, _)| i)
            .filter(|i| !namespaced || i.scope().covers(namespace))
            .cloned()
            .collect()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Object>> {
        self.covering(namespace)
            .iter()
            .find_map(|i| i.get(namespace, name))
    }

    /// Objects with an ownerReference to `uid`, bound to the owner's
    /// namespace: for a namespaced owner (`Some(namespace)`), only objects
    /// of that namespace (none of a cluster-scoped kind: a namespaced owner
    /// never owns those); for a cluster-scoped owner (`None`), any. See
    /// [`super::Cache::owned_by`].
    pub fn owned_by(&self, namespace: Option<&str>, uid: &str) -> Vec<Arc<Object>> {
        match namespace {
            None => self
                .informers()
                .iter()
                .flat_map(|i| i.owned_by(None, uid))
                .collect(),
            Some(_) if !self.resource.namespaced => Vec::new(),
            Some(ns) => self
                .covering(ns)
                .iter()
                .flat_map(|i| i.owned_by(Some(ns), uid))
                .collect(),
        }
    }

    /// Objects in `namespace` (all objects of the view when `None`).
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<Object>> {
        match namespace {
            None => self.informers().iter().flat_map(|i| i.list(None)).collect(),
            Some(ns) => self
                .covering(ns)
                .iter()
                .flat_map(|i| i.list(Some(ns)))
                .collect(),
        }
    }

    /// See [`super::Cache::labelled`].
    pub fn labelled(&self, namespace: &str, key: &str, value: &str) -> Vec<Arc<Object>> {
        self.covering(namespace)
            .iter()
            .flat_map(|i| i.labelled(namespace, key, value))
            .collect()
    }

    /// See [`super::Cache::index_label`]; informers added later are indexed
    /// too.
    pub fn index_label(&self, key: &str) {
        let mut inner = self.inner.write();
        for (informer, _) in &inner.informers {
            informer.index_label(key);
        }
        inner.indexed.push(key.to_string());
    }

    /// See [`Informer::remember`]: into the informer whose scope holds the
    /// object (its namespace and labels).
    pub fn remember(&self, object: DynamicObject) {
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let labels = object.metadata.labels.clone();
        if let Some(informer) = self
            .covering(&namespace)
            .into_iter()
            .find(|i| i.scope().matches(labels.as_ref()))
        {
            informer.remember(object);
        }
    }

    /// Call `handler` for every object of the view now and on every change,
    /// including those of informers added later.
    pub fn subscribe(&self, handler: Handler) -> ViewSubscription {
        let (id, informers) = {
            let mut inner = self.inner.write();
            let id = inner.next_id;
            inner.next_id += 1;
            inner.handlers.insert(id, handler.clone());
            let informers: Vec<Arc<Informer>> =
                inner.informers.iter().map(|(i, _)| i.clone()).collect();
            (id, informers)
        };
        for informer in informers {
            self.subscribed(&informer, id, informer.subscribe(handler.clone()));
        }
        ViewSubscription {
            inner: Arc::downgrade(&self.inner),
            id,
        }
    }

    pub fn is_synced(&self) -> bool {
        self.informers().iter().all(|i| i.is_synced())
    }

    pub async fn wait_synced(&self) {
        for informer in self.informers() {
            informer.wait_synced().await;
        }
    }

    /// The first informer's problem, if any cannot list or watch.
    pub fn problem(&self) -> Option<Problem> {
        self.informers().iter().find_map(|i| i.problem())
    }
}

#[cfg(test)]
mod tests;
