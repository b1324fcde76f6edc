//! A de-duplicating work queue, one per plugin.
//!
//! Guarantees:
//! - a key waiting in the queue is there once, however often it is added;
//! - a key is never handed to two workers at once: a key added while it is
//!   being reconciled is queued again when the worker calls [`Queue::done`];
//! - [`Queue::add_after`] keeps the earliest of several delays for a key;
//! - [`Queue::add_event`] coalesces a burst of changes of one key: it is
//!   handed out once its changes have been quiet for [`Debounce::quiet`],
//!   and never later than [`Debounce::max`] after the first of them.
//!
//! Why debounce: one reconcile's writes come back as a burst of watch
//! events (each child created, the status written, then the children's
//! own status and the Pods they start); reconciling on the first of them
//! sees the rest missing and is followed by another reconcile at once.
//! Waiting for the burst to end makes one reconcile see all of it, as
//! kube-runtime's `Controller` debounce does. The bound keeps a key that
//! changes without a pause (a flapping object) from waiting for ever.
//!
//! Backoff and resync policies live in the controller; this is only the queue.
//! A queue made with [`Queue::observed`] reports client-go's workqueue
//! metrics ([`metrics`]).

pub mod metrics;

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use self::metrics::{QueueObserver, Tracker};

struct State<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    active: HashSet<K>,
    /// Keys added while active: queued again on `done`.
    dirty: HashSet<K>,
    /// Pending delayed adds, earliest deadline per key.
    scheduled: HashMap<K, Instant>,
    /// Keys changed lately, waiting for their changes to settle.
    settling: HashMap<K, Burst>,
    closed: bool,
    /// What an observed queue reports (see [`Queue::observed`]).
    tracker: Option<Tracker<K>>,
}

impl<K: Clone + Eq + Hash> State<K> {
    /// Queue `key` now, or again after `done` if it is being worked on (a
    /// burst of changes waiting for it is absorbed). True if it was put in
    /// `ready`: a worker is to be woken. `new`: a new add, counted as one;
    /// a key queued again at `done` was counted when it was added.
    fn enqueue(&mut self, key: K, new: bool) -> bool {
        self.settling.remove(&key);
        if self.active.contains(&key) {
            if !self.dirty.contains(&key) {
                if new {
                    self.entered(&key);
                }
                self.dirty.insert(key);
                self.report_depth();
            }
            false
        } else if self.queued.insert(key.clone()) {
            if new {
                self.entered(&key);
            }
            self.ready.push_back(key);
            self.report_depth();
            true
        } else {
            false
        }
    }

    fn entered(&mut self, key: &K) {
        if let Some(tracker) = &mut self.tracker {
            tracker.added(key, Instant::now());
        }
    }

    /// Keys waiting to be handed out: those in `ready`, and those to be
    /// queued again when their worker is done.
    fn report_depth(&self) {
        if let Some(tracker) = &self.tracker {
            tracker.depth(self.ready.len() + self.dirty.len());
        }
    }
}

/// The changes of one key not yet handed out.
#[derive(Clone, Copy)]
struct Burst {
    first: Instant,
    last: Instant,
    /// A task is waiting for this burst's deadline.
    timer: bool,
}

impl Burst {
    fn due(&self, debounce: &Debounce) -> Instant {
        (self.last + debounce.quiet).min(self.first + debounce.max)
    }
}

/// How [`Queue::add_event`] coalesces the changes of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Debounce {
    /// Hand a key out once it has not changed for this long.
    pub quiet: Duration,
    /// ... and never later than this after its first change.
    pub max: Duration,
}

impl Default for Debounce {
    /// 500 ms quiet, as the kube-rs baseline of the operator bench: a
    /// reconcile's writes come back within milliseconds, but the children's
    /// own controllers answer them over a few hundred (a StatefulSet's
    /// status, its Pod scheduled, running, ready: ~0.5 s on a local control
    /// plane), and one reconcile after all of them is the one that sees the
    /// parent converged. 2 s at most: the latency a parent that never stops
    /// changing can be given.
    fn default() -> Self {
        Debounce {
            quiet: Duration::from_millis(500),
            max: Duration::from_secs(2),
        }
    }
}

impl Debounce {
    /// No coalescing: [`Queue::add_event`] is [`Queue::add`] (so is a
    /// zero `quiet` or `max`).
    pub const NONE: Debounce = Debounce {
        quiet: Duration::ZERO,
        max: Duration::ZERO,
    };
}

pub struct Queue<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    debounce: Debounce,
}

impl<K: Clone + Eq + Hash + Send + 'static> Queue<K> {
    /// A queue whose [`Queue::add_event`] does not wait.
    pub fn new() -> Arc<Self> {
        Self::with_debounce(Debounce::NONE)
    }

    /// A queue whose [`Queue::add_event`] coalesces bursts per `debounce`.
    pub fn with_debounce(debounce: Debounce) -> Arc<Self> {
        Self::build(debounce, None)
    }

    /// A queue like [`Queue::with_debounce`] whose work is counted in
    /// `observer`'s series (see [`metrics`]): adds, retries, depth, the time
    /// each key waited and was worked on, and, refreshed every
    /// [`metrics::REFRESH`] by a task that ends with the queue, the work in
    /// progress. Call it within a Tokio runtime.
    pub fn observed(debounce: Debounce, observer: QueueObserver) -> Arc<Self> {
        let queue = Self::build(debounce, Some(Tracker::new(observer)));
        tokio::spawn(Self::refresh(Arc::downgrade(&queue)));
        queue
    }

    /// Refresh the work-in-progress gauges until the queue closes or is
    /// dropped (both zero them).
    async fn refresh(queue: Weak<Self>) {
        let mut tick = tokio::time::interval(metrics::REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(queue) = queue.upgrade() else { return };
            let s = queue.state.lock();
            if s.closed {
                return;
            }
            if let Some(tracker) = &s.tracker {
                tracker.refresh(Instant::now());
            }
            s.report_depth();
        }
    }

    fn build(debounce: Debounce, tracker: Option<Tracker<K>>) -> Arc<Self> {
        Arc::new(Queue {
            debounce,
            state: Mutex::new(State {
                ready: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashSet::new(),
                scheduled: HashMap::new(),
                settling: HashMap::new(),
                closed: false,
                tracker,
            }),
            notify: Notify::new(),
        })
    }

    /// Queue `key` now (a burst of changes waiting for it is absorbed).
    pub fn add(&self, key: K) {
        let mut s = self.state.lock();
        if s.closed {
            return;
        }
        if s.enqueue(key, true) {
            drop(s);
            self.notify.notify_one();
        }
    }

    /// [`Queue::add_after`] for a key whose work failed: counted as a retry
    /// (`workqueue_retries_total`), as client-go's `AddRateLimited` is.
    pub fn retry_after(self: &Arc<Self>, key: K, delay: Duration) {
        {
            let s = self.state.lock();
            if let (false, Some(tracker)) = (s.closed, &s.tracker) {
                tracker.retried();
            }
        }
        self.add_after(key, delay);
    }

    /// Queue `key` after `delay`, unless an earlier add is already scheduled.
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        let at = Instant::now() + delay;
        {
            let mut s = self.state.lock();
            match s.scheduled.get(&key) {
                Some(existing) if *existing <= at => return,
                _ => {
                    s.scheduled.insert(key.clone(), at);
                }
            }
        }
        let queue = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let Some(queue) = queue.upgrade() else { return };
            let due = {
                let mut s = queue.state.lock();
                // A later, earlier-scheduled add replaced ours: let it fire.
                if s.scheduled.get(&key) == Some(&at) {
                    s.scheduled.remove(&key);
                    true
                } else {
                    false
                }
            };
            if due {
                queue.add(key);
            }
        });
    }

    /// `key` changed: queue it once its changes settle (see [`Debounce`]).
    /// A key already waiting in the queue stays where it is: it will read
    /// the latest state when handed out. A key being worked on is queued
    /// after [`Queue::done`], once the changes made meanwhile settle.
    pub fn add_event(self: &Arc<Self>, key: K) {
        if self.debounce.quiet.is_zero() || self.debounce.max.is_zero() {
            return self.add(key);
        }
        let now = Instant::now();
        let due = {
            let mut s = self.state.lock();
            if s.closed || s.queued.contains(&key) {
                return;
            }
            let active = s.active.contains(&key);
            let burst = s.settling.entry(key.clone()).or_insert(Burst {
                first: now,
                last: now,
                timer: false,
            });
            burst.last = now;
            if burst.timer || active {
                return;
            }
            burst.timer = true;
            burst.due(&self.debounce)
        };
        self.settle_at(key, due);
    }

    /// Wait until `due`, then hand `key` out if its burst has settled by
    /// then; otherwise wait for its new deadline.
    fn settle_at(self: &Arc<Self>, key: K, mut due: Instant) {
        let queue = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep_until(due).await;
                let Some(queue) = queue.upgrade() else { return };
                let mut s = queue.state.lock();
                let active = s.active.contains(&key);
                let Some(burst) = s.settling.get_mut(&key) else {
                    // Absorbed by an `add`.
                    return;
                };
                if active {
                    // `done` takes over.
                    burst.timer = false;
                    return;
                }
                let now_due = burst.due(&queue.debounce);
                if now_due > due {
                    due = now_due;
                    continue;
                }
                drop(s);
                queue.add(key);
                return;
            }
        });
    }

    /// The next key to work on; `None` once the queue is closed.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.state.lock();
                if s.closed {
                    return None;
                }
                if let Some(key) = s.ready.pop_front() {
                    s.queued.remove(&key);
                    if let Some(tracker) = &mut s.tracker {
                        tracker.handed_out(&key, Instant::now());
                    }
                    s.report_depth();
                    s.active.insert(key.clone());
                    let more = !s.ready.is_empty();
                    drop(s);
                    if more {
                        // Wake another worker for the rest.
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// The worker is finished with `key`.
    pub fn done(self: &Arc<Self>, key: &K) {
        let (requeued, settle) = {
            let mut s = self.state.lock();
            s.active.remove(key);
            if let Some(tracker) = &mut s.tracker {
                tracker.done(key, Instant::now());
            }
            let requeue = s.dirty.remove(key);
            let settle = match s.settling.get_mut(key) {
                Some(burst) if !requeue && !burst.timer => {
                    burst.timer = true;
                    Some(burst.due(&self.debounce))
                }
                _ => None,
            };
            // Added while it was worked on: queued again now (its add was
            // counted then).
            let requeued = requeue && !s.closed && s.enqueue(key.clone(), false);
            (requeued, settle)
        };
        if requeued {
            self.notify.notify_one();
        } else if let Some(due) = settle {
            self.settle_at(key.clone(), due);
        }
    }

    /// Stop handing out keys; workers waiting in `next` return `None`. An
    /// observed queue's gauges drop to zero.
    pub fn close(&self) {
        {
            let mut s = self.state.lock();
            s.closed = true;
            if let Some(tracker) = &mut s.tracker {
                tracker.closed();
            }
        }
        self.notify.notify_waiters();
    }

    /// The keys waiting now (not active or scheduled ones), for a breakdown
    /// of [`Queue::len`].
    pub fn waiting(&self) -> Vec<K> {
        let state = self.state.lock();
        state.ready.iter().cloned().collect()
    }

    /// Keys waiting (not counting active or scheduled ones).
    pub fn len(&self) -> usize {
        self.state.lock().ready.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys are waiting or being worked on (debounced ones not counted:
    /// nothing runs for them yet); never once the queue is closed (its
    /// workers are gone, whatever they held).
    pub fn working(&self) -> bool {
        let state = self.state.lock();
        !state.closed && (!state.ready.is_empty() || !state.active.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_queue_works_while_a_key_waits_or_is_worked_on() {
        let q = Queue::new();
        assert!(!q.working());
        q.add("a");
        assert!(q.working());
        assert_eq!(q.next().await, Some("a"));
        assert!(q.working(), "being worked on");
        q.done(&"a");
        assert!(!q.working());
        q.add("b");
        q.close();
        assert!(!q.working(), "closed");
    }

    #[tokio::test]
    async fn a_key_added_twice_is_handed_out_once() {
        let q = Queue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(q.next().await, Some("b"));
    }

    #[tokio::test]
    async fn a_key_added_while_active_is_requeued_only_when_done() {
        let q = Queue::new();
        q.add("a");
        let k = q.next().await.unwrap();
        q.add("a");
        assert_eq!(q.len(), 0, "never two workers on one key");
        q.done(&k);
        assert_eq!(q.next().await, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_keeps_the_earliest_deadline() {
        let q = Queue::new();
        q.add_after("a", Duration::from_secs(60));
        q.add_after("a", Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.next().await, Some("a"));
        q.done(&"a");
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(q.len(), 0, "the superseded 60 s add must not fire");
    }

    fn debounced() -> Arc<Queue<&'static str>> {
        Queue::with_debounce(Debounce {
            quiet: Duration::from_millis(100),
            max: Duration::from_secs(1),
        })
    }

    async fn sleep_ms(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_events_is_handed_out_once_when_it_has_been_quiet() {
        let q = debounced();
        q.add_event("a");
        sleep_ms(60).await;
        q.add_event("a");
        sleep_ms(60).await;
        assert_eq!(q.len(), 0, "60 ms after the last change: not quiet yet");
        sleep_ms(50).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.next().await, Some("a"));
        q.done(&"a");
        sleep_ms(2000).await;
        assert_eq!(q.len(), 0, "the burst is handed out once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_that_never_stops_changing_waits_no_longer_than_the_max() {
        let q = debounced();
        for _ in 0..19 {
            q.add_event("a");
            sleep_ms(50).await;
        }
        q.add_event("a");
        assert_eq!(q.len(), 0, "950 ms after the first change");
        sleep_ms(51).await;
        // Past 1000 ms after the first change, though the last was 51 ms ago.
        assert_eq!(q.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn events_while_a_key_is_worked_on_queue_it_again_once_they_settle() {
        let q = debounced();
        q.add("a");
        assert_eq!(q.next().await, Some("a"));
        q.add_event("a");
        sleep_ms(500).await;
        assert_eq!(q.len(), 0, "never two workers on one key");
        q.done(&"a");
        // The change was 500 ms ago: quiet already.
        sleep_ms(1).await;
        assert_eq!(q.next().await, Some("a"));
        q.done(&"a");
        q.add("a");
        assert_eq!(q.next().await, Some("a"));
        q.add_event("a");
        q.done(&"a");
        sleep_ms(50).await;
        assert_eq!(q.len(), 0, "a change just before done still settles");
        sleep_ms(60).await;
        assert_eq!(q.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_immediate_add_takes_the_place_of_a_settling_burst() {
        let q = debounced();
        q.add_event("a");
        q.add("a");
        assert_eq!(q.next().await, Some("a"));
        q.done(&"a");
        sleep_ms(2000).await;
        assert_eq!(q.len(), 0, "the burst was absorbed by the add");
    }

    #[tokio::test(start_paused = true)]
    async fn events_of_a_key_waiting_in_the_queue_are_absorbed() {
        let q = debounced();
        q.add("a");
        q.add_event("a");
        assert_eq!(q.next().await, Some("a"));
        q.done(&"a");
        sleep_ms(2000).await;
        assert_eq!(q.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn without_debounce_an_event_is_queued_at_once() {
        let q = Queue::new();
        q.add_event("a");
        assert_eq!(q.len(), 1);
    }

    #[tokio::test]
    async fn close_releases_waiting_workers() {
        let q: Arc<Queue<&str>> = Queue::new();
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.next().await });
        tokio::task::yield_now().await;
        q.close();
        assert_eq!(waiter.await.unwrap(), None);
    }
}
