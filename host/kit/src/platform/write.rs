//! The platform's files as written: `--format kustomize` (a directory for
//! `kubectl apply -k`) and `--format helm` (a values fragment for the
//! chart), both from the objects [`Platform`] derives.

use std::collections::BTreeMap;

use super::{Platform, Rule, map, ordered, permissions, rules_of, strings, text};
use kubeplug_core::yaml::Value;

impl Platform {
    fn documents(values: &[Value]) -> String {
        values
            .iter()
            .map(kubeplug_core::yaml::to_string)
            .collect::<Vec<_>>()
            .join("---\n")
    }

    /// `--format kustomize`: file name -> content, for `kubectl apply -k`.
    pub fn kustomize(&self) -> BTreeMap<String, String> {
        let name = &self.plugin;
        let policy_file = format!("policy-{name}.yaml");
        let mut files = BTreeMap::new();
        let kustomization = map(vec![
            ("apiVersion", text("kustomize.config.k8s.io/v1beta1")),
            ("kind", text("Kustomization")),
            (
                "resources",
                strings(&[
                    "serviceaccount.yaml".into(),
                    "plugin-rbac.yaml".into(),
                    "host-rbac.yaml".into(),
                ]),
            ),
        ]);
        files.insert(
            "kustomization.yaml".into(),
            self.header(&[
                &format!("The platform side of plugin {name}: `kubectl apply -k` this directory (or list it"),
                "under `resources:` of the platform's overlay), after the host's namespace.",
                &format!("{policy_file} is not a resource: merge it into the policy (see its header)."),
            ]) + &kubeplug_core::yaml::to_string(&kustomization),
        );
        files.insert(
            "serviceaccount.yaml".into(),
            self.header(&[
                &format!(
                    "Plugin {name}'s identity: the host impersonates this ServiceAccount for every"
                ),
                "write the plugin causes (apply, prune, status, parent patches, finalizers,",
                "events), so RBAC decides and the audit log names the plugin.",
            ]) + &kubeplug_core::yaml::to_string(&self.service_account_object()),
        );
        let mut what = vec![
            format!("What plugin {name}'s identity may do, and no more: each verb is one the host"),
            "sends or checks in its name (kubeplug_kit::platform lists why).".to_string(),
        ];
        if self.namespaces.is_empty() {
            what.push(format!(
                "It serves every namespace: ClusterRole {} bound cluster-wide.",
                self.service_account
            ));
        } else {
            what.push(format!(
                "It serves namespaces {} only: its rules on namespaced kinds are in",
                self.namespaces.join(", ")
            ));
            what.push(format!(
                "ClusterRole {}, bound by a RoleBinding in each of them",
                self.service_account
            ));
            if self.cluster_rules.is_empty() {
                what.push(
                    "(which must exist first) and nowhere else; it has no cluster-scoped kind."
                        .into(),
                );
            } else {
                what.push(
                    "(which must exist first) and nowhere else; its rules on cluster-scoped".into(),
                );
                what.push(format!(
                    "kinds are in ClusterRole {}, bound cluster-wide.",
                    self.cluster_role_name()
                ));
            }
        }
        if !self.metadata_only.is_empty() {
            what.push(format!(
                "Read metadata-only: {} (RBAC has no such verb; they are read like the rest).",
                self.metadata_only.join(", ")
            ));
        }
        files.insert(
            "plugin-rbac.yaml".into(),
            self.header(&what.iter().map(String::as_str).collect::<Vec<_>>())
                + &Self::documents(&self.plugin_rbac_objects()),
        );
        files.insert(
            "host-rbac.yaml".into(),
            self.header(&[
                &format!("The host's rules for plugin {name}, added to its own by bindings to its"),
                "ServiceAccount (kubeplug): in a ClusterRole, read every kind the plugin is",
                "handed (parent, children, related, referenced; no write verb: writes go out",
                "as the plugin); in a Role of the identity namespace, impersonate the plugin's",
                "ServiceAccount and no other (the API server checks impersonating a",
                "ServiceAccount in its namespace: a cluster-wide rule would cover that name",
                "in every namespace).",
            ]) + &Self::documents(&self.host_rbac_objects()),
        );
        files.insert(
            policy_file.clone(),
            self.header(&[
                &format!(
                    "Plugin {name}'s grant: a PluginPolicy holding its entry only. It is not a"
                ),
                "resource of the kustomization; the platform merges it one of two ways:",
                &format!(
                    "- copy `plugins.{name}` into its policy.yaml (ConfigMap kubeplug-policy); or"
                ),
                "- add this file to kubeplug-policy (configMapGenerator `files:`, with",
                "  `behavior: merge` in an overlay) and pass it to the host as one more",
                &format!(
                    "  `--policy=/etc/kubeplug/policy/{policy_file}`: the host merges policy files"
                ),
                "  (a plugin granted in two files is refused).",
            ]) + &kubeplug_core::yaml::to_string(&self.policy_fragment()),
        );
        files
    }

    /// `--format helm`: a values fragment for deploy/chart. `host_reads`:
    /// the release's `rbac.hostReadRules` now (Helm replaces a list, never
    /// merges it), kept beside this plugin's.
    pub fn helm(&self, host_reads: Option<&[Rule]>) -> String {
        let name = &self.plugin;
        let mut reads = permissions(&self.host_read_rules);
        // The release's rules of URLs stay as written (they are no
        // resource's, so `permissions` cannot regroup them).
        let mut urls: Vec<Rule> = Vec::new();
        for rule in host_reads.unwrap_or_default() {
            if rule.non_resource_urls.is_empty() {
                reads.extend(permissions(std::slice::from_ref(rule)));
            } else if !urls.contains(rule) {
                urls.push(rule.clone());
            }
        }
        let rules = |rules: &[Rule]| Value::Sequence(rules.iter().map(ordered).collect());
        let one = |key: &str, value: Value| {
            Value::Mapping([(key.to_string(), value)].into_iter().collect())
        };
        let values = map(vec![
            (
                "plugins",
                one(
                    "identities",
                    one(
                        name,
                        map(vec![
                            ("impersonate", Value::Bool(true)),
                            ("rules", rules(&self.identity_rules)),
                        ]),
                    ),
                ),
            ),
            (
                "policy",
                one("plugins", one(name, Value::Mapping(self.grant.clone()))),
            ),
            (
                "rbac",
                one("hostReadRules", rules(&[rules_of(&reads), urls].concat())),
            ),
        ]);
        let kept = if host_reads.is_some() {
            "holds the rules of the --helm-values files given and this plugin's"
        } else {
            "holds this plugin's only: pass the release's values with --helm-values to keep theirs"
        };
        let mut what = vec![
            format!("Plugin {name}'s platform side as values of the kubeplug chart (deploy/chart):"),
            "its identity (plugins.identities), its grant (policy.plugins) and the host's".into(),
            "reads (rbac.hostReadRules). Take it with".into(),
            "  helm upgrade kubeplug deploy/chart -n kubeplug-system -f <your values> -f <this file>"
                .into(),
            "Helm merges maps but replaces lists: rbac.hostReadRules below".into(),
            kept.into(),
            "(the chart puts the ServiceAccount in the release namespace).".into(),
            "The chart puts the host's impersonate rule in its ClusterRole (that name in any".into(),
            "namespace); --format kustomize puts it in a Role of the identity namespace.".into(),
        ];
        if !self.namespaces.is_empty() {
            what.extend([
                "Note: the chart binds plugins.identities cluster-wide: it cannot bind the identity"
                    .to_string(),
                format!(
                    "in namespaces {} only, so these rules hold in every namespace.",
                    self.namespaces.join(", ")
                ),
                "--format kustomize writes narrower bindings (a RoleBinding per namespace).".into(),
            ]);
        }
        self.header(&what.iter().map(String::as_str).collect::<Vec<_>>())
            + &kubeplug_core::yaml::to_string(&values)
    }
}
