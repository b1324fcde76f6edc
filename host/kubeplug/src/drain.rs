//! Shutdown as a drain signal (kubert's `shutdown`, linkerd's `drain`).
//!
//! Long-running tasks hold a [`Watch`] and finish when it is signalled;
//! the one who stops them holds the [`Signal`], signals, and waits until
//! every watch is dropped, within a deadline. Nothing is aborted by hand:
//! a task stops at its next await point, dropping what it holds.
//!
//! Guarantees: [`Signal::drain`] returns only once every [`Watch`] (and
//! every clone of it) is dropped, or the deadline passed.
//! Caveats: a task that never awaits (or holds a watch outside
//! [`Watch::run_until`] and never checks it) holds the drain up until the
//! deadline.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// A drain signal and its first watch.
pub fn channel() -> (Signal, Watch) {
    let (tx, rx) = watch::channel(false);
    (Signal(tx), Watch(rx))
}

/// Asks every [`Watch`] to finish (see [`Signal::drain`]).
pub struct Signal(watch::Sender<bool>);

/// Held by a task that must finish when the drain is signalled. Clone it
/// for each task.
#[derive(Clone)]
pub struct Watch(watch::Receiver<bool>);

impl Signal {
    /// Signal every watch, then wait until all are dropped, at most
    /// `deadline`. False if some task was still running at the deadline.
    pub async fn drain(self, deadline: Duration) -> bool {
        self.0.send_replace(true);
        tokio::time::timeout(deadline, self.0.closed())
            .await
            .is_ok()
    }
}

impl Watch {
    /// Resolves once the drain is signalled (or its signal is gone).
    pub async fn signaled(&mut self) {
        let _ = self.0.wait_for(|drained| *drained).await;
    }

    /// Run `task` until it ends or the drain is signalled, holding this
    /// watch until then.
    pub async fn run_until<F: Future<Output = ()>>(mut self, task: F) {
        tokio::select! {
            () = task => {}
            () = self.signaled() => {}
        }
    }

    /// The underlying channel, for code that waits on `true` itself (the
    /// admin server's connections); it holds the drain while it lives.
    pub fn into_receiver(self) -> watch::Receiver<bool> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_drain_waits_for_every_task_holding_a_watch() {
        let (signal, watch) = channel();
        let finished = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for _ in 0..3 {
            let finished = finished.clone();
            tokio::spawn(watch.clone().run_until(async move {
                std::future::pending::<()>().await;
                drop(finished);
            }));
        }
        let (done, mut cleanup) = (finished.clone(), watch);
        tokio::spawn(async move {
            cleanup.signaled().await;
            // A task may finish its work after the signal.
            tokio::time::sleep(Duration::from_millis(50)).await;
            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert!(signal.drain(Duration::from_secs(1)).await);
        assert_eq!(finished.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_gives_up_at_its_deadline() {
        let (signal, watch) = channel();
        tokio::spawn(async move {
            let _held = watch;
            std::future::pending::<()>().await;
        });
        assert!(!signal.drain(Duration::from_secs(1)).await);
    }
}
