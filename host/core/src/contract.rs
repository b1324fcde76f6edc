//! The contract's plain data, as the host reads it: what a call gets
//! ([`Request`]), what a plugin answers ([`Desired`], [`Finalized`]) and the
//! bounds a call runs under ([`Limits`], [`CompileLimits`]).
//!
//! These live apart from the Wasm runtime so that the pure layers (plan,
//! policy, apply) name them without depending on wasmtime.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Everything the host observed for one parent, as JSON text. The texts
/// are shared with the informer caches (one serialization per object and
/// resourceVersion) and lowered into the guest straight from there.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub parent: Arc<str>,
    pub observed: Vec<Arc<str>>,
    pub related: Vec<Arc<str>>,
    /// RFC 3339 UTC.
    pub now: String,
    pub entropy: Vec<u8>,
}

impl Request {
    /// A request stamped with the current time and fresh entropy.
    pub fn new(parent: Arc<str>, observed: Vec<Arc<str>>, related: Vec<Arc<str>>) -> Self {
        Request {
            parent,
            observed,
            related,
            now: format!("{:.0}", jiff::Timestamp::now()),
            entropy: rand::random::<[u8; 32]>().to_vec(),
        }
    }
}

/// A Kubernetes Event the plugin asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// Labels and annotations to merge into the parent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MetadataPatch {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A plugin's answer to `reconcile`, parsed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Desired {
    /// Each is a JSON object with `apiVersion`, `kind` and `metadata.name`.
    pub children: Vec<Value>,
    pub status: Option<Value>,
    pub parent_patch: Option<MetadataPatch>,
    #[serde(skip)]
    pub requeue_after: Option<Duration>,
    pub events: Vec<Event>,
}

/// A plugin's answer to `finalize`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finalized {
    pub done: bool,
    pub requeue_after: Option<Duration>,
    pub events: Vec<Event>,
}

/// Limits for every call into one plugin. The defaults suit a reconcile that
/// builds a few objects: real plugins use a few MiB and a few milliseconds,
/// so the caps only stop a runaway guest, never a healthy one. The platform's
/// policy ([`crate::policy::Quotas`]) sets the ceiling of each.
/// Serialized as a replay capture holds them (`timeoutMs`, `memoryBytes`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Wall-clock deadline of one call, instantiation included.
    #[serde(rename = "timeoutMs", with = "millis")]
    pub timeout: Duration,
    /// Cap on the guest memory of one call: every linear memory plus every
    /// table (at [`TABLE_ELEMENT_BYTES`] an element), summed. A per-memory
    /// cap would let a component with 20 core instances use 20 times it.
    pub memory_bytes: usize,
    /// Cap on core instances per call (a Rust component has a handful).
    pub instances: usize,
    /// Cap on tables per call.
    pub tables: usize,
    /// Cap on elements of each table.
    pub table_elements: usize,
    /// Cap on the bytes of one answer (all its strings), checked before the
    /// host parses any of it.
    pub response_bytes: usize,
    /// Cap on the children of one answer, checked before parsing.
    pub children: usize,
    /// Bytes of log (messages and field keys and values) one call may write.
    pub log_bytes: usize,
}

/// A `Duration` as whole milliseconds.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// What one table element costs the host (a function reference).
pub const TABLE_ELEMENT_BYTES: usize = 16;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // A reconcile is CPU-only JSON work: 2 s is 1000x a normal call.
            timeout: Duration::from_secs(2),
            // 128 MiB in all: room for a plugin that sees thousands of objects.
            memory_bytes: 128 << 20,
            instances: 20,
            tables: 20,
            table_elements: 100_000,
            // A seed plugin's answer is a few KiB.
            response_bytes: 4 << 20,
            children: 64,
            log_bytes: 64 << 10,
        }
    }
}

/// The `limits:` of a plugin's settings file (`<name>.yaml`): requests that
/// may lower the platform's quotas, never raise them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitSettings {
    pub timeout_ms: Option<u64>,
    pub memory_bytes: Option<usize>,
}

impl LimitSettings {
    /// `ceiling` lowered where these settings ask for less.
    pub fn within(&self, ceiling: Limits) -> Limits {
        Limits {
            timeout: self
                .timeout_ms
                .map(Duration::from_millis)
                .map_or(ceiling.timeout, |t| t.min(ceiling.timeout)),
            memory_bytes: self
                .memory_bytes
                .map_or(ceiling.memory_bytes, |m| m.min(ceiling.memory_bytes)),
            ..ceiling
        }
    }
}

/// Bounds on compiling one component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    pub timeout: Duration,
    /// Resident memory of the compiler process.
    pub memory_bytes: u64,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits {
            timeout: Duration::from_secs(60),
            memory_bytes: 1 << 30,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_lower_limits_but_never_raise_them() {
        let ceiling = Limits::default();
        let asks_more = LimitSettings {
            timeout_ms: Some(60_000),
            memory_bytes: Some(1 << 40),
        };
        assert_eq!(asks_more.within(ceiling), ceiling);
        let asks_less = LimitSettings {
            timeout_ms: Some(100),
            memory_bytes: Some(1 << 20),
        };
        let lowered = asks_less.within(ceiling);
        assert_eq!(lowered.timeout, Duration::from_millis(100));
        assert_eq!(lowered.memory_bytes, 1 << 20);
    }
}
