//! `native-database`: the `database` plugin's logic as a plain kube-rs
//! controller, without Wasm. The peer `tests/bench/operator` runs against
//! `kubeplug run` (see `docs/benchmarks/operator.md`).
//!
//! This is the "naive" baseline (contender `native`): no caches of its own,
//! no diffing; `native-database-reflector` is the "reflector" baseline, the
//! same logic with reflector stores and diffs.
//!
//! Written the way a typical kube-rs user would: a `Controller` on the
//! `Database` CRD (as `DynamicObject`) that `owns` its StatefulSet, Service
//! and Secret and `watches` its Pods; each reconcile GETs the children and
//! lists the pods (fresh reads, no caches of its own), calls
//! `DatabasePlugin::reconcile` natively, then server-side applies every child
//! and the status on **every** reconcile (no diffing: the API server turns an
//! unchanged apply into a no-op) and records the plugin's events. Default
//! `Controller` settings (unbounded concurrency, no debounce).
//!
//! Uses the kubeconfig (or in-cluster config); logs to stderr (`RUST_LOG`,
//! default `info`); logs its counters (`reconciles=N failures=N reads=N
//! writes=N`) on SIGUSR1 and when it stops (SIGTERM or Ctrl-C, graceful).

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use database::DatabasePlugin;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use kubeplug_sdk::{Context, Plugin};
use serde::de::DeserializeOwned;
use serde_json::Value;

#[path = "common/native.rs"]
mod native;

use native::{
    Counted, Counters, Error, INSTANCE_LABEL, NAME_LABEL, apply_status, error_policy, init_logging,
    log_on_usr1, record_events, run_to_end,
};

const MANAGER: &str = "native-database";

struct State {
    client: Client,
    database: ApiResource,
    recorder: Recorder,
    counters: Counters,
}

impl Counted for State {
    fn counters(&self) -> &Counters {
        &self.counters
    }
}

/// A child by name, as JSON with apiVersion and kind (None if absent).
async fn get<K>(st: &State, ns: &str, name: &str) -> Result<Option<Value>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    K: DeserializeOwned + serde::Serialize + Clone + std::fmt::Debug,
{
    st.counters.reads.fetch_add(1, Relaxed);
    let got = Api::<K>::namespaced(st.client.clone(), ns)
        .get_opt(name)
        .await?;
    Ok(got.map(|o| serde_json::to_value(o)).transpose()?)
}

async fn reconcile(db: Arc<DynamicObject>, st: Arc<State>) -> Result<Action, Error> {
    st.counters.reconciles.fetch_add(1, Relaxed);
    if db.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change()); // children go by garbage collection
    }
    let (ns, name) = (db.namespace().unwrap_or_default(), db.name_any());
    let selector = format!("{NAME_LABEL}=database,{INSTANCE_LABEL}={name}");
    let secret_name = database::secret_name(&name);
    let (sts, svc, secret, pods) = tokio::try_join!(
        get::<StatefulSet>(&st, &ns, &name),
        get::<Service>(&st, &ns, &name),
        get::<Secret>(&st, &ns, &secret_name),
        async {
            st.counters.reads.fetch_add(1, Relaxed);
            let lp = ListParams::default().labels(&selector);
            Ok::<_, Error>(
                Api::<Pod>::namespaced(st.client.clone(), &ns)
                    .list(&lp)
                    .await?,
            )
        },
    )?;

    // The same logic the plugin runs in Wasm, called natively.
    let now = format!("{:.0}", jiff::Timestamp::now());
    let mut ctx = Context::new(
        serde_json::to_value(&*db)?,
        database::Config::default(),
        &now,
    );
    ctx.observed = [sts, svc, secret].into_iter().flatten().collect();
    ctx.related = pods
        .items
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    ctx.entropy = rand::random::<[u8; 32]>().to_vec();
    let response = <DatabasePlugin as Plugin>::reconcile(&ctx)?;

    let owner = db.controller_owner_ref(&st.database);
    let apply = PatchParams::apply(MANAGER).force();
    for child in response.children() {
        let mut child: DynamicObject = serde_json::from_str(child)?;
        let kind = child
            .types
            .as_ref()
            .map(|t| t.kind.clone())
            .unwrap_or_default();
        let ar = match kind.as_str() {
            "StatefulSet" => ApiResource::erase::<StatefulSet>(&()),
            "Service" => ApiResource::erase::<Service>(&()),
            "Secret" => ApiResource::erase::<Secret>(&()),
            _ => return Err(Error::Kind(kind)),
        };
        child.metadata.namespace = Some(ns.clone());
        child.metadata.owner_references = owner.clone().map(|o| vec![o]);
        st.counters.writes.fetch_add(1, Relaxed);
        Api::<DynamicObject>::namespaced_with(st.client.clone(), &ns, &ar)
            .patch(&child.name_any(), &apply, &Patch::Apply(&child))
            .await?;
    }
    if let Some(status) = response.status_json() {
        let status = serde_json::from_str::<Value>(status)?;
        let at = (ns.as_str(), name.as_str());
        apply_status(&st.client, &st.database, at, status, &apply, &st.counters).await?;
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logging();
    let client = Client::try_default().await?;
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Database");
    let database = ApiResource::from_gvk_with_plural(&gvk, "databases");
    let st = Arc::new(State {
        recorder: Recorder::new(client.clone(), Reporter::from(MANAGER)),
        client: client.clone(),
        database: database.clone(),
        counters: Counters::default(),
    });

    let ours = watcher::Config::default().labels(&format!("{NAME_LABEL}=database"));
    let dt = database.clone();
    let controller = Controller::new_with(
        Api::<DynamicObject>::all_with(client.clone(), &database),
        watcher::Config::default(),
        database.clone(),
    )
    .owns(Api::<StatefulSet>::all(client.clone()), ours.clone())
    .owns(Api::<Service>::all(client.clone()), ours.clone())
    .owns(Api::<Secret>::all(client.clone()), ours.clone())
    .watches(Api::<Pod>::all(client.clone()), ours, move |pod| {
        let parent = pod.labels().get(INSTANCE_LABEL)?;
        Some(ObjectRef::new_with(parent, dt.clone()).within(&pod.namespace()?))
    })
    .shutdown_on_signal();
    let store = controller.store();
    tokio::spawn(async move {
        // Polled again and again: `wait_until_ready` wakes only its most
        // recent waiter, which is the controller's own.
        let tick = Duration::from_millis(100);
        while tokio::time::timeout(tick, store.wait_until_ready())
            .await
            .is_err()
        {}
        tracing::info!("native-database synced");
    });
    log_on_usr1(st.clone(), "native-database stats");
    let results = controller.run(reconcile, error_policy, st.clone());
    run_to_end(results, &st.counters, "native-database stopped").await;
    Ok(())
}
