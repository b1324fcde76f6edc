//! What queues a parent, one function per kind of trigger, in kube-rs's
//! `Controller::watches`/`owns` shape: each subscribes to a view and maps
//! its changes to parent keys ([`super::routes`]) on the plugin's queue.

use std::sync::Arc;

use kubeplug_core::manifest::{Manifest, Related};
use kubeplug_kube::informers::{Handler, Object, ObjectKey, View, ViewSubscription};
use kubeplug_kube::queue::Queue;

use super::{Shared, routes};

/// The plugin's queue and manifest, which every trigger maps into.
#[derive(Clone)]
pub(super) struct Triggers {
    pub queue: Arc<Queue<ObjectKey>>,
    pub manifest: Arc<Manifest>,
}

impl Triggers {
    /// A changed parent queues itself, unless the change is `echo` (our own
    /// status write coming back, see [`crate::fence::echoes`]).
    pub fn parents(
        &self,
        view: &View,
        echo: impl Fn(&ObjectKey, &Object) -> bool + Send + Sync + 'static,
    ) -> ViewSubscription {
        let Triggers { queue, manifest } = self.clone();
        let h: Handler = Arc::new(move |o| {
            if let Some(k) = routes::parent_key(&manifest, o) {
                if echo(&k, o) {
                    tracing::debug!(parent = %k, "echo of our own status write; not queued");
                    return;
                }
                routes::trace_trigger("parent", o, &k);
                queue.add_event(k)
            }
        });
        view.subscribe(h)
    }

    /// A changed child queues its controller owner (kube-rs's `owns`).
    pub fn owns(&self, view: &View) -> ViewSubscription {
        let Triggers { queue, manifest } = self.clone();
        let h: Handler = Arc::new(move |o| {
            if let Some(k) = routes::owner_key(&manifest, o) {
                routes::trace_trigger("child", o, &k);
                queue.add_event(k)
            }
        });
        view.subscribe(h)
    }

    /// A changed related object queues the parents in `parents` its labels
    /// select by `related`.
    pub fn related(&self, related: &Related, parents: &View, view: &View) -> ViewSubscription {
        let Triggers { queue, manifest } = self.clone();
        let (r, p) = (related.clone(), parents.clone());
        let h: Handler = Arc::new(move |o| {
            let parents_in = |ns: &str| {
                p.list(Some(ns))
                    .iter()
                    .filter_map(|o| o.metadata.name.clone())
                    .collect()
            };
            for k in routes::related_keys(&manifest, &r, o, parents_in) {
                routes::trace_trigger("related", o, &k);
                queue.add_event(k)
            }
        });
        view.subscribe(h)
    }

    /// A changed referenced object queues the parents that name it now
    /// (`referrers`, see [`crate::fence::references`]), in the plugin's
    /// namespaces.
    pub fn referenced(
        &self,
        view: &View,
        referrers: impl Fn(&Object) -> Vec<ObjectKey> + Send + Sync + 'static,
    ) -> ViewSubscription {
        let Triggers { queue, manifest } = self.clone();
        let h: Handler = Arc::new(move |o| {
            for k in referrers(o) {
                if manifest.watches_namespace(&k.namespace) {
                    routes::trace_trigger("referenced", o, &k);
                    queue.add_event(k)
                }
            }
        });
        view.subscribe(h)
    }

    /// A sharded plugin's unlabelled parent queues itself, to be labelled
    /// with its shard (see [`super::shards`]).
    pub fn strays(&self, view: &View) -> ViewSubscription {
        let Triggers { queue, manifest } = self.clone();
        let h: Handler = Arc::new(move |o| {
            if let Some(k) = routes::parent_key(&manifest, o) {
                routes::trace_trigger("stray", o, &k);
                queue.add_event(k)
            }
        });
        view.subscribe(h)
    }
}

/// Map every change the plugin's caches see to the parents it queues (see
/// [`Triggers`]): the parents themselves, the children they own, related
/// and referenced objects, a sharded plugin's strays.
pub(super) fn subscribe(shared: &Arc<Shared>, manifest: &Manifest) -> Vec<ViewSubscription> {
    let triggers = Triggers {
        queue: shared.queue.clone(),
        manifest: Arc::new(manifest.clone()),
    };
    let sources = &shared.sources;
    let mut subscriptions = Vec::new();
    let s = Arc::downgrade(shared);
    subscriptions.push(triggers.parents(&sources.parent, move |k, o| {
        s.upgrade().is_some_and(|s| s.fence.echoes.is_echo(k, o))
    }));
    for view in &sources.children {
        subscriptions.push(triggers.owns(view));
    }
    for (related, view) in &sources.related {
        subscriptions.push(triggers.related(related, &sources.parent, view));
    }
    for view in &sources.referenced {
        let (s, kind) = (Arc::downgrade(shared), view.resource().clone());
        subscriptions.push(triggers.referenced(view, move |o| {
            s.upgrade()
                .map(|s| s.fence.references.referrers(&kind, o))
                .unwrap_or_default()
        }));
    }
    if let Some(shards) = &shared.shards {
        subscriptions.push(triggers.strays(shards.strays()));
    }
    subscriptions
}
