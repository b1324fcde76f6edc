//! A call into a plugin: the host's memory and a slot first, then a fresh
//! `Store` with the plugin's limits and deadline, then the call, then what
//! its failure is reported as. Every export goes through [`Caller::run`].

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use super::{Caller, Spent, State};
use crate::bindings;
use crate::budget::{Reservation, Short};
use crate::error::CallError;
use crate::guest_log::LogQuota;
use crate::limits::Limiter;
use crate::pool::Slot;
use crate::timings::{Clock, Stage};
use kubeplug_core::contract::Limits;

/// How long a call waits for the host's memory budget before it gives up
/// (and is retried later like any transient failure).
const MEMORY_WAIT: Duration = Duration::from_secs(30);

/// What a call's store showed when it ended, for [`Caller::classify`].
struct Ended {
    memory_cap_hit: bool,
    budget_short: Option<Short>,
    /// Whether the instance was made (a failure before is the host's).
    instantiated: bool,
    /// The guest's stderr, where a Rust panic prints: the pipe itself (a
    /// handle), read only if the call trapped.
    stderr: Option<MemoryOutputPipe>,
    /// The message the guest logged as its error before it trapped.
    last_error: Option<String>,
}

impl Caller {
    /// Run `f` against a fresh instance through the generated bindings.
    pub(super) fn call<R>(
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
    pub(super) fn run<R>(
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
            stderr: store.data().wasi.as_ref().map(|w| w.stderr.clone()),
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
        let printed = ended.stderr.map(|pipe| pipe.contents());
        CallError::Trap {
            plugin,
            message: trap_message(&error, printed.as_deref(), ended.last_error.as_deref()),
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
