//! A plugin that misbehaves on command, to prove the host survives it.
//!
//! Parent: `Hostile` (`test.kubeplug.io/v1`) unless `claim` says otherwise.
//!
//! # Configuration (read by `manifest()`)
//!
//! - `manifest: panic` makes `manifest()` panic (load-time checks);
//!   `manifest: sleep` makes it sleep for an hour.
//! - `name` renames the plugin (default `hostile`).
//! - `claim` picks another parent kind (to test that two plugins cannot own
//!   one parent kind, and what the host does with parents it should refuse):
//!   `databases` (`example.com/v1` `Database`), `secrets` (core `v1`
//!   `Secret`), `serviceaccounts` (core `v1` `ServiceAccount`),
//!   `databases-v2` (`example.com/v2` `Database`, plural `databasez`, declared
//!   cluster-scoped: a deliberate lie), `pods` (core `v1` `Pod`, for a
//!   decorator's webhooks), `namespaces` (core `v1` `Namespace`, a
//!   cluster-scoped parent). Any other value keeps `Hostile`.
//! - `finalizer`: `true` declares the finalizer `test.kubeplug.io/hold`; a
//!   string declares exactly that finalizer (e.g.
//!   `kubernetes.io/pvc-protection`). Either way `finalize` releases the
//!   parent only once it is annotated `test.kubeplug.io/release: "true"`.
//! - `children`: extra declared child kinds beside `ConfigMap`:
//!   `clusterrolebinding`, `namespace`, `validatingwebhookconfiguration`
//!   (all cluster-scoped), `secret`, `hostile` (the plugin's own parent kind
//!   at `test.kubeplug.io/v2`, plural `hostilez`: an attempt to dodge an
//!   equality check), and `configmap-lie`, which adds no kind but declares the
//!   `ConfigMap` child cluster-scoped (a lie).
//! - `related`: `secrets-everywhere` observes `v1` `Secret`s declared
//!   cluster-scoped (a lie) labelled `kubeplug-test/steal: "yes"`; `secrets`
//!   the same Secrets of the parent's namespace (honestly namespaced); `pods`
//!   observes `v1` `Pod`s labelled `app: hostile`.
//! - `mode: decorator` makes the plugin a decorator of the same parent kind,
//!   with no children at all (`mode: composite` is the default).
//! - `namespaces`: the namespaces the plugin is restricted to.
//! - `behave`: overrides every parent's `spec.behave` (see below): a version
//!   of the plugin that, say, fails on every parent (`behave: error`).
//! - `admission: true` offers its `validate` and `mutate` webhooks, and
//!   `convert` (how its conversion misbehaves, see [`webhooks`]) its
//!   `convert`: each must then be granted.
//!
//! Unknown entries in `children`, `related` or `mode` are refused as invalid
//! configuration, so a typo in a test fails loudly.
//!
//! # Behaviour (`spec.behave` of the parent picks what `reconcile` does)
//!
//! The "ok ConfigMap" is a `ConfigMap` named `<name>-ok`.
//!
//! - `ok` (and any unknown value): returns the ok ConfigMap.
//! - `loop`: spins forever. `alloc`: grows memory without bound. `panic`:
//!   panics. `error`: returns a typed error. `malformed`: returns a child
//!   that is not JSON. `undeclared`: returns a `Secret` `<name>-smuggled`
//!   (a kind the default manifest does not declare).
//! - `cluster-child`: returns only cluster-scoped children: a
//!   `ClusterRoleBinding` `<name>-escalate` binding `cluster-admin` to the
//!   `default` ServiceAccount of the parent's namespace, a `Namespace`
//!   `<name>-ns`, and a `ValidatingWebhookConfiguration` `<name>-webhook`
//!   that denies (fail-closed, unreachable URL) every create and update.
//! - `adopt`: returns a ConfigMap named `spec.target` with data
//!   `adopted: "yes"` (to take over an object the plugin does not own).
//! - `steal`: returns a ConfigMap `<name>-loot` with one key per related
//!   object, `<namespace>.<name>` (`_` for no namespace), whose value is the
//!   JSON text of that object's `data`; status `{"loot": ["<ns>/<name>", ...]}`.
//! - `copy`: the ok ConfigMap, and status `{"copied": [...]}`: every value
//!   of the related objects' `data`, decoded from base64 when it is
//!   (a plugin that copies what it reads into what it writes).
//! - `label-from`: the ok ConfigMap labelled `<value>: handed`, and status
//!   `{"<value>": "handed"}`, for every such value: keys, and so field
//!   paths, built from what the plugin was handed (a candidate version whose
//!   what-if would name them).
//! - `events`: the ok ConfigMap, `spec.count` (default 1000) Normal events
//!   (reason `Flood`, message `event <i>`), and requeue after 0 seconds.
//! - `children`: `spec.count` (default 2000) ConfigMaps `<name>-<i>`.
//! - `status-bomb`: the ok ConfigMap and status `{"blob": "xxx…"}` of
//!   `spec.bytes` (default 8 MiB) characters.
//! - `log-bomb`: logs `spec.count` (default 1000) info messages `flood`, each
//!   with a 1 MiB field `blob`, then returns the ok ConfigMap.
//! - `spawn`: the ok ConfigMap and a child `Hostile` (`test.kubeplug.io/v2`)
//!   `<name>-spawn` whose `spec.behave` is `spawn` again.
//! - `reserved` (for decorator mode): a parent patch setting labels
//!   `kubeplug.io/plugin: database` and `pod-template-hash: abc` and the
//!   annotation `kubectl.kubernetes.io/last-applied-configuration: "{}"`.
//! - `decorate` (for decorator mode): a parent patch setting the annotation
//!   `example.com/decorated: "true"`.
//! - `nothing`: an empty answer (a decorator whose webhooks are under test).
//! - `inventory`: an empty answer, and an info log `handed` (fields
//!   `namespace`, `name`) for each related object it was handed.
//! - `secret-child`: the ok ConfigMap and a `Secret` `<name>-made` with
//!   `stringData` `k: v`.
//! - `foreign-finalizer`: the ok ConfigMap carrying the finalizer
//!   `spec.finalizer` (default `example.com/never`, which nothing removes).
//!
//! Blocking and memory (the deadline and the host's memory budget):
//!
//! - `sleep`: sleeps `spec.seconds` (default 3600) in a WASI clock wait,
//!   then returns the ok ConfigMap. `finalize` sleeps likewise when the
//!   parent's `spec.finalize` is `sleep`.
//! - `hold`: fills `spec.mib` (default 120) MiB, holds it for `spec.ms`
//!   (default 500) milliseconds, then answers with nothing to write
//!   (`spec.admit: hold` does the same in `validate` and `mutate`, with
//!   other defaults: see [`webhooks`]).
//! - `log-fields`: one log call with `spec.count` (default 1,500,000)
//!   empty fields, then the ok ConfigMap.
//! - `marker` (isolation between calls): answers a ConfigMap
//!   `<name>-seen-<word>-pages-<pages>`, with the word a static of its
//!   memory image held when the call began (7 in the image) and the pages
//!   its memory had, then writes `spec.write` (default 99) over the word and
//!   dirties `spec.mib` (default 4) MiB of heap: a fresh instance always
//!   answers 7 and its image's page count.
//!
//! `i` counts from 0.
//!
//! # Admission and conversion
//!
//! `validate`, `mutate` and `convert` misbehave as the object says
//! (`spec.admit`: spin, sleep, grow, panic, hold memory for a while, warn,
//! deny, escape their fence...): see [`webhooks`].
//!
//! # Finalize (`spec.finalize` of the parent picks what `finalize` does)
//!
//! An annotation `test.kubeplug.io/release: "true"` always releases the
//! parent (done). Otherwise:
//!
//! - absent (and any unknown value): pending, asking again after 1 s.
//! - `events`: pending, asking again after 0 s, with `spec.count` (default
//!   5000) Normal events (reason `FinalizeFlood`, message `event <i>`); logs
//!   `finalize flood` on every call.

// Deny, not forbid: the generated export glue is unsafe and allowed where
// it is expanded; everything written here stays safe.
#![deny(unsafe_code)]

mod webhooks;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

use kubeplug_sdk::k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kubeplug_sdk::{
    AdmissionRequest, Context, Error, Event, FinalizeResponse, LabelValue, Manifest, Plugin,
    Resource, Response, Verdict,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// The plugin (public so a native build, where nothing exports it, still uses it).
pub struct Hostile;

/// The configuration keys listed in the module docs.
#[derive(Deserialize, Default)]
pub struct Config {
    #[serde(default)]
    manifest: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    claim: Option<String>,
    #[serde(default)]
    finalizer: Finalizer,
    #[serde(default)]
    children: Vec<String>,
    #[serde(default)]
    related: Vec<String>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    behave: Option<String>,
    /// Offer `validate` and `mutate` (see [`webhooks`]).
    #[serde(default)]
    admission: bool,
    /// How `convert` misbehaves (see [`webhooks`]); offered when set.
    #[serde(default)]
    convert: Option<String>,
}

/// `finalizer: true|false` or `finalizer: "<name>"`.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Finalizer {
    Enabled(bool),
    Named(String),
}

impl Default for Finalizer {
    fn default() -> Self {
        Finalizer::Enabled(false)
    }
}

impl Finalizer {
    fn name(&self) -> Option<&str> {
        match self {
            Finalizer::Enabled(true) => Some(FINALIZER),
            Finalizer::Enabled(false) => None,
            Finalizer::Named(name) => Some(name),
        }
    }
}

const FINALIZER: &str = "test.kubeplug.io/hold";
/// `marker`'s word: 7 in the memory image, overwritten by every call.
static MARKER: AtomicU32 = AtomicU32::new(7);
const RELEASE: &str = "test.kubeplug.io/release";

/// A cluster-scoped resource type (or a namespaced one declared as such).
fn cluster(group: &str, version: &str, kind: &str, plural: &str) -> Resource {
    Resource {
        namespaced: false,
        ..Resource::namespaced(group, version, kind, plural)
    }
}

fn parent_kind(claim: Option<&str>) -> Resource {
    match claim {
        Some("databases") => Resource::namespaced("example.com", "v1", "Database", "databases"),
        Some("secrets") => Resource::namespaced("", "v1", "Secret", "secrets"),
        Some("serviceaccounts") => {
            Resource::namespaced("", "v1", "ServiceAccount", "serviceaccounts")
        }
        Some("databases-v2") => cluster("example.com", "v2", "Database", "databasez"),
        Some("pods") => Resource::namespaced("", "v1", "Pod", "pods"),
        Some("namespaces") => cluster("", "v1", "Namespace", "namespaces"),
        _ => Resource::namespaced("test.kubeplug.io", "v1", "Hostile", "hostiles"),
    }
}

fn child_kinds(children: &[String]) -> Result<Vec<Resource>, Error> {
    let mut config_map = Resource::of::<ConfigMap>();
    let mut kinds = Vec::new();
    for child in children {
        match child.as_str() {
            "configmap-lie" => config_map.namespaced = false,
            "clusterrolebinding" => kinds.push(cluster(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRoleBinding",
                "clusterrolebindings",
            )),
            "namespace" => kinds.push(cluster("", "v1", "Namespace", "namespaces")),
            "validatingwebhookconfiguration" => kinds.push(cluster(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
            )),
            "hostile" => kinds.push(Resource::namespaced(
                "test.kubeplug.io",
                "v2",
                "Hostile",
                "hostilez",
            )),
            "secret" => kinds.push(Resource::namespaced("", "v1", "Secret", "secrets")),
            other => {
                return Err(Error::InvalidConfig(format!(
                    "unknown child kind {other:?}"
                )));
            }
        }
    }
    kinds.insert(0, config_map);
    Ok(kinds)
}

impl Plugin for Hostile {
    type Config = Config;

    fn manifest(config: &Config) -> Result<Manifest, Error> {
        if config.manifest.as_deref() == Some("panic") {
            panic!("hostile plugin asked to panic in manifest()");
        }
        if config.manifest.as_deref() == Some("sleep") {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
        let parent = parent_kind(config.claim.as_deref());
        let name = config.name.as_deref().unwrap_or("hostile");
        let mut manifest = match config.mode.as_deref() {
            None | Some("composite") => {
                let mut manifest = Manifest::composite(name, "0.1.0", parent);
                for kind in child_kinds(&config.children)? {
                    manifest = manifest.child(kind);
                }
                manifest
            }
            Some("decorator") => Manifest::decorator(name, "0.1.0", parent),
            Some(other) => return Err(Error::InvalidConfig(format!("unknown mode {other:?}"))),
        };
        for related in &config.related {
            manifest = match related.as_str() {
                "secrets-everywhere" => manifest.related(
                    cluster("", "v1", "Secret", "secrets"),
                    &[("kubeplug-test/steal", LabelValue::Literal("yes".into()))],
                ),
                "secrets" => manifest.related(
                    Resource::of::<Secret>(),
                    &[("kubeplug-test/steal", LabelValue::Literal("yes".into()))],
                ),
                "pods" => manifest.related(
                    Resource::of::<Pod>(),
                    &[("app", LabelValue::Literal("hostile".into()))],
                ),
                other => {
                    return Err(Error::InvalidConfig(format!(
                        "unknown related kind {other:?}"
                    )));
                }
            };
        }
        manifest = manifest.namespaces(config.namespaces.iter().cloned());
        if config.admission {
            manifest = manifest.validates().mutates();
        }
        if config.convert.is_some() {
            manifest = manifest.converts();
        }
        Ok(match config.finalizer.name() {
            Some(finalizer) => manifest.finalizer(finalizer),
            None => manifest,
        })
    }

    fn reconcile(ctx: &Context<Config>) -> Result<Response, Error> {
        let behave = ctx
            .config
            .behave
            .as_deref()
            .or(ctx.parent["spec"]["behave"].as_str())
            .unwrap_or("ok");
        let name = ctx.name();
        match behave {
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "panic" => panic!("hostile plugin asked to panic"),
            "error" => Err(Error::Failed("hostile plugin asked to fail".into())),
            "malformed" => Ok(Response::default().child_json("{not json")),
            "undeclared" => {
                let mut secret = Secret::default();
                secret.metadata.name = Some(format!("{name}-smuggled"));
                Response::default().child(&secret)
            }
            "cluster-child" => Ok(cluster_children(ctx)),
            "adopt" => {
                let target = ctx.parent["spec"]["target"]
                    .as_str()
                    .ok_or_else(|| Error::InvalidInput("adopt needs spec.target".into()))?;
                Response::default().child(&config_map(target, [("adopted", "yes".into())]))
            }
            "steal" => steal(ctx),
            "copy" => copy(ctx),
            "label-from" => label_from(ctx),
            "events" => {
                let mut response = ok(ctx)?.requeue_after(0);
                for i in 0..count(ctx, "count", 1000) {
                    response = response.event(Event::normal("Flood", format!("event {i}")));
                }
                Ok(response)
            }
            "children" => {
                let mut response = Response::default();
                for i in 0..count(ctx, "count", 2000) {
                    response = response.child(&config_map(&format!("{name}-{i}"), []))?;
                }
                Ok(response)
            }
            "status-bomb" => {
                let blob = "x".repeat(count(ctx, "bytes", 8 << 20) as usize);
                ok(ctx)?.status(&json!({ "blob": blob }))
            }
            "log-bomb" => {
                let blob = "x".repeat(1 << 20);
                for _ in 0..count(ctx, "count", 1000) {
                    kubeplug_sdk::log::info("flood", &[("blob", &blob)]);
                }
                ok(ctx)
            }
            "spawn" => Ok(ok(ctx)?.child_json(
                json!({
                    "apiVersion": "test.kubeplug.io/v2",
                    "kind": "Hostile",
                    "metadata": { "name": format!("{name}-spawn") },
                    "spec": { "behave": "spawn" },
                })
                .to_string(),
            )),
            "reserved" => Ok(Response::default()
                .label("kubeplug.io/plugin", "database")
                .label("pod-template-hash", "abc")
                .annotation("kubectl.kubernetes.io/last-applied-configuration", "{}")),
            "decorate" => Ok(Response::default().annotation("example.com/decorated", "true")),
            // Blocking and memory (see the module docs).
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(count(ctx, "seconds", 3600)));
                ok(ctx)
            }
            "hold" => {
                hold(count(ctx, "mib", 120), count(ctx, "ms", 500));
                // Nothing to write: valid for a decorator too.
                Ok(Response::default())
            }
            "marker" => {
                let pages = memory_pages();
                let seen = MARKER.swap(count(ctx, "write", 99) as u32, Ordering::Relaxed);
                let heap = vec![0xa5u8; (count(ctx, "mib", 4) << 20) as usize];
                std::hint::black_box(&heap);
                Response::default().child(&config_map(
                    &format!("{name}-seen-{seen}-pages-{pages}"),
                    [],
                ))
            }
            "log-fields" => {
                let fields = vec![("", ""); count(ctx, "count", 1_500_000) as usize];
                kubeplug_sdk::log::info("fields", &fields);
                ok(ctx)
            }
            "secret-child" => {
                let mut secret = Secret::default();
                secret.metadata.name = Some(format!("{name}-made"));
                secret.string_data = Some(BTreeMap::from([("k".into(), "v".into())]));
                ok(ctx)?.child(&secret)
            }
            // --- Answer fence (issue 21, class 5): children's finalizers. ---
            "foreign-finalizer" => {
                let finalizer = ctx.parent["spec"]["finalizer"]
                    .as_str()
                    .unwrap_or("example.com/never");
                let mut cm = config_map(&format!("{name}-ok"), []);
                cm.metadata.finalizers = Some(vec![finalizer.into()]);
                Response::default().child(&cm)
            }
            // --- end of the answer-fence block ---
            // A decorator that leaves its parents alone (its webhooks are
            // under test).
            "nothing" => Ok(Response::default()),
            "inventory" => {
                for object in &ctx.related {
                    let at = |field: &str| object["metadata"][field].as_str().unwrap_or("-");
                    kubeplug_sdk::log::info(
                        "handed",
                        &[("namespace", at("namespace")), ("name", at("name"))],
                    );
                }
                Ok(Response::default())
            }
            _ => ok(ctx),
        }
    }

    fn validate(request: &AdmissionRequest<Config>) -> Result<Verdict, Error> {
        webhooks::validate(request)
    }

    fn mutate(request: &AdmissionRequest<Config>) -> Result<Option<Value>, Error> {
        webhooks::mutate(request)
    }

    fn convert(
        objects: Vec<Value>,
        api_version: &str,
        config: &Config,
    ) -> Result<Vec<Value>, Error> {
        webhooks::convert(objects, api_version, config)
    }

    fn finalize(ctx: &Context<Config>) -> Result<FinalizeResponse, Error> {
        if ctx.parent["spec"]["finalize"] == "sleep" {
            std::thread::sleep(std::time::Duration::from_secs(count(ctx, "seconds", 3600)));
        }
        if ctx.parent["metadata"]["annotations"][RELEASE] == "true" {
            return Ok(FinalizeResponse::done());
        }
        match ctx.parent["spec"]["finalize"].as_str().unwrap_or_default() {
            // --- Answer fence (issue 21, class 5): a finalize that floods. ---
            "events" => {
                kubeplug_sdk::log::info("finalize flood", &[]);
                let mut response = FinalizeResponse::pending(0);
                for i in 0..count(ctx, "count", 5000) {
                    response = response.event(Event::normal("FinalizeFlood", format!("event {i}")));
                }
                Ok(response)
            }
            // --- end of the answer-fence block ---
            _ => Ok(FinalizeResponse::pending(1)),
        }
    }
}

/// The guest memory's size in Wasm pages (0 when not built for Wasm).
fn memory_pages() -> usize {
    #[cfg(target_arch = "wasm32")]
    return core::arch::wasm32::memory_size(0);
    #[cfg(not(target_arch = "wasm32"))]
    return 0;
}

/// `hold`: fill `mib` MiB of memory and keep it for `ms` milliseconds (in
/// `reconcile`, `validate` and `mutate` alike).
fn hold(mib: u64, ms: u64) {
    let hoard = vec![7u8; (mib << 20) as usize];
    std::hint::black_box(&hoard);
    std::thread::sleep(std::time::Duration::from_millis(ms));
    std::hint::black_box(&hoard);
}

/// `spec.<key>` as a count, or `default` when absent or not a number.
fn count(ctx: &Context<Config>, key: &str, default: u64) -> u64 {
    ctx.parent["spec"][key].as_u64().unwrap_or(default)
}

fn config_map<const N: usize>(name: &str, data: [(&str, String); N]) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    if N > 0 {
        cm.data = Some(data.into_iter().map(|(k, v)| (k.into(), v)).collect());
    }
    cm
}

/// A response with just the ok ConfigMap `<name>-ok`.
fn ok(ctx: &Context<Config>) -> Result<Response, Error> {
    Response::default().child(&config_map(&format!("{}-ok", ctx.name()), []))
}

/// `cluster-child`: a cluster-admin binding, a Namespace and a fail-closed
/// webhook that denies every write.
fn cluster_children(ctx: &Context<Config>) -> Response {
    let name = ctx.name();
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": { "name": format!("{name}-escalate") },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": "default",
            "namespace": ctx.namespace(),
        }],
    });
    let namespace = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": format!("{name}-ns") },
    });
    let webhook = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": format!("{name}-webhook") },
        "webhooks": [{
            "name": "deny.test.kubeplug.io",
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "clientConfig": { "url": "https://127.0.0.1:1/deny" },
            "rules": [{
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": ["*"],
                "apiVersions": ["*"],
                "resources": ["*"],
            }],
        }],
    });
    Response::default()
        .child_json(binding.to_string())
        .child_json(namespace.to_string())
        .child_json(webhook.to_string())
}

/// `steal`: copy every related object's `data` into a ConfigMap and list
/// what was taken in the status.
fn steal(ctx: &Context<Config>) -> Result<Response, Error> {
    let mut data = BTreeMap::new();
    let mut loot = Vec::new();
    for object in &ctx.related {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let object_name = object["metadata"]["name"].as_str().unwrap_or_default();
        let key_namespace = if namespace.is_empty() { "_" } else { namespace };
        let text = serde_json::to_string(&object["data"])
            .map_err(|e| Error::Failed(format!("cannot serialize data: {e}")))?;
        data.insert(format!("{key_namespace}.{object_name}"), text);
        loot.push(Value::String(format!("{namespace}/{object_name}")));
    }
    let mut cm = config_map(&format!("{}-loot", ctx.name()), []);
    cm.data = Some(data);
    Response::default()
        .child(&cm)?
        .status(&json!({ "loot": loot }))
}

/// Every value of the related objects' `data`, decoded from base64 when it
/// is.
fn handed_values(ctx: &Context<Config>) -> Vec<String> {
    use base64::Engine as _;
    let mut values = Vec::new();
    for object in &ctx.related {
        for value in object["data"]
            .as_object()
            .into_iter()
            .flat_map(|d| d.values())
        {
            let Some(text) = value.as_str() else { continue };
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(text)
                .ok()
                .and_then(|d| String::from_utf8(d).ok());
            values.push(decoded.unwrap_or_else(|| text.to_string()));
        }
    }
    values
}

fn copy(ctx: &Context<Config>) -> Result<Response, Error> {
    ok(ctx)?.status(&json!({ "copied": handed_values(ctx) }))
}

/// `label-from`: the handed values as label keys of the ok ConfigMap and as
/// status keys.
fn label_from(ctx: &Context<Config>) -> Result<Response, Error> {
    let values = handed_values(ctx);
    let mut cm = config_map(&format!("{}-ok", ctx.name()), []);
    cm.metadata.labels = Some(
        values
            .iter()
            .map(|v| (v.clone(), "handed".to_string()))
            .collect(),
    );
    let status: serde_json::Map<String, Value> = values
        .into_iter()
        .map(|v| (v, Value::from("handed")))
        .collect();
    Response::default().child(&cm)?.status(&status)
}

kubeplug_sdk::export_plugin!(Hostile);
