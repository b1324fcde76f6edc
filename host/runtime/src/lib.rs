//! The Wasm runtime: loads plugin components and calls them safely.
//!
//! Start with [`Runtime::load`], which turns `.wasm` bytes into a [`Plugin`],
//! and [`Plugin::reconcile`]. The shape follows wasmtime's component examples
//! and Spin's host:
//!
//! - one [`Engine`] per host, configured once (see [`engine_config`]);
//! - a component compiled once per digest, precompiled artefacts cached on
//!   disk ([`cache`]);
//! - an `InstancePre` per plugin, and a fresh `Store` for every call, so calls
//!   share no state, may run concurrently and leak nothing between parents;
//! - limits per call ([`Limits`]): a wall-clock deadline through epoch
//!   interruption, and memory/instance/table caps through a store limiter;
//! - instances from a pool of slots ([`pool`]) when the host runs plugins
//!   ([`Allocation::Pooling`]): still a fresh instance per call, without
//!   mapping its memory, tables and stack each time.
//!
//! Guest failures become a typed [`CallError`] naming the plugin and the
//! cause; nothing a plugin does can take the host process down.

// Unsafe code only where wasmtime requires it (`cache`, which loads
// precompiled components); every other crate forbids it.
#![deny(unsafe_code)]

mod answer;
mod atomic_write;
mod bindings;
pub mod budget;
#[allow(
    unsafe_code,
    reason = "loading a precompiled component is unsafe in wasmtime's API; see the module"
)]
mod cache;
pub mod compile;
mod error;
mod guest_log;
mod limits;
mod network;
mod plugin;
pub mod pool;
mod reaper;
mod share;
pub mod timings;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

pub use budget::{BudgetStats, MemoryBudget};
pub use cache::{CompileCache, DEFAULT_CACHE_BYTES, Origin};
pub use compile::Compiler;
pub use error::{CallError, GuestError, LoadError};
pub use network::NO_NETWORK;
pub use plugin::Plugin;
// The contract's plain data, re-exported: callers of the runtime name them here.
pub use kubeplug_core::contract::{
    CompileLimits, Desired, Event, Finalized, LimitSettings, Limits, MetadataPatch, Request,
};

use bindings::{RECONCILER_EXPORT, RECONCILER_INTERFACE};
use kubeplug_core::policy::Quotas;
use plugin::State;

/// The contract version this host speaks (`wit/plugin.wit`).
pub const CONTRACT: &str = "kubeplug:plugin@0.1.0";

/// How often the epoch advances. Deadlines are rounded up to this; 10 ms keeps
/// the ticker thread's cost negligible while making deadlines precise enough.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Compiles at once by default: two, so that one big guest (a Python or
/// JavaScript plugin compiles for 10–30 s) never holds another plugin's
/// compile up, while a burst cannot take more than two cores' worth of
/// compiler memory. `kubeplug run --compiles` sets it.
pub const DEFAULT_COMPILES: usize = 2;

/// How a plugin is run: its configuration document and its limits.
#[derive(Debug, Clone, Default)]
pub struct PluginOptions {
    /// JSON configuration passed to every call; `{}` when `None`.
    pub config: Option<serde_json::Value>,
    pub limits: Limits,
    /// Bounds on compiling it (enforced by [`Compiler::Subprocess`]).
    pub compile: CompileLimits,
    /// What to call the plugin in errors until its manifest names it (e.g.
    /// the file name).
    pub label: Option<String>,
}

/// The engine configuration every plugin runs under.
pub fn engine_config() -> Config {
    engine_config_for(Allocation::OnDemand)
}

/// How instances get their memories and tables.
///
/// `kubeplug-bench` measures both (docs/benchmarks/runtime.md). The pooling
/// allocator keeps slots mapped between calls instead of an mmap/munmap per
/// instance, at the price of reserving address space for every slot up front
/// (see [`pool`]). `kubeplug run` pools by default; offline commands, which
/// make few calls, map on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocation {
    /// wasmtime's default: map each instance's memory when it starts.
    OnDemand,
    /// wasmtime's pooling allocator with room for this many instances at
    /// once (see [`pool::slots_for`]); a call waits for a free one.
    Pooling { instances: u32 },
}

fn engine_config_for(allocation: Allocation) -> Config {
    engine_config_tuned(allocation, pool::Tuning::default())
}

fn engine_config_tuned(allocation: Allocation, tuning: pool::Tuning) -> Config {
    let mut config = Config::new();
    if let Allocation::Pooling { instances } = allocation {
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(
            pool::config_tuned(instances, tuning),
        ));
    }
    // Memories start as a copy-on-write mapping of their initial image
    // (wasmtime's default, said here because the pool's resets rely on it).
    config.memory_init_cow(true);
    config.wasm_component_model(true);
    // Deadlines: the ticker thread advances the epoch, each Store gets a
    // deadline in ticks. Cheaper than fuel and measured in wall-clock time.
    config.epoch_interruption(true);
    // Compile with all cores once; artefacts are cached so this is rare.
    config.parallel_compilation(true);
    config
}

/// Loads and runs plugins. Cheap to share behind an `Arc`.
pub struct Runtime {
    engine: Engine,
    linker: Linker<State>,
    cache: CompileCache,
    /// Compiled components shared by digest; compiles bounded.
    components: share::Components,
    compiler: Compiler,
    ticker: Arc<EpochTicker>,
    /// What all calls in flight may hold together.
    budget: Arc<MemoryBudget>,
    /// The most memory one compile may use, whatever the plugin's quota
    /// says: what the host's container can hold.
    compile_ceiling: u64,
    /// The pool's slots a call waits for; `None` when not pooling.
    slots: Option<Arc<pool::Slots>>,
    /// Where calls' spent Stores are dropped: on the call's path unless the
    /// pool's tuning asks for the reaper thread (`reaper`).
    reaper: Arc<reaper::Reaper<plugin::Spent>>,
    /// Told of every compile (not of cache loads).
    compile_watch: Option<Arc<dyn CompileWatch>>,
}

/// Told when a component is compiled rather than loaded from a cache: a
/// compile takes seconds (10-30 s for a Python or JavaScript guest), which
/// a user should not wait through in silence (`run` logs a line, offline
/// commands show progress on a terminal).
pub trait CompileWatch: Send + Sync {
    /// The compile of plugin file `label` (`bytes` long) starts; it ends
    /// when the returned value is dropped.
    fn compiling(&self, label: &str, bytes: usize) -> Box<dyn Send>;
}

impl Runtime {
    /// A runtime caching precompiled components in `cache_dir` (none: always
    /// compile in memory).
    pub fn new(cache_dir: Option<PathBuf>) -> wasmtime::Result<Self> {
        Self::with_allocation(cache_dir, Allocation::OnDemand)
    }

    /// [`Runtime::new`] with another instance allocator.
    pub fn with_allocation(
        cache_dir: Option<PathBuf>,
        allocation: Allocation,
    ) -> wasmtime::Result<Self> {
        Self::with_pool_tuning(cache_dir, allocation, pool::Tuning::default())
    }

    /// [`Runtime::with_allocation`] with the pool's resets tuned otherwise
    /// than the host's default (for measuring them; no effect on demand).
    pub fn with_pool_tuning(
        cache_dir: Option<PathBuf>,
        allocation: Allocation,
        tuning: pool::Tuning,
    ) -> wasmtime::Result<Self> {
        let engine = Engine::new(&engine_config_tuned(allocation, tuning))?;
        let pooled = matches!(allocation, Allocation::Pooling { .. });
        let mut linker = Linker::new(&engine);
        // Guests built with WASI (Rust for wasm32-wasip2, Python, JS) import
        // it; the SDK's Rust plugins do not. Plugins get a WASI with
        // no files, no environment, no network and captured stderr.
        // Async, so that a deadline also stops a guest waiting in a host
        // call (`poll`, a sleep): see `plugin::Caller::run`.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        // Toolchains import wasi:http by default (componentize-js): linked,
        // and every request refused (see `network`).
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        guest_log::add_to_linker(&mut linker)?;
        let ticker = EpochTicker::spawn(engine.clone());
        let slots = match allocation {
            Allocation::OnDemand => None,
            Allocation::Pooling { instances } => {
                Some(Arc::new(pool::Slots::new(instances, pool::SLOT_WAIT)))
            }
        };
        Ok(Runtime {
            engine,
            linker,
            cache: CompileCache::new(cache_dir),
            components: share::Components::new(DEFAULT_COMPILES),
            compiler: Compiler::default(),
            ticker,
            budget: MemoryBudget::unlimited(),
            compile_ceiling: u64::MAX,
            slots,
            // On demand (offline commands, few calls), a Store's drop is
            // an unmap, left on the call's path.
            reaper: Arc::new(if pooled && tuning.reset_off_path {
                reaper::Reaper::spawn()
            } else {
                reaper::Reaper::inline()
            }),
            compile_watch: None,
        })
    }

    /// How long a call waits for a free slot of the pool (default
    /// [`pool::SLOT_WAIT`]); no effect without a pool. Set before loading.
    pub fn with_slot_wait(mut self, wait: Duration) -> Self {
        if let Some(slots) = &self.slots {
            self.slots = Some(Arc::new(pool::Slots::new(slots.total(), wait)));
        }
        self
    }

    /// The pool's size, `None` when instances are mapped on demand.
    pub fn pool_slots(&self) -> Option<u32> {
        self.slots.as_ref().map(|s| s.total())
    }

    /// The pool's slots (size and slots in use now, a Store waiting for its
    /// reset included); `None` when instances are mapped on demand.
    pub fn slots(&self) -> Option<&Arc<pool::Slots>> {
        self.slots.as_ref()
    }

    /// What the pool keeps resident for the next calls, `None` when not
    /// pooling: memory slots used before and free now, and the bytes of
    /// memory they keep (what each one's next reset copies back, at most).
    pub fn pool_resident(&self) -> Option<pool::Resident> {
        let metrics = self.engine.pooling_allocator_metrics()?;
        Some(pool::Resident {
            warm_memories: metrics.unused_warm_memories(),
            memory_bytes: metrics.unused_memory_bytes_resident(),
            table_bytes: metrics.unused_table_bytes_resident(),
        })
    }

    /// Keep at most `bytes` of precompiled components on disk (default
    /// [`DEFAULT_CACHE_BYTES`]), least recently used pruned first.
    pub fn with_cache_budget(mut self, bytes: u64) -> Self {
        self.cache = self.cache.with_budget(bytes);
        self
    }

    /// At most `compiles` compiles at once (default [`DEFAULT_COMPILES`]).
    pub fn with_compiles(mut self, compiles: usize) -> Self {
        self.components = share::Components::new(compiles);
        self
    }

    /// Charge every call of the plugins it loads against `budget` (see
    /// [`budget`]); without one, calls are bounded only by their own caps.
    pub fn with_memory_budget(mut self, budget: Arc<MemoryBudget>) -> Self {
        self.budget = budget;
        self
    }

    /// Calls charged against a budget of `plan.calls`, compiles capped at
    /// `plan.compile_each` (see [`budget::Plan`]).
    pub fn with_memory_plan(mut self, plan: budget::Plan) -> Self {
        self.budget = MemoryBudget::new(plan.calls);
        self.compile_ceiling = plan.compile_each;
        self
    }

    /// The budget calls are charged against.
    pub fn memory_budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    /// Compile with `compiler` (see [`compile`]): `kubeplug run` and
    /// `render` compile in a bounded child process.
    pub fn with_compiler(mut self, compiler: Compiler) -> Self {
        self.compiler = compiler;
        self
    }

    /// Tell `watch` of every compile.
    pub fn with_compile_watch(mut self, watch: Arc<dyn CompileWatch>) -> Self {
        self.compile_watch = Some(watch);
        self
    }

    /// [`Runtime::load`] within a grant's `quotas`: compiled within their
    /// compile bounds, run with the `limits` the plugin's settings ask for
    /// lowered to their call limits. Every path that loads a plugin as the
    /// live host would serve it (the registry, `doctor`, the offline kit)
    /// loads through here, so none applies the quotas differently.
    pub fn load_within(
        &self,
        bytes: &[u8],
        quotas: &Quotas,
        config: Option<serde_json::Value>,
        limits: LimitSettings,
        label: String,
    ) -> Result<Plugin, LoadError> {
        self.load(
            bytes,
            PluginOptions {
                config,
                limits: limits.within(quotas.limits()),
                compile: quotas.compile(),
                label: Some(label),
            },
        )
    }

    /// Compile (or load from cache), link and validate a plugin, calling its
    /// `manifest()` with the configuration. Any failure leaves nothing behind.
    pub fn load(&self, bytes: &[u8], mut options: PluginOptions) -> Result<Plugin, LoadError> {
        options.compile.memory_bytes = options.compile.memory_bytes.min(self.compile_ceiling);
        let digest = hex::encode(Sha256::digest(bytes));
        compile::precheck(bytes)?;
        let started = Instant::now();
        let label = options
            .label
            .unwrap_or_else(|| format!("sha256:{}", &digest[..12]));
        let compiling = || -> Box<dyn Send> {
            match &self.compile_watch {
                Some(watch) => watch.compiling(&label, bytes.len()),
                None => Box::new(()),
            }
        };
        let (component, origin) = self.components.get_or_make(&digest, |slots| {
            self.cache.component(
                &self.engine,
                bytes,
                &digest,
                &self.compiler,
                options.compile,
                slots,
                &compiling,
            )
        })?;
        let origin = origin.unwrap_or(Origin::Shared);
        if origin == Origin::Compiled {
            // A new artefact: keep the cache within its budget.
            self.cache.prune(&self.components.in_use());
        }
        let load_time = started.elapsed();
        self.check_contract(&component)?;
        if self.slots.is_some()
            && let Some(reason) = pool::misfit(&component)
        {
            return Err(LoadError::DoesNotFit(reason));
        }
        let pre = self
            .linker
            .instantiate_pre(&component)
            .and_then(bindings::PluginPre::new)
            .map_err(|e| LoadError::Link(error::boxed(e)))?;
        let config = options
            .config
            .unwrap_or_else(|| serde_json::json!({}))
            .to_string();
        Plugin::new(
            label,
            plugin::Loaded {
                engine: self.engine.clone(),
                pre,
                digest,
                size: bytes.len(),
                origin,
                load_time,
                config,
                limits: options.limits,
                budget: self.budget.clone(),
                slots: self.slots.clone(),
                reaper: self.reaper.clone(),
                _ticker: self.ticker.clone(),
                _component: component,
            },
            EPOCH_TICK,
        )
    }

    /// Refuse components built for another contract with a clear message,
    /// before linking fails with a less helpful one.
    fn check_contract(&self, component: &Component) -> Result<(), LoadError> {
        let ty = component.component_type();
        let mut found = None;
        for (name, _) in ty.exports(&self.engine) {
            if name == RECONCILER_EXPORT {
                return Ok(());
            }
            if name.starts_with(RECONCILER_INTERFACE) {
                found = Some(name.to_string());
            }
        }
        Err(LoadError::WrongContract {
            found: found.unwrap_or_else(|| "no kubeplug:plugin/reconciler export".into()),
            expected: RECONCILER_EXPORT.into(),
        })
    }
}

/// Advances the engine's epoch every [`EPOCH_TICK`], which is what makes
/// deadlines fire. The runtime and every plugin it loaded hold it, so a plugin
/// that outlives its runtime keeps its deadline; the thread stops when the
/// last of them is dropped.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn spawn(engine: Engine) -> Arc<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        std::thread::Builder::new()
            .name("kubeplug-epoch".into())
            .spawn(move || {
                while !thread_stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawning the epoch ticker thread");
        Arc::new(EpochTicker { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module whose memory starts with the word 5 (a data segment,
    /// so the memory has a copy-on-write image) and whose `bump` returns
    /// that word and adds one to it.
    const BUMP: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
        0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f, // type: () -> i32
        0x03, 0x02, 0x01, 0x00, // function 0 of type 0
        0x05, 0x03, 0x01, 0x00, 0x01, // memory: 1 page
        0x07, 0x0c, 0x02, 0x04, b'b', b'u', b'm', b'p', 0x00, 0x00, 0x01, b'm', 0x02,
        0x00, // exports
        0x0a, 0x17, 0x01, 0x15, 0x01, 0x01, 0x7f, // code: one i32 local
        0x41, 0x00, 0x41, 0x00, 0x28, 0x02, 0x00, // addr 0, load [0]
        0x22, 0x00, 0x41, 0x01, 0x6a, 0x36, 0x02, 0x00, // tee, +1, store
        0x20, 0x00, 0x0b, // return the old word
        0x0b, 0x0a, 0x01, 0x00, 0x41, 0x00, 0x0b, 0x04, 0x05, 0x00, 0x00, 0x00, // data
    ];

    fn bump_once(engine: &Engine, module: &wasmtime::Module) -> i32 {
        let mut store = wasmtime::Store::new(engine, ());
        store.set_epoch_deadline(1 << 40);
        let instance = wasmtime::Instance::new(&mut store, module, &[]).unwrap();
        let bump = instance
            .get_typed_func::<(), i32>(&mut store, "bump")
            .unwrap();
        bump.call(&mut store, ()).unwrap()
    }

    #[test]
    fn consecutive_instances_on_a_reused_slot_see_none_of_each_others_memory() {
        // One slot: every instance after the first reuses it.
        let engine = Engine::new(&engine_config_for(Allocation::Pooling { instances: 1 })).unwrap();
        let module = wasmtime::Module::new(&engine, BUMP).unwrap();
        for _ in 0..3 {
            assert_eq!(bump_once(&engine, &module), 5);
        }
    }

    #[test]
    fn on_demand_instances_start_from_the_image_too() {
        let engine = Engine::new(&engine_config()).unwrap();
        let module = wasmtime::Module::new(&engine, BUMP).unwrap();
        assert_eq!(bump_once(&engine, &module), 5);
        assert_eq!(bump_once(&engine, &module), 5);
    }
}
