//! The `Plugin` objects and their changes: a snapshot of the registry taken
//! every second, each object versioned when it changes, and the changes
//! broadcast to watchers (`kubectl get plugins -w`).
//!
//! resourceVersions are this replica's own counter: a watch resumes only on
//! the replica that issued the version (the APIService's Service may route
//! elsewhere; a client then relists, as after any expired version).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::Body;
use super::resources;
use kubeplug_operator::registry::Registry;

/// How often the registry is looked at.
const PERIOD: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
struct Event {
    kind: &'static str,
    version: u64,
    object: Value,
}

#[derive(Default)]
struct State {
    /// name → (resourceVersion, object with that version).
    objects: BTreeMap<String, (u64, Value)>,
    version: u64,
}

pub struct Tracker {
    state: Mutex<State>,
    events: broadcast::Sender<Event>,
}

/// Where Leases are, to say which replica leads each plugin.
pub struct Leases {
    pub client: kube::Client,
    pub namespace: String,
}

impl Tracker {
    pub fn new() -> Arc<Self> {
        Arc::new(Tracker {
            state: Mutex::new(State::default()),
            events: broadcast::channel(256).0,
        })
    }

    /// Follow the registry until the task is dropped. Without `leases` (no
    /// leader election), this replica, `identity`, leads every plugin.
    pub async fn run(
        self: Arc<Self>,
        registry: Arc<Registry>,
        leases: Option<Leases>,
        identity: String,
    ) {
        loop {
            let holders = match &leases {
                Some(leases) => lease_holders(leases).await,
                None => BTreeMap::new(),
            };
            let fresh = registry
                .status()
                .iter()
                .map(|row| {
                    let name = resources::name_of(row);
                    let owners = match &leases {
                        Some(_) => resources::Owners::from_leases(&name, row, &holders),
                        None => resources::Owners::this_replica(row, &identity),
                    };
                    (name, resources::plugin(row, &owners))
                })
                .collect();
            self.update(fresh);
            tokio::time::sleep(PERIOD).await;
        }
    }

    fn update(&self, mut fresh: BTreeMap<String, Value>) {
        let mut state = self.state.lock().expect("tracker lock");
        let mut events = Vec::new();
        let gone: Vec<String> = state
            .objects
            .keys()
            .filter(|name| !fresh.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            state.version += 1;
            let (_, object) = state.objects.remove(&name).expect("present");
            events.push(Event {
                kind: "DELETED",
                version: state.version,
                object,
            });
        }
        for (name, mut object) in std::mem::take(&mut fresh) {
            let kind = match state.objects.get(&name) {
                None => "ADDED",
                Some((_, old)) if without_version(old) == object => continue,
                Some(_) => "MODIFIED",
            };
            state.version += 1;
            let version = state.version;
            object["metadata"]["resourceVersion"] = json!(version.to_string());
            state.objects.insert(name, (version, object.clone()));
            events.push(Event {
                kind,
                version,
                object,
            });
        }
        for event in events {
            // No watcher is not an error.
            let _ = self.events.send(event);
        }
    }

    pub fn get(&self, name: &str) -> Option<Value> {
        let state = self.state.lock().expect("tracker lock");
        state.objects.get(name).map(|(_, o)| o.clone())
    }

    /// Every object, and the version of the whole list.
    pub fn list(&self) -> (Vec<Value>, u64) {
        let state = self.state.lock().expect("tracker lock");
        (
            state.objects.values().map(|(_, o)| o.clone()).collect(),
            state.version,
        )
    }

    pub fn version(&self) -> u64 {
        self.state.lock().expect("tracker lock").version
    }

    /// A watch response: from `since` (a list's version) on, or the current
    /// objects as ADDED first; newline-delimited JSON events, each object a
    /// one-row Table if `table`, each [`resources::redacted`] if `redact`.
    /// Ends after `timeout` (the client watches again), or when the watcher
    /// falls too far behind.
    pub fn watch(
        self: &Arc<Self>,
        since: Option<u64>,
        timeout: Duration,
        table: bool,
        redact: bool,
    ) -> Response<Body> {
        // Subscribe before reading the state, so no change falls between.
        let mut events = self.events.subscribe();
        let (start, initial) = match since {
            Some(version) => (version, Vec::new()),
            None => {
                let state = self.state.lock().expect("tracker lock");
                let initial = state
                    .objects
                    .values()
                    .map(|(v, o)| Event {
                        kind: "ADDED",
                        version: *v,
                        object: o.clone(),
                    })
                    .collect();
                (state.version, initial)
            }
        };
        let (mut sender, body) =
            http_body_util::channel::Channel::<Bytes, std::convert::Infallible>::new(16);
        tokio::spawn(async move {
            let frame = |event: &Event| {
                let object = if redact {
                    resources::redacted(event.object.clone())
                } else {
                    event.object.clone()
                };
                let object = if table {
                    resources::table(std::slice::from_ref(&object), event.version)
                } else {
                    object
                };
                Bytes::from(json!({"type": event.kind, "object": object}).to_string() + "\n")
            };
            for event in &initial {
                if sender.send_data(frame(event)).await.is_err() {
                    return;
                }
            }
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            loop {
                let event = tokio::select! {
                    event = events.recv() => event,
                    () = &mut deadline => return,
                };
                match event {
                    Ok(event) if event.version <= start => continue,
                    Ok(event) => {
                        if sender.send_data(frame(&event)).await.is_err() {
                            return;
                        }
                    }
                    // Fell behind or the tracker is gone: end; the client
                    // lists and watches again.
                    Err(_) => return,
                }
            }
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(body.boxed())
            .expect("static response parts are valid")
    }
}

fn without_version(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(metadata) = object["metadata"].as_object_mut() {
        metadata.remove("resourceVersion");
    }
    object
}

/// unit (a plugin, or one shard of it) → holder of its Lease (released
/// Leases left out).
async fn lease_holders(leases: &Leases) -> BTreeMap<String, String> {
    use k8s_openapi::api::coordination::v1::Lease;
    let api: kube::Api<Lease> = kube::Api::namespaced(leases.client.clone(), &leases.namespace);
    let Ok(list) = api.list(&Default::default()).await else {
        return BTreeMap::new();
    };
    list.items
        .into_iter()
        .filter_map(|lease| {
            let plugin = kubeplug_kube::leader::plugin_of_lease(&lease.metadata.name?)?.to_string();
            let holder = lease.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((plugin, holder))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(name: &str, state: &str) -> Value {
        json!({"metadata": {"name": name}, "status": {"state": state}})
    }

    #[test]
    fn versions_change_only_with_content_and_removals_are_deleted_events() {
        let tracker = Tracker::new();
        let mut events = tracker.events.subscribe();
        tracker.update(BTreeMap::from([("a".into(), plugin("a", "running"))]));
        tracker.update(BTreeMap::from([("a".into(), plugin("a", "running"))]));
        assert_eq!(tracker.version(), 1, "unchanged: no new version");
        tracker.update(BTreeMap::from([("a".into(), plugin("a", "degraded"))]));
        tracker.update(BTreeMap::new());
        let kinds: Vec<_> = std::iter::from_fn(|| events.try_recv().ok())
            .map(|e| (e.kind, e.version))
            .collect();
        assert_eq!(kinds, vec![("ADDED", 1), ("MODIFIED", 2), ("DELETED", 3)]);
        assert!(tracker.get("a").is_none());
    }
}
