//! Per-call resource limits and the store limiter that enforces them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::budget::{Reservation, Short};

/// Limits for every call into one plugin. The defaults suit a reconcile that
/// builds a few objects: real plugins use a few MiB and a few milliseconds,
/// so the caps only stop a runaway guest, never a healthy one. The platform's
/// policy ([`crate::policy::Quotas`]) sets the ceiling of each.
/// Serialized as a replay capture holds them (`timeoutMs`, `memoryBytes`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Wall-clock deadline of one call, instantiation included.
    #[serde(rename = "timeoutMs", with = "millis")]
    pub timeout: Duration,
    /// Cap on the guest memory of one call: every linear memory plus every
    /// table (at [`TABLE_ELEMENT_BYTES`] an element), summed. A per-memory
    /// cap would let a component with 20 core instances use 20 times it.
    pub memory_bytes: usize,
    /// Cap on core instances per call (a Rust component has a handful).
    pub instances: usize,
    /// Cap on tables per call.
    pub tables: usize,
    /// Cap on elements of each table.
    pub table_elements: usize,
    /// Cap on the bytes of one answer (all its strings), checked before the
    /// host parses any of it.
    pub response_bytes: usize,
    /// Cap on the children of one answer, checked before parsing.
    pub children: usize,
    /// Bytes of log (messages and field keys and values) one call may write.
    pub log_bytes: usize,
}

/// A `Duration` as whole milliseconds.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// What one table element costs the host (a function reference).
pub const TABLE_ELEMENT_BYTES: usize = 16;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // A reconcile is CPU-only JSON work: 2 s is 1000x a normal call.
            timeout: Duration::from_secs(2),
            // 128 MiB in all: room for a plugin that sees thousands of objects.
            memory_bytes: 128 << 20,
            instances: 20,
            tables: 20,
            table_elements: 100_000,
            // A seed plugin's answer is a few KiB.
            response_bytes: 4 << 20,
            children: 64,
            log_bytes: 64 << 10,
        }
    }
}

/// The `limits:` of a plugin's settings file (`<name>.yaml`): requests that
/// may lower the platform's quotas, never raise them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitSettings {
    pub timeout_ms: Option<u64>,
    pub memory_bytes: Option<usize>,
}

impl LimitSettings {
    /// `ceiling` lowered where these settings ask for less.
    pub fn within(&self, ceiling: Limits) -> Limits {
        Limits {
            timeout: self
                .timeout_ms
                .map(Duration::from_millis)
                .map_or(ceiling.timeout, |t| t.min(ceiling.timeout)),
            memory_bytes: self
                .memory_bytes
                .map_or(ceiling.memory_bytes, |m| m.min(ceiling.memory_bytes)),
            ..ceiling
        }
    }
}

/// Enforces [`Limits`] inside one `Store` and remembers whether the memory cap
/// (or the host's budget) was hit, so the resulting trap can be reported as
/// such.
pub struct Limiter {
    limits: Limits,
    /// Bytes of memories and tables of this store so far.
    used: usize,
    /// What this call holds of the host's memory budget.
    reservation: Option<Reservation>,
    /// Set when a memory or table grow was refused by the cap.
    pub memory_cap_hit: bool,
    /// Set when a grow was refused because the host's budget was spent.
    pub budget_short: Option<Short>,
}

impl Limiter {
    pub fn new(limits: Limits, reservation: Option<Reservation>) -> Self {
        Limiter {
            limits,
            used: 0,
            reservation,
            memory_cap_hit: false,
            budget_short: None,
        }
    }

    /// The most memory this call held.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Charge `bytes` the host copied out of the guest (an answer) against
    /// the budget, beside the guest's own memory, which is still held.
    pub fn hold_copy(&mut self, bytes: usize) -> wasmtime::Result<()> {
        if let Some(reservation) = &mut self.reservation
            && let Err(short) = reservation.cover(self.used.saturating_add(bytes))
        {
            self.budget_short = Some(short);
            wasmtime::bail!("the host's memory budget cannot cover an answer of {bytes} bytes");
        }
        Ok(())
    }

    fn grow(&mut self, more: usize) -> wasmtime::Result<bool> {
        let total = self.used.saturating_add(more);
        if total > self.limits.memory_bytes {
            self.memory_cap_hit = true;
            // Trap at once rather than let the guest's allocator fail and
            // maybe limp on: the call is lost either way.
            wasmtime::bail!(
                "memory cap of {} bytes reached (memories and tables would use {total})",
                self.limits.memory_bytes
            );
        }
        if let Some(reservation) = &mut self.reservation
            && let Err(short) = reservation.cover(total)
        {
            self.budget_short = Some(short);
            wasmtime::bail!("the host's memory budget cannot cover {total} bytes now");
        }
        self.used = total;
        Ok(true)
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(desired.saturating_sub(current))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limits.table_elements {
            return Ok(false);
        }
        self.grow(
            desired
                .saturating_sub(current)
                .saturating_mul(TABLE_ELEMENT_BYTES),
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter as _;

    #[test]
    fn the_memory_cap_counts_every_memory_of_a_call_together() {
        let mut limiter = Limiter::new(
            Limits {
                memory_bytes: 100,
                ..Limits::default()
            },
            None,
        );
        assert!(limiter.memory_growing(0, 60, None).unwrap());
        assert!(limiter.memory_growing(0, 40, None).unwrap());
        assert!(limiter.memory_growing(0, 1, None).is_err());
        assert!(limiter.memory_cap_hit);
    }

    #[test]
    fn tables_count_against_the_same_cap() {
        let mut limiter = Limiter::new(
            Limits {
                memory_bytes: 10 * TABLE_ELEMENT_BYTES,
                ..Limits::default()
            },
            None,
        );
        assert!(limiter.table_growing(0, 10, None).unwrap());
        assert!(limiter.memory_growing(0, 1, None).is_err());
    }

    #[test]
    fn settings_lower_limits_but_never_raise_them() {
        let ceiling = Limits::default();
        let asks_more = LimitSettings {
            timeout_ms: Some(60_000),
            memory_bytes: Some(1 << 40),
        };
        assert_eq!(asks_more.within(ceiling), ceiling);
        let asks_less = LimitSettings {
            timeout_ms: Some(100),
            memory_bytes: Some(1 << 20),
        };
        let lowered = asks_less.within(ceiling);
        assert_eq!(lowered.timeout, Duration::from_millis(100));
        assert_eq!(lowered.memory_bytes, 1 << 20);
    }
}
