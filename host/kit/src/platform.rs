//! The platform side of a plugin, derived from its manifest (`kubeplug
//! platform`): its identity (ServiceAccount `kubeplug-plugin-<name>`, its
//! ClusterRole and bindings), the host's rules for it (read what the plugin
//! is handed, impersonate its identity and no other) and its grant in the
//! policy, written as a kustomization or as a Helm values fragment.
//!
//! Least privilege: the identity's rules and the host's are
//! [`kubeplug_core::rights`] (each verb one the host sends or checks in the
//! plugin's name, and why), grouped into as few rules as RBAC allows, and
//! bound no wider than they are used:
//!
//! - a plugin that serves named namespaces (`Manifest::namespaces`) gets its
//!   rules on namespaced kinds by a RoleBinding in each of them; its rules
//!   on cluster-scoped kinds, if any, in a ClusterRole of their own
//!   (`kubeplug-plugin-<name>-cluster`) bound cluster-wide. One serving
//!   every namespace gets one ClusterRole bound cluster-wide;
//! - the host's `impersonate` rule is a Role in the identity namespace: the
//!   API server checks impersonating `system:serviceaccount:NS:NAME` in
//!   namespace NS, so a cluster-wide rule would let the host act as a
//!   same-named ServiceAccount in any namespace. Its reads are cluster-wide.
//!
//! Output is deterministic (kinds, rules and verbs in a fixed order), so
//! that running it again writes the same bytes and `--check` can tell a CI
//! job whether the committed files are current.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use kubeplug_core::manifest::{ApiResource, Manifest, Mode};
use kubeplug_core::policy::{KindRef, derived_finalizer_domain};
use kubeplug_core::rights::{self, Right};
use kubeplug_core::yaml::{Mapping, Value};

/// Verbs in the order rules list them.
const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "patch",
    "update",
    "delete",
    "deletecollection",
    "impersonate",
];

/// One RBAC PolicyRule (the fields kubeplug's rules use).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    /// A rule of URLs (`/healthz`, `/metrics`): never one kubeplug writes,
    /// but one a release's `rbac.hostReadRules` may hold, kept as it is.
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

/// One thing a rule allows: group, resource (with `/subresource`), object
/// name (empty: any) and verb.
pub type Permission = (String, String, String, String);

/// Everything `rules` allow on resources, one permission at a time: two
/// lists of rules are the same grant if these are equal, however they are
/// grouped. Rules of `nonResourceURLs` name no resource and add none.
pub fn permissions(rules: &[Rule]) -> BTreeSet<Permission> {
    let mut out = BTreeSet::new();
    for rule in rules {
        let names: Vec<String> = if rule.resource_names.is_empty() {
            vec![String::new()]
        } else {
            rule.resource_names.clone()
        };
        for group in &rule.api_groups {
            for resource in &rule.resources {
                for name in &names {
                    for verb in &rule.verbs {
                        out.insert((group.clone(), resource.clone(), name.clone(), verb.clone()));
                    }
                }
            }
        }
    }
    out
}

fn verb_order(verb: &str) -> Verb {
    (
        VERBS.iter().position(|v| *v == verb).unwrap_or(VERBS.len()),
        verb.to_string(),
    )
}

/// A verb with its place in [`VERBS`], which orders it.
type Verb = (usize, String);

/// A rule being grouped: group, resources and verbs.
type Grouped<'a> = (&'a str, Vec<&'a str>, Vec<Verb>);

/// `permissions` as few rules as grouping allows, in a fixed order: one
/// group per rule, resources with the same verbs (and names) together.
pub fn rules_of(permissions: &BTreeSet<Permission>) -> Vec<Rule> {
    // (group, resource, name) -> verbs; a permission for any name covers
    // the named ones.
    let mut verbs: BTreeMap<(&str, &str, &str), BTreeSet<Verb>> = BTreeMap::new();
    for (group, resource, name, verb) in permissions {
        let any = (group.clone(), resource.clone(), String::new(), verb.clone());
        if !name.is_empty() && permissions.contains(&any) {
            continue;
        }
        verbs
            .entry((group, resource, name))
            .or_default()
            .insert(verb_order(verb));
    }
    // (group, name, verbs) -> resources
    let mut resources: BTreeMap<(&str, &str, Vec<Verb>), Vec<&str>> = BTreeMap::new();
    for ((group, resource, name), set) in &verbs {
        resources
            .entry((group, name, set.iter().cloned().collect()))
            .or_default()
            .push(resource);
    }
    // (group, resources, verbs) -> names
    let mut names: BTreeMap<Grouped, Vec<&str>> = BTreeMap::new();
    for ((group, name, set), list) in resources {
        names.entry((group, list, set)).or_default().push(name);
    }
    names
        .into_iter()
        .map(|((group, list, set), names)| Rule {
            api_groups: vec![group.to_string()],
            resources: list.iter().map(|r| r.to_string()).collect(),
            verbs: set.into_iter().map(|(_, v)| v).collect(),
            resource_names: if names.iter().any(|n| n.is_empty()) {
                Vec::new()
            } else {
                names.iter().map(|n| n.to_string()).collect()
            },
            non_resource_urls: Vec::new(),
        })
        .collect()
}

/// `rules` regrouped as [`rules_of`] groups them.
pub fn normalized(rules: &[Rule]) -> Vec<Rule> {
    rules_of(&permissions(rules))
}

/// What the manifest does not say and the platform decides.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the plugins' ServiceAccounts and the host's live.
    pub identity_namespace: String,
    /// Label and annotation keys a decorator (or a mutating webhook) may
    /// set (`decoratorKeys`); empty: any key outside the reserved ones.
    pub decorator_keys: Vec<String>,
    /// Shards its parents are split into (`shards`), 1 for none.
    pub shards: u16,
    /// Pin the grant to this file's digest (`sha256`).
    pub pin: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            identity_namespace: kubeplug_core::policy::DEFAULT_IDENTITY_NAMESPACE.into(),
            decorator_keys: Vec::new(),
            shards: 1,
            pin: false,
        }
    }
}

/// The platform side of one plugin.
#[derive(Debug, Clone)]
pub struct Platform {
    pub plugin: String,
    pub version: String,
    /// The `.wasm`'s SHA-256, hex.
    pub digest: String,
    pub identity_namespace: String,
    /// `kubeplug-plugin-<name>`.
    pub service_account: String,
    /// The namespaces the plugin serves, sorted; empty: all (but those the
    /// host keeps it out of).
    pub namespaces: Vec<String>,
    /// What the plugin's identity may do.
    pub identity_rules: Vec<Rule>,
    /// [`identity_rules`](Self::identity_rules) on namespaced kinds: bound in
    /// each of [`namespaces`](Self::namespaces) when it names some.
    pub namespaced_rules: Vec<Rule>,
    /// [`identity_rules`](Self::identity_rules) on cluster-scoped kinds:
    /// always bound cluster-wide.
    pub cluster_rules: Vec<Rule>,
    /// What the host reads for it: every kind it is handed.
    pub host_read_rules: Vec<Rule>,
    /// The host may act as the plugin's ServiceAccount, and no other.
    pub impersonate: Rule,
    /// Kinds handed metadata-only (`Kind.group`): RBAC has no such verb,
    /// so they are read like the rest.
    pub metadata_only: Vec<String>,
    /// Its entry under `plugins:` in the policy.
    pub grant: Mapping,
    /// What the manifest could not say (shown in the files' headers).
    pub notes: Vec<String>,
}

/// `right` as one rule.
fn rule(right: &Right) -> Rule {
    Rule {
        api_groups: vec![right.kind.group.clone()],
        resources: vec![right.resource()],
        verbs: right.verbs.iter().map(|v| v.to_string()).collect(),
        resource_names: if right.name.is_empty() {
            Vec::new()
        } else {
            vec![right.name.clone()]
        },
        non_resource_urls: Vec::new(),
    }
}

/// `rights` as few rules as [`rules_of`] groups them.
fn rules_for(rights: &[Right]) -> Vec<Rule> {
    normalized(&rights.iter().map(rule).collect::<Vec<_>>())
}

fn kinds<'a>(resources: impl Iterator<Item = &'a ApiResource>) -> Vec<String> {
    let set: BTreeSet<String> = resources.map(|r| KindRef::of(r).to_string()).collect();
    set.into_iter().collect()
}

fn strings(list: &[String]) -> Value {
    Value::Sequence(list.iter().map(|s| Value::String(s.clone())).collect())
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Mapping(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

/// `value` with its fields in their declared order.
fn ordered<T: Serialize>(value: &T) -> Value {
    let json = serde_json::to_string(value).expect("rules serialize");
    serde_json::from_str(&json).expect("JSON reads back")
}

fn text(s: &str) -> Value {
    Value::String(s.into())
}

impl Platform {
    /// Derive everything from `manifest` (as the plugin declares it under
    /// its configuration) and the file's `digest`.
    pub fn derive(manifest: &Manifest, digest: &str, options: &Options) -> Platform {
        let name = &manifest.name;
        let service_account = format!("kubeplug-plugin-{name}");
        let parent = &manifest.parent;
        let related = || manifest.related.iter().map(|r| &r.resource);
        let host = rights::host(manifest, &service_account);

        let mut notes = Vec::new();
        let mut grant: Vec<(&str, Value)> = Vec::new();
        grant.push(("parent", strings(&kinds(std::iter::once(parent)))));
        for (key, list) in [
            ("children", kinds(manifest.children.iter())),
            ("related", kinds(related())),
            ("references", kinds(manifest.references.iter())),
            (
                "clusterScoped",
                kinds(
                    rights::handed(manifest)
                        .into_iter()
                        .filter(|r| !r.namespaced),
                ),
            ),
        ] {
            if !list.is_empty() {
                grant.push((key, strings(&list)));
            }
        }
        let namespaces: Vec<String> = manifest
            .namespaces
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !namespaces.is_empty() {
            grant.push(("namespaces", strings(&namespaces)));
        }
        if let Some(finalizer) = &manifest.finalizer
            && !finalizer.starts_with(&derived_finalizer_domain(name))
        {
            grant.push(("finalizers", strings(std::slice::from_ref(finalizer))));
        }
        let keys: BTreeSet<String> = options.decorator_keys.iter().cloned().collect();
        if !keys.is_empty() {
            grant.push((
                "decoratorKeys",
                strings(&keys.into_iter().collect::<Vec<_>>()),
            ));
        } else if manifest.mode == Mode::Decorator || manifest.webhooks.mutate {
            notes.push(
                "decoratorKeys: a manifest does not name the label and annotation keys it sets; without --decorator-key the grant allows any key outside the reserved ones".into(),
            );
        }
        let mut admission = Vec::new();
        if manifest.webhooks.validate {
            admission.push("validate".to_string());
        }
        if manifest.webhooks.mutate {
            admission.push("mutate".to_string());
        }
        if !admission.is_empty() {
            grant.push(("admission", strings(&admission)));
        }
        if manifest.webhooks.convert {
            grant.push(("conversion", Value::Bool(true)));
        }
        if options.shards > 1 {
            grant.push(("shards", Value::Number(options.shards.into())));
        }
        if options.pin {
            grant.push(("sha256", strings(&[digest.to_string()])));
        }
        let Value::Mapping(grant) = map(grant) else {
            unreachable!("map builds a mapping")
        };

        let identity = rights::identity(manifest, options.shards);
        let (namespaced, cluster): (Vec<Right>, Vec<Right>) =
            identity.iter().cloned().partition(|r| r.kind.namespaced);
        Platform {
            plugin: name.clone(),
            version: manifest.version.clone(),
            digest: digest.into(),
            identity_namespace: options.identity_namespace.clone(),
            impersonate: rule(&host.impersonate),
            service_account,
            namespaces,
            identity_rules: rules_for(&identity),
            namespaced_rules: rules_for(&namespaced),
            cluster_rules: rules_for(&cluster),
            host_read_rules: rules_for(&host.reads),
            metadata_only: kinds(manifest.metadata_only.iter()),
            grant,
            notes,
        }
    }

    /// The comment lines every file starts with: what it is, and where it
    /// came from.
    fn header(&self, what: &[&str]) -> String {
        let mut out = String::new();
        for line in what {
            out.push_str(&format!("# {line}\n").replace("# \n", "#\n"));
        }
        out.push_str(&format!(
            "# Generated by `kubeplug platform` from plugin {} {} (sha256:{}).\n# Do not edit: run it again (with --check in CI).\n",
            self.plugin, self.version, self.digest
        ));
        for note in &self.notes {
            out.push_str(&format!("# Note: {note}.\n"));
        }
        out
    }

    fn labels(&self) -> Value {
        map(vec![
            ("app.kubernetes.io/part-of", text("kubeplug")),
            ("app.kubernetes.io/managed-by", text("kubeplug-platform")),
            ("kubeplug.io/plugin", text(&self.plugin)),
        ])
    }

    fn meta(&self, name: &str, namespace: Option<&str>) -> Value {
        let mut entries = vec![("name", text(name))];
        if let Some(ns) = namespace {
            entries.push(("namespace", text(ns)));
        }
        entries.push(("labels", self.labels()));
        map(entries)
    }

    /// The ServiceAccount.
    pub fn service_account_object(&self) -> Value {
        map(vec![
            ("apiVersion", text("v1")),
            ("kind", text("ServiceAccount")),
            (
                "metadata",
                self.meta(&self.service_account, Some(&self.identity_namespace)),
            ),
            ("automountServiceAccountToken", Value::Bool(false)),
        ])
    }

    /// A ClusterRole (no `namespace`) or a Role named `name` holding
    /// `rules`.
    fn role(&self, name: &str, namespace: Option<&str>, rules: &[Rule]) -> Value {
        let kind = if namespace.is_some() {
            "Role"
        } else {
            "ClusterRole"
        };
        let rules = rules.iter().map(ordered).collect();
        map(vec![
            ("apiVersion", text("rbac.authorization.k8s.io/v1")),
            ("kind", text(kind)),
            ("metadata", self.meta(name, namespace)),
            ("rules", Value::Sequence(rules)),
        ])
    }

    /// A binding named `name` of `role` (a ClusterRole, or with
    /// `role_namespace` the Role there) to ServiceAccount `account` of the
    /// identity namespace: a ClusterRoleBinding with no `namespace`, else a
    /// RoleBinding in it.
    fn binding(
        &self,
        name: &str,
        namespace: Option<&str>,
        role: &str,
        role_namespaced: bool,
        account: &str,
    ) -> Value {
        let kind = if namespace.is_some() {
            "RoleBinding"
        } else {
            "ClusterRoleBinding"
        };
        let role_kind = if role_namespaced {
            "Role"
        } else {
            "ClusterRole"
        };
        map(vec![
            ("apiVersion", text("rbac.authorization.k8s.io/v1")),
            ("kind", text(kind)),
            ("metadata", self.meta(name, namespace)),
            (
                "roleRef",
                map(vec![
                    ("apiGroup", text("rbac.authorization.k8s.io")),
                    ("kind", text(role_kind)),
                    ("name", text(role)),
                ]),
            ),
            (
                "subjects",
                Value::Sequence(vec![map(vec![
                    ("kind", text("ServiceAccount")),
                    ("name", text(account)),
                    ("namespace", text(&self.identity_namespace)),
                ])]),
            ),
        ])
    }

    /// `kubeplug-plugin-<name>-cluster`: the ClusterRole holding the rules
    /// on cluster-scoped kinds of a plugin that serves named namespaces.
    pub fn cluster_role_name(&self) -> String {
        format!("{}-cluster", self.service_account)
    }

    /// The plugin's roles and their bindings to its ServiceAccount. Serving
    /// every namespace: ClusterRole `kubeplug-plugin-<name>` bound by a
    /// ClusterRoleBinding. Serving named namespaces: that ClusterRole holds
    /// the rules on namespaced kinds, bound by a RoleBinding in each served
    /// namespace; the rules on cluster-scoped kinds (if any) are in
    /// ClusterRole `kubeplug-plugin-<name>-cluster`, bound cluster-wide.
    pub fn plugin_rbac_objects(&self) -> Vec<Value> {
        let account = &self.service_account;
        if self.namespaces.is_empty() {
            return vec![
                self.role(account, None, &self.identity_rules),
                self.binding(account, None, account, false, account),
            ];
        }
        let mut out = Vec::new();
        if !self.namespaced_rules.is_empty() {
            out.push(self.role(account, None, &self.namespaced_rules));
            for namespace in &self.namespaces {
                out.push(self.binding(account, Some(namespace), account, false, account));
            }
        }
        if !self.cluster_rules.is_empty() {
            let cluster = self.cluster_role_name();
            out.push(self.role(&cluster, None, &self.cluster_rules));
            out.push(self.binding(&cluster, None, &cluster, false, account));
        }
        out
    }

    /// The host's rules for this plugin, bound to the host's ServiceAccount
    /// (`kubeplug`; RBAC adds them to its own): its reads in ClusterRole
    /// `kubeplug-host-<name>` (a ClusterRoleBinding), its `impersonate`
    /// rule in Role `kubeplug-host-<name>` of the identity namespace (a
    /// RoleBinding there), the one namespace the API server checks
    /// impersonating the plugin's ServiceAccount in.
    pub fn host_rbac_objects(&self) -> Vec<Value> {
        let name = format!("kubeplug-host-{}", self.plugin);
        let ns = Some(self.identity_namespace.as_str());
        vec![
            self.role(&name, None, &self.host_read_rules),
            self.binding(&name, None, &name, false, "kubeplug"),
            self.role(&name, ns, std::slice::from_ref(&self.impersonate)),
            self.binding(&name, ns, &name, true, "kubeplug"),
        ]
    }

    /// The grant as a policy file holding only this plugin's entry.
    pub fn policy_fragment(&self) -> Value {
        map(vec![
            ("apiVersion", text("kubeplug.io/v1alpha1")),
            ("kind", text("PluginPolicy")),
            (
                "plugins",
                Value::Mapping(
                    [(self.plugin.clone(), Value::Mapping(self.grant.clone()))]
                        .into_iter()
                        .collect(),
                ),
            ),
        ])
    }
}

/// Write `files` into `dir` (created if missing), each only if its content
/// differs. With `check`, write nothing. Returns the files that were (or,
/// with `check`, would be) written, in order.
pub fn write_files(
    dir: &Path,
    files: &BTreeMap<String, String>,
    check: bool,
) -> std::io::Result<Vec<PathBuf>> {
    let mut changed = Vec::new();
    for (name, content) in files {
        let path = dir.join(name);
        let same = match std::fs::read(&path) {
            Ok(bytes) => bytes == content.as_bytes(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
            Err(error) => return Err(error),
        };
        if same {
            continue;
        }
        if !check {
            std::fs::create_dir_all(dir)?;
            std::fs::write(&path, content)?;
        }
        changed.push(path);
    }
    Ok(changed)
}

mod write;

#[cfg(test)]
mod tests;
