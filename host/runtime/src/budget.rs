//! The host-wide memory budget every call is charged against.
//!
//! A plugin's memory cap bounds one call; the host runs many calls at once
//! (workers of every plugin, shadow slots, previews, replays). Without a
//! budget over all of them, a plugin allocating near its cap on a few parents
//! at once takes the whole process past its container's limit, and the
//! kernel kills every team's plugins with it. So each call, before it
//! instantiates, reserves what its plugin used recently (at most its cap,
//! waiting while the budget is short); memory it grows past the reservation
//! is taken from the budget as it grows, and a grow the budget cannot cover
//! stops the call (a host-side refusal, retried later, not the plugin's
//! fault). One plugin's calls may hold at most half of the budget (or one
//! cap, if bigger), so another plugin always finds room.
//!
//! Waiting blocks the calling thread: calls run on blocking threads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// What a call reserves at least: a small Rust guest's instance.
pub const MIN_RESERVATION: usize = 2 << 20;

/// Bytes the host keeps for itself out of a container's memory limit (its
/// caches, connections, buffers), before calls and compiles get a share.
pub const HOST_RESERVE: u64 = 128 << 20;

/// The host-wide budget. Cheap to share behind an `Arc`.
pub struct MemoryBudget {
    /// Bytes all calls in flight may hold together; `usize::MAX`: no budget.
    total: usize,
    ledger: Mutex<Ledger>,
    freed: Condvar,
}

#[derive(Default)]
struct Ledger {
    used: usize,
    peak: usize,
    waiting: usize,
    waits: u64,
    refused: u64,
    timed_out: u64,
    by_plugin: HashMap<Arc<str>, usize>,
}

/// What the budget looks like now, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetStats {
    /// The budget (`usize::MAX`: none).
    pub total: usize,
    /// Bytes reserved by calls in flight.
    pub used: usize,
    /// The most ever reserved at once.
    pub peak: usize,
    /// Calls waiting for memory now.
    pub waiting: usize,
    /// Calls that had to wait, ever.
    pub waits: u64,
    /// Calls stopped because a grow found the budget spent.
    pub refused: u64,
    /// Calls that gave up waiting.
    pub timed_out: u64,
}

/// Why a call got no memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Short {
    /// It waited this long for its reservation.
    Waited { bytes: usize, waited: Duration },
    /// It grew past its reservation while the budget was spent.
    Grow { bytes: usize },
}

impl MemoryBudget {
    /// A budget of `total` bytes for all calls together.
    pub fn new(total: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            total: total.max(MIN_RESERVATION),
            ledger: Mutex::new(Ledger::default()),
            freed: Condvar::new(),
        })
    }

    /// No budget: every reservation succeeds at once (offline tools).
    pub fn unlimited() -> Arc<Self> {
        Self::new(usize::MAX)
    }

    pub fn total(&self) -> usize {
        self.total
    }

    pub fn stats(&self) -> BudgetStats {
        let l = self.ledger.lock();
        BudgetStats {
            total: self.total,
            used: l.used,
            peak: l.peak,
            waiting: l.waiting,
            waits: l.waits,
            refused: l.refused,
            timed_out: l.timed_out,
        }
    }

    /// What one plugin's calls may hold together: half the budget, or one
    /// call at its cap if that is more.
    fn share(&self, cap: usize) -> usize {
        (self.total / 2).max(cap)
    }

    fn fits(&self, l: &Ledger, plugin: &str, bytes: usize, cap: usize) -> bool {
        let mine = l.by_plugin.get(plugin).copied().unwrap_or(0);
        l.used.saturating_add(bytes) <= self.total && mine.saturating_add(bytes) <= self.share(cap)
    }

    fn take(&self, l: &mut Ledger, plugin: &Arc<str>, bytes: usize) {
        l.used += bytes;
        l.peak = l.peak.max(l.used);
        *l.by_plugin.entry(plugin.clone()).or_default() += bytes;
    }

    /// Reserve `bytes` for one call of `plugin` (whose per-call cap is
    /// `cap`), waiting up to `wait` for calls in flight to give memory back.
    pub fn reserve(
        self: &Arc<Self>,
        plugin: &Arc<str>,
        bytes: usize,
        cap: usize,
        wait: Duration,
    ) -> Result<Reservation, Short> {
        let bytes = bytes.min(cap).max(MIN_RESERVATION.min(cap));
        let mut l = self.ledger.lock();
        if !self.fits(&l, plugin, bytes, cap) {
            let started = Instant::now();
            l.waits += 1;
            l.waiting += 1;
            loop {
                let left = wait.saturating_sub(started.elapsed());
                if left.is_zero() {
                    l.waiting -= 1;
                    l.timed_out += 1;
                    return Err(Short::Waited {
                        bytes,
                        waited: started.elapsed(),
                    });
                }
                self.freed.wait_for(&mut l, left);
                if self.fits(&l, plugin, bytes, cap) {
                    break;
                }
            }
            l.waiting -= 1;
        }
        self.take(&mut l, plugin, bytes);
        Ok(Reservation {
            budget: self.clone(),
            plugin: plugin.clone(),
            cap,
            held: bytes,
        })
    }
}

/// Memory one call holds of the budget; given back when dropped.
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    plugin: Arc<str>,
    cap: usize,
    held: usize,
}

impl Reservation {
    /// Make sure the call holds at least `total` bytes, taking the rest from
    /// the budget without waiting (a guest cannot wait inside a grow).
    pub fn cover(&mut self, total: usize) -> Result<(), Short> {
        if total <= self.held {
            return Ok(());
        }
        let more = total - self.held;
        let mut l = self.budget.ledger.lock();
        if !self.budget.fits(&l, &self.plugin, more, self.cap) {
            l.refused += 1;
            return Err(Short::Grow { bytes: total });
        }
        self.budget.take(&mut l, &self.plugin, more);
        self.held = total;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut l = self.budget.ledger.lock();
        l.used -= self.held;
        if let Some(mine) = l.by_plugin.get_mut(&*self.plugin) {
            *mine -= self.held;
            if *mine == 0 {
                l.by_plugin.remove(&*self.plugin);
            }
        }
        drop(l);
        self.budget.freed.notify_all();
    }
}

/// How the host splits the memory it may use: what plugin calls may hold
/// together, and what one compile (a child process) may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The limit the plan was made from, and where it came from.
    pub limit: u64,
    pub calls: usize,
    pub compile_each: u64,
}

impl Plan {
    /// Out of `limit`, the host keeps [`HOST_RESERVE`] for itself; calls
    /// get half the rest, and compiles the other half, shared by the
    /// `compiles` that may run at once. A 512 MiB pod: 192 MiB for calls,
    /// 96 MiB per compile (two at once).
    pub fn for_limit(limit: u64, compiles: usize) -> Plan {
        let rest = limit.saturating_sub(HOST_RESERVE).max(16 << 20);
        Plan {
            limit,
            calls: usize::try_from(rest / 2).unwrap_or(usize::MAX),
            compile_each: rest / 2 / compiles.max(1) as u64,
        }
    }
}

/// The memory this machine has (`MemTotal`), the limit when no container
/// sets one.
pub fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The memory limit of the container this process runs in, as Go's and the
/// JVM's container support read it: cgroup v2 `memory.max`, else cgroup v1
/// `memory.limit_in_bytes`, of this process's own cgroup. `None` when there
/// is no limit (or no cgroup file to read).
pub fn container_limit() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    limit_from(&cgroups, |path| std::fs::read_to_string(path).ok())
}

/// [`container_limit`] over a `/proc/self/cgroup` text and a file reader.
fn limit_from(cgroups: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    let parse = |text: Option<String>| -> Option<u64> {
        let text = text?;
        let text = text.trim();
        // "max" (v2) or a huge page-rounded number (v1): no limit.
        text.parse::<u64>().ok().filter(|&n| n < (1 << 60))
    };
    let mut candidates = Vec::new();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_end_matches('/');
        if id == "0" && controllers.is_empty() {
            candidates.push(format!("/sys/fs/cgroup{path}/memory.max"));
            candidates.push("/sys/fs/cgroup/memory.max".to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            candidates.push(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"));
            candidates.push("/sys/fs/cgroup/memory/memory.limit_in_bytes".to_string());
        }
    }
    // The most specific readable file wins; a limit found anywhere is
    // the one the kernel enforces on this process (the smallest).
    candidates.iter().filter_map(|p| parse(read(p))).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn a_call_that_does_not_fit_waits_until_another_gives_memory_back() {
        let budget = MemoryBudget::new(100 << 20);
        let a = budget
            .reserve(&name("a"), 60 << 20, 60 << 20, Duration::ZERO)
            .unwrap();
        // b's own share allows it, the budget does not: it waits.
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || {
                budget
                    .reserve(&name("b"), 50 << 20, 50 << 20, Duration::from_secs(10))
                    .map(|_| ())
            })
        };
        while budget.stats().waiting == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(a);
        assert_eq!(waiter.join().unwrap(), Ok(()));
        assert_eq!(budget.stats().used, 0);
        assert_eq!(budget.stats().waits, 1);
    }

    #[test]
    fn a_wait_gives_up_after_its_bound() {
        let budget = MemoryBudget::new(10 << 20);
        let _a = budget
            .reserve(&name("a"), 8 << 20, 10 << 20, Duration::ZERO)
            .unwrap();
        let short = budget.reserve(&name("b"), 8 << 20, 8 << 20, Duration::from_millis(20));
        assert!(matches!(short, Err(Short::Waited { .. })));
        assert_eq!(budget.stats().timed_out, 1);
    }

    #[test]
    fn one_plugin_holds_at_most_half_so_another_always_finds_room() {
        let budget = MemoryBudget::new(100 << 20);
        let cap = 10 << 20;
        let held: Vec<_> = (0..5)
            .map(|_| {
                budget
                    .reserve(&name("hog"), cap, cap, Duration::ZERO)
                    .unwrap()
            })
            .collect();
        assert!(
            budget
                .reserve(&name("hog"), cap, cap, Duration::ZERO)
                .is_err()
        );
        assert!(
            budget
                .reserve(&name("other"), cap, cap, Duration::ZERO)
                .is_ok()
        );
        drop(held);
    }

    #[test]
    fn growing_past_the_reservation_takes_from_the_budget_or_is_refused() {
        let budget = MemoryBudget::new(10 << 20);
        let mut r = budget
            .reserve(&name("a"), 1 << 20, 10 << 20, Duration::ZERO)
            .unwrap();
        r.cover(6 << 20).unwrap();
        assert_eq!(budget.stats().used, 6 << 20);
        assert_eq!(r.cover(11 << 20), Err(Short::Grow { bytes: 11 << 20 }));
        drop(r);
        assert_eq!(budget.stats().used, 0);
        assert_eq!(budget.stats().refused, 1);
    }

    #[test]
    fn a_512_mib_pod_splits_into_calls_and_compiles() {
        let plan = Plan::for_limit(512 << 20, 2);
        assert_eq!(plan.calls, 192 << 20);
        assert_eq!(plan.compile_each, 96 << 20);
    }

    #[test]
    fn the_container_limit_is_read_from_cgroup_v2_or_v1() {
        let v2 = "0::/kubepods/pod1/c1\n";
        let read = |p: &str| match p {
            "/sys/fs/cgroup/kubepods/pod1/c1/memory.max" => Some("536870912\n".into()),
            _ => None,
        };
        assert_eq!(limit_from(v2, read), Some(512 << 20));
        // In a cgroup namespace the own cgroup is the root.
        let ns = "0::/\n";
        let read = |p: &str| (p == "/sys/fs/cgroup/memory.max").then(|| "max\n".to_string());
        assert_eq!(limit_from(ns, read), None);
        let v1 = "9:pids:/\n4:memory:/kp-e2e\n1:cpu:/\n";
        let read = |p: &str| match p {
            "/sys/fs/cgroup/memory/kp-e2e/memory.limit_in_bytes" => Some("536870912".into()),
            "/sys/fs/cgroup/memory/memory.limit_in_bytes" => Some("9223372036854771712".into()),
            _ => None,
        };
        assert_eq!(limit_from(v1, read), Some(512 << 20));
    }
}
