//! The generated objects read as the Kubernetes types they claim to be,
//! with no field lost on the way.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use kubeplug_core::manifest::{ApiResource, LabelValue, Manifest, Mode, Related};
use kubeplug_kit::platform::{Options, Platform, permissions};

fn res(group: &str, kind: &str, plural: &str, namespaced: bool) -> ApiResource {
    ApiResource::new(group, "v1", kind, plural, namespaced)
}

/// A manifest that asks for a bit of everything.
fn manifests() -> Vec<Manifest> {
    let composite = Manifest {
        children: vec![
            res("apps", "StatefulSet", "statefulsets", true),
            res("", "Secret", "secrets", true),
        ],
        related: vec![Related {
            resource: res("", "Pod", "pods", true),
            match_labels: vec![("app".into(), LabelValue::ParentName)],
        }],
        references: vec![
            res("", "ConfigMap", "configmaps", true),
            res("", "Namespace", "namespaces", false),
        ],
        metadata_only: vec![res("", "Pod", "pods", true)],
        finalizer: Some("example.com/backup".into()),
        namespaces: vec!["team-b".into(), "team-a".into()],
        ..Manifest::new(
            "database",
            "1.2.3",
            res("example.com", "Database", "databases", true),
            Mode::Composite,
        )
    };
    let decorator = Manifest::new(
        "node-labeler",
        "0.1.0",
        res("", "Node", "nodes", false),
        Mode::Decorator,
    );
    vec![composite, decorator]
}

/// `json` read as `T`, which writes it back unchanged.
fn typed<T: DeserializeOwned + Serialize>(json: &Value) -> T {
    let object: T = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(
        &serde_json::to_value(&object).unwrap(),
        json,
        "a field was lost"
    );
    object
}

#[test]
fn every_generated_object_parses_as_its_kubernetes_type() {
    for manifest in manifests() {
        manifest.validate().unwrap();
        let options = Options {
            identity_namespace: "platform".into(),
            decorator_keys: vec!["example.com/*".into()],
            shards: 2,
            pin: false,
        };
        let platform = Platform::derive(&manifest, &"ab".repeat(32), &options);
        let files = platform.kustomize();
        let account = format!("kubeplug-plugin-{}", manifest.name);
        let host = format!("kubeplug-host-{}", manifest.name);
        // Each object as `Kind namespace/name`.
        let mut objects = Vec::new();
        for file in ["serviceaccount.yaml", "plugin-rbac.yaml", "host-rbac.yaml"] {
            let docs: Vec<Value> = kubeplug_core::yaml::from_documents(&files[file]).unwrap();
            for doc in docs {
                let kind = doc["kind"].as_str().unwrap().to_string();
                let meta = &doc["metadata"];
                objects.push(format!(
                    "{kind} {}/{}",
                    meta["namespace"].as_str().unwrap_or_default(),
                    meta["name"].as_str().unwrap()
                ));
                // Bindings are to the host's ServiceAccount in host-rbac.yaml,
                // to the plugin's in plugin-rbac.yaml; both in "platform".
                let subject = if file == "host-rbac.yaml" {
                    "kubeplug"
                } else {
                    account.as_str()
                };
                match kind.as_str() {
                    "ServiceAccount" => {
                        let sa: ServiceAccount = typed(&doc);
                        assert_eq!(sa.metadata.name.as_deref(), Some(account.as_str()));
                        assert_eq!(sa.metadata.namespace.as_deref(), Some("platform"));
                        assert_eq!(sa.automount_service_account_token, Some(false));
                    }
                    "ClusterRole" => {
                        let role: ClusterRole = typed(&doc);
                        let rules = role.rules.unwrap_or_default();
                        assert!(!rules.is_empty());
                        assert!(
                            !rules
                                .iter()
                                .any(|r| r.verbs.contains(&"impersonate".into())),
                            "impersonate only in a namespaced Role"
                        );
                    }
                    "Role" => {
                        let role: Role = typed(&doc);
                        assert_eq!(role.metadata.namespace.as_deref(), Some("platform"));
                        let rules = role.rules.unwrap();
                        assert_eq!(rules.len(), 1);
                        assert_eq!(rules[0].verbs, ["impersonate"]);
                        assert_eq!(
                            rules[0].resources.as_deref(),
                            Some(&["serviceaccounts".to_string()][..])
                        );
                        assert_eq!(
                            rules[0].resource_names.as_deref(),
                            Some(std::slice::from_ref(&account))
                        );
                    }
                    "ClusterRoleBinding" => {
                        let binding: ClusterRoleBinding = typed(&doc);
                        assert_eq!(Some(binding.role_ref.name), binding.metadata.name);
                        assert_eq!(binding.role_ref.kind, "ClusterRole");
                        let subject_of = &binding.subjects.unwrap()[0];
                        assert_eq!(subject_of.namespace.as_deref(), Some("platform"));
                        assert_eq!(subject_of.name, subject);
                    }
                    "RoleBinding" => {
                        let binding: RoleBinding = typed(&doc);
                        assert_eq!(Some(binding.role_ref.name), binding.metadata.name);
                        let subject_of = &binding.subjects.unwrap()[0];
                        assert_eq!(subject_of.namespace.as_deref(), Some("platform"));
                        assert_eq!(subject_of.name, subject);
                    }
                    other => panic!("unexpected kind {other}"),
                }
            }
        }
        let expected: Vec<String> = if manifest.namespaces.is_empty() {
            vec![
                format!("ServiceAccount platform/{account}"),
                format!("ClusterRole /{account}"),
                format!("ClusterRoleBinding /{account}"),
            ]
        } else {
            // Bound in each namespace it serves; its cluster-scoped kind
            // (Namespace) apart, cluster-wide.
            vec![
                format!("ServiceAccount platform/{account}"),
                format!("ClusterRole /{account}"),
                format!("RoleBinding team-a/{account}"),
                format!("RoleBinding team-b/{account}"),
                format!("ClusterRole /{account}-cluster"),
                format!("ClusterRoleBinding /{account}-cluster"),
            ]
        };
        let expected: Vec<String> = expected
            .into_iter()
            .chain([
                format!("ClusterRole /{host}"),
                format!("ClusterRoleBinding /{host}"),
                format!("Role platform/{host}"),
                format!("RoleBinding platform/{host}"),
            ])
            .collect();
        assert_eq!(objects, expected);
        // The helm fragment's rules are PolicyRules too.
        let values: Value = kubeplug_core::yaml::from_str(&platform.helm(None)).unwrap();
        let identity = &values["plugins"]["identities"][&manifest.name];
        let rules: Vec<PolicyRule> = typed(&identity["rules"]);
        assert_eq!(rules.len(), platform.identity_rules.len());
        let _: Vec<PolicyRule> = typed(&values["rbac"]["hostReadRules"]);
    }
}

#[test]
fn a_plugin_may_do_what_the_host_asks_in_its_name_and_the_host_only_reads() {
    let [composite, decorator] = &manifests()[..] else {
        unreachable!()
    };
    let options = Options {
        shards: 2,
        ..Options::default()
    };
    let p = |m: &Manifest, options: &Options| {
        permissions(&Platform::derive(m, &"ab".repeat(32), options).identity_rules)
    };
    let has = |set: &std::collections::BTreeSet<_>, g: &str, r: &str, v: &str| {
        set.contains(&(g.to_string(), r.to_string(), String::new(), v.to_string()))
    };
    let c = p(composite, &Options::default());
    for verb in ["get", "list", "watch", "patch"] {
        assert!(has(&c, "example.com", "databases", verb), "{verb}");
    }
    assert!(has(&c, "example.com", "databases/status", "patch"));
    assert!(has(&c, "example.com", "databases/finalizers", "update"));
    for verb in ["get", "list", "watch", "create", "patch", "delete"] {
        assert!(has(&c, "apps", "statefulsets", verb), "{verb}");
    }
    assert!(!has(&c, "", "configmaps", "patch"), "referenced: read only");
    assert!(has(&c, "events.k8s.io", "events", "create"));

    let d = p(decorator, &Options::default());
    assert!(has(&d, "", "nodes", "patch"));
    assert!(
        !d.iter().any(|x| x.1.contains('/')),
        "no status, no children: {d:?}"
    );
    let sharded = p(
        &Manifest::new("x", "1", res("a.io", "A", "as", true), Mode::Composite),
        &options,
    );
    assert!(has(&sharded, "a.io", "as", "patch"), "shard labels");

    let host = Platform::derive(composite, &"ab".repeat(32), &Options::default());
    assert!(
        permissions(&host.host_read_rules)
            .iter()
            .all(|x| ["get", "list", "watch"].contains(&x.3.as_str()))
    );
}
