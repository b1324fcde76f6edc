//! Dropping a call's spent `Store` off the call's path.
//!
//! Dropping a pooled `Store` resets its slot: wasmtime copies back from the
//! memory image every page of the memory still resident, up to the pool's
//! keep-resident size (see [`crate::pool`]). That was 26 of a small call's
//! 38 µs and ~1 ms of an interpreter guest's call. With the reaper, a pooled
//! call hands what it holds to the reaper thread once the answer is lifted,
//! and returns at once (on demand, the drop is an unmap and stays on the
//! call's path). Off by default (`pool::Tuning::reset_off_path`): since only
//! written pages are reset, the hand-over cost more than the reset it moved
//! on a 2-core host with busy cores (docs/benchmarks/runtime.md).
//!
//! Guarantees: whatever a call hands over is dropped whole, in its own field
//! order (for a call: the `Store`, then its memory-budget reservation, then
//! its pool slot), so the host-wide budget and the slot count stay true while
//! a reset is pending, and the slots bound how many Stores wait. The queue is
//! bounded ([`QUEUE`]): a call finding it full, or the reaper gone, drops
//! its own Store as before. Dropping the last handle (the runtime and its
//! plugins hold one each) drains the queue and joins the thread: nothing
//! queued outlives them.
//!
//! Caveat: the reset's CPU is still spent, on another thread. On a host whose
//! cores are all busy it competes with calls; `kubeplug-bench` prints the
//! CPU time per call beside the latency for that reason.

use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::thread::JoinHandle;

use super::timings::{Clock, Stage};

/// Spent Stores waiting for the reaper at most; more are dropped by their
/// own call. A few: a pooled Store waiting holds its slot and its memory.
pub const QUEUE: usize = 8;

/// Drops what it is handed on its own thread. Cheap to share behind an `Arc`.
pub(crate) struct Reaper<T: Send + 'static> {
    queue: Option<SyncSender<T>>,
    thread: Option<JoinHandle<()>>,
}

impl<T: Send + 'static> Reaper<T> {
    /// A reaper with its thread; without one (the thread could not be
    /// started), every [`Reaper::reap`] drops inline.
    pub fn spawn() -> Self {
        let (queue, spent) = mpsc::sync_channel::<T>(QUEUE);
        let thread = std::thread::Builder::new()
            .name("kubeplug-reaper".into())
            .spawn(move || {
                // Ends once every sender is gone and the queue is drained.
                for job in spent {
                    let mut clock = Clock::start();
                    drop(job);
                    clock.lap_off_path(Stage::Reset);
                }
            });
        match thread {
            Ok(thread) => Reaper {
                queue: Some(queue),
                thread: Some(thread),
            },
            Err(error) => {
                tracing::warn!(%error, "no reaper thread: calls drop their Stores themselves");
                Reaper::inline()
            }
        }
    }

    /// A reaper without a thread: every [`Reaper::reap`] drops inline.
    pub fn inline() -> Self {
        Reaper {
            queue: None,
            thread: None,
        }
    }

    /// Drop `job` on the reaper's thread, or here if its queue is full.
    pub fn reap(&self, job: T) {
        let Some(queue) = &self.queue else {
            return drop(job);
        };
        match queue.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => drop(job),
        }
    }
}

impl<T: Send + 'static> Drop for Reaper<T> {
    fn drop(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            // A panic in a job's drop ended the thread early: its queue was
            // dropped with it, so nothing is left behind either way.
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, mpsc};
    use std::thread::ThreadId;

    /// Records the thread it is dropped on, after waiting for `gate`.
    struct Job {
        gate: Option<mpsc::Receiver<()>>,
        dropped_on: Arc<Mutex<Vec<ThreadId>>>,
        dropped: Arc<AtomicUsize>,
    }

    impl Drop for Job {
        fn drop(&mut self) {
            if let Some(gate) = self.gate.take() {
                let _ = gate.recv();
            }
            self.dropped_on
                .lock()
                .unwrap()
                .push(std::thread::current().id());
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Jobs {
        dropped_on: Arc<Mutex<Vec<ThreadId>>>,
        dropped: Arc<AtomicUsize>,
    }

    impl Jobs {
        fn new() -> Self {
            Jobs {
                dropped_on: Default::default(),
                dropped: Default::default(),
            }
        }

        fn job(&self, gate: Option<mpsc::Receiver<()>>) -> Job {
            Job {
                gate,
                dropped_on: self.dropped_on.clone(),
                dropped: self.dropped.clone(),
            }
        }
    }

    #[test]
    fn a_job_is_dropped_off_the_callers_thread_and_the_last_handle_drains_the_queue() {
        let jobs = Jobs::new();
        let reaper = Reaper::spawn();
        // The first job holds the reaper until released, so the rest queue.
        let (release, gate) = mpsc::channel();
        reaper.reap(jobs.job(Some(gate)));
        for _ in 0..QUEUE - 1 {
            reaper.reap(jobs.job(None));
        }
        assert_eq!(jobs.dropped.load(Ordering::SeqCst), 0);
        release.send(()).unwrap();
        drop(reaper);
        assert_eq!(jobs.dropped.load(Ordering::SeqCst), QUEUE);
        let here = std::thread::current().id();
        assert!(jobs.dropped_on.lock().unwrap().iter().all(|t| *t != here));
    }

    #[test]
    fn a_job_finding_the_queue_full_is_dropped_by_its_caller() {
        let jobs = Jobs::new();
        let reaper = Reaper::spawn();
        let (release, gate) = mpsc::channel();
        reaper.reap(jobs.job(Some(gate)));
        // The reaper holds at most that one (blocked in its drop) beside the
        // QUEUE queued: of QUEUE + 1 more, at least one finds the queue full.
        for _ in 0..QUEUE + 1 {
            reaper.reap(jobs.job(None));
        }
        let here = std::thread::current().id();
        assert!(jobs.dropped_on.lock().unwrap().contains(&here));
        release.send(()).unwrap();
        drop(reaper);
        assert_eq!(jobs.dropped.load(Ordering::SeqCst), QUEUE + 2);
    }
}
