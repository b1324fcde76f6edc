//! A loaded plugin and the calls into it: one fresh `Store` per call.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{self, log, types};
use super::cache::Origin;
use super::error::{CallError, GuestError, LoadError};
use super::limits::{Limiter, Limits};
use crate::manifest::{self, Manifest};

/// How much of a guest's stderr (where Rust panics print) is kept per call.
const STDERR_CAPTURE: usize = 16 << 10;
/// Log calls a guest may make per call; the rest are dropped, so a chatty or
/// hostile plugin cannot flood the host's logs. Bytes are capped too
/// ([`Limits::log_bytes`]).
const LOG_BUDGET: u32 = 200;
/// Longest log message or field value kept, in bytes.
const LOG_MESSAGE_MAX: usize = 4 << 10;

/// Per-call host state, owned by the call's `Store`.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    /// `wasi:http`, refusing every request ([`super::network`]).
    http: super::network::Http,
    plugin: Arc<str>,
    log_budget: u32,
    /// Log bytes this call may still write.
    log_bytes: usize,
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn clipped(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wasmtime_wasi_http::WasiHttpView for State {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http.ctx,
            table: &mut self.table,
            hooks: &mut self.http.hooks,
        }
    }
}

impl types::Host for State {}

impl log::Host for State {
    fn log(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) {
        if self.log_budget == 0 || self.log_bytes == 0 {
            return;
        }
        self.log_budget -= 1;
        let message = clipped(&message, LOG_MESSAGE_MAX.min(self.log_bytes)).to_string();
        self.log_bytes -= message.len();
        let mut shown = Vec::with_capacity(fields.len());
        for (k, v) in &fields {
            let k = clipped(k, self.log_bytes);
            self.log_bytes -= k.len();
            let v = clipped(v, LOG_MESSAGE_MAX.min(self.log_bytes));
            self.log_bytes -= v.len();
            shown.push(format!("{k}={v}"));
        }
        if self.log_bytes == 0 {
            shown.push("(log quota of this call reached; the rest is dropped)".into());
        }
        let fields = shown.join(" ");
        let plugin = &*self.plugin;
        match level {
            log::Level::Trace => tracing::trace!(target: "plugin", plugin, fields, "{message}"),
            log::Level::Debug => tracing::debug!(target: "plugin", plugin, fields, "{message}"),
            log::Level::Info => tracing::info!(target: "plugin", plugin, fields, "{message}"),
            log::Level::Warn => tracing::warn!(target: "plugin", plugin, fields, "{message}"),
            log::Level::Error => tracing::error!(target: "plugin", plugin, fields, "{message}"),
        }
    }
}

/// What the runtime hands to [`Plugin::new`].
pub(super) struct Loaded {
    pub engine: Engine,
    pub pre: bindings::PluginPre<State>,
    pub digest: String,
    pub size: usize,
    pub origin: Origin,
    pub load_time: Duration,
    pub config: String,
    pub limits: Limits,
    /// Kept so that deadlines keep firing while the plugin lives.
    pub _ticker: Arc<super::EpochTicker>,
    /// Kept so that another load of the same bytes shares the compiled
    /// code while this plugin lives (`runtime::share`).
    pub _component: Arc<wasmtime::component::Component>,
}

/// Runs calls into one loaded component.
struct Caller {
    loaded: Loaded,
    /// The guest's `reconcile` and `finalize` exports, found once.
    reconcile: wasmtime::component::ComponentExportIndex,
    finalize: wasmtime::component::ComponentExportIndex,
    /// The plugin's name for errors and logs (from its manifest once known).
    name: Arc<str>,
    epoch_tick: Duration,
}

struct Inner {
    caller: Arc<Caller>,
    manifest: Manifest,
    limits: Limits,
}

/// A loaded, validated plugin. Cheap to clone; calls may run concurrently.
#[derive(Clone)]
pub struct Plugin {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.inner.manifest.name)
            .field("version", &self.inner.manifest.version)
            .field("digest", &self.inner.caller.loaded.digest)
            .finish()
    }
}

/// Everything the host observed for one parent, as JSON text. The texts
/// are shared with the informer caches (one serialization per object and
/// resourceVersion) and lowered into the guest straight from there.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub parent: Arc<str>,
    pub observed: Vec<Arc<str>>,
    pub related: Vec<Arc<str>>,
    /// RFC 3339 UTC.
    pub now: String,
    pub entropy: Vec<u8>,
}

/// `wit/plugin.wit`'s `request`, borrowing every text: lowering it copies
/// each string once, into guest memory, and nowhere else. (The generated
/// `types::Request` owns its strings, which would mean copying each cached
/// object once more per call.)
#[derive(wasmtime::component::ComponentType, wasmtime::component::Lower)]
#[component(record)]
struct WitRequest<'a> {
    parent: &'a str,
    observed: &'a [Arc<str>],
    related: &'a [Arc<str>],
    config: &'a str,
    now: &'a str,
    entropy: &'a [u8],
}

impl Request {
    /// A request stamped with the current time and fresh entropy.
    pub fn new(parent: Arc<str>, observed: Vec<Arc<str>>, related: Vec<Arc<str>>) -> Self {
        Request {
            parent,
            observed,
            related,
            now: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            entropy: rand::random::<[u8; 32]>().to_vec(),
        }
    }
}

/// A Kubernetes Event the plugin asked for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Event {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// Labels and annotations to merge into the parent.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetadataPatch {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A plugin's answer to `reconcile`, parsed.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Desired {
    /// Each is a JSON object with `apiVersion`, `kind` and `metadata.name`.
    pub children: Vec<Value>,
    pub status: Option<Value>,
    pub parent_patch: Option<MetadataPatch>,
    #[serde(skip)]
    pub requeue_after: Option<Duration>,
    pub events: Vec<Event>,
}

/// A plugin's answer to `finalize`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finalized {
    pub done: bool,
    pub requeue_after: Option<Duration>,
    pub events: Vec<Event>,
}

fn events(events: Vec<types::Event>) -> Vec<Event> {
    events
        .into_iter()
        .map(|e| Event {
            warning: e.warning,
            reason: e.reason,
            message: e.message,
        })
        .collect()
}

fn guest_error(e: types::Error) -> GuestError {
    match e {
        types::Error::InvalidConfig(m) => GuestError::InvalidConfig(m),
        types::Error::InvalidInput(m) => GuestError::InvalidInput(m),
        types::Error::Failed(m) => GuestError::Failed(m),
    }
}

fn api_resource(r: types::ApiResource) -> manifest::ApiResource {
    manifest::ApiResource {
        group: r.group,
        version: r.version,
        kind: r.kind,
        plural: r.plural,
        namespaced: r.namespaced,
    }
}

fn host_manifest(m: types::PluginManifest) -> Manifest {
    Manifest {
        name: m.name,
        version: m.version,
        parent: api_resource(m.parent),
        mode: match m.mode {
            types::Mode::Composite => manifest::Mode::Composite,
            types::Mode::Decorator => manifest::Mode::Decorator,
        },
        children: m.children.into_iter().map(api_resource).collect(),
        related: m
            .related
            .into_iter()
            .map(|r| manifest::Related {
                resource: api_resource(r.resource),
                match_labels: r
                    .match_labels
                    .into_iter()
                    .map(|l| {
                        let value = match l.value {
                            types::LabelValue::Literal(s) => manifest::LabelValue::Literal(s),
                            types::LabelValue::ParentName => manifest::LabelValue::ParentName,
                        };
                        (l.key, value)
                    })
                    .collect(),
            })
            .collect(),
        namespaces: m.namespaces,
        finalizer: m.finalizer,
        resync_seconds: m.resync_seconds,
        excluded_namespaces: Vec::new(),
        metadata_only: Vec::new(),
    }
}

/// Parse one child: a JSON object that names its type and itself.
fn parse_child(index: usize, text: &str) -> Result<Value, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("child #{index} is not JSON: {e}"))?;
    let Value::Object(_) = &value else {
        return Err(format!("child #{index} is not a JSON object"));
    };
    for field in ["apiVersion", "kind"] {
        if value[field].as_str().is_none_or(str::is_empty) {
            return Err(format!("child #{index} has no {field}"));
        }
    }
    if value["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        return Err(format!("child #{index} has no metadata.name"));
    }
    Ok(value)
}

fn parse_response(r: types::Response) -> Result<Desired, String> {
    let children = r
        .children
        .iter()
        .enumerate()
        .map(|(i, c)| parse_child(i, c))
        .collect::<Result<Vec<_>, _>>()?;
    let status = match r.status {
        None => None,
        Some(text) => {
            let v: Value =
                serde_json::from_str(&text).map_err(|e| format!("status is not JSON: {e}"))?;
            if !v.is_object() {
                return Err("status is not a JSON object".into());
            }
            Some(v)
        }
    };
    Ok(Desired {
        children,
        status,
        parent_patch: r.parent_patch.map(|p| MetadataPatch {
            labels: p.labels.into_iter().collect(),
            annotations: p.annotations.into_iter().collect(),
        }),
        requeue_after: r
            .requeue_after_seconds
            .map(|s| Duration::from_secs(s.into())),
        events: events(r.events),
    })
}

impl Plugin {
    /// Call `manifest()` and validate the answer; the plugin exists only if
    /// both succeed.
    pub(super) fn new(
        label: String,
        loaded: Loaded,
        epoch_tick: Duration,
    ) -> Result<Self, LoadError> {
        let export = |name: &str| {
            let component = loaded.pre.instance_pre().component();
            let interface = component.get_export_index(None, bindings::RECONCILER_EXPORT);
            component
                .get_export_index(interface.as_ref(), name)
                .expect("PluginPre checked the component's exports")
        };
        let (reconcile, finalize) = (export("reconcile"), export("finalize"));
        let mut caller = Caller {
            loaded,
            reconcile,
            finalize,
            name: Arc::from(label.as_str()),
            epoch_tick,
        };
        let config = caller.loaded.config.clone();
        let limits = caller.loaded.limits;
        let manifest = caller
            .call(limits, |store, guest| {
                guest
                    .kubeplug_plugin_reconciler()
                    .call_manifest(store, &config)
            })
            .and_then(|r| {
                r.map_err(|e| CallError::Guest {
                    plugin: label.clone(),
                    error: guest_error(e),
                })
            })
            .map_err(LoadError::Manifest)?;
        let mut manifest = host_manifest(manifest);
        manifest.metadata_only = caller
            .metadata_only(limits, &config)
            .map_err(LoadError::Manifest)?;
        manifest.validate().map_err(LoadError::InvalidManifest)?;
        caller.name = Arc::from(manifest.name.as_str());
        Ok(Plugin {
            inner: Arc::new(Inner {
                caller: Arc::new(caller),
                manifest,
                limits,
            }),
        })
    }

    /// The same component as the host admitted it: the manifest with scopes
    /// and plurals from API discovery and namespaces narrowed to the grant,
    /// and the limits of the grant's quotas.
    pub fn admitted(&self, manifest: Manifest, limits: Limits) -> Plugin {
        Plugin {
            inner: Arc::new(Inner {
                caller: self.inner.caller.clone(),
                manifest,
                limits,
            }),
        }
    }

    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    /// True if `other` is this very plugin as admitted (not merely the same
    /// file loaded again).
    pub fn same(&self, other: &Plugin) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub fn name(&self) -> &str {
        &self.inner.manifest.name
    }

    /// SHA-256 of the `.wasm` bytes, hex.
    pub fn digest(&self) -> &str {
        &self.inner.caller.loaded.digest
    }

    /// Size of the `.wasm` file in bytes.
    pub fn size(&self) -> usize {
        self.inner.caller.loaded.size
    }

    /// Whether the component was compiled now or loaded precompiled.
    pub fn origin(&self) -> Origin {
        self.inner.caller.loaded.origin
    }

    /// Time spent compiling or deserializing the component.
    pub fn load_time(&self) -> Duration {
        self.inner.caller.loaded.load_time
    }

    pub fn limits(&self) -> Limits {
        self.inner.limits
    }

    /// The configuration document every call gets, as the JSON text the
    /// runtime made of [`super::PluginOptions::config`].
    pub fn config(&self) -> &str {
        &self.inner.caller.loaded.config
    }

    fn wit_request<'a>(&'a self, request: &'a Request) -> WitRequest<'a> {
        WitRequest {
            parent: &request.parent,
            observed: &request.observed,
            related: &request.related,
            config: &self.inner.caller.loaded.config,
            now: &request.now,
            entropy: &request.entropy,
        }
    }

    /// Call the guest's `export` (`reconcile` or `finalize`) with
    /// `request` on a fresh instance; the guest's own error is typed.
    fn call_with<T>(
        &self,
        export: &wasmtime::component::ComponentExportIndex,
        request: &Request,
    ) -> Result<T, CallError>
    where
        T: wasmtime::component::ComponentType + wasmtime::component::Lift,
    {
        let params = self.wit_request(request);
        let answer = self.inner.caller.run(self.limits(), |store, instance| {
            let func = instance.get_typed_func::<(WitRequest<'_>,), (Result<T, types::Error>,)>(
                &mut *store,
                export,
            )?;
            Ok(func.call(store, (params,))?.0)
        })?;
        answer.map_err(|e| self.guest(e))
    }

    /// Decide the desired state for one parent.
    pub fn reconcile(&self, request: &Request) -> Result<Desired, CallError> {
        let response: types::Response = self.call_with(&self.inner.caller.reconcile, request)?;
        self.check_size(&response)?;
        parse_response(response).map_err(|reason| CallError::Malformed {
            plugin: self.name().into(),
            reason,
        })
    }

    /// Ask the plugin to clean up for a parent being deleted.
    pub fn finalize(&self, request: &Request) -> Result<Finalized, CallError> {
        let r: types::FinalizeResponse = self.call_with(&self.inner.caller.finalize, request)?;
        Ok(Finalized {
            done: r.done,
            requeue_after: r
                .requeue_after_seconds
                .map(|s| Duration::from_secs(s.into())),
            events: events(r.events),
        })
    }

    /// Refuse an answer over the size quotas before parsing any of it: the
    /// JSON parse, not the copy out of the guest, is what costs the host.
    fn check_size(&self, r: &types::Response) -> Result<(), CallError> {
        let limits = self.limits();
        let over = |what: String| CallError::OverQuota {
            plugin: self.name().into(),
            what,
        };
        if r.children.len() > limits.children {
            return Err(over(format!(
                "{} children (quota {})",
                r.children.len(),
                limits.children
            )));
        }
        let patch = r.parent_patch.as_ref().map_or(0, |p| {
            p.labels
                .iter()
                .chain(&p.annotations)
                .map(|(k, v)| k.len() + v.len())
                .sum()
        });
        let bytes = r.children.iter().map(String::len).sum::<usize>()
            + r.status.as_ref().map_or(0, String::len)
            + r.events
                .iter()
                .map(|e| e.reason.len() + e.message.len())
                .sum::<usize>()
            + patch;
        if bytes > limits.response_bytes {
            return Err(over(format!(
                "an answer of {bytes} bytes (quota {})",
                limits.response_bytes
            )));
        }
        Ok(())
    }

    fn guest(&self, e: types::Error) -> CallError {
        CallError::Guest {
            plugin: self.name().into(),
            error: guest_error(e),
        }
    }
}

impl Caller {
    /// The kinds the plugin reads only the metadata of, from its optional
    /// `reads` export (see `wit/plugin.wit`); none without the export.
    fn metadata_only(
        &self,
        limits: Limits,
        config: &str,
    ) -> Result<Vec<manifest::ApiResource>, CallError> {
        let component = self.loaded.pre.instance_pre().component();
        let Some(export) = component
            .get_export_index(None, bindings::READS_EXPORT)
            .and_then(|reads| component.get_export_index(Some(&reads), "metadata-only"))
        else {
            return Ok(Vec::new());
        };
        let kinds = self.run(limits, |store, instance| {
            let call = instance
                .get_typed_func::<(&str,), (Vec<types::ApiResource>,)>(&mut *store, &export)?;
            Ok(call.call(store, (config,))?.0)
        })?;
        Ok(kinds.into_iter().map(api_resource).collect())
    }

    /// Run `f` against a fresh instance through the generated bindings.
    fn call<R>(
        &self,
        limits: Limits,
        f: impl FnOnce(&mut Store<State>, &bindings::Plugin) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        self.run(limits, |store, instance| {
            let guest = bindings::Plugin::new(&mut *store, &instance)?;
            f(store, &guest)
        })
    }

    /// Run `f` against a fresh instance in a fresh `Store` with this plugin's
    /// limits, and classify any failure.
    fn run<R>(
        &self,
        limits: Limits,
        f: impl FnOnce(&mut Store<State>, wasmtime::component::Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let wasi = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let state = State {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter::new(limits),
            http: Default::default(),
            plugin: self.name.clone(),
            log_budget: LOG_BUDGET,
            log_bytes: limits.log_bytes,
        };
        let mut store = Store::new(&self.loaded.engine, state);
        store.limiter(|s| &mut s.limiter);
        let ticks = limits
            .timeout
            .as_nanos()
            .div_ceil(self.epoch_tick.as_nanos()) as u64;
        // +1: the current tick may be about to end.
        store.set_epoch_deadline(ticks + 1);
        store.epoch_deadline_trap();
        let result = self
            .loaded
            .pre
            .instance_pre()
            .instantiate(&mut store)
            .and_then(|instance| f(&mut store, instance));
        result.map_err(|error| {
            let plugin = self.name.to_string();
            if store.data().limiter.memory_cap_hit {
                return CallError::MemoryCap {
                    plugin,
                    limit_bytes: limits.memory_bytes,
                };
            }
            if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                return CallError::Deadline {
                    plugin,
                    timeout: limits.timeout,
                };
            }
            CallError::Trap {
                plugin,
                message: trap_message(&error, &stderr),
            }
        })
    }
}

/// The trap's cause plus what the guest printed (a Rust panic's message).
fn trap_message(error: &wasmtime::Error, stderr: &MemoryOutputPipe) -> String {
    let cause = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => error.root_cause().to_string(),
    };
    let printed = String::from_utf8_lossy(&stderr.contents())
        .trim()
        .to_string();
    if printed.is_empty() {
        cause
    } else {
        format!("{cause}; guest stderr: {printed}")
    }
}
