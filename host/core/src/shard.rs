//! What a shard is: the one home of how a sharded plugin's parents are
//! split between replicas, so that the host that labels objects, the
//! watches that filter by the label and the plan that copies it onto
//! children cannot disagree.
//!
//! A plugin granted `shards: N` (see [`crate::policy::Grant::shards`]) has
//! its parents split into `N` shards; each shard is owned by one replica at
//! a time. The host writes the shard number on every parent
//! ([`SHARD_LABEL`], value [`shard_of`] its namespace and name) and on every
//! child it writes for one (the parent's value), so that each replica's
//! watches ask the API server for `kubeplug.io/shard=<i>` ([`selector`]) and
//! hold only its own shards' objects.
//!
//! Why by object label, not by namespace: namespaces skew (one huge
//! namespace is one shard, however many replicas there are), while a label
//! spreads the parents of every namespace evenly and still lets the API
//! server filter each replica's watches, so a replica never receives what it
//! does not own.
//!
//! Related objects are the host's to read, not to write, so they carry no
//! shard and every replica watches them whole, with one exception: a grant
//! with `shardPods: true` asserts that the Pods the plugin reads are its own
//! children's, and the host writes the shard label into those children's pod
//! templates ([`label_pod_template`]), so the Pods carry it too and are
//! watched per shard ([`narrows`]).
//!
//! Why by namespace and name, not uid: a parent deleted and made again lands
//! in the same shard, and the hash needs nothing the API server assigns, so
//! a parent can be placed before it is ever read back.
//!
//! Guarantees: [`shard_of`] is FNV-1a 64 written out here (not std's
//! `DefaultHasher`, which may change between Rust releases), so a label an
//! older host wrote keeps its meaning. A label is read only in its canonical
//! form (decimal, no sign, no leading zero): label selectors match strings
//! exactly, and a replica watching `kubeplug.io/shard=1` never sees `01`.
//!
//! Caveats: changing a plugin's shard count moves most parents (the hash is
//! taken modulo the count); objects whose label is then out of range are
//! [strays](is_stray) and must be labelled again, and the host relabels
//! those in range whose label is no longer their hash too (the operator's
//! `controller::shards`), so that a label is always [`shard_of`] its object.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::manifest::{ApiResource, Related};
use crate::policy::Grant;

/// Label on a sharded plugin's parents and on every child the host writes
/// for them: the shard number in decimal (`"0"`, `"1"`, ...).
pub const SHARD_LABEL: &str = "kubeplug.io/shard";

/// FNV-1a 64's offset basis and prime, as published (Fowler, Noll, Vo).
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 over the concatenation of `parts`.
fn fnv1a_64(parts: &[&[u8]]) -> u64 {
    parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(FNV_OFFSET, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(FNV_PRIME)
        })
}

/// The shard of the object `namespace`/`name` (namespace empty for a
/// cluster-scoped one) when its plugin has `shards` shards: FNV-1a 64 of
/// `namespace + "/" + name`, modulo `shards`. A count of 0 or 1 is one
/// shard, number 0.
pub fn shard_of(namespace: &str, name: &str, shards: u16) -> u16 {
    if shards <= 1 {
        return 0;
    }
    let hash = fnv1a_64(&[namespace.as_bytes(), b"/", name.as_bytes()]);
    u16::try_from(hash % u64::from(shards)).expect("a remainder below a u16 fits one")
}

/// A [`SHARD_LABEL`] value read as a shard number: only the canonical
/// decimal form (`"7"`, not `"07"` or `"+7"`), which is what the host writes
/// and what label selectors match.
pub fn parse_shard(value: &str) -> Option<u16> {
    let shard: u16 = value.parse().ok()?;
    (shard.to_string() == value).then_some(shard)
}

/// The shard an object's labels name (`metadata.labels` as typed clients
/// hold them: `meta.labels.as_ref()`). `None`: no label, or not a canonical
/// shard number.
pub fn shard_label(labels: Option<&BTreeMap<String, String>>) -> Option<u16> {
    parse_shard(labels?.get(SHARD_LABEL)?)
}

/// The shard a JSON object's `metadata.labels` name, as [`shard_label`].
pub fn shard_label_of(object: &Value) -> Option<u16> {
    parse_shard(object["metadata"]["labels"][SHARD_LABEL].as_str()?)
}

/// Does an object whose label reads `label` ([`shard_label`]) need
/// labelling (again) for a plugin with `shards` shards? Yes when it has no
/// valid label or one at or past the count (the count was lowered). An
/// unsharded plugin (0 or 1 shards) neither writes nor reads the label, so
/// nothing is stray for it.
pub fn is_stray(label: Option<u16>, shards: u16) -> bool {
    shards > 1 && label.is_none_or(|shard| shard >= shards)
}

/// The label selector of one shard's objects, for a watch or a list:
/// `kubeplug.io/shard=<shard>`.
pub fn selector(shard: u16) -> String {
    format!("{SHARD_LABEL}={shard}")
}

/// Where the kinds that make Pods hold their pod template, by API group and
/// kind. Only these: a custom kind's `spec.template` may be anything, and
/// a StatefulSet's `volumeClaimTemplates` are immutable.
const POD_TEMPLATES: &[(&str, &str, &str)] = &[
    ("apps", "Deployment", "/spec/template"),
    ("apps", "StatefulSet", "/spec/template"),
    ("apps", "DaemonSet", "/spec/template"),
    ("apps", "ReplicaSet", "/spec/template"),
    ("batch", "Job", "/spec/template"),
    ("batch", "CronJob", "/spec/jobTemplate/spec/template"),
    ("", "ReplicationController", "/spec/template"),
];

/// Does a sharded plugin watch its `related` kind per shard instead of
/// whole? Only Pods, only when the grant says its related Pods are its own
/// children's (`shardPods: true`), and only when the selector names the
/// parent: then a parent's related Pods are made from its own children's pod
/// templates, which carry its shard ([`label_pod_template`]), so the owner
/// of the shard sees every one of them. A Pod made otherwise (not from the
/// plugin's children) is not seen at all: that is what the grant asserts.
pub fn narrows(grant: &Grant, related: &Related) -> bool {
    grant.shards > 1
        && grant.shard_pods
        && related.resource.group.is_empty()
        && related.resource.kind == "Pod"
        && related.parent_name_key().is_some()
}

/// A pod template whose labels (this JSON pointer) already hold the shard
/// label: only the host sets it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{labels}")]
pub struct ShardLabelSet {
    pub labels: String,
}

/// A child (of type `ty`, as the manifest resolved it) with its pod template
/// labelled with `shard`, so that the Pods it makes
/// land in that shard's watch (see [`narrows`]). Kinds that make no Pods
/// are left as they are. `Err` names the template when the plugin set the
/// label itself, which no answer may.
///
/// Caveat: a template whose label changes rolls its Pods; the label changes
/// only when the parent moves to another shard, that is when the grant's
/// shard count changes (or shardPods is first turned on).
pub fn label_pod_template(
    child: &mut Value,
    ty: &ApiResource,
    shard: u16,
) -> Result<(), ShardLabelSet> {
    let Some((_, _, path)) = POD_TEMPLATES
        .iter()
        .find(|(group, kind, _)| *group == ty.group && *kind == ty.kind)
    else {
        return Ok(());
    };
    let Some(Value::Object(template)) = child.pointer_mut(path) else {
        return Ok(());
    };
    let metadata = template
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Value::Object(metadata) = metadata else {
        return Ok(());
    };
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| Value::Object(Default::default()));
    let Value::Object(labels) = labels else {
        return Ok(());
    };
    if labels.contains_key(SHARD_LABEL) {
        return Err(ShardLabelSet {
            labels: format!("{path}/metadata/labels"),
        });
    }
    labels.insert(SHARD_LABEL.into(), shard.to_string().into());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fnv1a_64_as_published() {
        // The reference vectors of FNV-1a 64: "" is the offset basis.
        assert_eq!(fnv1a_64(&[]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(&[b"foobar"]), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a_64(&[b"foo", b"bar"]), fnv1a_64(&[b"foobar"]));
    }

    #[test]
    fn shards_are_pinned_so_labels_an_older_host_wrote_keep_their_meaning() {
        // Computed independently (Python, the published algorithm); a change
        // here relabels every sharded parent in every cluster.
        assert_eq!(shard_of("shop", "orders", 12), 3);
        assert_eq!(shard_of("shop", "orders", 3), 0);
        assert_eq!(shard_of("team-a", "cache-0", 256), 98);
        assert_eq!(shard_of("", "cluster-wide", 7), 1);
    }

    #[test]
    fn one_shard_or_none_is_shard_zero() {
        assert_eq!(shard_of("shop", "orders", 0), 0);
        assert_eq!(shard_of("team-a", "cache-0", 1), 0);
    }

    #[test]
    fn the_namespace_and_the_name_are_kept_apart() {
        // "a/bc" and "ab/c" are different objects in different namespaces.
        let a = fnv1a_64(&[b"a", b"/", b"bc"]);
        let b = fnv1a_64(&[b"ab", b"/", b"c"]);
        assert_ne!(a, b);
    }

    #[test]
    fn a_hundred_thousand_parents_spread_over_twelve_shards_within_five_percent() {
        for namespace in [|_| "shop".to_string(), |i| format!("team-{}", i % 37)] {
            let mut counts = [0u32; 12];
            for i in 0..100_000u32 {
                let shard = shard_of(&namespace(i), &format!("orders-{i}"), 12);
                counts[usize::from(shard)] += 1;
            }
            let even = 100_000.0 / 12.0;
            for (shard, count) in counts.iter().enumerate() {
                let off = (f64::from(*count) - even).abs() / even;
                assert!(
                    off <= 0.05,
                    "shard {shard}: {count} of 100,000 ({counts:?})"
                );
            }
        }
    }

    #[test]
    fn only_the_canonical_decimal_form_is_a_shard() {
        assert_eq!(parse_shard("0"), Some(0));
        assert_eq!(parse_shard("255"), Some(255));
        for bad in ["", "07", "+7", "-1", " 7", "7 ", "x", "65536", "0x1"] {
            assert_eq!(parse_shard(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_label_reads_the_same_from_typed_labels_and_from_json() {
        let labels = BTreeMap::from([
            ("app".to_string(), "orders".to_string()),
            (SHARD_LABEL.to_string(), "5".to_string()),
        ]);
        assert_eq!(shard_label(Some(&labels)), Some(5));
        assert_eq!(shard_label(None), None);
        assert_eq!(shard_label(Some(&BTreeMap::new())), None);
        let object = serde_json::json!({"metadata": {"labels": {SHARD_LABEL: "5"}}});
        assert_eq!(shard_label_of(&object), Some(5));
        assert_eq!(shard_label_of(&serde_json::json!({"metadata": {}})), None);
        let number = serde_json::json!({"metadata": {"labels": {SHARD_LABEL: 5}}});
        assert_eq!(shard_label_of(&number), None, "label values are strings");
    }

    #[test]
    fn an_object_without_a_label_in_range_is_stray_only_for_a_sharded_plugin() {
        assert!(is_stray(None, 4));
        assert!(is_stray(Some(4), 4), "the count was lowered");
        assert!(!is_stray(Some(3), 4));
        assert!(!is_stray(Some(0), 4));
        for unsharded in [0, 1] {
            assert!(!is_stray(None, unsharded));
            assert!(!is_stray(Some(9), unsharded));
        }
    }

    #[test]
    fn a_shards_selector_names_the_label_and_its_value() {
        assert_eq!(selector(3), "kubeplug.io/shard=3");
        assert_eq!(
            parse_shard(selector(3).rsplit('=').next().unwrap()),
            Some(3)
        );
    }

    fn grant(shards: u16, shard_pods: bool) -> Grant {
        Grant {
            shards,
            shard_pods,
            ..Grant::safe_default()
        }
    }

    fn pods(labels: Vec<(String, crate::manifest::LabelValue)>) -> Related {
        Related {
            resource: crate::manifest::ApiResource::new("", "v1", "Pod", "pods", true),
            match_labels: labels,
        }
    }

    #[test]
    fn only_related_pods_named_after_their_parent_are_narrowed_and_only_when_granted() {
        use crate::manifest::LabelValue;
        let named = || {
            vec![
                ("app".to_string(), LabelValue::Literal("db".into())),
                ("instance".to_string(), LabelValue::ParentName),
            ]
        };
        assert!(narrows(&grant(4, true), &pods(named())));
        assert!(!narrows(&grant(4, false), &pods(named())), "not granted");
        assert!(!narrows(&grant(1, true), &pods(named())), "not sharded");
        let literal = vec![("app".to_string(), LabelValue::Literal("db".into()))];
        assert!(
            !narrows(&grant(4, true), &pods(literal)),
            "a selector that does not name the parent selects other shards' Pods"
        );
        let secrets = Related {
            resource: ApiResource::new("", "v1", "Secret", "secrets", true),
            match_labels: named(),
        };
        assert!(!narrows(&grant(4, true), &secrets), "only Pods carry it");
    }

    /// A resolved type of `group` and `kind` (version and plural do not
    /// matter here).
    fn typed(group: &str, kind: &str) -> ApiResource {
        ApiResource::new(group, "v1", kind, "", true)
    }

    #[test]
    fn the_pod_templates_of_kinds_that_make_pods_carry_the_shard() {
        let mut sts = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "spec": {"template": {"metadata": {"labels": {"app": "db"}}, "spec": {}}}
        });
        label_pod_template(&mut sts, &typed("apps", "StatefulSet"), 7).unwrap();
        assert_eq!(
            sts["spec"]["template"]["metadata"]["labels"],
            serde_json::json!({"app": "db", SHARD_LABEL: "7"})
        );
        let mut cron = serde_json::json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}
        });
        label_pod_template(&mut cron, &typed("batch", "CronJob"), 2).unwrap();
        assert_eq!(
            cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"][SHARD_LABEL],
            "2"
        );
        // Kinds that make no Pods, and custom kinds with a `spec.template`.
        for (ty, other) in [
            (
                typed("", "Service"),
                serde_json::json!({"apiVersion": "v1", "kind": "Service", "spec": {}}),
            ),
            (
                typed("example.com", "Deployment"),
                serde_json::json!({"apiVersion": "example.com/v1", "kind": "Deployment",
                    "spec": {"template": {"metadata": {}}}}),
            ),
        ] {
            let mut same = other.clone();
            label_pod_template(&mut same, &ty, 1).unwrap();
            assert_eq!(same, other);
        }
    }

    #[test]
    fn a_template_already_carrying_the_label_is_refused() {
        let mut deploy = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "spec": {"template": {"metadata": {"labels": {SHARD_LABEL: "0"}}}}
        });
        assert_eq!(
            label_pod_template(&mut deploy, &typed("apps", "Deployment"), 3),
            Err(ShardLabelSet {
                labels: "/spec/template/metadata/labels".to_string()
            })
        );
    }
}
