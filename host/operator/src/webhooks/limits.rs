//! The bounds every review passes before its body is read: how many are
//! in flight, per plugin and on the host, and the memory each holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Answer, status};
use crate::metrics::OperatorMetrics;
use crate::registry::Registry;
use kubeplug_core::webhook::{self, Webhook};
use kubeplug_runtime::MemoryBudget;
use kubeplug_runtime::budget::Reservation;

/// Reviews in flight (read, waiting or answered) for one plugin at once.
/// The API server's own webhook client sends far fewer; more is a flood,
/// answered `429` while others' reviews go on.
pub const PLUGIN_REVIEWS: usize = 16;
/// Reviews in flight on the host at once, all plugins together.
pub const HOST_REVIEWS: usize = 64;

/// The bounds every review passes before its body is read: how many may be
/// in flight, per plugin and in all, and the memory each holds, taken from
/// the budget plugin calls share (so that a flood of reviews cannot take a
/// host past its container's limit, and one plugin's flood leaves the rest
/// of the budget to the others).
pub struct ReviewLimits {
    budget: Arc<MemoryBudget>,
    host: Arc<Semaphore>,
    plugins: Mutex<HashMap<String, Arc<Semaphore>>>,
    per_plugin: usize,
}

impl ReviewLimits {
    pub fn new(budget: Arc<MemoryBudget>) -> Self {
        Self::with(budget, HOST_REVIEWS, PLUGIN_REVIEWS)
    }

    pub fn with(budget: Arc<MemoryBudget>, host: usize, per_plugin: usize) -> Self {
        ReviewLimits {
            budget,
            host: Arc::new(Semaphore::new(host)),
            plugins: Mutex::new(HashMap::new()),
            per_plugin,
        }
    }

    /// The most memory one plugin's reviews may hold together: half the
    /// budget, as for its calls.
    pub fn plugin_share(&self) -> usize {
        self.budget.total() / 2
    }

    fn plugin(&self, plugin: &str) -> Arc<Semaphore> {
        let mut plugins = self.plugins.lock();
        plugins
            .entry(plugin.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_plugin)))
            .clone()
    }
}

/// What answers reviews: the plugins, the bounds reviews pass, the metrics
/// they count in.
pub struct Reviews {
    pub registry: Arc<Registry>,
    pub metrics: OperatorMetrics,
    pub limits: ReviewLimits,
}

/// A review's place among those in flight: given back when dropped.
pub(super) struct Entry {
    pub(super) _plugin: OwnedSemaphorePermit,
    pub(super) _host: OwnedSemaphorePermit,
    pub(super) memory: Reservation,
}

/// Why a review is not read: answered before its body is.
pub(super) fn busy(plugin: &str, what: &str, waited: Duration) -> (Answer, &'static str) {
    (
        status(
            429,
            "TooManyRequests",
            format!(
                "plugin {plugin}'s reviews are at their bound ({what}) and none ended within \
                 {waited:.1?}; try again"
            ),
        ),
        "busy",
    )
}

pub(super) fn too_large(plugin: &str, needs: usize, share: usize) -> (Answer, &'static str) {
    (
        status(
            413,
            "RequestEntityTooLarge",
            format!(
                "answering this review would hold about {} MiB; plugin {plugin}'s reviews may \
                 hold {} MiB on this host (half its memory budget for calls: raise \
                 --memory-limit-mib or the container's limit)",
                needs.div_ceil(1 << 20),
                share >> 20
            ),
        ),
        "too_large",
    )
}

/// Take a place for one review of `plugin` (whose body says it is
/// `declared` bytes long, if it says), waiting until `until` at most.
pub(super) async fn enter(
    limits: &ReviewLimits,
    plugin: &str,
    webhook: Webhook,
    declared: Option<usize>,
    until: Instant,
) -> Result<Entry, (Answer, &'static str)> {
    let started = Instant::now();
    let floor = webhook::review_floor(declared.unwrap_or(webhook.max_body()));
    let share = limits.plugin_share();
    if floor > share {
        return Err(too_large(plugin, floor, share));
    }
    let wait = |sem: Arc<Semaphore>| tokio::time::timeout_at(until.into(), sem.acquire_owned());
    let Ok(Ok(mine)) = wait(limits.plugin(plugin)).await else {
        return Err(busy(
            plugin,
            &format!("{} at once", limits.per_plugin),
            started.elapsed(),
        ));
    };
    let Ok(Ok(host)) = wait(limits.host.clone()).await else {
        return Err(busy(
            plugin,
            "the host's reviews at once",
            started.elapsed(),
        ));
    };
    let budget = limits.budget.clone();
    // The plugin's own share of the budget, the one its calls are charged
    // to: a flooded plugin's reviews and calls together hold at most half,
    // and every other plugin keeps the rest.
    let key: Arc<str> = plugin.into();
    let left = until.saturating_duration_since(Instant::now());
    let reserved = tokio::task::spawn_blocking(move || budget.reserve(&key, floor, share, left))
        .await
        .map_err(|e| (status(500, "InternalError", format!("{e}")), "failed"))?;
    let memory = reserved.map_err(|_| busy(plugin, "memory", started.elapsed()))?;
    Ok(Entry {
        _plugin: mine,
        _host: host,
        memory,
    })
}

/// A review's place and memory, given back when dropped.
pub struct Hold {
    pub(super) _entry: Entry,
}
