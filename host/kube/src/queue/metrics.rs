//! client-go's workqueue metrics for a [`Queue`](super::Queue), under the
//! names stock client-go and controller-runtime dashboards and alerts query,
//! labelled `controller` and `name` (both the plugin's name, as
//! controller-runtime names a controller's queue after it). They are
//! registered without the `kubeplug_` prefix; `kubeplug_queue_depth` stays
//! beside them.
//!
//! What each family counts, as client-go counts it:
//! - `workqueue_depth`: keys waiting to be handed out, those added while being
//!   worked on (handed out again after [`Queue::done`](super::Queue::done))
//!   included; keys still settling ([`Debounce`](super::Debounce)) or
//!   scheduled for later are not in the queue yet;
//! - `workqueue_adds_total`: keys entering the queue; an add of a key already
//!   waiting is absorbed and not counted, a debounced or delayed add counts
//!   when it lands;
//! - `workqueue_queue_duration_seconds`: from a key's first add to a worker
//!   taking it;
//! - `workqueue_work_duration_seconds`: from a worker taking a key to `done`;
//! - `workqueue_retries_total`: [`Queue::retry_after`](super::Queue::retry_after)
//!   (a failure backing off), as client-go counts `AddRateLimited`;
//! - `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds`:
//!   the work in progress (summed over keys, and the oldest), refreshed every
//!   [`REFRESH`] by a task of the queue.
//!
//! Caveats: the gauges are zeroed when the queue closes or is dropped. A
//! queue replacing another of the same name (a plugin's controller
//! restarted) shares its series; whichever closes last may zero them, and
//! the live queue sets them again within [`REFRESH`].

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

/// client-go's `ExponentialBuckets(10e-9, 10, 12)`: 10 ns to 1000 s, each
/// ten times the last. Written out so that they read as what dashboards
/// expect.
pub const BUCKETS: [f64; 12] = [
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0,
];

/// How often the work-in-progress gauges are refreshed: client-go's period.
pub const REFRESH: Duration = Duration::from_millis(500);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    controller: String,
    name: String,
}

type SecondsGauge = Gauge<f64, AtomicU64>;

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The workqueue families of every queue of a host. Cheap to clone.
#[derive(Clone)]
pub struct WorkqueueMetrics {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: Family<QueueLabels, Histogram>,
    work_duration: Family<QueueLabels, Histogram>,
    retries: Family<QueueLabels, Counter>,
    unfinished: Family<QueueLabels, SecondsGauge>,
    longest: Family<QueueLabels, SecondsGauge>,
}

impl Default for WorkqueueMetrics {
    fn default() -> Self {
        WorkqueueMetrics {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(histogram),
            work_duration: Family::new_with_constructor(histogram),
            retries: Family::default(),
            unfinished: Family::default(),
            longest: Family::default(),
        }
    }
}

impl WorkqueueMetrics {
    /// The families, registered in `registry` (one without prefix: the
    /// names are client-go's). Help texts are client-go's.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            m.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            m.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            m.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            m.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            m.retries.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases",
            m.unfinished.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            m.longest.clone(),
        );
        m
    }

    /// The series of the queue `name` (its controller's name too), created
    /// now so that a dashboard shows the queue before its first add.
    pub fn queue(&self, name: &str) -> QueueObserver {
        let labels = QueueLabels {
            controller: name.into(),
            name: name.into(),
        };
        QueueObserver {
            depth: self.depth.get_or_create(&labels).clone(),
            adds: self.adds.get_or_create(&labels).clone(),
            queue_duration: self.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.work_duration.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
            unfinished: self.unfinished.get_or_create(&labels).clone(),
            longest: self.longest.get_or_create(&labels).clone(),
        }
    }
}

/// One queue's series (see [`WorkqueueMetrics::queue`]), handed to
/// [`Queue::observed`](super::Queue::observed).
#[derive(Clone)]
pub struct QueueObserver {
    depth: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    unfinished: SecondsGauge,
    longest: SecondsGauge,
}

impl QueueObserver {
    fn zero(&self) {
        self.depth.set(0);
        self.unfinished.set(0.0);
        self.longest.set(0.0);
    }
}

/// What an observed queue tracks under its lock: when each key entered and
/// when each key being worked on was handed out.
pub(super) struct Tracker<K> {
    observer: QueueObserver,
    /// First add of each key waiting, or added while worked on.
    added: HashMap<K, Instant>,
    /// When each key being worked on was handed out.
    started: HashMap<K, Instant>,
}

impl<K: Clone + Eq + Hash> Tracker<K> {
    pub(super) fn new(observer: QueueObserver) -> Self {
        Tracker {
            observer,
            added: HashMap::new(),
            started: HashMap::new(),
        }
    }

    /// `key` entered the queue (or was added while being worked on).
    pub(super) fn added(&mut self, key: &K, now: Instant) {
        self.observer.adds.inc();
        self.added.entry(key.clone()).or_insert(now);
    }

    /// A worker took `key`.
    pub(super) fn handed_out(&mut self, key: &K, now: Instant) {
        if let Some(at) = self.added.remove(key) {
            self.observer
                .queue_duration
                .observe(now.saturating_duration_since(at).as_secs_f64());
        }
        self.started.insert(key.clone(), now);
    }

    /// The worker is finished with `key`.
    pub(super) fn done(&mut self, key: &K, now: Instant) {
        if let Some(at) = self.started.remove(key) {
            self.observer
                .work_duration
                .observe(now.saturating_duration_since(at).as_secs_f64());
        }
    }

    pub(super) fn depth(&self, waiting: usize) {
        self.observer
            .depth
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }

    pub(super) fn retried(&self) {
        self.observer.retries.inc();
    }

    /// Set the work-in-progress gauges as of `now`.
    pub(super) fn refresh(&self, now: Instant) {
        let running = self
            .started
            .values()
            .map(|at| now.saturating_duration_since(*at).as_secs_f64());
        let (sum, longest) = running.fold((0.0, 0.0_f64), |(sum, longest), secs| {
            (sum + secs, longest.max(secs))
        });
        self.observer.unfinished.set(sum);
        self.observer.longest.set(longest);
    }

    /// The queue closed: nothing waits or runs any more.
    pub(super) fn closed(&mut self) {
        self.added.clear();
        self.started.clear();
        self.observer.zero();
    }
}

impl<K> Drop for Tracker<K> {
    fn drop(&mut self) {
        self.observer.zero();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{Debounce, Queue};
    use super::*;

    /// An observed queue `p` and the registry its series are in.
    fn observed(debounce: Debounce) -> (Arc<Queue<&'static str>>, Registry) {
        let mut registry = Registry::default();
        let metrics = WorkqueueMetrics::register(&mut registry);
        (Queue::observed(debounce, metrics.queue("p")), registry)
    }

    /// The value of series `name` of queue `p` (`name` may end in a label,
    /// e.g. `_bucket{le="1.0"`).
    fn value(registry: &Registry, name: &str) -> f64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        let labels = r#"controller="p",name="p"}"#;
        let series = if name.ends_with('"') {
            format!("{name},{labels} ")
        } else {
            format!("{name}{{{labels} ")
        };
        text.lines()
            .find_map(|line| line.strip_prefix(&series))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    }

    async fn sleep_ms(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_counts_each_key_it_takes_in_once_and_times_its_wait_and_its_work() {
        let (q, r) = observed(Debounce::NONE);
        assert_eq!(value(&r, "workqueue_depth"), 0.0, "shown before any add");
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(value(&r, "workqueue_adds_total"), 2.0, "absorbed adds");
        assert_eq!(value(&r, "workqueue_depth"), 2.0);
        sleep_ms(3000).await;
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(value(&r, "workqueue_depth"), 1.0);
        assert_eq!(value(&r, "workqueue_queue_duration_seconds_sum"), 3.0);
        sleep_ms(2000).await;
        q.done(&"a");
        assert_eq!(value(&r, "workqueue_work_duration_seconds_sum"), 2.0);
        assert_eq!(value(&r, "workqueue_work_duration_seconds_count"), 1.0);
        assert_eq!(
            value(&r, r#"workqueue_work_duration_seconds_bucket{le="1.0""#),
            0.0
        );
        assert_eq!(
            value(&r, r#"workqueue_work_duration_seconds_bucket{le="10.0""#),
            1.0
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_worked_on_waits_in_the_depth_and_is_counted_once() {
        let (q, r) = observed(Debounce::NONE);
        q.add("a");
        assert_eq!(q.next().await, Some("a"));
        sleep_ms(1000).await;
        q.add("a");
        q.add("a");
        assert_eq!(value(&r, "workqueue_adds_total"), 2.0);
        assert_eq!(value(&r, "workqueue_depth"), 1.0, "to be handed out again");
        sleep_ms(1000).await;
        q.done(&"a");
        assert_eq!(
            value(&r, "workqueue_adds_total"),
            2.0,
            "requeued, not added"
        );
        assert_eq!(value(&r, "workqueue_depth"), 1.0);
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(value(&r, "workqueue_depth"), 0.0);
        assert_eq!(
            value(&r, "workqueue_queue_duration_seconds_sum"),
            1.0,
            "waited from its add until the worker before it was done"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_events_is_one_add_when_it_lands() {
        let (q, r) = observed(Debounce {
            quiet: Duration::from_millis(100),
            max: Duration::from_secs(1),
        });
        q.add_event("a");
        q.add_event("a");
        assert_eq!(value(&r, "workqueue_adds_total"), 0.0, "still settling");
        assert_eq!(value(&r, "workqueue_depth"), 0.0);
        sleep_ms(150).await;
        assert_eq!(value(&r, "workqueue_adds_total"), 1.0);
        assert_eq!(value(&r, "workqueue_depth"), 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_counted_by_retry_after_alone() {
        let (q, r) = observed(Debounce::NONE);
        q.retry_after("a", Duration::from_secs(1));
        q.add_after("b", Duration::from_secs(1));
        assert_eq!(value(&r, "workqueue_retries_total"), 1.0);
        assert_eq!(value(&r, "workqueue_adds_total"), 0.0, "not landed yet");
        sleep_ms(1100).await;
        assert_eq!(value(&r, "workqueue_adds_total"), 2.0);
        assert_eq!(value(&r, "workqueue_retries_total"), 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn work_in_progress_is_refreshed_and_every_gauge_is_zeroed_when_the_queue_closes() {
        let (q, r) = observed(Debounce::NONE);
        q.add("a");
        q.add("b");
        q.add("c");
        assert_eq!(q.next().await, Some("a"));
        sleep_ms(1000).await;
        assert_eq!(q.next().await, Some("b"));
        // The refresh at 3 s has run, the next one (3.5 s) not yet.
        sleep_ms(2250).await;
        assert_eq!(value(&r, "workqueue_unfinished_work_seconds"), 5.0);
        assert_eq!(
            value(&r, "workqueue_longest_running_processor_seconds"),
            3.0
        );
        q.done(&"a");
        sleep_ms(500).await;
        assert_eq!(
            value(&r, "workqueue_longest_running_processor_seconds"),
            2.5
        );
        q.close();
        assert_eq!(value(&r, "workqueue_depth"), 0.0, "c is never handed out");
        assert_eq!(value(&r, "workqueue_unfinished_work_seconds"), 0.0);
        assert_eq!(
            value(&r, "workqueue_longest_running_processor_seconds"),
            0.0
        );
        q.add("d");
        q.done(&"b");
        sleep_ms(1000).await;
        assert_eq!(value(&r, "workqueue_depth"), 0.0, "closed");
        assert_eq!(value(&r, "workqueue_adds_total"), 3.0);
    }
}
