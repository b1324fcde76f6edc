//! Where a plugin's rollout stands, judged without a cluster: the state a
//! plugin is reported in ([`State`], on `/plugins` and in `plugin_info`),
//! and the latest upgrade on probation or rolled back ([`Rollout`], whose
//! judgement is [`crate::rollback::Probation`]'s).
//!
//! Generic over the plugin version `P` and the parent key `K` the caller
//! uses, so that this module names neither the Wasm runtime nor Kubernetes.

use serde::Serialize;

use crate::rollback::{Probation, RollbackSettings, Verdict};

/// A plugin's state, as reported by `/plugins` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Serving its latest file.
    Running,
    /// Serving an older version (the latest file failed to load), or
    /// unable to watch a kind it needs (RBAC, a missing CRD): see `reason`.
    Degraded,
    /// Nothing serving: the file failed to load.
    Failed,
    /// The latest file loaded but failed its probation: the previous
    /// version serves again (see [`crate::rollback`]); `reason` says why.
    #[serde(rename = "rolled-back")]
    RolledBack,
    /// The latest file loaded, but its what-if breaks the promotion gate of
    /// the plugin's grant (see [`crate::policy::Gate`]): the previous
    /// version serves until the gate or the file changes.
    Blocked,
}

impl State {
    /// The state of a file: whether a version `serves` from it, whether
    /// its latest content `failed` to load, whether the serving version
    /// was `rolled_back` to, and whether it is `stuck` (cannot watch a kind
    /// it needs).
    pub fn of(serves: bool, failed: bool, rolled_back: bool, stuck: bool) -> State {
        match (serves, failed) {
            (true, false) if rolled_back => State::RolledBack,
            (true, false) if !stuck => State::Running,
            (true, _) => State::Degraded,
            (false, _) => State::Failed,
        }
    }

    /// The state's one spelling, on `/plugins` and as the `state` label.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Degraded => "degraded",
            State::Failed => "failed",
            State::RolledBack => "rolled-back",
            State::Blocked => "blocked",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many parents get an Event about a rollback.
pub const ROLLBACK_EVENTS: usize = 5;

/// A version that was rolled back.
#[derive(Debug, Clone)]
pub struct RolledBack {
    pub version: String,
    pub digest: String,
    /// Content key of its file: the registry does not load it again.
    pub key: String,
    pub reason: String,
    /// RFC 3339.
    pub at: String,
}

/// Where the latest upgrade of one plugin stands.
#[derive(Debug)]
pub struct Rollout<P, K> {
    probation: Option<OnProbation<P, K>>,
    rolled_back: Option<RolledBack>,
}

impl<P, K> Default for Rollout<P, K> {
    fn default() -> Self {
        Rollout {
            probation: None,
            rolled_back: None,
        }
    }
}

/// A new version being judged, and the version to put back.
#[derive(Debug)]
struct OnProbation<P, K> {
    new: P,
    previous: P,
    /// Content key of the new version's file.
    key: String,
    probation: Probation,
    /// A few parents the new version failed on (they get an Event if it is
    /// rolled back).
    failed_on: Vec<K>,
}

/// What one finished reconcile did to the rollout.
#[derive(Debug, PartialEq)]
pub enum Judged<P, K> {
    /// Not the version on probation, or still judging it.
    Judging,
    /// The new version passed; the previous one is let go.
    Passed,
    /// Put `previous` back: `new` failed its probation for `reason`.
    RollBack {
        new: P,
        previous: P,
        /// Content key of `new`'s file.
        key: String,
        reason: String,
        /// Parents `new` failed on, at most [`ROLLBACK_EVENTS`].
        failed_on: Vec<K>,
    },
}

impl<P, K: PartialEq + Clone> Rollout<P, K> {
    /// `new` (from the file with content key `key`) replaces `previous`:
    /// judge it under `settings`, forgetting any earlier rollback.
    pub fn start(&mut self, new: P, previous: P, key: String, settings: RollbackSettings) {
        self.rolled_back = None;
        self.probation = settings.enabled.then(|| OnProbation {
            new,
            previous,
            key,
            probation: Probation::new(settings),
            failed_on: Vec::new(),
        });
    }

    /// Count a reconcile of `parent` finished by the version `is_new`
    /// tells apart (`fault`: failed by the plugin's fault), and judge.
    pub fn record(
        &mut self,
        is_new: impl FnOnce(&P) -> bool,
        parent: &K,
        fault: bool,
    ) -> Judged<P, K> {
        let Some(on) = self.probation.as_mut().filter(|on| is_new(&on.new)) else {
            return Judged::Judging;
        };
        if fault && on.failed_on.len() < ROLLBACK_EVENTS && !on.failed_on.contains(parent) {
            on.failed_on.push(parent.clone());
        }
        match on.probation.record(fault) {
            Verdict::Judging => Judged::Judging,
            Verdict::Passed => {
                self.probation = None;
                Judged::Passed
            }
            Verdict::RollBack(reason) => {
                let on = self.probation.take().expect("on probation: checked above");
                Judged::RollBack {
                    new: on.new,
                    previous: on.previous,
                    key: on.key,
                    reason,
                    failed_on: on.failed_on,
                }
            }
        }
    }

    /// Remember the version rolled back, while the previous one serves.
    pub fn rolled_back_to_previous(&mut self, back: RolledBack) {
        self.rolled_back = Some(back);
    }

    /// The version that was rolled back, while the previous one serves.
    pub fn rolled_back(&self) -> Option<&RolledBack> {
        self.rolled_back.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(calls: u32) -> RollbackSettings {
        RollbackSettings {
            calls,
            max_error_rate: 0.5,
            ..RollbackSettings::default()
        }
    }

    #[test]
    fn a_state_is_spelled_once_for_the_api_and_the_metrics() {
        for state in [
            State::Running,
            State::Degraded,
            State::Failed,
            State::RolledBack,
            State::Blocked,
        ] {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::from(state.as_str())
            );
            assert_eq!(state.to_string(), state.as_str());
        }
    }

    #[test]
    fn a_file_is_running_degraded_failed_or_rolled_back() {
        assert_eq!(State::of(true, false, false, false), State::Running);
        assert_eq!(State::of(true, false, true, false), State::RolledBack);
        assert_eq!(State::of(true, true, true, false), State::Degraded);
        assert_eq!(State::of(true, false, false, true), State::Degraded);
        assert_eq!(State::of(false, true, false, false), State::Failed);
    }

    #[test]
    fn a_new_version_failing_its_probation_puts_the_previous_back_naming_where_it_failed() {
        let mut rollout: Rollout<&str, u32> = Rollout::default();
        rollout.start("v2", "v1", "key2".into(), settings(2));
        assert_eq!(rollout.record(|p| *p == "v1", &7, true), Judged::Judging);
        assert_eq!(rollout.record(|p| *p == "v2", &7, true), Judged::Judging);
        let Judged::RollBack {
            new,
            previous,
            key,
            failed_on,
            ..
        } = rollout.record(|p| *p == "v2", &7, true)
        else {
            panic!("expected a rollback")
        };
        assert_eq!((new, previous, key.as_str()), ("v2", "v1", "key2"));
        assert_eq!(failed_on, vec![7], "each parent once");
        assert_eq!(rollout.record(|_| true, &8, true), Judged::Judging);
    }

    #[test]
    fn a_passed_probation_ends_and_a_new_upgrade_forgets_the_last_rollback() {
        let mut rollout: Rollout<&str, u32> = Rollout::default();
        rollout.rolled_back_to_previous(RolledBack {
            version: "0.2.0".into(),
            digest: "ab".into(),
            key: "k".into(),
            reason: "r".into(),
            at: "t".into(),
        });
        rollout.start("v3", "v1", "key3".into(), settings(1));
        assert!(rollout.rolled_back().is_none());
        assert_eq!(rollout.record(|_| true, &1, false), Judged::Passed);
        assert_eq!(rollout.record(|_| true, &1, true), Judged::Judging);
    }
}
