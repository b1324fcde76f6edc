//! A plugin's view of one kind: the informers of its scopes (one per
//! namespace it is bound to, or one for all), read as one cache.

use std::sync::Arc;

use kube::core::DynamicObject;

use super::{Handler, Informer, Object, Problem, Subscription};
use kubeplug_core::manifest::ApiResource;

/// The informers of one kind a plugin reads, one per [`super::Scope`].
#[derive(Clone)]
pub struct View {
    informers: Vec<Arc<Informer>>,
}

impl View {
    /// `informers` must all be of one resource type, and there must be one.
    pub fn new(informers: Vec<Arc<Informer>>) -> View {
        assert!(!informers.is_empty(), "a view has at least one informer");
        View { informers }
    }

    pub fn resource(&self) -> &ApiResource {
        self.informers[0].resource()
    }

    pub fn informers(&self) -> &[Arc<Informer>] {
        &self.informers
    }

    /// The informers that hold objects of `namespace`.
    fn covering<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Arc<Informer>> {
        let namespaced = self.resource().namespaced;
        self.informers
            .iter()
            .filter(move |i| !namespaced || i.scope().covers(namespace))
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Object>> {
        self.covering(namespace)
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
                .informers
                .iter()
                .flat_map(|i| i.owned_by(None, uid))
                .collect(),
            Some(_) if !self.resource().namespaced => Vec::new(),
            Some(ns) => self
                .covering(ns)
                .flat_map(|i| i.owned_by(Some(ns), uid))
                .collect(),
        }
    }

    /// Objects in `namespace` (all objects of the view when `None`).
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<Object>> {
        match namespace {
            None => self.informers.iter().flat_map(|i| i.list(None)).collect(),
            Some(ns) => self.covering(ns).flat_map(|i| i.list(Some(ns))).collect(),
        }
    }

    /// See [`super::Cache::labelled`].
    pub fn labelled(&self, namespace: &str, key: &str, value: &str) -> Vec<Arc<Object>> {
        self.covering(namespace)
            .flat_map(|i| i.labelled(namespace, key, value))
            .collect()
    }

    /// See [`super::Cache::index_label`].
    pub fn index_label(&self, key: &str) {
        for informer in &self.informers {
            informer.index_label(key);
        }
    }

    /// See [`Informer::remember`].
    pub fn remember(&self, object: DynamicObject) {
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        if let Some(informer) = self.covering(&namespace).next() {
            informer.remember(object);
        }
    }

    /// Call `handler` for every object of the view now and on every change.
    pub fn subscribe(&self, handler: Handler) -> Vec<Subscription> {
        self.informers
            .iter()
            .map(|i| i.subscribe(handler.clone()))
            .collect()
    }

    pub fn is_synced(&self) -> bool {
        self.informers.iter().all(|i| i.is_synced())
    }

    pub async fn wait_synced(&self) {
        for informer in &self.informers {
            informer.wait_synced().await;
        }
    }

    /// The first informer's problem, if any cannot list or watch.
    pub fn problem(&self) -> Option<Problem> {
        self.informers.iter().find_map(|i| i.problem())
    }
}
