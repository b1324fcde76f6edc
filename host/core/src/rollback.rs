//! Automatic rollback: a new version on probation is judged by its first
//! calls, and put back to the previous version if too many fail.
//!
//! Loading checks that a file is a valid plugin; it cannot check that the
//! plugin decides well. After an upgrade the host keeps the previous version
//! in memory and watches the new one's first [`RollbackSettings::calls`]
//! reconciles (or its first [`RollbackSettings::seconds`]): if the share of
//! them that fail by the plugin's fault (an error, a trap, a deadline, the
//! memory cap, a fence refusal) is above [`RollbackSettings::max_error_rate`],
//! the previous version serves again. Failures of the API server or of RBAC
//! are not the plugin's fault and do not count.

use std::time::{Duration, Instant};

use serde::Deserialize;

/// A plugin's rollback settings (`rollback:` in its settings file).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackSettings {
    /// Judge new versions at all.
    pub enabled: bool,
    /// How many of a new version's first reconciles are judged.
    pub calls: u32,
    /// How long a new version is judged at most, in seconds.
    pub seconds: u64,
    /// Above this share of failed reconciles (0..1), roll back.
    pub max_error_rate: f64,
}

impl Default for RollbackSettings {
    fn default() -> Self {
        RollbackSettings {
            enabled: true,
            calls: 20,
            seconds: 300,
            max_error_rate: 0.5,
        }
    }
}

/// Rollback settings that cannot mean anything.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RollbackSettingsError {
    #[error("rollback.maxErrorRate must be between 0 and 1, got {0}")]
    MaxErrorRate(f64),
    #[error("rollback.calls must be at least 1")]
    NoCalls,
}

impl RollbackSettings {
    /// Refuse settings that cannot mean anything.
    pub fn validate(&self) -> Result<(), RollbackSettingsError> {
        if !(0.0..=1.0).contains(&self.max_error_rate) || self.max_error_rate.is_nan() {
            return Err(RollbackSettingsError::MaxErrorRate(self.max_error_rate));
        }
        if self.calls == 0 {
            return Err(RollbackSettingsError::NoCalls);
        }
        Ok(())
    }
}

/// What the probation decided after a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Still judging.
    Judging,
    /// The new version passed; the previous one can go.
    Passed,
    /// Roll back, and why.
    RollBack(String),
}

/// The record of one new version on probation.
#[derive(Debug)]
pub struct Probation {
    settings: RollbackSettings,
    started: Instant,
    calls: u32,
    errors: u32,
}

impl Probation {
    pub fn new(settings: RollbackSettings) -> Probation {
        Probation::starting_at(settings, Instant::now())
    }

    fn starting_at(settings: RollbackSettings, started: Instant) -> Probation {
        Probation {
            settings,
            started,
            calls: 0,
            errors: 0,
        }
    }

    /// Count one reconcile (`failed`: by the plugin's fault) and judge.
    pub fn record(&mut self, failed: bool) -> Verdict {
        self.record_at(failed, Instant::now())
    }

    fn record_at(&mut self, failed: bool, now: Instant) -> Verdict {
        let s = &self.settings;
        let window_over = now.duration_since(self.started) >= Duration::from_secs(s.seconds);
        // A call after the time window closes it without being counted.
        if !window_over {
            self.calls += 1;
            self.errors += u32::from(failed);
        }
        let limit = s.max_error_rate * f64::from(s.calls);
        let rate = |errors: u32, calls: u32| f64::from(errors) / f64::from(calls.max(1));
        let reason = |calls: u32| {
            format!(
                "{} of its first {calls} reconciles failed (more than {:.0}%)",
                self.errors,
                s.max_error_rate * 100.0
            )
        };
        // Certain to end above the threshold: no need to wait for the rest.
        if f64::from(self.errors) > limit {
            return Verdict::RollBack(reason(s.calls));
        }
        if self.calls >= s.calls || window_over {
            return if self.calls > 0 && rate(self.errors, self.calls) > s.max_error_rate {
                Verdict::RollBack(reason(self.calls))
            } else {
                Verdict::Passed
            };
        }
        Verdict::Judging
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(calls: u32, rate: f64) -> RollbackSettings {
        RollbackSettings {
            calls,
            max_error_rate: rate,
            ..RollbackSettings::default()
        }
    }

    #[test]
    fn a_version_failing_every_call_rolls_back_as_soon_as_the_outcome_is_certain() {
        let mut p = Probation::new(settings(10, 0.5));
        for _ in 0..5 {
            assert_eq!(p.record(true), Verdict::Judging);
        }
        let Verdict::RollBack(reason) = p.record(true) else {
            panic!("expected a rollback")
        };
        assert_eq!(
            reason,
            "6 of its first 10 reconciles failed (more than 50%)"
        );
    }

    #[test]
    fn a_healthy_version_passes_after_its_window() {
        let mut p = Probation::new(settings(4, 0.5));
        assert_eq!(p.record(true), Verdict::Judging);
        assert_eq!(p.record(false), Verdict::Judging);
        assert_eq!(p.record(true), Verdict::Judging);
        // 2 of 4 is not above 50 %.
        assert_eq!(p.record(false), Verdict::Passed);
    }

    #[test]
    fn the_time_window_judges_what_it_has() {
        let start = Instant::now();
        let mut p = Probation::starting_at(
            RollbackSettings {
                seconds: 60,
                ..settings(100, 0.2)
            },
            start,
        );
        assert_eq!(p.record_at(true, start), Verdict::Judging);
        assert_eq!(p.record_at(false, start), Verdict::Judging);
        // After the window: 1 of 2 failed, above 20 %.
        assert!(matches!(
            p.record_at(false, start + Duration::from_secs(61)),
            Verdict::RollBack(r) if r.starts_with("1 of its first 2")
        ));
        let mut quiet = Probation::starting_at(settings(100, 0.2), start);
        assert_eq!(
            quiet.record_at(true, start + Duration::from_secs(301)),
            Verdict::Passed,
            "no call inside the window: nothing to judge"
        );
    }

    #[test]
    fn settings_are_checked() {
        assert!(settings(10, 1.5).validate().is_err());
        assert!(settings(0, 0.5).validate().is_err());
        assert!(RollbackSettings::default().validate().is_ok());
        let parsed: RollbackSettings =
            crate::yaml::from_str("calls: 5\nmaxErrorRate: 0.1").unwrap();
        assert_eq!(parsed.calls, 5);
        assert_eq!(parsed.seconds, 300);
    }
}
