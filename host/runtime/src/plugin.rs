//! A loaded plugin and the calls into it: one fresh `Store` per call.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::answer::{
    AnswerBytes, api_resource, events, guest_error, host_manifest, parse_response,
};
use super::bindings::{self, types};
use super::budget::{MemoryBudget, Reservation, Short};
use super::cache::Origin;
use super::error::{CallError, LoadError};
use super::guest_log::{LogQuota, Logs};
use super::limits::Limiter;
use super::pool::Slot;
use super::reaper::Reaper;
use super::timings::{Clock, Stage};
use kubeplug_core::contract::{Desired, Finalized, Limits, Request};
use kubeplug_core::manifest::{self, Manifest};

mod references;
mod webhook;

/// How much of a guest's stderr (where Rust panics print) is kept per call.
const STDERR_CAPTURE: usize = 16 << 10;
/// How long a call waits for the host's memory budget before it gives up
/// (and is retried later like any transient failure).
const MEMORY_WAIT: Duration = Duration::from_secs(30);
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

/// What a call's store showed when it ended, for [`Plugin::classify`].
struct Ended {
    memory_cap_hit: bool,
    budget_short: Option<Short>,
    /// Whether the instance was made (a failure before is the host's).
    instantiated: bool,
    /// The guest's stderr, where a Rust panic prints.
    printed: Option<Vec<u8>>,
    /// The message the guest logged as its error before it trapped.
    last_error: Option<String>,
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

    /// Run `f` against a fresh instance through the generated bindings.
    fn call<R>(
        &self,
        limits: Limits,
        f: impl AsyncFnOnce(&mut Store<State>, &bindings::Plugin) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        self.run(limits, async |store, instance| {
            let guest = bindings::Plugin::new(&mut *store, &instance)?;
            f(store, &guest).await
        })
    }

    /// Run `f` against a fresh instance in a fresh `Store` with this plugin's
    /// limits, and classify any failure.
    ///
    /// Before it instantiates, the call reserves memory of the host's budget
    /// (about what the plugin's recent calls used; see [`super::budget`]).
    /// Its deadline holds inside host calls too: Wasm code is interrupted by
    /// the epoch, and a guest blocked in a host call (a `sleep`, a `poll`)
    /// is dropped when the deadline passes, so no call outlives it.
    fn run<R>(
        &self,
        limits: Limits,
        f: impl AsyncFnOnce(&mut Store<State>, wasmtime::component::Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let mut clock = Clock::start();
        // The deadline counts from here: the waits for memory and a slot are
        // the caller's time too (a webhook's timeout does not wait for them).
        let started = Instant::now();
        let (reservation, slot) = self.admit(limits, started, &mut clock)?;
        let timeout = limits.timeout.saturating_sub(started.elapsed());
        let mut store = self.store(limits, reservation, clock, timeout);
        let pre = self.loaded.pre.instance_pre();
        let mut instantiated = false;
        let outcome = block_on(async {
            tokio::time::timeout(timeout, async {
                let instance = pre.instantiate_async(&mut store).await?;
                instantiated = true;
                store.data_mut().clock.lap(Stage::Instantiate);
                let result = f(&mut store, instance).await;
                store.data_mut().clock.lap(Stage::Call);
                result
            })
            .await
        });
        // A grow the budget refused counts as used: the next call reserves
        // it up front and waits for it, instead of failing the same way.
        let limiter = &mut store.data_mut().limiter;
        let wanted = match limiter.budget_short {
            Some(Short::Grow { bytes }) => bytes,
            _ => 0,
        };
        self.remember_use(limiter.used().max(wanted));
        let ended = Ended {
            memory_cap_hit: limiter.memory_cap_hit,
            budget_short: limiter.budget_short.clone(),
            instantiated,
            printed: store
                .data()
                .wasi
                .as_ref()
                .map(|w| w.stderr.contents().to_vec()),
            last_error: store.data_mut().last_error.take(),
        };
        let reservation = store.data_mut().limiter.take_reservation();
        let mut clock = store.data().clock;
        // Trapped, timed out or answered alike: the reset is not the caller's.
        self.loaded.reaper.reap(Spent {
            _store: store,
            _reservation: reservation,
            _slot: slot,
        });
        clock.lap(Stage::Drop);
        match outcome {
            Ok(result) => result.map_err(|error| self.classify(limits, error, ended)),
            Err(_elapsed) => Err(CallError::Deadline {
                plugin: self.name.to_string(),
                timeout: limits.timeout,
            }),
        }
    }

    /// Memory of the host's budget, then an instance slot, for a call that
    /// started at `started`; refused when the waits leave the call less than
    /// half its deadline.
    fn admit(
        &self,
        limits: Limits,
        started: Instant,
        clock: &mut Clock,
    ) -> Result<(Reservation, Option<Slot>), CallError> {
        let plugin = || self.name.to_string();
        let left = || limits.timeout.saturating_sub(started.elapsed());
        // Memory first, then a slot: a call waiting for memory holds no
        // slot, so one plugin's calls queued for a large reservation never
        // keep the pool from another plugin's calls. (Those holding memory
        // go on to a slot, which only calls that run hold.)
        let reservation = self
            .loaded
            .budget
            .reserve(
                &self.name,
                self.high_water.load(Ordering::Relaxed),
                limits.memory_bytes,
                // Past half its deadline a call does not start (below), so
                // it waits no longer than that for memory.
                MEMORY_WAIT.min(limits.timeout / 2),
            )
            .map_err(|short| CallError::HostMemory {
                plugin: plugin(),
                reason: short_reason(&short),
            })?;
        clock.lap(Stage::Reserve);
        // Past half its deadline a call does not start (below): it waits
        // for a slot no longer than that, and gives its memory back then.
        let slot_wait = || left().saturating_sub(limits.timeout - limits.timeout / 2);
        let slot = match &self.loaded.slots {
            Some(slots) => Some(slots.take_for(&self.name, slot_wait()).map_err(|busy| {
                CallError::HostBusy {
                    plugin: plugin(),
                    reason: if busy.share {
                        format!(
                            "its share of the host's instance slots ({}) stayed busy for {:.0?}",
                            busy.slots, busy.waited
                        )
                    } else {
                        format!(
                            "all {} instance slots of the host stayed busy for {:.0?}",
                            busy.slots, busy.waited
                        )
                    },
                }
            })?),
            None => None,
        };
        clock.lap(Stage::Slot);
        if left() < limits.timeout / 2 {
            // The host's waits took most of the deadline: a call that ran
            // out of the rest would be blamed on the plugin, so it does not
            // start; the host was busy, not the plugin slow.
            return Err(CallError::HostBusy {
                plugin: plugin(),
                reason: format!(
                    "it waited {:.0?} of its {:.0?} deadline for memory and an instance slot",
                    started.elapsed(),
                    limits.timeout
                ),
            });
        }
        Ok((reservation, slot))
    }

    /// A fresh `Store` with this plugin's limits, holding `reservation`,
    /// whose epoch deadline falls `timeout` from now.
    fn store(
        &self,
        limits: Limits,
        reservation: Reservation,
        clock: Clock,
        timeout: Duration,
    ) -> Store<State> {
        let state = State {
            wasi: None,
            table: ResourceTable::new(),
            limiter: Limiter::new(limits, Some(reservation)),
            http: Default::default(),
            plugin: self.name.clone(),
            log: LogQuota::new(limits.log_bytes),
            last_error: None,
            clock,
        };
        let mut store = Store::new(&self.loaded.engine, state);
        store.limiter(|s| &mut s.limiter);
        let ticks = timeout.as_nanos().div_ceil(self.epoch_tick.as_nanos()) as u64;
        // +1: the current tick may be about to end.
        store.set_epoch_deadline(ticks + 1);
        store.epoch_deadline_trap();
        store.data_mut().clock.lap(Stage::Store);
        store
    }

    /// What a call that ended in `error` is reported as: the cause the host
    /// saw (a limit, the budget, the deadline) before the guest's trap.
    fn classify(&self, limits: Limits, error: wasmtime::Error, ended: Ended) -> CallError {
        let plugin = self.name.to_string();
        if ended.memory_cap_hit {
            return CallError::MemoryCap {
                plugin,
                limit_bytes: limits.memory_bytes,
            };
        }
        if let Some(short) = &ended.budget_short {
            return CallError::HostMemory {
                plugin,
                reason: short_reason(short),
            };
        }
        if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            return CallError::Deadline {
                plugin,
                timeout: limits.timeout,
            };
        }
        if !ended.instantiated && error.downcast_ref::<Trap>().is_none() {
            // The allocator or a limit refused the instance itself (e.g.
            // more core instances than a slot holds), before any guest code
            // ran.
            return CallError::Instantiate {
                plugin,
                message: format!("{error:#}"),
            };
        }
        CallError::Trap {
            plugin,
            message: trap_message(
                &error,
                ended.printed.as_deref(),
                ended.last_error.as_deref(),
            ),
        }
    }

    /// Keep about the most a recent call used (decaying, so that one big
    /// call does not make every later one reserve as much).
    fn remember_use(&self, used: usize) {
        let _ = self
            .high_water
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |seen| {
                Some(used.max(seen - seen / 4))
            });
    }
}

fn short_reason(short: &Short) -> String {
    match short {
        Short::Waited { bytes, waited } => format!(
            "the host's memory budget had no room for {bytes} bytes within {:.0?}",
            waited
        ),
        Short::Grow { bytes } => {
            format!("the host's memory budget could not cover {bytes} bytes at once")
        }
    }
}

/// Drive a call's future to its end on this thread. Calls run on blocking
/// threads of the host's runtime (or, offline, on no runtime at all);
/// wasmtime-wasi's host calls need a Tokio context for their timers.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread => {
            tokio::task::block_in_place(|| handle.block_on(future))
        }
        _ => wasmtime_wasi::runtime::in_tokio(future),
    }
}

/// The trap's cause plus what the guest printed (a Rust panic's message
/// under WASI) and its last error log (the SDK's panic message without WASI).
fn trap_message(
    error: &wasmtime::Error,
    stderr: Option<&[u8]>,
    last_error: Option<&str>,
) -> String {
    let mut message = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => error.root_cause().to_string(),
    };
    let printed = String::from_utf8_lossy(stderr.unwrap_or_default())
        .trim()
        .to_string();
    if !printed.is_empty() {
        message += &format!("; guest stderr: {printed}");
    }
    if let Some(logged) = last_error {
        message += &format!("; guest error log: {}", logged.trim());
    }
    message
}
