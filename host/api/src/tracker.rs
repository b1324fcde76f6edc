//! The `Plugin` objects and their changes: a snapshot of the registry taken
//! every second, each object versioned when it changes, and the changes
//! broadcast to watchers (`kubectl get plugins -w`).
//!
//! resourceVersions are this process's own counter, started at its start
//! time in microseconds, so that a version another replica or an earlier
//! process issued is not one of ours. A watch resumes from a version only
//! if every change since is still in the last [`HISTORY`] changes; any other
//! version (too old, another replica's, a restarted host's) is answered
//! with a 410 `Expired` ERROR event, as kube-apiserver answers it, and the
//! client lists again. Nothing between a list and its watch is lost.
//!
//! A watch with a [`Selector`] sees what kube-apiserver's watch cache would
//! send it: each change is judged on the object before and after it, so an
//! object that comes to match is ADDED, one that stops matching is DELETED
//! (in its last matching state, at the change's version), a change to one
//! that matches before and after is MODIFIED, and the rest is not sent.
//! Judging both states, rather than keeping per watch the names it was
//! shown, is what lets a watch resumed from a list's version (`kubectl get
//! -w` lists, then watches from there) learn that an object it listed
//! stopped matching.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::WatchEvent;
use parking_lot::Mutex;
use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

use crate::plugin::Plugin;
use crate::resources;
use crate::responses::Body;
use crate::selectors::Selector;
use crate::table;
use kubeplug_operator::registry::Registry;

/// How often the registry is looked at.
const PERIOD: Duration = Duration::from_secs(1);

/// How many changes are kept for watches that resume from a version: a
/// `kubectl get -w` lists, then watches from the list's version a moment
/// later; a busy plugin changes about once a second (its counters).
pub const HISTORY: usize = 256;

/// What happened to an object: a watch event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Added,
    Modified,
    Deleted,
}

impl Change {
    /// The watch event of this change to `object`.
    fn event<T>(self, object: T) -> WatchEvent<T> {
        match self {
            Change::Added => WatchEvent::Added(object),
            Change::Modified => WatchEvent::Modified(object),
            Change::Deleted => WatchEvent::Deleted(object),
        }
    }
}

#[derive(Clone, Debug)]
struct Event {
    change: Change,
    version: u64,
    /// The object at `version` (for a deletion, as it was last, at
    /// `version`).
    object: Plugin,
    /// The object before this change: none for an addition.
    previous: Option<Plugin>,
}

impl Event {
    /// This event as a watch with `selector` sees it, or nothing; the same
    /// event for a selector that selects everything.
    fn selected(self, selector: &Selector) -> Option<Event> {
        let now = self.change != Change::Deleted && selector.matches(&self.object.metadata);
        let before = self
            .previous
            .as_ref()
            .is_some_and(|p| selector.matches(&p.metadata));
        let change = match (before, now) {
            (false, false) => return None,
            (false, true) => Change::Added,
            (true, true) => Change::Modified,
            (true, false) => Change::Deleted,
        };
        let object = match (now, self.previous) {
            (true, _) | (false, None) => self.object,
            // Its last state that matched, at this event's version (as
            // kube-apiserver's cacheWatcher sends it): a client resumes
            // from the version of the last object it was sent.
            (false, Some(last)) => at_version(last, self.version),
        };
        Some(Event {
            change,
            version: self.version,
            object,
            previous: None,
        })
    }
}

struct State {
    /// name → (resourceVersion, object with that version).
    objects: BTreeMap<String, (u64, Plugin)>,
    version: u64,
    /// The last [`HISTORY`] changes, oldest first (versions consecutive).
    history: VecDeque<Event>,
}

impl State {
    /// Every change after `version`, if all of them are still kept.
    fn since(&self, version: u64) -> Option<Vec<Event>> {
        if version > self.version {
            return None;
        }
        let oldest = self.history.front().map_or(self.version + 1, |e| e.version);
        if version + 1 < oldest {
            return None;
        }
        Some(
            self.history
                .iter()
                .filter(|e| e.version > version)
                .cloned()
                .collect(),
        )
    }
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
    /// A tracker whose versions start at this moment in microseconds.
    pub fn new() -> Arc<Self> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_micros() as u64);
        Self::starting_at(now)
    }

    /// A tracker whose list is at `version` until the first change.
    fn starting_at(version: u64) -> Arc<Self> {
        Arc::new(Tracker {
            state: Mutex::new(State {
                objects: BTreeMap::new(),
                version,
                history: VecDeque::with_capacity(HISTORY),
            }),
            events: broadcast::channel(HISTORY).0,
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

    fn update(&self, mut fresh: BTreeMap<String, Plugin>) {
        let mut state = self.state.lock();
        let mut events = Vec::new();
        let gone: Vec<String> = state
            .objects
            .keys()
            .filter(|name| !fresh.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            state.version += 1;
            let (_, previous) = state.objects.remove(&name).expect("present");
            // At the deletion's version, as kube-apiserver sends it: a
            // client resumes from the version of the last object it saw.
            let object = at_version(previous.clone(), state.version);
            events.push(Event {
                change: Change::Deleted,
                version: state.version,
                object,
                previous: Some(previous),
            });
        }
        for (name, object) in std::mem::take(&mut fresh) {
            let change = match state.objects.get(&name) {
                None => Change::Added,
                Some((_, old)) if without_version(old) == object => continue,
                Some(_) => Change::Modified,
            };
            state.version += 1;
            let version = state.version;
            let object = at_version(object, version);
            let previous = state
                .objects
                .insert(name, (version, object.clone()))
                .map(|(_, old)| old);
            events.push(Event {
                change,
                version,
                object,
                previous,
            });
        }
        // Sent under the lock, as kept: a watch subscribes and reads the
        // history under it too, so it sees each change exactly once.
        for event in events {
            if state.history.len() == HISTORY {
                state.history.pop_front();
            }
            state.history.push_back(event.clone());
            // No watcher is not an error.
            let _ = self.events.send(event);
        }
    }

    pub fn get(&self, name: &str) -> Option<Plugin> {
        let state = self.state.lock();
        state.objects.get(name).map(|(_, o)| o.clone())
    }

    /// Every object, and the version of the whole list.
    pub fn list(&self) -> (Vec<Plugin>, u64) {
        let state = self.state.lock();
        (
            state.objects.values().map(|(_, o)| o.clone()).collect(),
            state.version,
        )
    }

    pub fn version(&self) -> u64 {
        self.state.lock().version
    }

    /// A watch response: the changes after `since` (a list's version), or
    /// the current objects as ADDED first; newline-delimited JSON events,
    /// each object a one-row Table if `table`, each [`Plugin::redacted`] if
    /// `redact`, only what `selector` selects (see the module's doc). Ends
    /// after `timeout` (the client watches again), or when the watcher falls
    /// too far behind; a `since` whose changes are not all kept gets one
    /// 410 `Expired` ERROR event (the client lists again).
    pub fn watch(
        self: &Arc<Self>,
        since: Option<u64>,
        timeout: Duration,
        table: bool,
        redact: bool,
        selector: Selector,
    ) -> Response<Body> {
        // Subscribe and read the state under the lock changes are sent
        // under, so no change falls between.
        let state = self.state.lock();
        let mut events = self.events.subscribe();
        let (start, initial): (u64, Vec<Event>) = match since {
            Some(version) => match state.since(version) {
                Some(kept) => (
                    state.version,
                    kept.into_iter()
                        .filter_map(|e| e.selected(&selector))
                        .collect(),
                ),
                None => return expired(version, &state),
            },
            None => {
                let initial = state
                    .objects
                    .values()
                    .filter(|(_, o)| selector.matches(&o.metadata))
                    .map(|(v, o)| Event {
                        change: Change::Added,
                        version: *v,
                        object: o.clone(),
                        previous: None,
                    })
                    .collect();
                (state.version, initial)
            }
        };
        drop(state);
        let (mut sender, body) =
            http_body_util::channel::Channel::<Bytes, std::convert::Infallible>::new(16);
        tokio::spawn(async move {
            let frame = |event: &Event| {
                let object = if redact {
                    event.object.clone().redacted()
                } else {
                    event.object.clone()
                };
                if table {
                    let table = table::table(std::slice::from_ref(&object), event.version);
                    line(&event.change.event(table))
                } else {
                    line(&event.change.event(object))
                }
            };
            for event in &initial {
                let Some(frame) = frame(event) else { return };
                if sender.send_data(frame).await.is_err() {
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
                        let Some(event) = event.selected(&selector) else {
                            continue;
                        };
                        let Some(frame) = frame(&event) else { return };
                        if sender.send_data(frame).await.is_err() {
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

/// The answer to a watch from a version whose changes are not all kept:
/// one ERROR event, as kube-apiserver sends it ("too old resource version").
fn expired(version: u64, state: &State) -> Response<Body> {
    let oldest = state.history.front().map_or(state.version, |e| e.version);
    let status = resources::failure(
        StatusCode::GONE,
        "Expired",
        format!("too old resource version: {version} ({oldest})"),
        None,
    );
    let body = line(&WatchEvent::<Plugin>::ErrorStatus(status)).unwrap_or_default();
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(body).boxed())
        .expect("static response parts are valid")
}

/// One line of a watch response, or nothing (and the watch ends: the client
/// watches again) if the event cannot be serialized, which only a bug does.
fn line(event: &impl Serialize) -> Option<Bytes> {
    match serde_json::to_vec(event) {
        Ok(mut line) => {
            line.push(b'\n');
            Some(Bytes::from(line))
        }
        Err(error) => {
            tracing::error!(%error, "cannot serialize a watch event");
            None
        }
    }
}

fn at_version(mut object: Plugin, version: u64) -> Plugin {
    object.metadata.resource_version = Some(version.to_string());
    object
}

fn without_version(object: &Plugin) -> Plugin {
    let mut object = object.clone();
    object.metadata.resource_version = None;
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
    use crate::fixtures::row;
    use crate::plugin::STATE_LABEL;
    use crate::resources::Owners;
    use kubeplug_core::manifest::Mode;
    use kubeplug_core::rollout::State;
    use serde_json::Value;

    fn state(state: &str) -> State {
        match state {
            "running" => State::Running,
            "degraded" => State::Degraded,
            "failed" => State::Failed,
            other => panic!("no state {other} in these tests"),
        }
    }

    fn plugin(name: &str, state_: &str) -> Plugin {
        labelled(name, state_, 0).1
    }

    /// A plugin (labelled with its state, as every one is), with
    /// `reconciles` to change it without changing its state.
    fn labelled(name: &str, state_: &str, reconciles: u64) -> (String, Plugin) {
        let mut row = row(state(state_), Some(Mode::Composite));
        row.name = Some(name.into());
        row.detail.as_mut().expect("serving").reconciles = reconciles;
        (name.into(), resources::plugin(&row, &Owners::default()))
    }

    /// The next `n` events of a watch: (type, name, state, resourceVersion).
    async fn next_events(body: &mut Body, n: usize) -> Vec<(String, String, String, String)> {
        let mut seen = Vec::new();
        while seen.len() < n {
            let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
                .await
                .unwrap_or_else(|_| panic!("no event after {seen:?}"))
                .expect("the watch goes on")
                .expect("infallible");
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let event: Value = serde_json::from_slice(&data).expect("a JSON event");
            let object = &event["object"];
            seen.push((
                event["type"].as_str().expect("type").to_string(),
                object["metadata"]["name"]
                    .as_str()
                    .expect("name")
                    .to_string(),
                object["status"]["state"]
                    .as_str()
                    .expect("state")
                    .to_string(),
                object["metadata"]["resourceVersion"]
                    .as_str()
                    .expect("resourceVersion")
                    .to_string(),
            ));
        }
        seen
    }

    fn event(
        kind: &str,
        name: &str,
        state: &str,
        version: u64,
    ) -> (String, String, String, String) {
        (kind.into(), name.into(), state.into(), version.to_string())
    }

    fn running() -> Selector {
        Selector::parse(Some(&format!("{STATE_LABEL}=running")), None).expect("valid")
    }

    #[test]
    fn versions_change_only_with_content_and_removals_are_deleted_events() {
        let tracker = Tracker::starting_at(0);
        let mut events = tracker.events.subscribe();
        tracker.update(BTreeMap::from([("a".into(), plugin("a", "running"))]));
        tracker.update(BTreeMap::from([("a".into(), plugin("a", "running"))]));
        assert_eq!(tracker.version(), 1, "unchanged: no new version");
        tracker.update(BTreeMap::from([("a".into(), plugin("a", "degraded"))]));
        tracker.update(BTreeMap::new());
        let kinds: Vec<_> = std::iter::from_fn(|| events.try_recv().ok())
            .map(|e| (e.change, e.version, e.object.metadata.resource_version))
            .collect();
        let at = |version: &str| Some(version.to_string());
        assert_eq!(
            kinds,
            vec![
                (Change::Added, 1, at("1")),
                (Change::Modified, 2, at("2")),
                (Change::Deleted, 3, at("3")),
            ]
        );
        assert!(tracker.get("a").is_none());
    }

    #[tokio::test]
    async fn a_selected_watch_sees_objects_come_and_go_as_they_match() {
        let tracker = Tracker::starting_at(0);
        // 1: a running, 2: b failed.
        tracker.update(BTreeMap::from([
            labelled("a", "running", 0),
            labelled("b", "failed", 0),
        ]));
        let mut body = json_watch(&tracker, None, running()).into_body();
        // Only what matches is listed first.
        assert_eq!(
            next_events(&mut body, 1).await,
            [event("ADDED", "a", "running", 1)]
        );
        // 3: a fails (stops matching), 4: b runs (comes to match).
        tracker.update(BTreeMap::from([
            labelled("a", "failed", 0),
            labelled("b", "running", 0),
        ]));
        // 5: a changes and still does not match; 6: b changes and still
        // does.
        tracker.update(BTreeMap::from([
            labelled("a", "failed", 1),
            labelled("b", "running", 1),
        ]));
        // 7: a is removed (not shown: no event); 8: b is removed.
        tracker.update(BTreeMap::from([labelled("b", "running", 1)]));
        tracker.update(BTreeMap::new());
        assert_eq!(
            next_events(&mut body, 4).await,
            [
                // In its last matching state, at the change's version.
                event("DELETED", "a", "running", 3),
                event("ADDED", "b", "running", 4),
                event("MODIFIED", "b", "running", 6),
                event("DELETED", "b", "running", 8),
            ]
        );
    }

    #[tokio::test]
    async fn a_selected_watch_resumed_from_a_list_learns_what_stopped_matching() {
        let tracker = Tracker::starting_at(0);
        tracker.update(BTreeMap::from([
            labelled("a", "running", 0),
            labelled("b", "failed", 0),
        ]));
        // `kubectl get -w`: a list at version 2, then a watch from there,
        // which lists nothing itself.
        let (listed, version) = tracker.list();
        assert_eq!(
            listed
                .iter()
                .filter(|o| running().matches(&o.metadata))
                .count(),
            1
        );
        let mut body = json_watch(&tracker, Some(version), running()).into_body();
        tracker.update(BTreeMap::from([
            labelled("a", "failed", 0),
            labelled("b", "failed", 1),
        ]));
        tracker.update(BTreeMap::from([
            labelled("a", "failed", 0),
            labelled("b", "running", 1),
        ]));
        assert_eq!(
            next_events(&mut body, 2).await,
            [
                event("DELETED", "a", "running", 3),
                event("ADDED", "b", "running", 5),
            ]
        );
    }

    #[tokio::test]
    async fn a_watch_without_selector_sees_every_change_as_it_happened() {
        let tracker = Tracker::starting_at(0);
        tracker.update(BTreeMap::from([labelled("a", "running", 0)]));
        let mut body = json_watch(&tracker, None, Selector::default()).into_body();
        tracker.update(BTreeMap::from([
            labelled("a", "failed", 0),
            labelled("b", "failed", 0),
        ]));
        tracker.update(BTreeMap::new());
        assert_eq!(
            next_events(&mut body, 5).await,
            [
                event("ADDED", "a", "running", 1),
                event("MODIFIED", "a", "failed", 2),
                event("ADDED", "b", "failed", 3),
                event("DELETED", "a", "failed", 4),
                event("DELETED", "b", "failed", 5),
            ]
        );
    }

    #[tokio::test]
    async fn a_watch_from_a_list_sees_the_changes_made_before_it_began() {
        let tracker = Tracker::starting_at(0);
        tracker.update(BTreeMap::from([labelled("a", "running", 0)]));
        let (_, version) = tracker.list();
        // Between the list and the watch: a fails, b appears.
        tracker.update(BTreeMap::from([
            labelled("a", "failed", 0),
            labelled("b", "running", 0),
        ]));
        let mut body = json_watch(&tracker, Some(version), Selector::default()).into_body();
        tracker.update(BTreeMap::from([labelled("b", "running", 0)]));
        assert_eq!(
            next_events(&mut body, 3).await,
            [
                event("MODIFIED", "a", "failed", 2),
                event("ADDED", "b", "running", 3),
                event("DELETED", "a", "failed", 4),
            ]
        );
    }

    /// A plain JSON watch (no table, nothing redacted) from `since`.
    fn json_watch(
        tracker: &Arc<Tracker>,
        since: Option<u64>,
        selector: Selector,
    ) -> Response<Body> {
        tracker.watch(since, Duration::from_secs(60), false, false, selector)
    }

    /// The one event of a watch: its type and its object.
    async fn only_event(body: &mut Body) -> Value {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("an answer")
            .expect("one frame")
            .expect("infallible");
        let event: Value = serde_json::from_slice(&frame.into_data().expect("data")).expect("JSON");
        assert!(body.frame().await.is_none(), "the watch ends after it");
        event
    }

    #[tokio::test]
    async fn a_version_whose_changes_are_gone_or_not_ours_is_expired() {
        let tracker = Tracker::starting_at(1000);
        tracker.update(BTreeMap::from([labelled("a", "running", 0)]));
        for reconciles in 1..=HISTORY as u64 {
            tracker.update(BTreeMap::from([labelled("a", "running", reconciles)]));
        }
        let now = tracker.version();
        assert_eq!(now, 1000 + 1 + HISTORY as u64);
        let watch = |since| json_watch(&tracker, Some(since), Selector::default());
        // The oldest kept change is 1002: from 1001 on is whole; 1000 is
        // not (1001 was dropped), nor is a version above ours (another
        // replica's) or below where we started (an earlier process's).
        for since in [1000, 999, 5, now + 1, now + 1_000_000] {
            let event = only_event(watch(since).body_mut()).await;
            assert_eq!(event["type"], "ERROR", "{since}: {event}");
            assert_eq!(event["object"]["kind"], "Status");
            assert_eq!(event["object"]["code"], 410);
            assert_eq!(event["object"]["reason"], "Expired");
        }
        let mut body = watch(1001).into_body();
        let replayed = next_events(&mut body, HISTORY).await;
        assert_eq!(replayed.first().map(|e| e.3.as_str()), Some("1002"));
        assert_eq!(replayed.last().map(|e| e.3.clone()), Some(now.to_string()));
        // Up to date: nothing to replay, the watch goes on.
        let mut body = watch(now).into_body();
        tracker.update(BTreeMap::new());
        assert_eq!(
            next_events(&mut body, 1).await,
            [event("DELETED", "a", "running", now + 1)]
        );
    }
}
