//! The generated platform side of the three seed plugins against what
//! deploy/base and the chart's values write by hand for them.

use std::collections::BTreeSet;
use std::io::Write as _;

use serde_json::Value as Json;

use super::*;
use kubeplug_core::manifest::{LabelValue, Related};
use kubeplug_core::policy::{Grant, Policy};
use kubeplug_core::webhook::Webhooks;

fn res(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::new(group, version, kind, plural, true)
}

fn pod() -> ApiResource {
    res("", "v1", "Pod", "pods")
}

/// A seed composite of parent kind `parent`, at 0.1.0.
fn seed(name: &str, parent: ApiResource) -> Manifest {
    Manifest::new(name, "0.1.0", parent, Mode::Composite)
}

/// plugins/database's manifest (lib.rs: `manifest`).
fn database() -> Manifest {
    Manifest {
        children: vec![
            res("apps", "v1", "StatefulSet", "statefulsets"),
            res("", "v1", "Service", "services"),
            res("", "v1", "Secret", "secrets"),
        ],
        related: vec![Related {
            resource: pod(),
            match_labels: vec![
                (
                    "app.kubernetes.io/name".into(),
                    LabelValue::Literal("database".into()),
                ),
                ("app.kubernetes.io/instance".into(), LabelValue::ParentName),
            ],
        }],
        webhooks: Webhooks {
            validate: true,
            convert: true,
            ..Webhooks::default()
        },
        ..seed(
            "database",
            res("example.com", "v1", "Database", "databases"),
        )
    }
}

/// plugins/myapp's manifest.
fn myapp() -> Manifest {
    Manifest {
        children: vec![res("apps", "v1", "Deployment", "deployments")],
        references: vec![res("", "v1", "ConfigMap", "configmaps")],
        webhooks: Webhooks {
            mutate: true,
            ..Webhooks::default()
        },
        ..seed("myapp", res("example.com", "v1alpha1", "MyApp", "myapps"))
    }
}

/// plugins/pod-annotator's manifest under deploy/base/settings' config
/// (`namespaces: [team-a]`).
fn pod_annotator() -> Manifest {
    Manifest {
        namespaces: vec!["team-a".into()],
        metadata_only: vec![pod()],
        ..Manifest::new("pod-annotator", "0.1.0", pod(), Mode::Decorator)
    }
}

const DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// What the platform says that the manifest cannot: pod-annotator's keys
/// (`example.com/injected`, `example.com/injected-at`).
fn options(manifest: &Manifest) -> Options {
    Options {
        decorator_keys: if manifest.name == "pod-annotator" {
            vec!["example.com/*".into()]
        } else {
            Vec::new()
        },
        ..Options::default()
    }
}

fn seeds() -> Vec<(Manifest, Platform)> {
    [database(), myapp(), pod_annotator()]
        .into_iter()
        .map(|m| {
            m.validate().unwrap();
            let p = Platform::derive(&m, DIGEST, &options(&m));
            (m, p)
        })
        .collect()
}

fn deploy(path: &str) -> String {
    let path = format!("{}/../../deploy/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn documents(path: &str) -> Vec<Json> {
    kubeplug_core::yaml::from_documents(&deploy(path)).unwrap()
}

fn rules(value: &Json) -> Vec<Rule> {
    serde_json::from_value(value.clone()).unwrap()
}

fn chart_values() -> Json {
    kubeplug_core::yaml::from_str(&deploy("chart/values.yaml")).unwrap()
}

/// The rules of ClusterRole `name` in deploy/base/`file`.
fn base_cluster_role(file: &str, name: &str) -> Vec<Rule> {
    let role = documents(file)
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no ClusterRole {name} in {file}"));
    rules(&role["rules"])
}

fn perm(group: &str, resource: &str, verb: &str) -> Permission {
    (group.into(), resource.into(), String::new(), verb.into())
}

/// A composite seed's excess (see [`excess`]): on its parent kind
/// (`plural` of example.com) `patch` and `update`, `get` and `update` of its
/// status; and `children`'s.
fn composite_excess<const N: usize>(
    plural: &str,
    children: [Permission; N],
) -> BTreeSet<Permission> {
    let status = format!("{plural}/status");
    [
        perm("example.com", plural, "patch"),
        perm("example.com", plural, "update"),
        perm("example.com", &status, "get"),
        perm("example.com", &status, "update"),
    ]
    .into_iter()
    .chain(children)
    .collect()
}

/// What deploy/ grants a seed's identity beyond what the host ever asks in
/// its name: `update` (the host sends no PUT: children by server-side
/// apply, parents by merge patch, status by apply on the subresource),
/// `get` of the status subresource, and `patch` of a composite's parent
/// without a finalizer or shards. See the report of `kubeplug platform`
/// (docs/platform.md).
fn excess(name: &str) -> BTreeSet<Permission> {
    match name {
        "database" => composite_excess(
            "databases",
            [
                perm("apps", "statefulsets", "update"),
                perm("", "services", "update"),
                perm("", "secrets", "update"),
            ],
        ),
        "myapp" => composite_excess("myapps", [perm("apps", "deployments", "update")]),
        _ => BTreeSet::new(),
    }
}

#[test]
fn the_seeds_identities_are_what_deploy_writes_less_the_verbs_never_used() {
    let values = chart_values();
    for (manifest, platform) in seeds() {
        let name = &manifest.name;
        let generated = permissions(&platform.identity_rules);
        let chart = permissions(&rules(&values["plugins"]["identities"][name]["rules"]));
        let base = permissions(&base_cluster_role(
            "base/plugin-rbac.yaml",
            &format!("kubeplug-plugin-{name}"),
        ));
        assert_eq!(chart, base, "{name}: the chart and deploy/base agree");
        let missing: Vec<_> = generated.difference(&base).collect();
        assert!(
            missing.is_empty(),
            "{name}: generated beyond deploy/: {missing:?}"
        );
        let extra: BTreeSet<_> = base.difference(&generated).cloned().collect();
        assert_eq!(extra, excess(name), "{name}: deploy/ beyond generated");
        assert_eq!(
            values["plugins"]["identities"][name]["impersonate"],
            Json::Bool(true)
        );
    }
}

#[test]
fn the_seeds_host_rules_are_what_deploy_writes() {
    let seeds = seeds();
    let mut reads = BTreeSet::new();
    let mut impersonated = Vec::new();
    for (_, platform) in &seeds {
        reads.extend(permissions(&platform.host_read_rules));
        impersonated.extend(platform.impersonate.resource_names.clone());
        assert_eq!(
            permissions(std::slice::from_ref(&platform.impersonate)).len(),
            1,
            "one verb on one name"
        );
    }
    let chart = permissions(&rules(&chart_values()["rbac"]["hostReadRules"]));
    assert_eq!(reads, chart);

    let host = base_cluster_role("base/rbac.yaml", "kubeplug");
    let impersonate = host
        .iter()
        .find(|r| r.verbs == ["impersonate"])
        .expect("the host's impersonate rule");
    assert_eq!(impersonate.resource_names, impersonated);
    let base_reads: BTreeSet<_> = permissions(&host)
        .into_iter()
        .filter(|p| p.0 != "authorization.k8s.io" && p.3 != "impersonate")
        .collect();
    assert_eq!(reads, base_reads);
}

fn load(text: &str) -> Policy {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    Policy::load(&[file.path()]).unwrap()
}

/// A grant with its lists in one order: the order a list is written in
/// means nothing.
fn sorted(mut grant: Grant) -> Grant {
    for set in [
        &mut grant.parent,
        &mut grant.children,
        &mut grant.related,
        &mut grant.references,
    ] {
        set.named.sort();
    }
    grant.cluster_scoped.sort();
    grant.namespaces.named.sort();
    grant.finalizers.sort();
    grant.decorator_keys.sort();
    grant
}

#[test]
fn the_seeds_grants_parse_as_what_deploy_grants() {
    let base = load(&deploy("base/policy.yaml"));
    let chart = chart_values();
    for (manifest, platform) in seeds() {
        let name = &manifest.name;
        let text = &platform.kustomize()[&format!("policy-{name}.yaml")];
        let generated = load(text).grant(name).unwrap();
        assert_eq!(generated.service_account, format!("kubeplug-plugin-{name}"));
        let mut generated = sorted(generated.grant);
        let hand = sorted(base.grant(name).unwrap().grant);

        let chart_policy = serde_json::json!({
            "plugins": { name.as_str(): chart["policy"]["plugins"][name] }
        });
        let from_chart = sorted(load(&chart_policy.to_string()).grant(name).unwrap().grant);
        assert_eq!(from_chart, hand, "{name}: the chart and deploy/base agree");

        if name == "pod-annotator" {
            // The one difference: the generated grant holds the plugin to
            // the namespaces its manifest asks for (its config's), deploy/
            // to every namespace but the system ones.
            assert!(!generated.namespaces.all);
            assert_eq!(generated.namespaces.named, ["team-a"]);
            assert!(hand.namespaces.all && hand.namespaces.named.is_empty());
            generated.namespaces = hand.namespaces.clone();
        }
        assert_eq!(generated, hand, "{name}");
        // And it admits the manifest it was made from.
        let policy = load(text);
        let effective = policy.grant(name).unwrap();
        effective.admit(&manifest, DIGEST).unwrap();
    }
}

#[test]
fn the_grant_asks_for_exactly_what_the_manifest_asks_and_what_the_platform_adds() {
    let mut manifest = database();
    manifest.finalizer = Some("example.com/backup".into());
    manifest.children.push(ApiResource::new(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        false,
    ));
    manifest.parent.namespaced = false;
    let platform = Platform::derive(
        &manifest,
        DIGEST,
        &Options {
            shards: 3,
            pin: true,
            ..Options::default()
        },
    );
    let text = &platform.kustomize()["policy-database.yaml"];
    let grant = load(text).grant("database").unwrap();
    assert_eq!(grant.grant.finalizers, ["example.com/backup"]);
    assert_eq!(grant.grant.shards, 3);
    assert_eq!(grant.grant.sha256, [DIGEST]);
    assert_eq!(
        grant
            .grant
            .cluster_scoped
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["Database.example.com", "PersistentVolume"]
    );
    grant.admit(&manifest, DIGEST).unwrap();
    let perms = permissions(&platform.identity_rules);
    assert!(perms.contains(&perm("example.com", "databases", "patch")));
    assert!(
        !perms
            .iter()
            .any(|p| p.3 == "update" && !p.1.ends_with("/finalizers"))
    );

    // A finalizer in its own domain needs no grant.
    manifest.finalizer = Some("database.kubeplug.io/cleanup".into());
    let platform = Platform::derive(&manifest, DIGEST, &Options::default());
    assert!(!platform.grant.contains_key("finalizers"));
}

#[test]
fn a_decorator_without_keys_says_so_and_one_without_children_needs_no_finalizers_rule() {
    let manifest = pod_annotator();
    let platform = Platform::derive(&manifest, DIGEST, &Options::default());
    assert!(!platform.grant.contains_key("decoratorKeys"));
    assert!(platform.kustomize()["policy-pod-annotator.yaml"].contains("# Note: decoratorKeys"));
    let perms = permissions(&platform.identity_rules);
    assert!(!perms.iter().any(|p| p.1.contains('/')), "{perms:?}");
    assert!(platform.kustomize()["plugin-rbac.yaml"].contains("Read metadata-only: Pod"));
}

#[test]
fn rules_are_grouped_in_one_order() {
    let platform = Platform::derive(&database(), DIGEST, &Options::default());
    let text = kubeplug_core::yaml::to_string(&platform.identity_rules);
    let expected = "\
- apiGroups:
  - ''
  resources:
  - pods
  verbs:
  - get
  - list
  - watch
- apiGroups:
  - ''
  resources:
  - secrets
  - services
  verbs:
  - get
  - list
  - watch
  - create
  - patch
  - delete
- apiGroups:
  - apps
  resources:
  - statefulsets
  verbs:
  - get
  - list
  - watch
  - create
  - patch
  - delete
- apiGroups:
  - events.k8s.io
  resources:
  - events
  verbs:
  - create
  - patch
- apiGroups:
  - example.com
  resources:
  - databases
  verbs:
  - get
  - list
  - watch
- apiGroups:
  - example.com
  resources:
  - databases/finalizers
  verbs:
  - update
- apiGroups:
  - example.com
  resources:
  - databases/status
  verbs:
  - patch
";
    assert_eq!(text, expected);
    // Regrouping is stable, and a rule for any name covers named ones.
    assert_eq!(
        normalized(&platform.identity_rules),
        platform.identity_rules
    );
    let mut both = platform.host_read_rules.clone();
    both.push(Rule {
        api_groups: vec!["".into()],
        resources: vec!["pods".into()],
        verbs: vec!["get".into()],
        resource_names: vec!["one".into()],
        non_resource_urls: Vec::new(),
    });
    assert_eq!(normalized(&both), platform.host_read_rules);
}

#[test]
fn output_is_the_same_bytes_every_time_and_check_names_what_would_change() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("database");
    let manifest = database();
    let files = Platform::derive(&manifest, DIGEST, &Options::default()).kustomize();
    let again = Platform::derive(&manifest, DIGEST, &Options::default()).kustomize();
    assert_eq!(files, again);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        [
            "host-rbac.yaml",
            "kustomization.yaml",
            "plugin-rbac.yaml",
            "policy-database.yaml",
            "serviceaccount.yaml"
        ]
    );
    for content in files.values() {
        assert!(content.starts_with("# "), "a header first: {content}");
        assert!(content.contains(&format!("sha256:{DIGEST}")));
    }

    assert_eq!(write_files(&out, &files, true).unwrap().len(), 5);
    assert!(!out.exists(), "--check writes nothing");
    assert_eq!(write_files(&out, &files, false).unwrap().len(), 5);
    assert!(write_files(&out, &files, true).unwrap().is_empty());
    assert!(write_files(&out, &files, false).unwrap().is_empty());

    // A new version of the plugin with one more child kind.
    let mut newer = manifest.clone();
    newer
        .children
        .push(res("", "v1", "ConfigMap", "configmaps"));
    let changed = Platform::derive(&newer, DIGEST, &Options::default()).kustomize();
    let would = write_files(&out, &changed, true).unwrap();
    assert_eq!(
        would,
        ["host-rbac.yaml", "plugin-rbac.yaml", "policy-database.yaml"].map(|f| out.join(f))
    );
    assert_eq!(
        std::fs::read_to_string(out.join("plugin-rbac.yaml")).unwrap(),
        files["plugin-rbac.yaml"]
    );
}

#[test]
fn the_helm_fragment_keeps_the_releases_host_reads_and_parses_as_the_chart_reads_it() {
    let chart = chart_values();
    let kept = rules(&chart["rbac"]["hostReadRules"]);
    for (manifest, platform) in seeds() {
        let name = &manifest.name;
        let text = platform.helm(Some(&kept));
        assert_eq!(text, platform.helm(Some(&kept)));
        assert!(text.starts_with("# "));
        let values: Json = kubeplug_core::yaml::from_str(&text).unwrap();
        let identity = &values["plugins"]["identities"][name];
        assert_eq!(identity["impersonate"], Json::Bool(true));
        assert_eq!(
            permissions(&rules(&identity["rules"])),
            permissions(&platform.identity_rules)
        );
        // The seeds are all in the chart's reads already.
        assert_eq!(
            permissions(&rules(&values["rbac"]["hostReadRules"])),
            permissions(&kept)
        );
        let policy = serde_json::json!({"plugins": values["policy"]["plugins"]});
        let grant = load(&policy.to_string()).grant(name).unwrap();
        let from_kustomize = load(&platform.kustomize()[&format!("policy-{name}.yaml")])
            .grant(name)
            .unwrap();
        assert_eq!(grant, from_kustomize);
    }
    // A new plugin's reads are added to the release's, none dropped.
    let mut other = myapp();
    other.name = "cache".into();
    other.children = vec![res(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
    )];
    let platform = Platform::derive(&other, DIGEST, &Options::default());
    let values: Json = kubeplug_core::yaml::from_str(&platform.helm(Some(&kept))).unwrap();
    let reads = permissions(&rules(&values["rbac"]["hostReadRules"]));
    assert!(reads.is_superset(&permissions(&kept)));
    assert!(reads.contains(&perm("", "persistentvolumeclaims", "watch")));
    // A rule of URLs the release holds is kept as written.
    let mut with_urls = kept.clone();
    let urls: Rule = serde_json::from_value(serde_json::json!(
        {"nonResourceURLs": ["/healthz", "/metrics"], "verbs": ["get"]}
    ))
    .unwrap();
    with_urls.push(urls.clone());
    let values: Json = kubeplug_core::yaml::from_str(&platform.helm(Some(&with_urls))).unwrap();
    let written = rules(&values["rbac"]["hostReadRules"]);
    assert_eq!(
        written.iter().filter(|r| **r == urls).count(),
        1,
        "{written:?}"
    );
    assert!(permissions(&written).is_superset(&permissions(&kept)));
    let alone: Json = kubeplug_core::yaml::from_str(&platform.helm(None)).unwrap();
    assert_eq!(
        permissions(&rules(&alone["rbac"]["hostReadRules"])),
        permissions(&platform.host_read_rules)
    );
}

/// `objects` as JSON, each with its kind, namespace (empty: none) and name.
fn objects(values: &[kubeplug_core::yaml::Value]) -> Vec<(String, String, String, Json)> {
    values
        .iter()
        .map(|v| {
            let json = serde_json::to_value(v).unwrap();
            let s = |v: &Json| v.as_str().unwrap_or_default().to_string();
            (
                s(&json["kind"]),
                s(&json["metadata"]["namespace"]),
                s(&json["metadata"]["name"]),
                json,
            )
        })
        .collect()
}

/// kind, namespace and name of each of `objects`.
fn names(objects: &[(String, String, String, Json)]) -> Vec<(&str, &str, &str)> {
    objects
        .iter()
        .map(|(k, ns, n, _)| (k.as_str(), ns.as_str(), n.as_str()))
        .collect()
}

#[test]
fn a_plugin_serving_namespaces_is_bound_in_each_and_its_cluster_scoped_kinds_apart() {
    // pod-annotator under `namespaces: [team-a]`, reading Namespaces too.
    let mut manifest = pod_annotator();
    manifest.namespaces = vec!["team-b".into(), "team-a".into(), "team-b".into()];
    manifest.references = vec![ApiResource::new("", "v1", "Namespace", "namespaces", false)];
    manifest.validate().unwrap();
    let platform_options = Options {
        identity_namespace: "platform".into(),
        ..options(&manifest)
    };
    let platform = Platform::derive(&manifest, DIGEST, &platform_options);
    let generated = objects(&platform.plugin_rbac_objects());
    let account = "kubeplug-plugin-pod-annotator";
    let cluster = "kubeplug-plugin-pod-annotator-cluster";
    assert_eq!(
        names(&generated),
        [
            ("ClusterRole", "", account),
            ("RoleBinding", "team-a", account),
            ("RoleBinding", "team-b", account),
            ("ClusterRole", "", cluster),
            ("ClusterRoleBinding", "", cluster),
        ]
    );
    for (kind, namespace, name, json) in &generated {
        if kind.ends_with("Binding") {
            assert_eq!(json["roleRef"]["kind"], "ClusterRole");
            assert_eq!(json["roleRef"]["name"], name.as_str());
            assert_eq!(
                json["subjects"],
                serde_json::json!([{"kind": "ServiceAccount", "name": account, "namespace": "platform"}]),
                "{kind} {namespace}/{name}"
            );
        }
    }
    let role_rules = |name: &str| {
        let (.., json) = generated
            .iter()
            .find(|(k, _, n, _)| k == "ClusterRole" && n == name)
            .unwrap();
        permissions(&rules(&json["rules"]))
    };
    // Namespaced kinds only where they are bound per namespace; the
    // cluster-scoped one apart; together, the whole identity.
    let namespaced = role_rules(account);
    assert!(namespaced.contains(&perm("", "pods", "patch")));
    assert!(namespaced.contains(&perm("events.k8s.io", "events", "create")));
    assert!(
        !namespaced.iter().any(|p| p.1 == "namespaces"),
        "{namespaced:?}"
    );
    assert_eq!(
        role_rules(cluster),
        ["get", "list", "watch"]
            .map(|v| perm("", "namespaces", v))
            .into_iter()
            .collect()
    );
    let both: BTreeSet<_> = namespaced.union(&role_rules(cluster)).cloned().collect();
    assert_eq!(both, permissions(&platform.identity_rules));
    let text = &platform.kustomize()["plugin-rbac.yaml"];
    assert!(
        text.contains("# It serves namespaces team-a, team-b only"),
        "{text}"
    );

    // The seed: namespaced kinds only, so no cluster-wide binding at all.
    let seed = Platform::derive(&pod_annotator(), DIGEST, &options(&pod_annotator()));
    assert_eq!(
        names(&objects(&seed.plugin_rbac_objects())),
        [
            ("ClusterRole", "", account),
            ("RoleBinding", "team-a", account),
        ]
    );
    // The Helm chart cannot say it: its fragment says so.
    assert!(seed.helm(None).contains(
        "# Note: the chart binds plugins.identities cluster-wide: it cannot bind the identity\n# in namespaces team-a only"
    ));
}

#[test]
fn a_plugin_serving_every_namespace_is_bound_cluster_wide() {
    let platform = Platform::derive(&database(), DIGEST, &Options::default());
    let objects = objects(&platform.plugin_rbac_objects());
    let account = "kubeplug-plugin-database";
    assert_eq!(
        names(&objects),
        [
            ("ClusterRole", "", account),
            ("ClusterRoleBinding", "", account)
        ]
    );
    assert_eq!(rules(&objects[0].3["rules"]), platform.identity_rules);
    assert!(!platform.helm(None).contains("# Note: the chart binds"));
}

#[test]
fn the_host_impersonates_the_plugin_by_a_role_in_the_identity_namespace_only() {
    for (manifest, _) in seeds() {
        let options = Options {
            identity_namespace: "platform".into(),
            ..options(&manifest)
        };
        let platform = Platform::derive(&manifest, DIGEST, &options);
        let objects = objects(&platform.host_rbac_objects());
        let name = format!("kubeplug-host-{}", manifest.name);
        let name = name.as_str();
        assert_eq!(
            names(&objects),
            [
                ("ClusterRole", "", name),
                ("ClusterRoleBinding", "", name),
                ("Role", "platform", name),
                ("RoleBinding", "platform", name),
            ]
        );
        // Cluster-wide: the reads, and no impersonation.
        assert_eq!(rules(&objects[0].3["rules"]), platform.host_read_rules);
        let reads = permissions(&rules(&objects[0].3["rules"]));
        assert!(
            reads
                .iter()
                .all(|p| ["get", "list", "watch"].contains(&p.3.as_str()))
        );
        // In the identity namespace: impersonate that one account.
        assert_eq!(
            permissions(&rules(&objects[2].3["rules"])),
            [(
                String::new(),
                "serviceaccounts".to_string(),
                format!("kubeplug-plugin-{}", manifest.name),
                "impersonate".to_string()
            )]
            .into_iter()
            .collect()
        );
        for (binding, role_kind) in [(&objects[1].3, "ClusterRole"), (&objects[3].3, "Role")] {
            assert_eq!(binding["roleRef"]["kind"], role_kind);
            assert_eq!(binding["roleRef"]["name"], name);
            assert_eq!(
                binding["subjects"],
                serde_json::json!([{"kind": "ServiceAccount", "name": "kubeplug", "namespace": "platform"}])
            );
        }
    }
}
