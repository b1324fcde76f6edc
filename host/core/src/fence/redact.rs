//! Values a reader may not see, taken out wherever a plugin's answer copies
//! them.
//!
//! A preview shows a caller what the plugin would write; the plugin was
//! handed objects the caller may not read (a Secret, a referenced
//! ConfigMap). Of those kinds the preview shows no live value; but the
//! plugin may copy what it was handed into a child of a kind the caller may
//! read, its status or a parent patch (a database's connection string into
//! its status). So every string value of the withheld objects (their data
//! and spec, not their metadata: names are not secrets, and a name like
//! `shop` would blank half the answer), and the decoded text of a Secret's
//! `data`, is looked for in the answer: a string or a key that holds one
//! is replaced whole. Copies the plugin transforms (encodes, splits) are
//! not caught; a plugin that means to leak can write them anywhere anyway.

use base64::Engine as _;
use serde_json::{Map, Value};

/// What replaces a string or key that holds a withheld value.
pub const REDACTED: &str = "(withheld)";

/// Strings shorter than this are not looked for: `1`, `TCP`, `spec` would
/// blank half an answer and hide nothing.
const MIN_LEN: usize = 5;
/// Nor these, which every answer holds.
const COMMON: [&str; 3] = ["false", "value", "items"];

/// The withheld values to look for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Redaction {
    values: Vec<String>,
}

impl Redaction {
    /// The values of `handed` (the objects given to the plugin, as JSON)
    /// whose kind `withheld(group, kind)` says the reader may not read.
    pub fn of<'a>(
        handed: impl IntoIterator<Item = &'a str>,
        withheld: impl Fn(&str, &str) -> bool,
    ) -> Self {
        let mut values = Vec::new();
        for text in handed {
            let Ok(object) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let kind = object["kind"].as_str().unwrap_or_default();
            if !withheld(group, kind) {
                continue;
            }
            let Value::Object(fields) = &object else {
                continue;
            };
            for (key, value) in fields {
                if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                strings(value, &mut values);
            }
            if group.is_empty() && kind == "Secret" {
                for encoded in object["data"]
                    .as_object()
                    .into_iter()
                    .flat_map(|d| d.values())
                {
                    let decoded = encoded
                        .as_str()
                        .and_then(|e| base64::engine::general_purpose::STANDARD.decode(e).ok())
                        .and_then(|d| String::from_utf8(d).ok());
                    values.extend(decoded);
                }
            }
        }
        values.retain(|v| v.len() >= MIN_LEN && !COMMON.contains(&v.as_str()));
        values.sort();
        values.dedup();
        Redaction { values }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn holds(&self, text: &str) -> bool {
        self.values.iter().any(|v| text.contains(v.as_str()))
    }

    /// Replace in `value` every string and key that holds a withheld
    /// value; how many were replaced.
    pub fn apply(&self, value: &mut Value) -> usize {
        if self.is_empty() {
            return 0;
        }
        match value {
            Value::String(text) if self.holds(text) => {
                *text = REDACTED.into();
                1
            }
            Value::Array(items) => items.iter_mut().map(|v| self.apply(v)).sum(),
            Value::Object(fields) => {
                let mut replaced = 0;
                let mut kept = Map::new();
                for (key, mut inner) in std::mem::take(fields) {
                    replaced += self.apply(&mut inner);
                    let key = if self.holds(&key) {
                        replaced += 1;
                        (1..)
                            .map(|i| format!("{REDACTED}-{i}"))
                            .find(|k| !kept.contains_key(k))
                            .expect("a free key")
                    } else {
                        key
                    };
                    kept.insert(key, inner);
                }
                *fields = kept;
                replaced
            }
            _ => 0,
        }
    }
}

fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(fields) => fields.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_withheld_value_is_taken_out_wherever_the_answer_copies_it() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "shop-credentials"},
            "data": {"password": "aHVudGVyMg=="}}); // hunter2
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "shop"}, "data": {"dsn": "postgres://db:5432/shop", "on": "yes"}});
        let readable = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "shop"}, "spec": {"serviceName": "shopping-cart"}});
        let handed = [secret.to_string(), config.to_string(), readable.to_string()];
        let redaction = Redaction::of(handed.iter().map(String::as_str), |group, kind| {
            group.is_empty() && (kind == "Secret" || kind == "ConfigMap")
        });
        let mut answer = json!({
            "status": {"connect": "postgres://db:5432/shop", "phase": "Running", "on": "yes"},
            "children": [{"diff": [{"path": "spec.x", "desired": "pw=hunter2;"}]}],
            "parentPatch": {"labels": {"copy-of-aHVudGVyMg==": "1", "copy-of-aHVudGVyMg==x": "2"}},
            "names": ["shop", "shop-credentials", "shopping-cart"],
        });
        assert_eq!(redaction.apply(&mut answer), 4);
        assert_eq!(answer["status"]["connect"], REDACTED);
        assert_eq!(answer["children"][0]["diff"][0]["desired"], REDACTED);
        assert_eq!(answer["children"][0]["diff"][0]["path"], "spec.x");
        let labels = answer["parentPatch"]["labels"].as_object().unwrap();
        assert_eq!(
            labels.keys().collect::<Vec<_>>(),
            ["(withheld)-1", "(withheld)-2"]
        );
        // Short values, names and readable kinds' values stay.
        assert_eq!(answer["status"]["on"], "yes");
        assert_eq!(answer["status"]["phase"], "Running");
        assert_eq!(
            answer["names"],
            json!(["shop", "shop-credentials", "shopping-cart"])
        );
        let text = answer.to_string();
        assert!(
            !text.contains("hunter2") && !text.contains("aHVudGVyMg=="),
            "{text}"
        );
    }

    #[test]
    fn nothing_withheld_changes_nothing() {
        let redaction = Redaction::of(
            ["{\"kind\": \"Secret\", \"data\": {\"a\": \"aGVsbG8=\"}}"],
            |_, _| false,
        );
        assert!(redaction.is_empty());
        let mut answer = json!({"a": "hello"});
        assert_eq!(redaction.apply(&mut answer), 0);
        assert_eq!(answer, json!({"a": "hello"}));
    }
}
