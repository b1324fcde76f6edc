//! A loaded plugin and the calls into it: one fresh `Store` per call.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::answer::{
    AnswerBytes, api_resource, events, guest_error, host_manifest, parse_response,
};
use super::bindings::{self, types};
use super::budget::{MemoryBudget, Reservation};
use super::cache::Origin;
use super::error::{CallError, LoadError};
use super::guest_log::{LogQuota, Logs};
use super::limits::Limiter;
use super::pool::Slot;
use super::reaper::Reaper;
use super::timings::{Clock, Stage};
use kubeplug_core::contract::{Desired, Finalized, Limits, Request};
use kubeplug_core::manifest::{self, Manifest};

mod call;
mod references;
mod webhook;

/// How much of a guest's stderr (where Rust panics print) is kept per call.
const STDERR_CAPTURE: usize = 16 << 10;

/// Per-call host state, owned by the call's `Store`.
pub struct State {
    /// Built at the guest's first WASI call: the SDK's plugins import no
    /// WASI, and building a context (clocks, random, pipes) for every call
    /// would be a cost they never use.
    wasi: Option<Wasi>,
    table: ResourceTable,
    limiter: Limiter,
    /// `wasi:http`, refusing every request ([`super::network`]).
    http: super::network::Http,
    pub(super) plugin: Arc<str>,
    /// What this call may still log.
    log: LogQuota,
    /// The call's last error-level log line (as kept by the log budget):
    /// reported with a trap, since a guest without WASI (the SDK's builds)
    /// sends its panic message there rather than to stderr.
    pub(super) last_error: Option<String>,
    /// Where the call's time goes (`timings`; nothing without the feature).
    clock: Clock,
}

impl Logs for State {
    fn plugin(&self) -> &str {
        &self.plugin
    }

    fn log_quota(&mut self) -> &mut LogQuota {
        &mut self.log
    }

    fn set_last_error(&mut self, message: String) {
        self.last_error = Some(message);
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi.get_or_insert_with(Wasi::new).ctx,
            table: &mut self.table,
        }
    }
}

/// A call's WASI: no files, no environment, no network, stderr captured
/// (where a Rust panic prints under WASI) for the trap's report.
struct Wasi {
    ctx: WasiCtx,
    stderr: MemoryOutputPipe,
}

impl Wasi {
    fn new() -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let ctx = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Wasi { ctx, stderr }
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

/// What a call holds once its answer is lifted, handed to the reaper
/// ([`super::reaper`]) and dropped there in field order: the Store (the
/// slot's reset), then the memory reservation, then the pool slot, so that
/// neither is given back before the reset is done.
pub(super) struct Spent {
    _store: Store<State>,
    _reservation: Option<Reservation>,
    _slot: Option<Slot>,
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
    /// The host-wide budget every call of this plugin is charged against.
    pub budget: Arc<MemoryBudget>,
    /// The pool's slots a call takes one of; `None` when not pooling.
    pub slots: Option<Arc<super::pool::Slots>>,
    /// Where a call's spent Store is dropped (inline by default; see
    /// `pool::Tuning::reset_off_path`).
    pub reaper: Arc<Reaper<Spent>>,
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
    /// The optional exports (`validate`, `mutate`, `convert`), if the
    /// component has them.
    validate: Option<wasmtime::component::ComponentExportIndex>,
    mutate: Option<wasmtime::component::ComponentExportIndex>,
    convert: Option<wasmtime::component::ComponentExportIndex>,
    /// `references` of the optional `references` export, if it has it.
    references: Option<wasmtime::component::ComponentExportIndex>,
    /// The plugin's name for errors and logs (from its manifest once known).
    name: Arc<str>,
    epoch_tick: Duration,
    /// About the most memory a recent call used: what the next call
    /// reserves of the budget before it instantiates.
    high_water: AtomicUsize,
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
        let optional = |interface: &str, name: &str| {
            let component = loaded.pre.instance_pre().component();
            component
                .get_export_index(None, interface)
                .and_then(|i| component.get_export_index(Some(&i), name))
        };
        let validate = optional(bindings::ADMISSION_EXPORT, "validate");
        let mutate = optional(bindings::ADMISSION_EXPORT, "mutate");
        let convert = optional(bindings::CONVERSION_EXPORT, "convert");
        let references = optional(bindings::REFERENCES_EXPORT, "references");
        let mut caller = Caller {
            loaded,
            reconcile,
            finalize,
            validate,
            mutate,
            convert,
            references,
            name: Arc::from(label.as_str()),
            epoch_tick,
            high_water: AtomicUsize::new(0),
        };
        let config = caller.loaded.config.clone();
        let limits = caller.loaded.limits;
        let manifest = caller
            .call(limits, async |store, guest| {
                guest
                    .kubeplug_plugin_reconciler()
                    .call_manifest(store, &config)
                    .await
            })
            .and_then(|r| {
                r.map_err(|e| CallError::Guest {
                    plugin: label.clone(),
                    error: guest_error(e),
                })
            })
            .map_err(|e| match e {
                CallError::Instantiate { message, .. } => LoadError::DoesNotFit(message),
                e => LoadError::Manifest(e),
            })?;
        let mut manifest = host_manifest(manifest);
        manifest.metadata_only = caller
            .metadata_only(limits, &config)
            .map_err(LoadError::Manifest)?;
        manifest.webhooks = caller
            .offered(limits, &config)
            .map_err(LoadError::Manifest)?;
        manifest.references = caller
            .reference_kinds(limits, &config)
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

    /// Call `export` with `params` on a fresh instance within `limits`;
    /// the guest's own error is typed.
    ///
    /// The answer is copied out of the guest by wasmtime as the call
    /// returns (the guest frees its side right after), so it is at most as
    /// big as the guest's memory; before the call's memory is given back,
    /// the copy is charged against the host's budget too, then checked
    /// against the plugin's quotas before any of it is parsed.
    fn call_export<P, T>(
        &self,
        export: &wasmtime::component::ComponentExportIndex,
        params: P,
        limits: Limits,
        count: impl FnOnce(&T) -> Result<(), String>,
    ) -> Result<T, CallError>
    where
        P: wasmtime::component::ComponentNamedList + wasmtime::component::Lower + Send + Sync,
        T: wasmtime::component::ComponentType
            + wasmtime::component::Lift
            + AnswerBytes
            + Send
            + Sync
            + 'static,
    {
        let over = |what: String| CallError::OverQuota {
            plugin: self.name().into(),
            what,
        };
        let answer = self.inner.caller.run(limits, async |store, instance| {
            let func =
                instance.get_typed_func::<P, (Result<T, types::Error>,)>(&mut *store, export)?;
            store.data_mut().clock.lap(Stage::Export);
            let (answer,) = func.call_async(&mut *store, params).await?;
            let bytes = match &answer {
                Ok(t) => t.bytes(),
                Err(e) => e.bytes(),
            };
            store.data_mut().limiter.hold_copy(bytes)?;
            Ok(answer)
        })?;
        let answer = answer.map_err(|e| CallError::Guest {
            plugin: self.name().into(),
            error: guest_error(e),
        })?;
        count(&answer).map_err(over)?;
        let bytes = answer.bytes();
        if bytes > limits.response_bytes {
            return Err(over(format!(
                "an answer of {bytes} bytes (quota {})",
                limits.response_bytes
            )));
        }
        Ok(answer)
    }

    /// Decide the desired state for one parent.
    pub fn reconcile(&self, request: &Request) -> Result<Desired, CallError> {
        let children = self.limits().children;
        let response: types::Response = self.call_export(
            &self.inner.caller.reconcile,
            (self.wit_request(request),),
            self.limits(),
            |r: &types::Response| {
                if r.children.len() > children {
                    return Err(format!("{} children (quota {children})", r.children.len()));
                }
                Ok(())
            },
        )?;
        parse_response(response).map_err(|reason| CallError::Malformed {
            plugin: self.name().into(),
            reason,
        })
    }

    /// Ask the plugin to clean up for a parent being deleted.
    pub fn finalize(&self, request: &Request) -> Result<Finalized, CallError> {
        let r: types::FinalizeResponse = self.call_export(
            &self.inner.caller.finalize,
            (self.wit_request(request),),
            self.limits(),
            |_| Ok(()),
        )?;
        Ok(Finalized {
            done: r.done,
            requeue_after: r
                .requeue_after_seconds
                .map(|s| Duration::from_secs(s.into())),
            events: events(r.events),
        })
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
        self.kinds(limits, config, bindings::READS_EXPORT, "metadata-only")
    }

    /// The kinds an optional export's `function(config)` lists (`reads`'
    /// `metadata-only`, `references`' `kinds`); none without the export.
    pub(super) fn kinds(
        &self,
        limits: Limits,
        config: &str,
        export: &str,
        function: &str,
    ) -> Result<Vec<manifest::ApiResource>, CallError> {
        let component = self.loaded.pre.instance_pre().component();
        let Some(export) = component
            .get_export_index(None, export)
            .and_then(|i| component.get_export_index(Some(&i), function))
        else {
            return Ok(Vec::new());
        };
        let kinds = self.run(limits, async |store, instance| {
            let call = instance
                .get_typed_func::<(&str,), (Vec<types::ApiResource>,)>(&mut *store, &export)?;
            Ok(call.call_async(&mut *store, (config,)).await?.0)
        })?;
        Ok(kinds.into_iter().map(api_resource).collect())
    }
}
