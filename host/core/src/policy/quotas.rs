//! Per-plugin quotas: how much one plugin may ask of the host.
//!
//! Every value has a default that a healthy plugin never reaches; the policy
//! sets defaults for all plugins (`quotas:`) and overrides per plugin
//! (`plugins.<name>.quotas:`). A plugin's own settings file may lower the
//! per-call limits, never raise them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::contract::{CompileLimits, Limits};

/// Quotas of one plugin. Field names are the policy file's keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Quotas {
    /// Children one answer may hold. 64 is ten times what the seed plugins
    /// use; a fan-out beyond that deserves a conversation with the platform.
    pub children_per_parent: usize,
    /// Bytes of one answer (children, status, events, patch), checked before
    /// the host parses it.
    pub response_bytes: usize,
    /// Bytes of the desired status (JSON). A status is read by every client
    /// of the parent; 64 KiB is far beyond a useful one.
    pub status_bytes: usize,
    /// Events in one answer.
    pub events_per_answer: usize,
    /// Events recorded per parent per minute; the rest are dropped (and
    /// counted), so a plugin cannot flood the API server with events.
    pub events_per_parent_per_minute: u32,
    /// Shortest requeue-after the host honours, in seconds: a plugin asking
    /// for 0 s is reconciled again after this long.
    pub requeue_floor_seconds: u64,
    /// Bytes of log (messages and fields) one call may write; the rest is
    /// dropped.
    pub log_bytes_per_call: usize,
    /// Guest memory of one call, summed over every linear memory and table.
    pub memory_bytes: usize,
    /// Wall-clock deadline of one call, in milliseconds.
    pub call_timeout_ms: u64,
    /// Wall-clock time to compile a new `.wasm`, in seconds. Big guests
    /// (a Python component) take 10–25 s on two cores.
    pub compile_timeout_seconds: u64,
    /// Resident memory of the compiler process, in bytes.
    pub compile_memory_bytes: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        let limits = Limits::default();
        Quotas {
            children_per_parent: limits.children,
            response_bytes: limits.response_bytes,
            status_bytes: 64 << 10,
            events_per_answer: 10,
            events_per_parent_per_minute: 30,
            requeue_floor_seconds: 5,
            log_bytes_per_call: limits.log_bytes,
            memory_bytes: limits.memory_bytes,
            call_timeout_ms: limits.timeout.as_millis() as u64,
            compile_timeout_seconds: 60,
            compile_memory_bytes: 1 << 30,
        }
    }
}

/// Quota overrides that are not quotas (an unknown key, a wrong type).
#[derive(Debug, thiserror::Error)]
#[error("invalid quotas: {0}")]
pub struct QuotasError(serde_json::Error);

impl Quotas {
    /// These quotas with `overrides` (policy-file keys) applied.
    pub fn merged(
        &self,
        overrides: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Quotas, QuotasError> {
        let mut value = serde_json::to_value(self).expect("quotas serialize");
        let map = value.as_object_mut().expect("quotas are an object");
        for (k, v) in overrides {
            map.insert(k.clone(), v.clone());
        }
        serde_json::from_value(value).map_err(QuotasError)
    }

    /// The per-call limits these quotas allow (a plugin's settings may
    /// lower them: [`crate::contract::LimitSettings::within`]).
    pub fn limits(&self) -> Limits {
        Limits {
            timeout: Duration::from_millis(self.call_timeout_ms),
            memory_bytes: self.memory_bytes,
            response_bytes: self.response_bytes,
            children: self.children_per_parent,
            log_bytes: self.log_bytes_per_call,
            ..Limits::default()
        }
    }

    pub fn compile(&self) -> CompileLimits {
        CompileLimits {
            timeout: Duration::from_secs(self.compile_timeout_seconds),
            memory_bytes: self.compile_memory_bytes,
        }
    }

    pub fn requeue_floor(&self) -> Duration {
        Duration::from_secs(self.requeue_floor_seconds)
    }
}
