//! The captures one plugin keeps: bounded in count and bytes, one per
//! parent, oldest out first.

use std::collections::VecDeque;

use parking_lot::{Mutex, MutexGuard};
use serde::Serialize;

use super::{Call, Capture};

/// Bounds of one plugin's ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLimits {
    /// Captures kept.
    pub entries: usize,
    /// Bytes kept (captures as serialized JSON).
    pub bytes: usize,
}

impl Default for RingLimits {
    fn default() -> Self {
        RingLimits {
            entries: 32,
            bytes: 4 << 20,
        }
    }
}

/// One line of a ring's listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub parent: String,
    pub at: String,
    pub call: Call,
    pub reason: String,
    pub error: String,
    pub bytes: usize,
}

struct Entry {
    capture: Capture,
    bytes: usize,
}

#[derive(Default)]
struct Kept {
    /// Oldest first.
    entries: VecDeque<Entry>,
    bytes: usize,
}

/// The last failures of one plugin, one per parent. Thread-safe.
pub struct Ring {
    limits: RingLimits,
    kept: Mutex<Kept>,
}

impl Default for Ring {
    fn default() -> Self {
        Ring::new(RingLimits::default())
    }
}

impl Ring {
    pub fn new(limits: RingLimits) -> Self {
        Ring {
            limits,
            kept: Mutex::default(),
        }
    }

    fn kept(&self) -> MutexGuard<'_, Kept> {
        self.kept.lock()
    }

    /// Keep `capture`, replacing its parent's older one (so that a parent
    /// failing again and again cannot flush the others), then drop the
    /// oldest while over a bound. A capture bigger than the byte bound is
    /// dropped (and logged): it would flush everything else.
    pub fn record(&self, capture: Capture) {
        let bytes = serde_json::to_vec(&capture).map_or(usize::MAX, |v| v.len());
        if bytes > self.limits.bytes {
            tracing::warn!(
                plugin = %capture.plugin,
                parent = %capture.parent,
                bytes,
                limit = self.limits.bytes,
                "failure capture over the replay ring's byte bound; not kept"
            );
            return;
        }
        let mut kept = self.kept();
        if let Some(i) = kept
            .entries
            .iter()
            .position(|e| e.capture.parent == capture.parent)
        {
            let old = kept.entries.remove(i).expect("index just found");
            kept.bytes -= old.bytes;
        }
        kept.bytes += bytes;
        kept.entries.push_back(Entry { capture, bytes });
        while kept.entries.len() > self.limits.entries || kept.bytes > self.limits.bytes {
            let Some(old) = kept.entries.pop_front() else {
                break;
            };
            kept.bytes -= old.bytes;
        }
    }

    /// What is kept, newest first.
    pub fn list(&self) -> Vec<Summary> {
        self.kept()
            .entries
            .iter()
            .rev()
            .map(|e| Summary {
                parent: e.capture.parent.clone(),
                at: e.capture.at.clone(),
                call: e.capture.call,
                reason: e.capture.reason.clone(),
                error: e.capture.error.clone(),
                bytes: e.bytes,
            })
            .collect()
    }

    /// The capture of `parent` (`namespace/name`, or `name` when
    /// cluster-scoped).
    pub fn get(&self, parent: &str) -> Option<Capture> {
        self.kept()
            .entries
            .iter()
            .find(|e| e.capture.parent == parent)
            .map(|e| e.capture.clone())
    }

    /// Forget everything (e.g. a new version of the plugin was loaded).
    pub fn clear(&self) {
        *self.kept() = Kept::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::tests::capture;

    fn size(c: &Capture) -> usize {
        serde_json::to_vec(c).unwrap().len()
    }

    fn parents(ring: &Ring) -> Vec<String> {
        ring.list().into_iter().map(|s| s.parent).collect()
    }

    #[test]
    fn the_oldest_goes_first_past_the_count() {
        let ring = Ring::new(RingLimits {
            entries: 2,
            ..RingLimits::default()
        });
        for p in ["ns/a", "ns/b", "ns/c"] {
            ring.record(capture(p, "boom"));
        }
        assert_eq!(parents(&ring), ["ns/c", "ns/b"]);
        assert!(ring.get("ns/a").is_none());
        assert_eq!(ring.get("ns/b").unwrap().parent, "ns/b");
    }

    #[test]
    fn the_oldest_goes_first_past_the_bytes() {
        let one = size(&capture("ns/a", "boom"));
        let ring = Ring::new(RingLimits {
            entries: 100,
            bytes: 2 * one + one / 2,
        });
        for p in ["ns/a", "ns/b", "ns/c"] {
            ring.record(capture(p, "boom"));
        }
        assert_eq!(parents(&ring), ["ns/c", "ns/b"]);
        assert_eq!(ring.list()[0].bytes, one);
    }

    #[test]
    fn a_parent_failing_again_replaces_its_capture_only() {
        let ring = Ring::new(RingLimits {
            entries: 2,
            ..RingLimits::default()
        });
        ring.record(capture("ns/a", "first"));
        ring.record(capture("ns/b", "boom"));
        for _ in 0..10 {
            ring.record(capture("ns/a", "again"));
        }
        assert_eq!(parents(&ring), ["ns/a", "ns/b"]);
        assert_eq!(ring.get("ns/a").unwrap().error, "again");
    }

    #[test]
    fn a_capture_over_the_byte_bound_is_dropped_and_the_rest_kept() {
        let small = capture("ns/a", "boom");
        let ring = Ring::new(RingLimits {
            entries: 10,
            bytes: size(&small) + 100,
        });
        ring.record(small);
        ring.record(capture("ns/big", &"x".repeat(1000)));
        assert_eq!(parents(&ring), ["ns/a"]);
        ring.clear();
        assert!(ring.list().is_empty());
    }
}
