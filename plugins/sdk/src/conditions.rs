//! Status conditions that do not churn.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Set condition `new` in `conditions`, keeping `lastTransitionTime` when the
/// condition's status did not change. Without this, every reconcile would
/// write a new timestamp and the host would write status on every call.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status == new.status {
                new.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = new;
        }
        None => conditions.push(new),
    }
}

/// Parse an RFC 3339 timestamp (the request's `now`) into a `Time`.
pub fn time(rfc3339: &str) -> Option<Time> {
    serde_json::from_value(serde_json::Value::String(rfc3339.into())).ok()
}
