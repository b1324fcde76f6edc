//! Secret values out of a capture: a capture leaves the host (to a team's
//! laptop), the Secrets a plugin was shown must not.
//!
//! Keys stay, so a plugin that checks for a key still takes the same path;
//! only a core `v1` `Secret` is touched, and only it is re-serialized: every
//! other text is kept byte for byte.

use serde_json::Value;

/// What a redacted `stringData` value becomes.
pub const REDACTED: &str = "<redacted>";
/// What a redacted `data` value becomes: base64 of [`REDACTED`], so that a
/// plugin decoding it still gets valid base64.
pub const REDACTED_BASE64: &str = "PHJlZGFjdGVkPg==";
/// Holds the whole object, `data` included, when it was `kubectl apply`'d.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `text` with its Secret values redacted; when something was, a line
/// naming it (`what Secret ns/name: data, ...`) is pushed to `redacted`.
pub fn text(what: &str, text: &str, redacted: &mut Vec<String>) -> String {
    let Ok(mut object) = serde_json::from_str::<Value>(text) else {
        return text.to_string();
    };
    let parts = secret(&mut object);
    if parts.is_empty() {
        return text.to_string();
    }
    let meta = &object["metadata"];
    let name = crate::replay::parent_key(
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default(),
    );
    redacted.push(format!("{what} Secret {name}: {}", parts.join(", ")));
    object.to_string()
}

/// Redact `object` in place if it is a core Secret; the parts redacted.
fn secret(object: &mut Value) -> Vec<&'static str> {
    let mut parts = Vec::new();
    if object["apiVersion"] != "v1" || object["kind"] != "Secret" {
        return parts;
    }
    for (field, value) in [("data", REDACTED_BASE64), ("stringData", REDACTED)] {
        if let Some(map) = object.get_mut(field).and_then(Value::as_object_mut)
            && !map.is_empty()
        {
            map.values_mut().for_each(|v| *v = value.into());
            parts.push(field);
        }
    }
    if let Some(v) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
        .and_then(|a| a.get_mut(LAST_APPLIED))
    {
        *v = REDACTED.into();
        parts.push(LAST_APPLIED);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn redact(text: &str) -> (String, Vec<String>) {
        let mut redacted = Vec::new();
        let out = super::text("observed[2]", text, &mut redacted);
        (out, redacted)
    }

    #[test]
    fn secret_values_are_redacted_and_keys_kept() {
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "db-credentials",
                "namespace": "default",
                "annotations": { LAST_APPLIED: "{\"data\":{\"password\":\"aHVudGVyMg==\"}}", "team": "db" },
            },
            "data": { "password": "aHVudGVyMg==", "user": "YWRtaW4=" },
            "stringData": { "token": "s3cr3t" },
            "type": "Opaque",
        });
        let (out, redacted) = redact(&secret.to_string());
        let out: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            out["data"],
            json!({ "password": REDACTED_BASE64, "user": REDACTED_BASE64 })
        );
        assert_eq!(out["stringData"], json!({ "token": REDACTED }));
        assert_eq!(out["metadata"]["annotations"][LAST_APPLIED], REDACTED);
        assert_eq!(out["metadata"]["annotations"]["team"], "db");
        assert_eq!(out["type"], "Opaque");
        assert!(!out.to_string().contains("aHVudGVyMg=="));
        assert_eq!(
            redacted,
            [format!(
                "observed[2] Secret default/db-credentials: data, stringData, {LAST_APPLIED}"
            )]
        );
    }

    #[test]
    fn the_placeholder_is_base64_of_redacted() {
        use std::fmt::Write as _;
        // Decode by hand: no base64 crate in the host.
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut bits = String::new();
        for c in REDACTED_BASE64.trim_end_matches('=').bytes() {
            let index = ALPHABET.iter().position(|&a| a == c).unwrap();
            write!(bits, "{index:06b}").unwrap();
        }
        let bytes: Vec<u8> = bits
            .as_bytes()
            .chunks_exact(8)
            .map(|b| u8::from_str_radix(std::str::from_utf8(b).unwrap(), 2).unwrap())
            .collect();
        assert_eq!(bytes, REDACTED.as_bytes());
    }

    #[test]
    fn other_objects_are_kept_byte_for_byte() {
        let texts = [
            // Not serde_json's layout: a re-serialization would show.
            "{\"kind\": \"Pod\", \"apiVersion\":\"v1\",\"data\":{\"a\":\"b\"}}",
            // Looks like a Secret, is a ConfigMap.
            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\",\"annotations\":{\"kubectl.kubernetes.io/last-applied-configuration\":\"{}\"}},\"data\":{\"password\":\"x\"}}",
            // A Secret of another group is not the core kind.
            "{\"apiVersion\":\"example.com/v1\",\"kind\":\"Secret\",\"data\":{\"a\":\"b\"}}",
            // A Secret with nothing to hide.
            "{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"data\": {}}",
            "not json",
        ];
        for text in texts {
            let (out, redacted) = redact(text);
            assert_eq!(out, text);
            assert!(redacted.is_empty(), "{text}: {redacted:?}");
        }
    }

    #[test]
    fn a_cluster_scoped_name_stands_alone() {
        let (_, redacted) = redact(
            &json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" }, "stringData": { "k": "v" } })
                .to_string(),
        );
        assert_eq!(redacted, ["observed[2] Secret s: stringData"]);
    }
}
