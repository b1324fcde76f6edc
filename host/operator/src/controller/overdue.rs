//! Calls that ran past their deadline, so that a plugin whose calls keep
//! timing out shows `degraded` with the reason instead of looking healthy
//! between its failures.

use std::collections::VecDeque;
use std::time::Duration;

use crate::error::ReconcileError;
use kubeplug_kube::informers::Problem;
use kubeplug_runtime::CallError;

/// Calls remembered.
const WINDOW: usize = 20;
/// Calls of the window past their deadline that make the plugin degraded.
const DEGRADED_AT: usize = 5;

/// The outcomes of a plugin's latest calls: past their deadline or not.
#[derive(Default)]
pub struct Overdue {
    recent: VecDeque<bool>,
    timeout: Option<Duration>,
}

impl Overdue {
    pub fn record<T>(&mut self, result: &Result<T, ReconcileError>) {
        let overdue = match result {
            Err(ReconcileError::Call(CallError::Deadline { timeout, .. })) => {
                self.timeout = Some(*timeout);
                true
            }
            _ => false,
        };
        if self.recent.len() == WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(overdue);
    }

    pub fn problem(&self) -> Option<Problem> {
        let overdue = self.recent.iter().filter(|&&o| o).count();
        (overdue >= DEGRADED_AT).then(|| Problem {
            message: format!(
                "{overdue} of its last {} calls ran past their deadline of {:?} and were stopped",
                self.recent.len(),
                self.timeout.unwrap_or_default()
            ),
            persistent: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadline() -> Result<(), ReconcileError> {
        Err(ReconcileError::Call(CallError::Deadline {
            plugin: "p".into(),
            timeout: Duration::from_secs(1),
        }))
    }

    #[test]
    fn a_plugin_whose_calls_keep_timing_out_is_degraded_until_they_stop() {
        let mut o = Overdue::default();
        for _ in 0..4 {
            o.record(&deadline());
        }
        assert!(o.problem().is_none());
        o.record(&deadline());
        let p = o.problem().expect("degraded");
        assert_eq!(
            p.message,
            "5 of its last 5 calls ran past their deadline of 1s and were stopped"
        );
        for _ in 0..WINDOW {
            o.record(&Ok(()));
        }
        assert!(o.problem().is_none());
    }
}
