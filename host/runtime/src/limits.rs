//! Per-call resource limits and the store limiter that enforces them.

use super::budget::{Reservation, Short};
use kubeplug_core::contract::{Limits, TABLE_ELEMENT_BYTES};

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

    /// The call's share of the host's budget, taken out once the call is
    /// over, so that it is given back after the Store's reset, not before.
    pub fn take_reservation(&mut self) -> Option<Reservation> {
        self.reservation.take()
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
}
