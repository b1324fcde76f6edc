//! Where two JSON objects differ, field by field, each field named by a
//! JSON Pointer (RFC 6901): `/metadata/labels/app.kubernetes.io~1name` is
//! one label key, where a dotted path could not tell it from nested fields.
//!
//! One walker for every comparison the host shows: a preview's update
//! (what an apply would set, [`Fields::After`]) and a shadow's two answers
//! (both sides, [`Fields::Both`]). Lists are compared whole: their pointer
//! names the list. (`json-patch`'s diff, in the tree through kube, walks
//! into lists and keeps no "before" value, so it does not fit.)

use serde_json::Value;

/// Which fields a diff walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fields {
    /// Only the fields `after` has: what an apply of `after` sets (fields
    /// only `before` has, such as the API server's defaults, are not shown).
    After,
    /// The fields either side has (one only one side has shows `null` on
    /// the other).
    Both,
}

/// One field that differs.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// JSON Pointer to the field (`""`: the whole value).
    pub path: String,
    pub before: Value,
    pub after: Value,
}

/// The fields where `after` differs from `before`, in key order.
pub fn diff(before: &Value, after: &Value, fields: Fields) -> Vec<Change> {
    let mut out = Vec::new();
    walk(before, after, fields, String::new(), &mut out);
    out
}

/// `key` escaped as one JSON Pointer token (`~` → `~0`, `/` → `~1`).
pub fn pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn walk(before: &Value, after: &Value, fields: Fields, path: String, out: &mut Vec<Change>) {
    let null = Value::Null;
    let at = |key: &str| format!("{path}/{}", pointer_escape(key));
    match (fields, before, after) {
        (Fields::After, _, Value::Object(want)) => {
            for (key, value) in want {
                walk(
                    before.get(key).unwrap_or(&null),
                    value,
                    fields,
                    at(key),
                    out,
                );
            }
        }
        (Fields::Both, Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let (a, b) = (a.get(key).unwrap_or(&null), b.get(key).unwrap_or(&null));
                walk(a, b, fields, at(key), out);
            }
        }
        (_, a, b) if a != b => out.push(Change {
            path,
            before: a.clone(),
            after: b.clone(),
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn paths(changes: &[Change]) -> Vec<&str> {
        changes.iter().map(|c| c.path.as_str()).collect()
    }

    #[test]
    fn an_apply_diff_names_each_changed_field_with_both_values() {
        let live = json!({"spec": {"replicas": 1, "template": {"image": "postgres:16"}}, "metadata": {"name": "a"}});
        let desired = json!({"spec": {"replicas": 3, "template": {"image": "postgres:16"}, "serviceName": "a"}, "metadata": {"name": "a"}});
        assert_eq!(
            diff(&live, &desired, Fields::After),
            vec![
                Change {
                    path: "/spec/replicas".into(),
                    before: json!(1),
                    after: json!(3)
                },
                Change {
                    path: "/spec/serviceName".into(),
                    before: Value::Null,
                    after: json!("a")
                },
            ]
        );
        assert!(diff(&desired, &desired, Fields::After).is_empty());
    }

    #[test]
    fn an_apply_diff_ignores_fields_only_the_live_object_has() {
        let live = json!({"spec": {"replicas": 1, "defaulted": true}});
        let desired = json!({"spec": {"replicas": 1}});
        assert!(diff(&live, &desired, Fields::After).is_empty());
        assert_eq!(
            paths(&diff(&live, &desired, Fields::Both)),
            ["/spec/defaulted"]
        );
    }

    #[test]
    fn a_two_sided_diff_shows_null_for_a_field_one_side_lacks() {
        let a = json!({"phase": "Running"});
        let b = json!({"phase": "Pending", "extra": 1});
        let found = diff(&a, &b, Fields::Both);
        assert_eq!(paths(&found), ["/extra", "/phase"]);
        assert_eq!(
            (&found[0].before, &found[0].after),
            (&Value::Null, &json!(1))
        );
    }

    #[test]
    fn label_keys_with_slashes_and_tildes_are_one_pointer_token() {
        let live = json!({"metadata": {"labels": {"app.kubernetes.io/name": "a", "x~y": "1"}}});
        let desired = json!({"metadata": {"labels": {"app.kubernetes.io/name": "b", "x~y": "2"}}});
        assert_eq!(
            paths(&diff(&live, &desired, Fields::After)),
            [
                "/metadata/labels/app.kubernetes.io~1name",
                "/metadata/labels/x~0y"
            ]
        );
        let pointer = "/metadata/labels/app.kubernetes.io~1name";
        assert_eq!(live.pointer(pointer), Some(&json!("a")), "RFC 6901");
    }

    #[test]
    fn lists_are_compared_whole() {
        let live = json!({"spec": {"ports": [{"port": 1}]}});
        let desired = json!({"spec": {"ports": [{"port": 2}]}});
        for fields in [Fields::After, Fields::Both] {
            assert_eq!(paths(&diff(&live, &desired, fields)), ["/spec/ports"]);
        }
    }

    #[test]
    fn differing_whole_values_have_the_empty_pointer() {
        assert_eq!(paths(&diff(&json!(1), &json!(2), Fields::Both)), [""]);
    }
}
