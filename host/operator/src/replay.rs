//! Failures a team can replay: the request behind a failed reconcile, kept
//! so that the plugin's owners reproduce it offline with the same inputs
//! (`now` and `entropy` included) through `kubeplug render --request`.
//!
//! The live host records a [`Capture`] per failing parent in a bounded
//! per-plugin [`Ring`]; `/plugins/<plugin>/replays` serves them to loopback
//! clients ([`kubeplug::admin`]) and `kubeplug replay` ([`fetch`]) fetches
//! them. Secrets in the inputs are redacted ([`redact`]) before they are kept.

pub mod redact;
mod ring;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use kubeplug_runtime::{self as runtime, Plugin};

pub use ring::{Ring, RingLimits, Summary};

/// The `apiVersion` of a capture file.
pub const API_VERSION: &str = "kubeplug.io/v1alpha1";
/// The `kind` of a capture file.
pub const KIND: &str = "Replay";

/// Which export of the plugin failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Call {
    Reconcile,
    Finalize,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Call::Reconcile => "reconcile",
            Call::Finalize => "finalize",
        })
    }
}

/// The request the plugin was handed, as the JSON texts it got: kept as
/// text, not objects, so that a replay is byte for byte the same call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestTexts {
    pub parent: String,
    #[serde(default)]
    pub observed: Vec<String>,
    #[serde(default)]
    pub related: Vec<String>,
    /// RFC 3339 UTC.
    pub now: String,
    /// Hex.
    pub entropy: String,
}

/// A capture's entropy is not hex.
#[derive(Debug, thiserror::Error)]
#[error("the capture's request.entropy is not hex")]
pub struct BadEntropy(#[source] pub hex::FromHexError);

impl RequestTexts {
    /// The runtime request these texts describe, unchanged.
    pub fn to_request(&self) -> Result<runtime::Request, BadEntropy> {
        Ok(runtime::Request {
            parent: self.parent.as_str().into(),
            observed: self.observed.iter().map(|t| t.as_str().into()).collect(),
            related: self.related.iter().map(|t| t.as_str().into()).collect(),
            now: self.now.clone(),
            entropy: hex::decode(&self.entropy).map_err(BadEntropy)?,
        })
    }
}

/// One failed call and everything needed to make it again: a
/// self-describing file (`kind: Replay`) that `kubeplug render --request`
/// reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capture {
    pub api_version: String,
    pub kind: String,
    /// The plugin's name (its manifest's).
    pub plugin: String,
    pub version: String,
    /// SHA-256 of the `.wasm` the failure happened on, hex.
    pub digest: String,
    pub call: Call,
    /// `namespace/name`, or `name` for a cluster-scoped parent.
    pub parent: String,
    /// When it failed, RFC 3339.
    pub at: String,
    /// The error exactly as the host logged it.
    pub error: String,
    /// A short label: `guest_error`, `trap`, `deadline`, `memory_cap`,
    /// `fence`, ...
    pub reason: String,
    /// The plugin's configuration document.
    pub config: Value,
    /// The limits the call ran under.
    pub limits: runtime::Limits,
    pub request: RequestTexts,
    /// What was redacted from the request, e.g.
    /// `observed[2] Secret default/db: data, stringData`.
    #[serde(default)]
    pub redacted: Vec<String>,
}

/// `namespace/name`, or `name` when the namespace is empty (cluster-scoped).
pub fn parent_key(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

impl Capture {
    /// What the controller records when a call of `plugin` on the parent
    /// `namespace/name` failed with `error` (as logged) for `reason` (a
    /// short label). Secrets in the request are redacted.
    pub fn new(
        plugin: &Plugin,
        call: Call,
        namespace: &str,
        name: &str,
        request: &runtime::Request,
        error: &str,
        reason: &str,
    ) -> Capture {
        let mut redacted = Vec::new();
        let parent = redact::text("parent", &request.parent, &mut redacted);
        let mut list = |what: &str, texts: &[std::sync::Arc<str>]| -> Vec<String> {
            texts
                .iter()
                .enumerate()
                .map(|(i, t)| redact::text(&format!("{what}[{i}]"), t, &mut redacted))
                .collect()
        };
        let observed = list("observed", &request.observed);
        let related = list("related", &request.related);
        let manifest = plugin.manifest();
        Capture {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            plugin: manifest.name.clone(),
            version: manifest.version.clone(),
            digest: plugin.digest().into(),
            call,
            parent: parent_key(namespace, name),
            at: format!("{:.3}", jiff::Timestamp::now()),
            error: error.into(),
            reason: reason.into(),
            // The runtime made this text from JSON; it parses.
            config: serde_json::from_str(plugin.config()).unwrap_or(Value::Null),
            limits: plugin.limits(),
            request: RequestTexts {
                parent,
                observed,
                related,
                now: request.now.clone(),
                entropy: hex::encode(&request.entropy),
            },
            redacted,
        }
    }

    /// The runtime request to replay.
    pub fn request(&self) -> Result<runtime::Request, BadEntropy> {
        self.request.to_request()
    }

    /// Whether this is a capture file at all (a stray object would otherwise
    /// fail with a confusing missing-field error).
    pub fn check_kind(&self) -> Result<(), NotACapture> {
        if self.api_version == API_VERSION && self.kind == KIND {
            Ok(())
        } else {
            Err(NotACapture {
                api_version: self.api_version.clone(),
                kind: self.kind.clone(),
            })
        }
    }
}

/// A file of another apiVersion or kind than a capture's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected apiVersion {API_VERSION}, kind {KIND}; found {api_version} {kind}")]
pub struct NotACapture {
    pub api_version: String,
    pub kind: String,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A capture of `parent` failing with `error`.
    pub(crate) fn capture(parent: &str, error: &str) -> Capture {
        Capture {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            plugin: "database".into(),
            version: "1.0.0".into(),
            digest: "ab".repeat(32),
            call: Call::Reconcile,
            parent: parent.into(),
            at: "2026-11-29T18:00:00.000Z".into(),
            error: error.into(),
            reason: "guest_error".into(),
            config: serde_json::json!({ "replicas": 3, "ratio": 0.1, "name": "é\"x" }),
            limits: runtime::Limits::default(),
            request: RequestTexts {
                // Deliberately not serde_json's own layout: kept as is.
                parent: "{\"kind\":\"Database\",  \"b\":1,\"a\":2}".into(),
                observed: vec!["{ \"x\": [1, 2.50] }\n".into()],
                related: vec![],
                now: "2026-11-29T18:00:00Z".into(),
                entropy: hex::encode((0..32).collect::<Vec<u8>>()),
            },
            redacted: vec![],
        }
    }

    #[test]
    fn capture_times_keep_milliseconds_and_call_times_whole_seconds() {
        let t = jiff::Timestamp::new(1_795_975_200, 5_000_000).unwrap();
        assert_eq!(format!("{t:.3}"), "2026-11-29T18:00:00.005Z");
        assert_eq!(format!("{t:.0}"), "2026-11-29T18:00:00Z");
        let whole = jiff::Timestamp::new(1_795_975_200, 0).unwrap();
        assert_eq!(format!("{whole:.3}"), "2026-11-29T18:00:00.000Z");
    }

    #[test]
    fn a_capture_round_trips_through_yaml_and_json_unchanged() {
        let c = capture(
            "default/db",
            "plugin database returned an error: no: \"way\"\n",
        );
        let yaml = kubeplug_core::yaml::to_string(&c);
        assert!(yaml.starts_with("apiVersion: kubeplug.io/v1alpha1\nkind: Replay\n"));
        assert_eq!(kubeplug_core::yaml::from_str::<Capture>(&yaml).unwrap(), c);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Capture>(&json).unwrap(), c);
        // The request texts survive byte for byte.
        let back: Capture = kubeplug_core::yaml::from_str(&yaml).unwrap();
        assert_eq!(
            back.request().unwrap().parent,
            c.request.parent.as_str().into()
        );
        assert_eq!(
            back.request().unwrap().entropy,
            (0..32).collect::<Vec<u8>>()
        );
    }

    #[test]
    fn the_config_comes_back_as_the_text_the_plugin_got() {
        // What `Runtime::load` makes of `PluginOptions.config`.
        let config = serde_json::json!({ "z": [1, 2.5, -3e-7], "a": { "ü": null, "b": true } });
        let text = config.to_string();
        let c = Capture {
            config: serde_json::from_str(&text).unwrap(),
            ..capture("default/db", "x")
        };
        let back: Capture =
            kubeplug_core::yaml::from_str(&kubeplug_core::yaml::to_string(&c)).unwrap();
        assert_eq!(back.config.to_string(), text);
    }

    #[test]
    fn cluster_scoped_parents_are_named_alone() {
        assert_eq!(parent_key("", "node-1"), "node-1");
        assert_eq!(parent_key("ns", "db"), "ns/db");
    }

    #[test]
    fn limits_survive_a_file() {
        let limits = runtime::Limits::default();
        let text = kubeplug_core::yaml::to_string(&limits);
        assert!(text.contains("timeoutMs: 2000"), "{text}");
        assert_eq!(
            kubeplug_core::yaml::from_str::<runtime::Limits>(&text).unwrap(),
            limits
        );
    }
}
