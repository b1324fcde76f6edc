//! Unit tests of the policy: parsing, admission of manifests (with scopes
//! as discovery reports them) and the checks on answers.

use std::collections::BTreeMap;
use std::io::Write as _;

use super::*;
use crate::fence::FenceError;
use crate::manifest::{ApiResource, LabelValue, Manifest, Mode, Related};
use serde_json::Value;

use crate::contract::{Desired, Event, MetadataPatch};

fn res(group: &str, kind: &str, plural: &str, namespaced: bool) -> ApiResource {
    ApiResource::new(group, "v1", kind, plural, namespaced)
}

fn database() -> Manifest {
    Manifest {
        children: vec![
            res("apps", "StatefulSet", "statefulsets", true),
            res("", "Service", "services", true),
            res("", "Secret", "secrets", true),
        ],
        related: vec![Related {
            resource: res("", "Pod", "pods", true),
            match_labels: vec![("app".into(), LabelValue::ParentName)],
        }],
        ..Manifest::new(
            "database",
            "0.1.0",
            res("example.com", "Database", "databases", true),
            Mode::Composite,
        )
    }
}

fn policy(yaml: &str) -> Policy {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(yaml.as_bytes()).unwrap();
    Policy::load(&[file.path()]).unwrap()
}

const SEEDS: &str = "
strict: true
plugins:
  database:
    parent: [Database.example.com]
    children: [StatefulSet.apps, Service, Secret]
    related: [Pod]
  pod-annotator:
    parent: [Pod]
    decoratorKeys: [\"example.com/*\"]
";

const DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[test]
fn a_manifest_within_its_grant_is_admitted_outside_system_namespaces() {
    let grant = policy(SEEDS).grant("database").unwrap();
    let admitted = grant.admit(&database(), DIGEST).unwrap();
    assert!(admitted.watches_namespace("shop"));
    assert!(!admitted.watches_namespace("kube-system"));
    assert!(!admitted.watches_namespace("kubeplug-system"));
    assert_eq!(
        grant.user(),
        "system:serviceaccount:kubeplug-system:kubeplug-plugin-database"
    );
}

#[test]
fn a_refusal_names_every_missing_grant() {
    let grant = policy(SEEDS).grant("database").unwrap();
    let mut asks = database();
    asks.children.push(res(
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ));
    asks.related.push(Related {
        resource: res("", "ConfigMap", "configmaps", true),
        match_labels: vec![("a".into(), LabelValue::Literal("b".into()))],
    });
    asks.finalizer = Some("kubernetes.io/pvc-protection".into());
    asks.namespaces = vec!["kube-system".into()];
    let refusal = grant.admit(&asks, DIGEST).unwrap_err();
    let text = refusal.to_string();
    for needle in [
        "child kind ClusterRoleBinding.rbac.authorization.k8s.io",
        "cluster-scoped ClusterRoleBinding.rbac.authorization.k8s.io",
        "related kind ConfigMap",
        "finalizer kubernetes.io/pvc-protection",
        "namespace kube-system",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from {text}");
    }
}

#[test]
fn strict_mode_refuses_a_plugin_without_an_entry_and_the_default_grant_fences_one() {
    assert!(policy(SEEDS).grant("stranger").is_none());
    let lenient = Policy::default();
    let grant = lenient.grant("stranger").unwrap();
    assert!(!grant.explicit);
    // Namespaced, non-sensitive kinds pass; Secrets must be named.
    let mut m = database();
    m.name = "stranger".into();
    let text = grant.admit(&m, DIGEST).unwrap_err().to_string();
    assert!(
        text.contains("child kind Secret (sensitive kinds must be named)"),
        "{text}"
    );
    m.children.pop();
    assert!(grant.admit(&m, DIGEST).is_ok());
    // A parent kind of Secret in kube-system is not granted.
    m.parent = res("", "Secret", "secrets", true);
    m.children = vec![res("", "ConfigMap", "configmaps", true)];
    m.namespaces = vec!["kube-system".into()];
    let text = grant.admit(&m, DIGEST).unwrap_err().to_string();
    assert!(
        text.contains("parent kind Secret") && text.contains("namespace kube-system"),
        "{text}"
    );
}

#[test]
fn pins_refuse_other_digests() {
    let pinned = policy(&format!(
        "plugins:\n  database:\n    parent: [Database.example.com]\n    children: [StatefulSet.apps, Service, Secret]\n    related: [Pod]\n    sha256: [\"sha256:{}\"]\n",
        "ab".repeat(32)
    ));
    let grant = pinned.grant("database").unwrap();
    assert!(grant.admit(&database(), &"ab".repeat(32)).is_ok());
    assert!(
        grant
            .admit(&database(), DIGEST)
            .unwrap_err()
            .to_string()
            .contains("is not pinned")
    );
    assert_eq!(pinned.pins_for_file("database"), ["ab".repeat(32)]);
}

#[test]
fn a_grant_for_named_namespaces_narrows_a_plugin_that_asks_for_all() {
    let p = policy(
        "plugins:\n  database:\n    parent: [Database.example.com]\n    children: [StatefulSet.apps, Service, Secret]\n    related: [Pod]\n    namespaces: [team-a]\n",
    );
    let admitted = p
        .grant("database")
        .unwrap()
        .admit(&database(), DIGEST)
        .unwrap();
    assert_eq!(admitted.namespaces, vec!["team-a".to_string()]);
}

#[test]
fn the_plugins_own_finalizer_domain_is_always_granted() {
    let grant = policy(SEEDS).grant("database").unwrap();
    let mut m = database();
    m.finalizer = Some("database.kubeplug.io/cleanup".into());
    assert!(grant.admit(&m, DIGEST).is_ok());
    assert!(!grant.finalizer_allowed("kubeplug.io/cleanup"));
}

fn answer() -> Desired {
    Desired::default()
}

fn decorator() -> Manifest {
    Manifest {
        name: "pod-annotator".into(),
        parent: res("", "Pod", "pods", true),
        mode: Mode::Decorator,
        children: Vec::new(),
        related: Vec::new(),
        ..database()
    }
}

fn patch(key: &str) -> Desired {
    Desired {
        parent_patch: Some(MetadataPatch {
            labels: BTreeMap::new(),
            annotations: BTreeMap::from([(key.to_string(), "x".to_string())]),
        }),
        ..answer()
    }
}

#[test]
fn reserved_and_ungranted_decorator_keys_are_refused() {
    let grant = policy(SEEDS).grant("pod-annotator").unwrap();
    let m = decorator();
    assert!(
        grant
            .check_answer(&m, &patch("example.com/injected"))
            .is_ok()
    );
    for key in [
        "kubeplug.io/plugin",
        "pod-template-hash",
        "kubectl.kubernetes.io/last-applied-configuration",
    ] {
        assert_eq!(
            grant.check_answer(&m, &patch(key)),
            Err(FenceError::KeyNotGranted {
                key: key.into(),
                reserved: true
            })
        );
    }
    assert!(matches!(
        grant.check_answer(&m, &patch("other.io/x")),
        Err(FenceError::KeyNotGranted {
            reserved: false,
            ..
        })
    ));
    // The default grant: any key but the reserved ones.
    let lenient = Policy::default().grant("pod-annotator").unwrap();
    assert!(lenient.check_answer(&m, &patch("other.io/x")).is_ok());
    assert!(
        lenient
            .check_answer(&m, &patch("app.kubernetes.io/name"))
            .is_err()
    );
}

#[test]
fn a_key_pattern_never_unlocks_a_reserved_key_only_its_exact_name_does() {
    let p = policy(
        "plugins:\n  pod-annotator:\n    parent: [Pod]\n    decoratorKeys: [\"app*\", \"*\", example.kubernetes.io/granted, \"team.k8s.io/*\"]\n",
    );
    let grant = p.grant("pod-annotator").unwrap();
    let m = decorator();
    for key in ["app-tier", "app/x", "other.io/x"] {
        assert!(grant.check_answer(&m, &patch(key)).is_ok(), "{key}");
    }
    for key in [
        "app.kubernetes.io/name",
        "app.kubeplug.io/plugin",
        "team.k8s.io/owner",
        "example.kubernetes.io/other",
    ] {
        assert_eq!(
            grant.check_answer(&m, &patch(key)),
            Err(FenceError::KeyNotGranted {
                key: key.into(),
                reserved: true
            }),
            "{key}"
        );
    }
    assert!(
        grant
            .check_answer(&m, &patch("example.kubernetes.io/granted"))
            .is_ok()
    );
}

#[test]
fn a_finalizer_pattern_never_unlocks_a_reserved_finalizer_only_its_exact_name_does() {
    let p = policy(
        "plugins:\n  database:\n    parent: [Database.example.com]\n    finalizers: [\"*\", example.kubernetes.io/granted]\n",
    );
    let grant = p.grant("database").unwrap();
    assert!(grant.finalizer_allowed("example.com/cleanup"));
    assert!(grant.finalizer_allowed("example.kubernetes.io/granted"));
    assert!(grant.finalizer_allowed("database.kubeplug.io/cleanup"));
    for reserved in [
        "kubernetes.io/pvc-protection",
        "example.kubernetes.io/other",
        "batch.k8s.io/x",
        "other.kubeplug.io/x",
        "foregroundDeletion",
        "orphan",
    ] {
        assert!(!grant.finalizer_allowed(reserved), "{reserved}");
    }
}

fn config_map(name: &str, finalizers: Value) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "finalizers": finalizers},
    })
}

#[test]
fn a_child_may_carry_only_finalizers_its_grant_allows() {
    let p = policy(
        "plugins:\n  database:\n    parent: [Database.example.com]\n    finalizers: [example.com/cleanup]\n",
    );
    let grant = p.grant("database").unwrap();
    let m = database();
    let with = |finalizers: Value| Desired {
        children: vec![config_map("c", finalizers)],
        ..answer()
    };
    let allowed = serde_json::json!(["database.kubeplug.io/keep", "example.com/cleanup"]);
    assert!(grant.check_answer(&m, &with(allowed)).is_ok());
    assert!(grant.check_answer(&m, &with(Value::Null)).is_ok());
    let refused = grant
        .check_answer(
            &m,
            &with(serde_json::json!([
                "example.com/cleanup",
                "kubernetes.io/pvc-protection"
            ])),
        )
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "child ConfigMap/c: finalizer kubernetes.io/pvc-protection is not granted (a plugin may use database.kubeplug.io/* unless granted more)"
    );
    assert!(matches!(
        grant.check_answer(&m, &with(serde_json::json!([7]))),
        Err(FenceError::FinalizerNotGranted { finalizer, .. }) if finalizer == "7"
    ));
}

#[test]
fn answers_over_quota_are_refused() {
    let p = policy(
        "plugins:\n  database:\n    parent: [Database.example.com]\n    quotas: {statusBytes: 100, eventsPerAnswer: 2, childrenPerParent: 1}\n",
    );
    let grant = p.grant("database").unwrap();
    let m = database();
    let big = Desired {
        status: Some(serde_json::json!({"blob": "x".repeat(200)})),
        ..answer()
    };
    assert!(matches!(
        grant.check_answer(&m, &big),
        Err(FenceError::StatusTooLarge { .. })
    ));
    let event = Event {
        warning: false,
        reason: "R".into(),
        message: "m".into(),
    };
    let chatty = Desired {
        events: vec![event; 3],
        ..answer()
    };
    assert_eq!(
        grant.check_answer(&m, &chatty),
        Err(FenceError::TooManyEvents { count: 3, max: 2 })
    );
    let many = Desired {
        children: vec![serde_json::json!({}); 2],
        ..answer()
    };
    assert!(matches!(
        grant.check_answer(&m, &many),
        Err(FenceError::TooManyChildren { .. })
    ));
    assert_eq!(grant.quotas.limits().children, 1);
}

#[test]
fn a_grant_is_unsharded_unless_it_names_a_shard_count() {
    let p = policy("plugins:\n  database: {shards: 12}\n  cache: {shards: 256}\n  other: {}\n");
    assert_eq!(p.grant("database").unwrap().grant.shards, 12);
    assert_eq!(p.grant("cache").unwrap().grant.shards, 256);
    assert_eq!(p.grant("other").unwrap().grant.shards, 1);
    assert_eq!(
        p.grant("stranger").unwrap().grant.shards,
        1,
        "the default grant"
    );
    assert_eq!(Grant::safe_default().shards, 1);
}

#[test]
fn a_shard_count_outside_one_to_256_is_refused_with_its_reason() {
    let load = |shards: &str| {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        write!(file, "plugins:\n  database: {{shards: {shards}}}\n").unwrap();
        Policy::load(&[file.path()])
    };
    for bad in ["0", "257", "-1", "65536"] {
        let error = load(bad).unwrap_err();
        assert!(
            matches!(error, PolicyError::Invalid { .. }),
            "{bad}: {error:?}"
        );
        assert!(
            error
                .to_string()
                .ends_with(&format!(": shards: {bad} is outside 1..=256 (the number of shards a plugin's parents are split into; 1 is not sharded)")),
            "{bad}: {error}"
        );
    }
    for not_a_number in ["2.5", "[4]", "many"] {
        assert!(
            matches!(load(not_a_number), Err(PolicyError::Parse { .. })),
            "{not_a_number}"
        );
    }
}

#[test]
fn a_decorator_may_not_set_the_shard_label_even_when_granted_by_name() {
    let p = policy(
        "plugins:\n  pod-annotator:\n    parent: [Pod]\n    decoratorKeys: [kubeplug.io/shard, \"*\"]\n",
    );
    let grant = p.grant("pod-annotator").unwrap();
    let labelled = Desired {
        parent_patch: Some(MetadataPatch {
            labels: BTreeMap::from([("kubeplug.io/shard".to_string(), "0".to_string())]),
            annotations: BTreeMap::new(),
        }),
        ..answer()
    };
    assert_eq!(
        grant.check_answer(&decorator(), &labelled),
        Err(FenceError::HostLabel {
            on: "the parent patch".into(),
            key: "kubeplug.io/shard".into()
        })
    );
    // The annotation of that name is an ordinary reserved key: its exact
    // name grants it.
    assert!(
        grant
            .check_answer(&decorator(), &patch("kubeplug.io/shard"))
            .is_ok()
    );
}

#[test]
fn a_plugin_granted_in_two_files_is_an_error() {
    let mut a = tempfile::NamedTempFile::new().unwrap();
    a.write_all(b"plugins:\n  x:\n    parent: [Pod]\n").unwrap();
    let error = Policy::load(&[a.path(), a.path()]).unwrap_err();
    assert!(error.to_string().contains("invalid policy"), "{error}");
}

#[test]
fn typos_in_a_policy_are_errors_not_silent_defaults() {
    let mut a = tempfile::NamedTempFile::new().unwrap();
    a.write_all(b"plugins:\n  x:\n    parnet: [Pod]\n").unwrap();
    assert!(Policy::load(&[a.path()]).is_err());
    let mut b = tempfile::NamedTempFile::new().unwrap();
    b.write_all(b"quotas: {eventsPerAnwser: 3}\n").unwrap();
    assert!(Policy::load(&[b.path()]).is_err());
}

#[test]
fn a_grants_path_is_a_file_or_a_folder_one_level_down_and_never_shared() {
    let one = |path: &str| {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        write!(file, "plugins:\n  database: {{path: {path:?}}}\n").unwrap();
        Policy::load(&[file.path()]).map(|p| p.location("database"))
    };
    assert_eq!(one("db.wasm").unwrap(), Location::File("db.wasm".into()));
    assert_eq!(
        one("team-a/db.wasm").unwrap(),
        Location::File("team-a/db.wasm".into())
    );
    assert_eq!(one("team-a/").unwrap(), Location::Folder("team-a".into()));
    for bad in [
        "",
        "/plugins/db.wasm",
        "../db.wasm",
        "team-a/../db.wasm",
        ".hidden/db.wasm",
        "a/b/db.wasm",
        "a/b/",
        "team-a",
        "db.next.wasm",
        "team-a//db.wasm",
    ] {
        let error = one(bad).unwrap_err();
        assert!(
            error.to_string().contains("path") || format!("{error:?}").contains("path"),
            "{bad}: {error:?}"
        );
    }
    let twice = "plugins:\n  a: {path: x/b.wasm}\n  b: {path: x/}\n";
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(twice.as_bytes()).unwrap();
    let error = Policy::load(&[file.path()]).unwrap_err();
    assert!(
        format!("{error}").contains("x/b.wasm is also the location of plugin b"),
        "{error}"
    );
    // No entry, or no path: the default layouts.
    assert_eq!(policy(SEEDS).location("database"), Location::Default);
    assert_eq!(policy(SEEDS).location("stranger"), Location::Default);
}

#[test]
fn a_location_is_bound_to_the_name_its_grant_or_its_default_layout_gives() {
    let p = policy(
        "plugins:
  database: {path: team-a/engine.wasm}
  cache: {path: team-b/}
  myapp: {}
",
    );
    let at = |rel: &str| p.bound_at(Path::new(rel));
    assert_eq!(at("team-a/engine.wasm").unwrap(), "database");
    assert_eq!(at("team-b/cache.wasm").unwrap(), "cache");
    assert_eq!(at("myapp.wasm").unwrap(), "myapp");
    assert_eq!(at("myapp/myapp.wasm").unwrap(), "myapp");
    assert_eq!(at("stranger.wasm").unwrap(), "stranger");
    for refused in [
        "database.wasm",
        "database/database.wasm",
        "cache.wasm",
        "team-b/myapp.wasm",
        "team-a/myapp.wasm",
    ] {
        assert!(at(refused).is_err(), "{refused}");
    }
    let next = |rel: &str| p.candidate_at(Path::new(rel));
    assert_eq!(next("team-a/database.next.wasm").unwrap(), "database");
    assert_eq!(next("team-b/cache.next.wasm").unwrap(), "cache");
    assert_eq!(next("myapp.next.wasm").unwrap(), "myapp");
    assert!(next("database.next.wasm").is_err());
    assert!(next("team-b/myapp.next.wasm").is_err());
}

#[test]
fn shard_pods_defaults_off_and_needs_a_sharded_grant() {
    let p = policy("plugins:\n  database: {shards: 4, shardPods: true}\n  other: {shards: 4}\n");
    assert!(p.grant("database").unwrap().grant.shard_pods);
    assert!(!p.grant("other").unwrap().grant.shard_pods);
    assert!(!Grant::safe_default().shard_pods);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"plugins:\n  database: {shardPods: true}\n")
        .unwrap();
    let error = Policy::load(&[file.path()]).unwrap_err().to_string();
    assert!(
        error.contains("shardPods: true needs shards: 2 or more"),
        "{error}"
    );
}

#[test]
fn webhooks_are_none_by_default_and_granted_by_name() {
    let p = policy(
        "plugins:\n  database: {admission: [validate], conversion: true}\n  myapp: {admission: [mutate, validate]}\n  other: {}\n",
    );
    let webhooks = |name: &str| p.grant(name).unwrap().grant.webhooks;
    assert_eq!(
        webhooks("database"),
        Webhooks {
            validate: true,
            mutate: false,
            convert: true
        }
    );
    assert!(webhooks("myapp").validate && webhooks("myapp").mutate && !webhooks("myapp").convert);
    assert_eq!(webhooks("other"), Webhooks::default());
    assert_eq!(Grant::safe_default().webhooks, Webhooks::default());
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"plugins:\n  database: {admission: [reconcile]}\n")
        .unwrap();
    let error = Policy::load(&[file.path()]).unwrap_err().to_string();
    assert!(
        error.contains("\"reconcile\" is neither validate nor mutate"),
        "{error}"
    );
}

#[test]
fn a_plugin_offering_a_webhook_its_grant_lacks_is_refused_at_load() {
    let p = policy(SEEDS);
    let grant = p.grant("database").unwrap();
    let mut offers = database();
    offers.webhooks = Webhooks {
        validate: true,
        mutate: false,
        convert: true,
    };
    let text = grant.admit(&offers, DIGEST).unwrap_err().to_string();
    assert!(
        text.contains(
            "the validate webhook of its parent kind (grant it under admission: [validate])"
        ) && text
            .contains("the convert webhook of its parent kind (grant it under conversion: true)"),
        "{text}"
    );
    let granted = policy(
        "plugins:\n  database:\n    parent: [Database.example.com]\n    children: [StatefulSet.apps, Service, Secret]\n    related: [Pod]\n    admission: [validate]\n    conversion: true\n",
    );
    let admitted = granted
        .grant("database")
        .unwrap()
        .admit(&offers, DIGEST)
        .unwrap();
    assert_eq!(admitted.webhooks, offers.webhooks);
}

#[test]
fn a_grants_failure_policy_defaults_to_fail() {
    let p = policy("plugins:\n  a: {failurePolicy: Ignore}\n  b: {}\n");
    assert_eq!(
        p.grant("a").unwrap().grant.failure_policy,
        FailurePolicy::Ignore
    );
    assert_eq!(
        p.grant("b").unwrap().grant.failure_policy,
        FailurePolicy::Fail
    );
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"plugins:\n  a: {failurePolicy: Maybe}\n")
        .unwrap();
    assert!(Policy::load(&[file.path()]).is_err());
}

/// A cluster-scoped parent (a Namespace decorator) that reads namespaced
/// kinds is narrowed to the grant's namespaces like a namespaced one: what
/// it is handed by reference or as related comes from there only.
#[test]
fn a_cluster_scoped_parents_plugin_is_narrowed_to_the_grants_namespaces() {
    let manifest = Manifest {
        references: vec![res("", "ConfigMap", "configmaps", true)],
        ..Manifest::new(
            "ns-decorator",
            "0.1.0",
            res("", "Namespace", "namespaces", false),
            Mode::Decorator,
        )
    };
    let yaml = |namespaces: &str| {
        format!(
            "plugins:\n  ns-decorator:\n    parent: [Namespace]\n    references: [ConfigMap]\n    clusterScoped: [Namespace]\n{namespaces}"
        )
    };
    let admitted = policy(&yaml("    namespaces: [team-a]\n"))
        .grant("ns-decorator")
        .unwrap()
        .admit(&manifest, DIGEST)
        .unwrap();
    assert_eq!(admitted.namespaces, vec!["team-a"]);
    assert!(!admitted.watches_namespace("kube-system"));
    let all = policy(&yaml(""))
        .grant("ns-decorator")
        .unwrap()
        .admit(&manifest, DIGEST)
        .unwrap();
    assert!(all.watches_namespace("team-b"));
    for system in [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "kubeplug-system",
    ] {
        assert!(!all.watches_namespace(system), "{system}");
    }
    let refusal = policy(&yaml("    namespaces: []\n"))
        .grant("ns-decorator")
        .unwrap()
        .admit(&manifest, DIGEST)
        .unwrap_err();
    assert!(
        refusal.missing.iter().any(|m| m.contains("any namespace")),
        "{refusal:?}"
    );
    // Reading no namespaced kind, it needs no namespace.
    let alone = Manifest {
        references: Vec::new(),
        ..manifest
    };
    policy(&yaml("    namespaces: []\n"))
        .grant("ns-decorator")
        .unwrap()
        .admit(&alone, DIGEST)
        .unwrap();
}
