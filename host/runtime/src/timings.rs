//! Where a call's time goes: per-stage timings of [`crate::Plugin`]'s calls,
//! for `kubeplug-bench --breakdown` only.
//!
//! Behind the `timings` feature (off by default). Without it, [`Clock`] is
//! an empty type whose laps compile to nothing, so the host pays nothing
//! for the hook. With it, each call appends its stages to a thread-local
//! list that [`take`] drains (calls run on the caller's thread); the reset
//! of a call's Store, done by the reaper thread (`reaper`), goes to a shared
//! list that [`take_off_path`] drains.

/// The stages of one call, in the order a call goes through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// Waiting for and taking an instance slot of the pool.
    Slot,
    /// Reserving the call's memory of the host's budget.
    Reserve,
    /// Building the call's host state and `Store` (its WASI context waits
    /// for the guest's first WASI call).
    Store,
    /// Instantiating the component (core instances, memory images, start
    /// functions) in the fresh `Store`.
    Instantiate,
    /// Looking up the typed export in the new instance.
    Export,
    /// Lowering the request, running the guest, lifting its answer and its
    /// post-return (wasmtime runs post-return inside the call).
    Call,
    /// Handing the spent `Store` to the reaper (`reaper`): what is left of
    /// its drop on the call's path.
    Drop,
    /// Dropping the `Store` on the reaper's thread, off the call's path: the
    /// instance's slot reset (memory, tables, stack), the host state freed,
    /// then the memory reservation and the slot given back. Not part of the
    /// whole call's time, but of its CPU time.
    Reset,
}

impl Stage {
    pub const ALL: [Stage; 8] = [
        Stage::Slot,
        Stage::Reserve,
        Stage::Store,
        Stage::Instantiate,
        Stage::Export,
        Stage::Call,
        Stage::Drop,
        Stage::Reset,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Slot => "slot",
            Stage::Reserve => "reserve",
            Stage::Store => "store",
            Stage::Instantiate => "instantiate",
            Stage::Export => "export",
            Stage::Call => "call",
            Stage::Drop => "drop",
            Stage::Reset => "reset",
        }
    }
}

#[cfg(feature = "timings")]
mod enabled {
    use std::cell::RefCell;
    use std::time::{Duration, Instant};

    use parking_lot::Mutex;

    use super::Stage;

    thread_local! {
        static SAMPLES: RefCell<Vec<(Stage, Duration)>> = const { RefCell::new(Vec::new()) };
    }

    /// Stages timed off the caller's thread (the reaper's resets).
    static OFF_PATH: Mutex<Vec<(Stage, Duration)>> = Mutex::new(Vec::new());

    /// Times consecutive stages of a call.
    #[derive(Clone, Copy)]
    pub struct Clock(Instant);

    impl Clock {
        pub fn start() -> Self {
            Clock(Instant::now())
        }

        /// The time since the last lap (or the start) was spent in `stage`.
        pub fn lap(&mut self, stage: Stage) {
            let now = Instant::now();
            let spent = now - self.0;
            SAMPLES.with(|s| s.borrow_mut().push((stage, spent)));
            self.0 = now;
        }

        /// [`Clock::lap`] for a stage run on another thread than the call's.
        pub fn lap_off_path(&mut self, stage: Stage) {
            let now = Instant::now();
            let spent = now - self.0;
            OFF_PATH.lock().push((stage, spent));
            self.0 = now;
        }
    }

    /// The stages this thread's calls went through since the last `take`.
    pub fn take() -> Vec<(Stage, Duration)> {
        SAMPLES.with(|s| std::mem::take(&mut *s.borrow_mut()))
    }

    /// The stages any thread timed off the calls' path since the last call.
    pub fn take_off_path() -> Vec<(Stage, Duration)> {
        std::mem::take(&mut *OFF_PATH.lock())
    }
}

#[cfg(feature = "timings")]
pub use enabled::{Clock, take, take_off_path};

/// Without the `timings` feature: nothing is measured.
#[cfg(not(feature = "timings"))]
#[derive(Clone, Copy)]
pub(crate) struct Clock;

#[cfg(not(feature = "timings"))]
impl Clock {
    #[inline(always)]
    pub(crate) fn start() -> Self {
        Clock
    }

    #[inline(always)]
    pub(crate) fn lap(&mut self, _stage: Stage) {}

    #[inline(always)]
    pub(crate) fn lap_off_path(&mut self, _stage: Stage) {}
}

#[cfg(all(test, feature = "timings"))]
mod tests {
    use super::*;

    #[test]
    fn each_lap_is_recorded_once_and_taken_once() {
        take();
        let mut clock = Clock::start();
        clock.lap(Stage::Slot);
        clock.lap(Stage::Drop);
        let stages: Vec<Stage> = take().into_iter().map(|(s, _)| s).collect();
        assert_eq!(stages, [Stage::Slot, Stage::Drop]);
        assert!(take().is_empty());
    }
}
