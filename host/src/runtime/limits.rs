//! Per-call resource limits and the store limiter that enforces them.

use std::time::Duration;

use serde::Deserialize;

/// Limits for every call into one plugin. The defaults suit a reconcile that
/// builds a few objects: real plugins use a few MiB and a few milliseconds,
/// so the caps only stop a runaway guest, never a healthy one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock deadline of one call, instantiation included.
    #[serde(with = "millis", rename = "timeoutMs")]
    pub timeout: Duration,
    /// Cap on the size of each linear memory, in bytes.
    pub memory_bytes: usize,
    /// Cap on core instances per call (a Rust component has a handful).
    pub instances: usize,
    /// Cap on tables per call.
    pub tables: usize,
    /// Cap on elements of each table.
    pub table_elements: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // A reconcile is CPU-only JSON work: 2 s is 1000x a normal call.
            timeout: Duration::from_secs(2),
            // 128 MiB: room for a plugin that sees thousands of objects.
            memory_bytes: 128 << 20,
            instances: 20,
            tables: 20,
            table_elements: 100_000,
        }
    }
}

mod millis {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// Enforces [`Limits`] inside one `Store` and remembers whether the memory cap
/// was hit, so the resulting trap can be reported as such.
pub struct Limiter {
    limits: Limits,
    /// Set when a memory grow was refused.
    pub memory_cap_hit: bool,
}

impl Limiter {
    pub fn new(limits: Limits) -> Self {
        Limiter {
            limits,
            memory_cap_hit: false,
        }
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limits.memory_bytes {
            self.memory_cap_hit = true;
            // Trap at once rather than let the guest's allocator fail and
            // maybe limp on: the call is lost either way.
            wasmtime::bail!(
                "memory cap of {} bytes reached (asked for {desired})",
                self.limits.memory_bytes
            );
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.limits.table_elements)
    }

    fn instances(&self) -> usize {
        self.limits.instances
    }

    fn tables(&self) -> usize {
        self.limits.tables
    }

    fn memories(&self) -> usize {
        self.limits.instances
    }
}
