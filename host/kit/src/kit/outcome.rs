//! What a case checks, in one canonical shape for both sides: the answer a
//! fixture expects and the answer the plugin gave. Every field of the call
//! is present (absent ones as the empty answer), children are sorted by
//! their key, so two outcomes compare field by field with `==`.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use kubeplug_core::yaml;
use kubeplug_runtime::{Event, GuestError};

/// Which export of the plugin a case calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Call {
    #[default]
    Reconcile,
    Finalize,
    Manifest,
    /// `admission.validate`: one write's verdict.
    Validate,
    /// `admission.mutate`: one write's JSON patch.
    Mutate,
    /// `conversion.convert`: objects at another version.
    Convert,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Call::Reconcile => "reconcile",
            Call::Finalize => "finalize",
            Call::Manifest => "manifest",
            Call::Validate => "validate",
            Call::Mutate => "mutate",
            Call::Convert => "convert",
        })
    }
}

impl Call {
    /// The fields an outcome of this call has, in the order they print.
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            Call::Reconcile => &[
                "children",
                "status",
                "parentPatch",
                "requeueAfterSeconds",
                "events",
                "error",
                "refused",
            ],
            Call::Finalize => &["done", "requeueAfterSeconds", "events", "error", "refused"],
            Call::Manifest => &["manifest", "error"],
            Call::Validate => &["allowed", "warnings", "denied", "error", "refused"],
            Call::Mutate => &["patch", "error", "refused"],
            Call::Convert => &["objects", "error", "refused"],
        }
    }

    /// Is it one of the calls the live host serves as a webhook?
    pub fn is_webhook(self) -> bool {
        matches!(self, Call::Validate | Call::Mutate | Call::Convert)
    }
}

/// The empty answer of a field: what its absence means.
fn empty(field: &str) -> Value {
    match field {
        "children" | "events" | "warnings" | "patch" | "objects" => json!([]),
        "done" | "allowed" => json!(false),
        _ => Value::Null,
    }
}

/// The `error` of a guest error, as the WIT variant names it.
pub fn error_value(error: &GuestError) -> Value {
    let (kind, message) = match error {
        GuestError::InvalidConfig(m) => ("invalid-config", m),
        GuestError::InvalidInput(m) => ("invalid-input", m),
        GuestError::Failed(m) => ("failed", m),
    };
    json!({"kind": kind, "message": message})
}

/// A guest crash's message without the trace its SDK appends (the Python
/// and TypeScript SDKs: ` (at app.py:15 in reconcile → app.py:5 in f)`):
/// only a suffix of that shape, whose first frame is `FILE:LINE in NAME`.
pub fn without_trace(message: &str) -> &str {
    let Some(at) = message.rfind(" (at ") else {
        return message;
    };
    let frame = &message[at + 5..];
    let traced = message.ends_with(')')
        && frame.split_once(" in ").is_some_and(|(place, _)| {
            place.rsplit_once(':').is_some_and(|(file, line)| {
                !file.is_empty()
                    && !file.contains(' ')
                    && !line.is_empty()
                    && line.bytes().all(|b| b.is_ascii_digit())
            })
        });
    if traced { &message[..at] } else { message }
}

/// `expected` and `actual` crashes (`failed`) whose messages are equal once
/// their traces are set aside: lines move, the fixture still holds.
fn same_error(expected: &Value, actual: &Value) -> bool {
    let message = |v: &Value| v.get("message").and_then(Value::as_str).map(str::to_string);
    expected.get("kind") == actual.get("kind")
        && actual.get("kind").and_then(Value::as_str) == Some("failed")
        && message(expected)
            .zip(message(actual))
            .is_some_and(|(e, a)| without_trace(&e) == without_trace(&a))
}

/// The events of an answer, as fixtures write them.
pub fn events_value(events: &[Event]) -> Value {
    events
        .iter()
        .map(|e| {
            json!({
                "type": if e.warning { "Warning" } else { "Normal" },
                "reason": e.reason,
                "message": e.message,
            })
        })
        .collect()
}

/// A case's `expect` (or one field of it) that is not an answer of its
/// call ([`Outcome::expected`], [`Outcome::set`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExpectError {
    #[error("expected a mapping")]
    NotAMapping,
    #[error("unknown key {key:?} for a {call} case (expected one of {})", call.fields().join(", "))]
    UnknownKey { key: String, call: Call },
    /// A field (named) that holds a list with something not an object.
    #[error("{0}: expected a list of objects")]
    NotObjects(String),
    #[error("parentPatch: unknown key {0:?}")]
    PatchKey(String),
    #[error("warnings: expected a list of strings")]
    Warnings,
    #[error("{field}: unexpected value {value}")]
    Unexpected { field: String, value: Value },
    #[error("error.kind: expected invalid-config, invalid-input or failed")]
    ErrorKind,
    #[error("error.message: expected a string")]
    ErrorMessage,
    #[error("error: unknown key {0:?}")]
    ErrorKey(String),
    #[error("denied.message: expected a string")]
    DeniedMessage,
    #[error("denied: unknown key {0:?}")]
    DeniedKey(String),
    #[error("denied.causes: expected a list of {{field, message}} strings")]
    DeniedCauses,
}

/// An answer in canonical form (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub call: Call,
    fields: Map<String, Value>,
}

impl Outcome {
    /// The empty answer of `call`: nothing to do.
    pub fn empty(call: Call) -> Self {
        let fields = call
            .fields()
            .iter()
            .map(|f| (f.to_string(), empty(f)))
            .collect();
        Outcome { call, fields }
    }

    /// A case's `expect` (absent or null: the empty answer), checked and
    /// made canonical. A validation's `allowed` goes without saying: it is
    /// true unless the case expects a denial or an error.
    pub fn expected(call: Call, expect: Option<Value>) -> Result<Self, ExpectError> {
        let mut outcome = Outcome::empty(call);
        let given = match expect {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(given)) => given,
            Some(_) => return Err(ExpectError::NotAMapping),
        };
        if call == Call::Validate && !given.contains_key("allowed") {
            let refused = |key: &str| given.get(key).is_some_and(|v| !v.is_null());
            let allowed = !refused("denied") && !refused("error");
            outcome.set("allowed", allowed.into())?;
        }
        for (key, value) in given {
            if !call.fields().contains(&key.as_str()) {
                return Err(ExpectError::UnknownKey { key, call });
            }
            outcome.set(&key, value)?;
        }
        Ok(outcome)
    }

    /// Set `field`, checking its shape; `null` is the empty answer.
    pub fn set(&mut self, field: &str, value: Value) -> Result<(), ExpectError> {
        let value = match (field, value) {
            (_, Value::Null) => empty(field),
            ("children", Value::Array(mut children)) => {
                if children.iter().any(|c| !c.is_object()) {
                    return Err(ExpectError::NotObjects("children".into()));
                }
                children.sort_by_cached_key(child_key);
                Value::Array(children)
            }
            ("events", Value::Array(events)) => Value::Array(events),
            ("parentPatch", Value::Object(mut patch)) => {
                if let Some(key) = patch
                    .keys()
                    .find(|k| !matches!(k.as_str(), "labels" | "annotations"))
                {
                    return Err(ExpectError::PatchKey(key.clone()));
                }
                for part in ["labels", "annotations"] {
                    let entry = patch.entry(part).or_insert_with(|| json!({}));
                    if entry.is_null() {
                        *entry = json!({});
                    }
                }
                Value::Object(patch)
            }
            ("requeueAfterSeconds", v @ Value::Number(_)) if v.is_u64() => v,
            ("done" | "allowed", v @ Value::Bool(_)) => v,
            ("warnings", Value::Array(warnings)) => {
                if warnings.iter().any(|w| !w.is_string()) {
                    return Err(ExpectError::Warnings);
                }
                Value::Array(warnings)
            }
            ("denied", Value::Object(denied)) => check_denied(denied)?,
            ("patch" | "objects", Value::Array(items)) => {
                if items.iter().any(|i| !i.is_object()) {
                    return Err(ExpectError::NotObjects(field.into()));
                }
                Value::Array(items)
            }
            ("refused", v @ Value::String(_)) => v,
            ("status" | "manifest", v @ Value::Object(_)) => v,
            ("error", Value::Object(error)) => check_error(error)?,
            (field, other) => {
                return Err(ExpectError::Unexpected {
                    field: field.into(),
                    value: other,
                });
            }
        };
        self.fields.insert(field.to_string(), value);
        Ok(())
    }

    /// The canonical value of `field`.
    pub fn get(&self, field: &str) -> &Value {
        &self.fields[field]
    }

    /// The fields where `self` (expected) and `other` (actual) differ, in
    /// print order. An error's message matches with or without the
    /// guest's trace (` (at app.py:15 in reconcile)`), so that a fixture
    /// does not break when lines move.
    pub fn differing<'a>(&'a self, other: &'a Outcome) -> Vec<&'static str> {
        self.call
            .fields()
            .iter()
            .copied()
            .filter(|f| {
                let (expected, actual) = (self.fields.get(*f), other.fields.get(*f));
                expected != actual
                    && !(*f == "error"
                        && expected.zip(actual).is_some_and(|(e, a)| same_error(e, a)))
            })
            .collect()
    }

    /// `expect` as `--update` writes it: only the fields that say
    /// something, in print order.
    pub fn to_expect(&self) -> yaml::Value {
        let mut out = yaml::Mapping::new();
        for field in self.call.fields() {
            let value = &self.fields[*field];
            if *value == empty(field) {
                continue;
            }
            let mut value = value.clone();
            if *field == "parentPatch"
                && let Some(patch) = value.as_object_mut()
            {
                patch.retain(|_, v| v.as_object().is_none_or(|m| !m.is_empty()));
            }
            if *field == "error"
                && value.get("kind").and_then(Value::as_str) == Some("failed")
                && let Some(Value::String(message)) = value.get_mut("message")
            {
                *message = without_trace(message).to_string();
            }
            if *field == "denied"
                && let Some(denied) = value.as_object_mut()
            {
                denied.retain(|k, v| k != "causes" || v.as_array().is_none_or(|c| !c.is_empty()));
            }
            out.insert((*field).into(), (&value).into());
        }
        yaml::Value::Mapping(out)
    }
}

fn check_error(error: Map<String, Value>) -> Result<Value, ExpectError> {
    let kind = error.get("kind").and_then(Value::as_str);
    if !matches!(kind, Some("invalid-config" | "invalid-input" | "failed")) {
        return Err(ExpectError::ErrorKind);
    }
    if !error.get("message").is_some_and(Value::is_string) {
        return Err(ExpectError::ErrorMessage);
    }
    if let Some(key) = error
        .keys()
        .find(|k| !matches!(k.as_str(), "kind" | "message"))
    {
        return Err(ExpectError::ErrorKey(key.clone()));
    }
    Ok(Value::Object(error))
}

/// A denial: `message`, and `causes` (default none), each a `field` and a
/// `message`.
fn check_denied(mut denied: Map<String, Value>) -> Result<Value, ExpectError> {
    if !denied.get("message").is_some_and(Value::is_string) {
        return Err(ExpectError::DeniedMessage);
    }
    if let Some(key) = denied
        .keys()
        .find(|k| !matches!(k.as_str(), "message" | "causes"))
    {
        return Err(ExpectError::DeniedKey(key.clone()));
    }
    let causes = denied.entry("causes").or_insert_with(|| json!([]));
    if causes.is_null() {
        *causes = json!([]);
    }
    let cause_ok = |c: &Value| {
        c.as_object().is_some_and(|c| {
            c.len() == 2
                && c.get("field").is_some_and(Value::is_string)
                && c.get("message").is_some_and(Value::is_string)
        })
    };
    if !causes.as_array().is_some_and(|c| c.iter().all(cause_ok)) {
        return Err(ExpectError::DeniedCauses);
    }
    Ok(Value::Object(denied))
}

/// A child's identity in the set of children: apiVersion, kind, namespace,
/// name.
pub fn child_key(child: &Value) -> [String; 4] {
    let text = |pointer: &str| {
        child
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    [
        text("/apiVersion"),
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected(call: Call, yaml: &str) -> Result<Outcome, String> {
        Outcome::expected(call, kubeplug_core::yaml::from_str(yaml).unwrap())
            .map_err(|e| e.to_string())
    }

    fn child(kind: &str, name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}})
    }

    #[test]
    fn an_error_matches_with_or_without_the_guests_trace_and_update_writes_none() {
        let expected = Outcome::expected(
            Call::Reconcile,
            Some(json!({"error": {"kind": "failed", "message": "KeyError: 'spec'"}})),
        )
        .unwrap();
        let mut actual = Outcome::empty(Call::Reconcile);
        let traced = "KeyError: 'spec' (at app.py:15 in reconcile → app.py:5 in replicas)";
        actual
            .fields
            .insert("error".into(), json!({"kind": "failed", "message": traced}));
        assert!(expected.differing(&actual).is_empty());
        let written = serde_json::to_value(actual.to_expect()).unwrap();
        assert_eq!(written["error"]["message"], "KeyError: 'spec'");
        actual.fields.insert(
            "error".into(),
            json!({"kind": "invalid-input", "message": traced}),
        );
        assert_eq!(expected.differing(&actual), ["error"]);
        // A fixture that kept an older trace still holds.
        let older = Outcome::expected(
            Call::Reconcile,
            Some(json!({"error": {"kind": "failed", "message": "KeyError: 'spec' (at app.py:9 in reconcile)"}})),
        )
        .unwrap();
        actual
            .fields
            .insert("error".into(), json!({"kind": "failed", "message": traced}));
        assert!(older.differing(&actual).is_empty());
        // A typed error's own words are never cut.
        let typed = "replicas must be set (at spec.replicas)";
        let invalid = Outcome::expected(
            Call::Reconcile,
            Some(json!({"error": {"kind": "invalid-input", "message": "replicas must be set"}})),
        )
        .unwrap();
        actual.fields.insert(
            "error".into(),
            json!({"kind": "invalid-input", "message": typed}),
        );
        assert_eq!(invalid.differing(&actual), ["error"]);
        let written = serde_json::to_value(actual.to_expect()).unwrap();
        assert_eq!(written["error"]["message"], typed);
        assert_eq!(without_trace("no (trace) here"), "no (trace) here");
        assert_eq!(without_trace(typed), typed);
        assert_eq!(without_trace("x (at a.py:1 in f)"), "x");
        assert_eq!(
            without_trace("x (at src/plugin.ts:26 in reconcile → b.ts:3 in g)"),
            "x"
        );
    }

    #[test]
    fn absent_keys_are_the_empty_answer() {
        let nothing = Outcome::empty(Call::Reconcile);
        assert_eq!(Outcome::expected(Call::Reconcile, None).unwrap(), nothing);
        assert_eq!(expected(Call::Reconcile, "{}").unwrap(), nothing);
        assert_eq!(
            expected(Call::Reconcile, "children: []\nstatus: null").unwrap(),
            nothing
        );
        let mut answered = Outcome::empty(Call::Reconcile);
        answered.set("status", json!({"phase": "Running"})).unwrap();
        assert_eq!(nothing.differing(&answered), ["status"]);
        assert_eq!(Outcome::empty(Call::Finalize).get("done"), &json!(false));
    }

    #[test]
    fn children_compare_as_a_set() {
        let mut one = Outcome::empty(Call::Reconcile);
        one.set(
            "children",
            json!([child("Service", "a"), child("Secret", "b")]),
        )
        .unwrap();
        let mut other = Outcome::empty(Call::Reconcile);
        other
            .set(
                "children",
                json!([child("Secret", "b"), child("Service", "a")]),
            )
            .unwrap();
        assert!(one.differing(&other).is_empty());
        other
            .set("children", json!([child("Secret", "b")]))
            .unwrap();
        assert_eq!(one.differing(&other), ["children"]);
    }

    #[test]
    fn a_patch_without_labels_equals_one_with_empty_labels() {
        let short = expected(Call::Reconcile, "parentPatch: {annotations: {a: b}}").unwrap();
        let long = expected(
            Call::Reconcile,
            "parentPatch: {labels: {}, annotations: {a: b}}",
        )
        .unwrap();
        assert_eq!(short, long);
        assert_ne!(short, Outcome::empty(Call::Reconcile));
    }

    #[test]
    fn malformed_expectations_are_refused() {
        for (call, yaml, says) in [
            (Call::Reconcile, "chidlren: []", "unknown key \"chidlren\""),
            (Call::Reconcile, "done: true", "unknown key \"done\""),
            (
                Call::Reconcile,
                "error: {kind: oops, message: x}",
                "error.kind",
            ),
            (Call::Reconcile, "error: {kind: failed}", "error.message"),
            (Call::Reconcile, "children: [1]", "children"),
            (
                Call::Reconcile,
                "requeueAfterSeconds: -1",
                "requeueAfterSeconds",
            ),
            (Call::Reconcile, "parentPatch: {label: {}}", "parentPatch"),
            (Call::Manifest, "children: []", "unknown key"),
            (Call::Finalize, "[]", "expected a mapping"),
        ] {
            let error = expected(call, yaml).unwrap_err();
            assert!(error.contains(says), "{yaml}: {error}");
        }
        assert!(expected(Call::Reconcile, "error: {kind: invalid-input, message: no}").is_ok());
    }

    #[test]
    fn a_validation_is_allowed_unless_it_expects_a_denial_or_an_error() {
        let allowed = expected(Call::Validate, "{}").unwrap();
        assert_eq!(allowed.get("allowed"), &json!(true));
        assert_eq!(Outcome::expected(Call::Validate, None).unwrap(), allowed);
        let warned = expected(Call::Validate, "warnings: [old]").unwrap();
        assert_eq!(warned.get("allowed"), &json!(true));
        let denied = expected(Call::Validate, "denied: {message: refused}").unwrap();
        assert_eq!(denied.get("allowed"), &json!(false));
        assert_eq!(
            denied.get("denied"),
            &json!({"message": "refused", "causes": []}),
            "causes default to none"
        );
        let failed = expected(Call::Validate, "error: {kind: failed, message: x}").unwrap();
        assert_eq!(failed.get("allowed"), &json!(false));
        // Written back as a case would write it: the denial alone.
        let written = kubeplug_core::yaml::to_string(&denied.to_expect());
        assert_eq!(written, "denied:\n  message: refused\n");
    }

    #[test]
    fn webhook_expectations_are_checked() {
        for (call, yaml, says) in [
            (Call::Validate, "patch: []", "unknown key \"patch\""),
            (Call::Validate, "allowed: yes", "allowed"),
            (Call::Validate, "warnings: [1]", "warnings"),
            (Call::Validate, "denied: {causes: []}", "denied.message"),
            (
                Call::Validate,
                "denied: {message: m, why: x}",
                "unknown key \"why\"",
            ),
            (
                Call::Validate,
                "denied: {message: m, causes: [{field: a}]}",
                "denied.causes",
            ),
            (Call::Mutate, "patch: [add]", "patch"),
            (Call::Mutate, "objects: []", "unknown key"),
            (Call::Convert, "objects: {}", "objects"),
            (Call::Convert, "children: []", "unknown key"),
        ] {
            let error = expected(call, yaml).unwrap_err();
            assert!(error.contains(says), "{call} {yaml}: {error}");
        }
        let patch = expected(Call::Mutate, "patch: [{op: add, path: /spec/a, value: 1}]");
        assert_ne!(patch.unwrap(), Outcome::empty(Call::Mutate));
        assert_eq!(
            expected(Call::Mutate, "patch: []").unwrap(),
            Outcome::empty(Call::Mutate),
            "no patch is the empty answer"
        );
    }

    #[test]
    fn to_expect_writes_only_what_says_something_and_reads_back_the_same() {
        let mut outcome = Outcome::empty(Call::Reconcile);
        outcome
            .set(
                "parentPatch",
                json!({"labels": {}, "annotations": {"a": "b"}}),
            )
            .unwrap();
        outcome.set("requeueAfterSeconds", json!(30)).unwrap();
        let written = outcome.to_expect();
        assert_eq!(
            kubeplug_core::yaml::to_string(&written),
            "parentPatch:\n  annotations:\n    a: b\nrequeueAfterSeconds: 30\n"
        );
        let read = Outcome::expected(Call::Reconcile, Some(written.to_typed().unwrap()));
        assert_eq!(read.unwrap(), outcome);
        let empty = Outcome::empty(Call::Finalize).to_expect();
        assert_eq!(
            empty,
            kubeplug_core::yaml::Value::Mapping(Default::default())
        );
    }
}
