//! Parents whose reconciles keep failing, so that a plugin that fails on
//! most of what it reconciles (a refused read, a forbidden write, a trap, a
//! kind the API server does not serve) shows `degraded` with the latest
//! reason instead of `running`, and `running` again once its parents
//! reconcile.
//!
//! Health is judged per parent, not per call: a parent retried with backoff
//! makes more calls than one that succeeded once, and a plugin that fails on
//! one bad parent out of a hundred is healthy (that parent has its Event).

use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

use kubeplug_kube::informers::{ObjectKey, Problem};

/// Failures in a row that make a parent count as failing: one failure may
/// be a conflict or a restart the retry clears.
const FAILING_AFTER: u32 = 2;

/// Each parent's failures in a row (0: its last reconcile succeeded) and
/// its latest failure's text.
#[derive(Default)]
pub struct Failing {
    parents: DashMap<ObjectKey, Outcome>,
    /// Orders failures, so that the reason shown is the latest of a parent
    /// that keeps failing (not one that failed once, or has recovered).
    seq: AtomicU64,
}

#[derive(Default)]
struct Outcome {
    failures: u32,
    seq: u64,
    why: String,
}

impl Failing {
    pub fn succeeded(&self, key: &ObjectKey) {
        self.parents.insert(key.clone(), Outcome::default());
    }

    /// Count a failure of `key`'s reconcile (`why`: one line) and return its
    /// failures in a row, for the backoff.
    pub fn failed(&self, key: &ObjectKey, why: String) -> u32 {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let mut outcome = self.parents.entry(key.clone()).or_default();
        outcome.failures += 1;
        outcome.seq = seq;
        outcome.why = why;
        outcome.failures
    }

    /// The parent is gone (or reconciled elsewhere now).
    pub fn forget(&self, key: &ObjectKey) {
        self.parents.remove(key);
    }

    /// A new version serves: its predecessor's failures say nothing of it.
    pub fn clear(&self) {
        self.parents.clear();
    }

    /// `degraded` while at least half of the parents with an outcome fail
    /// (counting only those `exists` still finds).
    pub fn problem(&self, exists: impl Fn(&ObjectKey) -> bool) -> Option<Problem> {
        self.parents.retain(|key, _| exists(key));
        let total = self.parents.len();
        let mut failing = 0;
        let mut latest: Option<(u64, String)> = None;
        for entry in self.parents.iter() {
            let outcome = entry.value();
            if outcome.failures < FAILING_AFTER {
                continue;
            }
            failing += 1;
            if latest.as_ref().is_none_or(|(seq, _)| outcome.seq > *seq) {
                latest = Some((outcome.seq, format!("{}: {}", entry.key(), outcome.why)));
            }
        }
        if failing == 0 || failing * 2 < total {
            return None;
        }
        let (_, latest) = latest?;
        Some(Problem {
            message: format!(
                "reconciles keep failing ({failing} of the {total} parents it reconciled); latest, {latest}"
            ),
            persistent: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("team-a", name)
    }

    #[test]
    fn one_parent_failing_twice_in_a_row_degrades_the_plugin_until_it_reconciles() {
        let f = Failing::default();
        assert_eq!(f.failed(&key("a"), "may not get greetings".into()), 1);
        assert!(
            f.problem(|_| true).is_none(),
            "one failure may be transient"
        );
        assert_eq!(f.failed(&key("a"), "may not get greetings".into()), 2);
        let p = f.problem(|_| true).expect("degraded");
        assert!(p.persistent);
        assert_eq!(
            p.message,
            "reconciles keep failing (1 of the 1 parents it reconciled); latest, team-a/a: may not get greetings"
        );
        f.succeeded(&key("a"));
        assert!(f.problem(|_| true).is_none());
    }

    #[test]
    fn one_bad_parent_among_healthy_ones_leaves_the_plugin_running() {
        let f = Failing::default();
        for name in ["a", "b", "c"] {
            f.succeeded(&key(name));
        }
        for _ in 0..5 {
            f.failed(&key("bad"), "invalid input".into());
        }
        assert!(f.problem(|_| true).is_none(), "1 of 4 fails");
        f.failed(&key("b"), "trap".into());
        f.failed(&key("b"), "trap".into());
        // A one-off failure after them is not the reason shown.
        f.failed(&key("c"), "conflict".into());
        let p = f.problem(|_| true).expect("2 of 4 fail");
        assert!(p.message.contains("2 of the 4") && p.message.ends_with("team-a/b: trap"));
    }

    #[test]
    fn deleted_parents_and_a_new_version_forget_what_failed() {
        let f = Failing::default();
        f.failed(&key("gone"), "x".into());
        f.failed(&key("gone"), "x".into());
        assert!(f.problem(|k| k.name != "gone").is_none());
        f.failed(&key("a"), "x".into());
        f.failed(&key("a"), "x".into());
        f.clear();
        assert!(f.problem(|_| true).is_none());
    }
}
