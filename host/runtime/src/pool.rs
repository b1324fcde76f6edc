//! The instance pool: wasmtime's pooling allocator, sized from the host's
//! settings, and the gate that makes a call wait for a free slot.
//!
//! Every call still gets a fresh instance in a fresh `Store`; what the pool
//! saves is the work around it. A slot's memory, tables and fiber stack stay
//! mapped between calls: no mmap/munmap per instance, a memory's
//! copy-on-write image mapped once per slot and reset instead of faulted in
//! again, and no stack mapped per call. The reset copies the kept part of
//! a memory (up to [`MEMORY_KEEP_RESIDENT`]) back from the image: with the
//! kernel's page-map scan ([`Tuning::pagemap_scan`], on where it is safe)
//! only the pages some call of the slot wrote, else all of it; on the
//! call's path by default, or on the reaper's thread ([`crate::reaper`],
//! [`Tuning::reset_off_path`]).
//!
//! Guarantees: a call that finds every slot busy waits for one (up to
//! [`SLOT_WAIT`], then fails with [`crate::CallError::HostBusy`], retried
//! later like a memory-budget shortage); a component that needs more than a
//! slot holds (memories, tables, core instances, instance metadata) is
//! refused at load with the reason, never at a later call.
//!
//! Caveats: the pool reserves its address space up front: each memory slot
//! reserves [`MEMORY_SLOT_BYTES`] plus a guard region, so `slots ×
//! MEMORIES_PER_COMPONENT` of them (the most, 256 slots: ~2 TiB of a
//! 64-bit host's 128 TiB; a 512 MiB pod's 96 slots: ~0.8 TiB). That is address space, not memory: untouched pages cost no RSS
//! and, being mapped without access, no commit charge. What stays resident
//! is what calls dirtied, up to [`MEMORY_KEEP_RESIDENT`] per memory slot
//! that was ever used.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use wasmtime::component::Component;
use wasmtime::{Enabled, PoolingAllocationConfig};

/// Slots of a pool sized by [`slots_for`] at least: the concurrency a
/// small host (a few plugins, two workers each) needs.
pub const MIN_SLOTS: u32 = 16;
/// Slots at most: more calls than this cannot run at once anyway (the
/// host's blocking threads are bounded), and each slot reserves address
/// space.
pub const MAX_SLOTS: u32 = 256;

/// Core instances one component may make: the default per-call cap of
/// [`kubeplug_core::contract::Limits::instances`]; componentize-py and
/// componentize-js guests make about a dozen.
pub const CORE_INSTANCES_PER_COMPONENT: u32 = 20;
/// Linear memories one component may define: every guest shipped defines
/// one (Rust, componentize-py and componentize-js alike, measured on
/// `target/plugins` and `target/test-plugins`); one spare.
pub const MEMORIES_PER_COMPONENT: u32 = 2;
/// Tables one component may define: the guests shipped define two (the
/// largest starts with 7,689 elements, the TypeScript ones).
pub const TABLES_PER_COMPONENT: u32 = 8;
/// Elements of one table at most: the default per-call cap of
/// [`kubeplug_core::contract::Limits::table_elements`].
pub const TABLE_ELEMENTS: usize = 100_000;
/// What one memory slot may grow to: all of a 32-bit memory, so that the
/// plugin's own cap (the store limiter) is what bounds it.
pub const MEMORY_SLOT_BYTES: usize = 4 << 30;
/// Instance metadata (`VMContext`s) of one component, all core instances
/// together: interpreters export and import thousands of functions.
const COMPONENT_METADATA_BYTES: usize = 16 << 20;
/// One core instance's metadata.
const CORE_METADATA_BYTES: usize = 8 << 20;
/// Bytes of a memory slot reset by copying instead of given back to the
/// kernel: only pages a call dirtied are copied, so a slot reused by the
/// same plugin neither faults its heap in again nor pays for pages it did
/// not touch. A guest's whole working set for the interpreters' guests.
pub const MEMORY_KEEP_RESIDENT: usize = 16 << 20;
/// The same for a table (a Python guest's table is ~100 KiB).
const TABLE_KEEP_RESIDENT: usize = 1 << 20;
/// The same for a fiber stack (what a call's host side typically touches).
const STACK_KEEP_RESIDENT: usize = 128 << 10;

/// How long a call waits for a free slot before it gives up (as long as it
/// would wait for the memory budget).
pub const SLOT_WAIT: Duration = Duration::from_secs(30);

/// A pool for about the calls a memory budget of `budget_bytes` lets run at
/// once (each reserves at least [`crate::budget::MIN_RESERVATION`]),
/// within [`MIN_SLOTS`]..=[`MAX_SLOTS`].
pub fn slots_for(budget_bytes: usize) -> u32 {
    let calls = budget_bytes / crate::budget::MIN_RESERVATION;
    u32::try_from(calls)
        .unwrap_or(u32::MAX)
        .clamp(MIN_SLOTS, MAX_SLOTS)
}

/// How the pool resets a slot for its next instance. [`Tuning::default`] is
/// the host's; other values are for measuring (`kubeplug-bench --breakdown
/// --tunings`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Bytes of a memory reset by copying (see [`MEMORY_KEEP_RESIDENT`]).
    pub memory_keep_resident: usize,
    /// The same for a table.
    pub table_keep_resident: usize,
    /// The same for a fiber stack.
    pub stack_keep_resident: usize,
    /// Find the pages to copy back with the kernel's `PAGEMAP_SCAN` (only
    /// the pages still resident and written since the slot was mapped)
    /// instead of copying all of the kept part; see [`scan_is_safe`].
    pub pagemap_scan: bool,
    /// Slots kept warm (image mapped, pages resident) while unused.
    pub max_unused_warm_slots: u32,
    /// Decommits batched before they are flushed (1: none).
    pub decommit_batch_size: usize,
    /// Reset a spent Store on the reaper's thread ([`crate::reaper`]), not
    /// on the call's. Off by default: on a 2-core host with every core busy,
    /// handing the Store over cost more (~10 µs) than the reset it moved
    /// (4–5 µs with the page-map scan); docs/benchmarks/runtime.md, "Reset off the
    /// call's path". A host with idle cores may measure otherwise
    /// (`kubeplug-bench --breakdown --tunings default,off-path`).
    pub reset_off_path: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            memory_keep_resident: MEMORY_KEEP_RESIDENT,
            table_keep_resident: TABLE_KEEP_RESIDENT,
            stack_keep_resident: STACK_KEEP_RESIDENT,
            pagemap_scan: scan_is_safe(),
            max_unused_warm_slots: 100,
            decommit_batch_size: 1,
            reset_off_path: false,
        }
    }
}

/// Whether the page-map scan may choose the pages to reset: only when this
/// host has no swap. wasmtime 48's scan asks for *present* written pages, so
/// a page a call wrote that was swapped out before the reset would be
/// neither copied back nor decommitted, and the next instance in the slot
/// would read it (bytecodealliance/wasmtime#14357, open). Without the scan
/// the whole kept part is copied back, swapped or not. Read once, when the
/// engine is made: swap turned on later is not seen (Kubernetes nodes run
/// without swap unless `NodeSwap` is configured).
pub fn scan_is_safe() -> bool {
    let no_swap = std::fs::read_to_string("/proc/swaps")
        .map(|swaps| swaps.lines().skip(1).all(|l| l.trim().is_empty()))
        .unwrap_or(false);
    no_swap && PoolingAllocationConfig::is_pagemap_scan_available()
}

/// wasmtime's pooling configuration for `slots` component instances at
/// once, each with room for the largest shape a plugin may have.
pub fn config(slots: u32) -> PoolingAllocationConfig {
    config_tuned(slots, Tuning::default())
}

/// [`config`] with another [`Tuning`].
pub fn config_tuned(slots: u32, tuning: Tuning) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(slots)
        .total_core_instances(slots * CORE_INSTANCES_PER_COMPONENT)
        .total_memories(slots * MEMORIES_PER_COMPONENT)
        .total_tables(slots * TABLES_PER_COMPONENT)
        // One fiber per call's Store; twice that so that a store being
        // dropped never holds up the next call's.
        .total_stacks(slots * 2)
        .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
        .max_memories_per_component(MEMORIES_PER_COMPONENT)
        .max_tables_per_component(TABLES_PER_COMPONENT)
        .max_memories_per_module(MEMORIES_PER_COMPONENT)
        .max_tables_per_module(TABLES_PER_COMPONENT)
        .table_elements(TABLE_ELEMENTS)
        .max_memory_size(MEMORY_SLOT_BYTES)
        .max_component_instance_size(COMPONENT_METADATA_BYTES)
        .max_core_instance_size(CORE_METADATA_BYTES)
        .linear_memory_keep_resident(tuning.memory_keep_resident)
        .table_keep_resident(tuning.table_keep_resident)
        .async_stack_keep_resident(tuning.stack_keep_resident)
        .pagemap_scan(if tuning.pagemap_scan {
            Enabled::Auto
        } else {
            Enabled::No
        })
        .max_unused_warm_slots(tuning.max_unused_warm_slots)
        .decommit_batch_size(tuning.decommit_batch_size);
    pool
}

/// Why a component cannot be instantiated in a slot, found from its
/// static shape (core instances and metadata sizes are checked by
/// instantiating it at load).
pub fn misfit(component: &Component) -> Option<String> {
    let needs = component.resources_required()?;
    if needs.num_memories > MEMORIES_PER_COMPONENT {
        return Some(format!(
            "it defines {} memories, a slot holds {MEMORIES_PER_COMPONENT}",
            needs.num_memories
        ));
    }
    if needs.num_tables > TABLES_PER_COMPONENT {
        return Some(format!(
            "it defines {} tables, a slot holds {TABLES_PER_COMPONENT}",
            needs.num_tables
        ));
    }
    if let Some(elements) = needs.max_initial_table_size
        && elements > TABLE_ELEMENTS as u64
    {
        return Some(format!(
            "a table starts with {elements} elements, a slot holds {TABLE_ELEMENTS}"
        ));
    }
    None
}

/// What the pool keeps resident between calls ([`crate::Runtime::pool_resident`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resident {
    /// Memory slots used before and free now.
    pub warm_memories: u32,
    /// Bytes those memory slots keep resident.
    pub memory_bytes: usize,
    /// The same for table slots.
    pub table_bytes: usize,
}

/// Counts the slots in use, so that a call waits for one instead of
/// failing in wasmtime's allocator, and what each plugin's calls hold, so
/// that one plugin's burst leaves slots for the others. Cheap to share
/// behind an `Arc`.
pub struct Slots {
    total: u32,
    wait: Duration,
    used: Mutex<Used>,
    freed: Condvar,
}

#[derive(Default)]
struct Used {
    all: u32,
    by_plugin: HashMap<Arc<str>, u32>,
}

/// A slot a call holds; given back when dropped (after the call's `Store`
/// is, see [`crate::reaper`]).
pub struct Slot {
    slots: Arc<Slots>,
    plugin: Option<Arc<str>>,
}

/// No slot was free within the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    /// The slots the caller could have had: the pool, or its plugin's share.
    pub slots: u32,
    /// Whether the plugin's own share was the bound (the pool had room).
    pub share: bool,
    pub waited: Duration,
}

impl Slots {
    pub fn new(total: u32, wait: Duration) -> Self {
        Slots {
            total,
            wait,
            used: Mutex::new(Used::default()),
            freed: Condvar::new(),
        }
    }

    /// The pool's size.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// What one plugin's calls may hold at once: half the pool, at least
    /// one slot (the same share as of the memory budget).
    pub fn share(&self) -> u32 {
        (self.total / 2).max(1)
    }

    /// Slots in use now.
    pub fn used(&self) -> u32 {
        self.used.lock().all
    }

    /// Take a slot, waiting for one up to the pool's wait (the host's own
    /// work, e.g. a compile: no plugin's share).
    pub fn take(self: &Arc<Self>) -> Result<Slot, Busy> {
        self.take_within(None, self.wait)
    }

    /// Take a slot for a call of `plugin`, within its share, waiting up to
    /// `wait` (at most the pool's wait).
    pub fn take_for(self: &Arc<Self>, plugin: &Arc<str>, wait: Duration) -> Result<Slot, Busy> {
        self.take_within(Some(plugin), wait.min(self.wait))
    }

    fn take_within(
        self: &Arc<Self>,
        plugin: Option<&Arc<str>>,
        wait: Duration,
    ) -> Result<Slot, Busy> {
        let share = self.share();
        let mut used = self.used.lock();
        let started = Instant::now();
        let mine = |used: &Used| plugin.map_or(0, |p| used.by_plugin.get(p).copied().unwrap_or(0));
        while used.all >= self.total || (plugin.is_some() && mine(&used) >= share) {
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                let own = used.all < self.total;
                return Err(Busy {
                    slots: if own { share } else { self.total },
                    share: own,
                    waited: started.elapsed(),
                });
            }
            self.freed.wait_for(&mut used, left);
        }
        used.all += 1;
        if let Some(plugin) = plugin {
            *used.by_plugin.entry(plugin.clone()).or_default() += 1;
        }
        Ok(Slot {
            slots: self.clone(),
            plugin: plugin.cloned(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut used = self.slots.used.lock();
        used.all -= 1;
        if let Some(plugin) = &self.plugin
            && let Some(mine) = used.by_plugin.get_mut(plugin)
        {
            *mine -= 1;
            if *mine == 0 {
                used.by_plugin.remove(plugin);
            }
        }
        drop(used);
        // Every waiter looks again: the one woken may be another plugin's,
        // still over its share, while a third could go.
        self.slots.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_finding_every_slot_busy_waits_for_one_given_back() {
        let slots = Arc::new(Slots::new(1, Duration::from_secs(10)));
        let held = slots.take().unwrap();
        let waiter = {
            let slots = slots.clone();
            std::thread::spawn(move || slots.take().map(|_| ()))
        };
        std::thread::sleep(Duration::from_millis(20));
        drop(held);
        assert_eq!(waiter.join().unwrap(), Ok(()));
        assert_eq!(slots.used(), 0);
    }

    #[test]
    fn a_wait_for_a_slot_gives_up_after_its_bound() {
        let slots = Arc::new(Slots::new(2, Duration::from_millis(20)));
        let _a = slots.take().unwrap();
        let _b = slots.take().unwrap();
        let busy = slots.take().err().expect("no third slot");
        assert_eq!(busy.slots, 2);
    }

    #[test]
    fn one_plugins_calls_hold_at_most_half_the_slots_and_others_go_on() {
        let slots = Arc::new(Slots::new(4, Duration::from_secs(10)));
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let wait = Duration::from_millis(20);
        let a1 = slots.take_for(&a, wait).unwrap();
        let _a2 = slots.take_for(&a, wait).unwrap();
        let busy = slots.take_for(&a, wait).err().expect("a's share is taken");
        assert_eq!((busy.slots, busy.share), (2, true));
        let _b1 = slots.take_for(&b, wait).unwrap();
        let _host = slots.take().unwrap();
        assert_eq!(slots.used(), 4);
        // A's share comes back with its slot, and another of a's waiters
        // (woken by notify_all, not one of b's) takes it.
        let waiter = {
            let (slots, a) = (slots.clone(), a.clone());
            std::thread::spawn(move || slots.take_for(&a, Duration::from_secs(10)).map(|_| ()))
        };
        std::thread::sleep(Duration::from_millis(20));
        drop(a1);
        assert_eq!(waiter.join().unwrap(), Ok(()));
    }

    #[test]
    fn the_pool_is_sized_from_the_memory_budget_within_bounds() {
        // A 512 MiB pod's 192 MiB for calls: 96 calls of 2 MiB.
        assert_eq!(slots_for(192 << 20), 96);
        assert_eq!(slots_for(1 << 20), MIN_SLOTS);
        assert_eq!(slots_for(usize::MAX), MAX_SLOTS);
    }
}
