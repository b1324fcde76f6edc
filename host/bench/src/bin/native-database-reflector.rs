//! `native-database-reflector`: the "reflector" baseline of
//! `tests/bench/operator` (see `docs/benchmarks/operator.md`). The same
//! Database logic as `native-database` (the "naive" baseline), called
//! natively, in the kube-rs controller a competent user would write: it
//! reads from watch caches and writes only what differs.
//!
//! **Caches.** One watch per kind, each feeding a reflector store and, through
//! the same stream, the `Controller`'s triggers (`for_stream_with`,
//! `owns_stream`, `watches_stream`: kube's `unstable-runtime` feature), with
//! `managedFields` stripped before caching:
//! - Databases (`DynamicObject`), full: the parent and its `.status`;
//! - StatefulSets, full minus `.status` (the logic reads only whether it
//!   exists; the spec is kept to diff against);
//! - Pods, full minus `.spec`: the logic reads their phase, Ready condition
//!   and deletion; selected by label `app.kubernetes.io/name=database`;
//! - Services and Secrets **metadata-only** (watches of
//!   `Api<PartialObjectMeta<K>>`, kube 5's successor of `metadata_watcher`): the logic does not read their bodies (it returns
//!   an existing Secret's `data` unchanged, and the Secret is create-only).
//!
//! Children are watched with the labels the logic puts on them
//! (`app.kubernetes.io/name=database,app.kubernetes.io/managed-by=kubeplug`).
//! Parents are triggered only when their `metadata.generation` changes (not
//! by their own status writes); children and pods on every change.
//!
//! **Reconcile** makes no reads: the parent comes from the controller's store,
//! the children by name and the pods by label from the stores. It calls
//! `<DatabasePlugin as Plugin>::reconcile` exactly as `native-database` does,
//! then **diffs before writing**:
//! - StatefulSet: server-side applied (field manager
//!   `native-database-reflector`, controller ownerReference) only when the
//!   desired JSON is not a subset of the cached object (so drift is repaired);
//! - Service: applied only when the content hash of the desired object
//!   differs from the `example.com/applied-hash` annotation it was last
//!   applied with (cached metadata). So a deleted Service is recreated and a
//!   changed Database re-applies it, but an edit of its spec by someone else
//!   is not undone (the price of not caching its body);
//! - the create-only Secret: created (POST) once, when absent from the cache,
//!   never re-applied. An `AlreadyExists` means the cache was behind: the
//!   logic then believed it was creating the Secret, so this reconcile's
//!   events (`CredentialsCreated`) are not recorded;
//! - status: applied only when it differs from the cached parent's `.status`;
//! - events: recorded as the logic asks.
//!
//! **Controller config**: concurrency 4 (as many reconciles in flight as
//! kubeplug's 4 workers per plugin; bounds the burst of requests on the API
//! server instead of one task per Database) and a 500 ms debounce (the watch
//! events of one change, such as the three children created by one reconcile
//! or a pod's successive status updates, become one reconcile, which then
//! also sees all of them in the caches).
//!
//! Uses the kubeconfig (or in-cluster config); logs to stderr (`RUST_LOG`,
//! default `info`); logs `native-database-reflector synced` once every cache
//! has listed, and its counters (`reconciles=N failures=N reads=N writes=N`;
//! reads stay 0) on SIGUSR1 and when it stops (SIGTERM or Ctrl-C, graceful).

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use database::DatabasePlugin;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta, Patch, PatchParams,
    PostParams,
};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Client, Resource, ResourceExt};
use kubeplug_sdk::{Context, Plugin};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

#[path = "common/native.rs"]
mod native;

use native::{
    Counted, Counters, Error, INSTANCE_LABEL, NAME_LABEL, apply_status, error_policy, init_logging,
    log_on_usr1, record_events, run_to_end,
};

const MANAGER: &str = "native-database-reflector";
const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The contract's mark of a create-only child (`wit/plugin.wit`).
const CREATE_ONLY: &str = "kubeplug.io/create-only";
/// On metadata-only children: the hash of what was last applied.
const APPLIED_HASH: &str = "example.com/applied-hash";

type Meta<K> = PartialObjectMeta<K>;

struct Stores {
    statefulsets: Store<StatefulSet>,
    services: Store<Meta<Service>>,
    secrets: Store<Meta<Secret>>,
    pods: Store<Pod>,
}

struct State {
    client: Client,
    database: ApiResource,
    recorder: Recorder,
    stores: Stores,
    /// Every store has listed once; until then a reconcile would take a
    /// child not yet listed for a missing one.
    synced: AtomicBool,
    counters: Counters,
}

impl Counted for State {
    fn counters(&self) -> &Counters {
        &self.counters
    }
}

/// A metadata-only object as the logic sees an observed child: its kind's
/// apiVersion and kind (not `PartialObjectMetadata`) and its metadata.
fn meta_json<K: Resource<DynamicType = ()>>(o: &Meta<K>) -> Result<Value, Error> {
    Ok(json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": serde_json::to_value(&o.metadata)?,
    }))
}

/// Whether `observed` holds every field of `desired` with the same value
/// (what a server-side apply of `desired` would leave unchanged; lists must
/// match element by element).
fn contains(observed: &Value, desired: &Value) -> bool {
    match (observed, desired) {
        (Value::Object(o), Value::Object(d)) => d
            .iter()
            .all(|(k, v)| o.get(k).is_some_and(|o| contains(o, v))),
        (Value::Array(o), Value::Array(d)) => {
            o.len() == d.len() && o.iter().zip(d).all(|(o, d)| contains(o, d))
        }
        _ => observed == desired,
    }
}

fn content_hash(child: &Value) -> String {
    hex::encode(Sha256::digest(child.to_string().as_bytes()))
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

async fn reconcile(db: Arc<DynamicObject>, st: Arc<State>) -> Result<Action, Error> {
    st.counters.reconciles.fetch_add(1, Relaxed);
    if !st.synced.load(Relaxed) {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    if db.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change()); // children go by garbage collection
    }
    let (ns, name) = (db.namespace().unwrap_or_default(), db.name_any());
    let secret_name = database::secret_name(&name);
    let stores = &st.stores;
    let sts = stores.statefulsets.get(&ObjectRef::new(&name).within(&ns));
    let svc = stores.services.get(&ObjectRef::new(&name).within(&ns));
    let secret = stores
        .secrets
        .get(&ObjectRef::new(&secret_name).within(&ns));
    let pods = stores.pods.state_filter(|p| {
        p.metadata.namespace.as_deref() == Some(ns.as_str())
            && p.labels().get(NAME_LABEL).map(String::as_str) == Some("database")
            && p.labels().get(INSTANCE_LABEL) == Some(&name)
    });

    // The same logic the plugin runs in Wasm, called natively.
    let now = format!("{:.0}", jiff::Timestamp::now());
    let mut ctx = Context::new(
        serde_json::to_value(&*db)?,
        database::Config::default(),
        &now,
    );
    let sts_json = sts.as_deref().map(serde_json::to_value).transpose()?;
    ctx.observed = sts_json.iter().cloned().collect();
    if let Some(svc) = &svc {
        ctx.observed.push(meta_json(svc)?);
    }
    if let Some(secret) = &secret {
        ctx.observed.push(meta_json(secret)?);
    }
    ctx.related = pods
        .iter()
        .map(|p| serde_json::to_value(&**p))
        .collect::<Result<_, _>>()?;
    ctx.entropy = rand::random::<[u8; 32]>().to_vec();
    let response = <DatabasePlugin as Plugin>::reconcile(&ctx)?;

    let owner = db.controller_owner_ref(&st.database);
    let apply = PatchParams::apply(MANAGER).force();
    let mut stale = false;
    for child in response.children() {
        let mut child: Value = serde_json::from_str(child)?;
        let kind = child["kind"].as_str().unwrap_or_default().to_string();
        let child_name = child["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        child["metadata"]["namespace"] = ns.clone().into();
        child["metadata"]["ownerReferences"] =
            serde_json::to_value(owner.iter().collect::<Vec<_>>())?;
        let create_only = child["metadata"]["annotations"][CREATE_ONLY] == "true";
        let (ar, write) = match kind.as_str() {
            "StatefulSet" => (
                ApiResource::erase::<StatefulSet>(&()),
                !sts_json.as_ref().is_some_and(|o| contains(o, &child)),
            ),
            "Service" => {
                let hash = content_hash(&child);
                let unchanged = svc
                    .as_ref()
                    .is_some_and(|o| annotation(&o.metadata, APPLIED_HASH) == Some(&hash));
                child["metadata"]["annotations"][APPLIED_HASH] = hash.into();
                (ApiResource::erase::<Service>(&()), !unchanged)
            }
            "Secret" if create_only => (ApiResource::erase::<Secret>(&()), secret.is_none()),
            _ => return Err(Error::Kind(kind)),
        };
        if !write {
            continue;
        }
        let api = Api::<DynamicObject>::namespaced_with(st.client.clone(), &ns, &ar);
        let object: DynamicObject = serde_json::from_value(child)?;
        st.counters.writes.fetch_add(1, Relaxed);
        if create_only {
            let pp = PostParams {
                field_manager: Some(MANAGER.into()),
                ..Default::default()
            };
            match api.create(&pp, &object).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.is_already_exists() => stale = true,
                Err(e) => return Err(e.into()),
            }
        } else {
            api.patch(&child_name, &apply, &Patch::Apply(&object))
                .await?;
        }
    }
    if let Some(status) = response.status_json() {
        let status: Value = serde_json::from_str(status)?;
        if db.data.get("status") != Some(&status) {
            let at = (ns.as_str(), name.as_str());
            apply_status(&st.client, &st.database, at, status, &apply, &st.counters).await?;
        }
    }
    if stale {
        tracing::debug!(%name, "create-only child already existed: not recording events");
        return Ok(Action::requeue(Duration::from_secs(600)));
    }
    let reference = db.object_ref(&st.database);
    record_events(
        &st.recorder,
        &reference,
        response.events(),
        &st.counters,
        &name,
    )
    .await;
    Ok(Action::requeue(Duration::from_secs(600)))
}

/// Waits until `store` has listed (polled again and again: `wait_until_ready`
/// wakes only its most recent waiter, and the controller waits on its own
/// store too).
async fn listed<K>(store: &Store<K>)
where
    K: 'static + Clone + kube::runtime::reflector::Lookup,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let tick = Duration::from_millis(100);
    while tokio::time::timeout(tick, store.wait_until_ready())
        .await
        .is_err()
    {}
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logging();
    let client = Client::try_default().await?;
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Database");
    let database = ApiResource::from_gvk_with_plural(&gvk, "databases");

    let children = watcher::Config::default().labels(&format!(
        "{NAME_LABEL}=database,{MANAGED_BY_LABEL}=kubeplug"
    ));
    let pods_wc = watcher::Config::default().labels(&format!("{NAME_LABEL}=database"));

    let w_databases = reflector::store::Writer::new(database.clone());
    let databases = w_databases.as_reader();
    let parents = watcher(
        Api::<DynamicObject>::all_with(client.clone(), &database),
        watcher::Config::default(),
    )
    .modify(|o| o.managed_fields_mut().clear())
    .reflect(w_databases)
    .applied_objects()
    .predicate_filter(predicates::generation, Default::default());

    let (statefulsets, w) = reflector::store();
    let statefulset_stream = watcher(Api::<StatefulSet>::all(client.clone()), children.clone())
        .modify(|o| {
            o.managed_fields_mut().clear();
            o.status = None;
        })
        .reflect(w)
        .touched_objects();
    let (services, w) = reflector::store();
    let service_stream = watcher(Api::<Meta<Service>>::all(client.clone()), children.clone())
        .modify(|o| o.managed_fields_mut().clear())
        .reflect(w)
        .touched_objects();
    let (secrets, w) = reflector::store();
    let secret_stream = watcher(Api::<Meta<Secret>>::all(client.clone()), children)
        .modify(|o| o.managed_fields_mut().clear())
        .reflect(w)
        .touched_objects();
    let (pods, w) = reflector::store();
    let pod_stream = watcher(Api::<Pod>::all(client.clone()), pods_wc)
        .modify(|o| {
            o.managed_fields_mut().clear();
            o.spec = None;
        })
        .reflect(w)
        .touched_objects();

    let st = Arc::new(State {
        recorder: Recorder::new(client.clone(), Reporter::from(MANAGER)),
        client: client.clone(),
        database: database.clone(),
        stores: Stores {
            statefulsets: statefulsets.clone(),
            services: services.clone(),
            secrets: secrets.clone(),
            pods: pods.clone(),
        },
        synced: AtomicBool::new(false),
        counters: Counters::default(),
    });

    let dt = database.clone();
    let controller = Controller::for_stream_with(parents, databases.clone(), database.clone())
        .owns_stream(statefulset_stream)
        .owns_stream(service_stream)
        .owns_stream(secret_stream)
        .watches_stream(pod_stream, move |pod: Pod| {
            let parent = pod.labels().get(INSTANCE_LABEL)?;
            Some(ObjectRef::new_with(parent, dt.clone()).within(&pod.namespace()?))
        })
        .with_config(
            controller::Config::default()
                .concurrency(4)
                .debounce(Duration::from_millis(500)),
        )
        .shutdown_on_signal();
    let synced = st.clone();
    tokio::spawn(async move {
        tokio::join!(
            listed(&databases),
            listed(&statefulsets),
            listed(&services),
            listed(&secrets),
            listed(&pods),
        );
        synced.synced.store(true, Relaxed);
        tracing::info!("native-database-reflector synced");
    });
    log_on_usr1(st.clone(), "native-database-reflector stats");
    let results = controller.run(reconcile, error_policy, st.clone());
    run_to_end(results, &st.counters, "native-database-reflector stopped").await;
    Ok(())
}
