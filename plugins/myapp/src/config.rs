//! `spec.configRef`: the ConfigMap a MyApp names. Its content's hash goes
//! into the pod template, so that a change to it rolls the Deployment (what
//! Helm users do with a `checksum/config` annotation, kept current here by
//! the host's watch of the ConfigMap).

use std::collections::BTreeMap;

use serde::Deserialize;

/// The pod template annotation holding the ConfigMap's hash.
pub const HASH_ANNOTATION: &str = "example.com/config-hash";

/// `MyApp.spec.configRef`.
#[derive(Debug, Clone, Deserialize)]
pub struct ConfigRef {
    pub name: String,
}

/// The part of a ConfigMap the hash reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapView {
    #[serde(default)]
    pub data: BTreeMap<String, String>,
    #[serde(default)]
    pub binary_data: BTreeMap<String, String>,
}

/// FNV-1a 64 over each entry of `data`, then of `binaryData` (as its
/// base64 text), in key order: section, key and value, each followed by a
/// zero byte. The Python and TypeScript ports compute the same, so one set
/// of fixtures holds for all three.
pub fn hash(config: &ConfigMapView) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (section, entries) in [("data", &config.data), ("binaryData", &config.binary_data)] {
        for (key, value) in entries {
            for part in [section, key.as_str(), value.as_str()] {
                for byte in part.bytes().chain(std::iter::once(0)) {
                    h ^= u64::from(byte);
                    h = h.wrapping_mul(0x0100_0000_01b3);
                }
            }
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(data: &[(&str, &str)], binary: &[(&str, &str)]) -> ConfigMapView {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        ConfigMapView {
            data: map(data),
            binary_data: map(binary),
        }
    }

    #[test]
    fn the_hash_is_the_ports_and_sees_every_entry() {
        assert_eq!(hash(&ConfigMapView::default()), "cbf29ce484222325");
        let binary = [("logo.png", "iVBORw0KGgo=")];
        let debug = view(&[("greeting", "hello"), ("LOG_LEVEL", "debug")], &binary);
        assert_eq!(hash(&debug), "fbf2cb315d7bcbdf");
        let info = view(&[("greeting", "hello"), ("LOG_LEVEL", "info")], &binary);
        assert_eq!(hash(&info), "20a651e2c4af4014");
        // A key moved between sections, or a value between keys, differs.
        assert_ne!(
            hash(&view(&[("a", "1")], &[])),
            hash(&view(&[], &[("a", "1")]))
        );
        assert_ne!(
            hash(&view(&[("ab", "")], &[])),
            hash(&view(&[("a", "b")], &[]))
        );
    }
}
