//! A plugin's identity: its ServiceAccount exists, and RBAC lets it do
//! everything the host will ask in its name. The host reads for a plugin
//! only what that ServiceAccount may read, and sends every write the plugin
//! causes impersonating it (see [`kubeplug_kube::identity`]): a missing
//! rule shows up as `ReadDenied` or `WriteFailed` events, one reconcile at a
//! time. Here each one is asked up front with a SubjectAccessReview
//! ([`ask`], which [`host_rights`](super::host_rights) asks the host's own
//! with): what the host asks in a plugin's name is
//! [`kubeplug_core::rights::identity`].

use k8s_openapi::api::authorization::v1::ResourceAttributes;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;

use crate::report::Check;
use kubeplug_core::manifest::Manifest;
use kubeplug_core::policy::Effective;
use kubeplug_core::rights::{self, Right};
use kubeplug_kube::identity;

/// One request the host sends (or one read it checks) in a plugin's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    pub verb: &'static str,
    pub group: String,
    /// The plural.
    pub resource: String,
    /// `status`, or empty.
    pub subresource: String,
    /// The one object (`resourceNames`), or empty: any.
    pub name: String,
    /// Empty: in every namespace (or a cluster-scoped kind).
    pub namespace: String,
}

impl Permission {
    /// `statefulsets.apps`, `pods`, `databases.example.com/status`.
    pub fn resource(&self) -> String {
        let mut text = self.resource.clone();
        if !self.group.is_empty() {
            text = format!("{text}.{}", self.group);
        }
        if !self.subresource.is_empty() {
            text = format!("{text}/{}", self.subresource);
        }
        text
    }

    /// `statefulsets.apps`, `kubeplug-plugin-database` of
    /// `serviceaccounts`, `pods in namespace team-a`: the resource, the
    /// object and where.
    pub fn what(&self) -> String {
        let mut text = self.resource();
        if !self.name.is_empty() {
            text = format!("{text} {}", self.name);
        }
        if !self.namespace.is_empty() {
            text = format!("{text} in namespace {}", self.namespace);
        }
        text
    }
}

/// `rights` as the permissions to ask, added to `out` unless there: each
/// verb in each of `namespaces` for a namespaced kind (empty: in every
/// namespace), cluster-wide for a cluster-scoped one.
pub fn add(out: &mut Vec<Permission>, rights: &[Right], namespaces: &[String]) {
    let everywhere = [String::new()];
    let namespaces = if namespaces.is_empty() {
        &everywhere
    } else {
        namespaces
    };
    for right in rights {
        let in_namespaces: &[String] = if right.kind.namespaced {
            namespaces
        } else {
            &everywhere
        };
        for namespace in in_namespaces {
            for &verb in right.verbs {
                let permission = Permission {
                    verb,
                    group: right.kind.group.clone(),
                    resource: right.kind.plural.clone(),
                    subresource: right.subresource.to_string(),
                    name: right.name.clone(),
                    namespace: namespace.clone(),
                };
                if !out.contains(&permission) {
                    out.push(permission);
                }
            }
        }
    }
}

/// What the host asks in the name of the plugin `manifest` describes (as
/// admitted: real plurals and scopes, namespaces narrowed by the grant),
/// [`rights::identity`] under the grant's shards, in every namespace the
/// plugin serves (all, when its manifest names none), each once.
pub fn required(manifest: &Manifest, grant: &Effective) -> Vec<Permission> {
    let mut out = Vec::new();
    add(
        &mut out,
        &rights::identity(manifest, grant.grant.shards),
        &manifest.namespaces,
    );
    out
}

/// `missing` by resource (name and namespace), each with its verbs in
/// order.
pub fn by_resource(missing: &[Permission]) -> Vec<(&Permission, Vec<&'static str>)> {
    let mut groups: Vec<(&Permission, Vec<&'static str>)> = Vec::new();
    for p in missing {
        match groups.iter_mut().find(|(q, _)| {
            q.group == p.group
                && q.resource == p.resource
                && q.subresource == p.subresource
                && q.name == p.name
                && q.namespace == p.namespace
        }) {
            Some((_, verbs)) => verbs.push(p.verb),
            None => groups.push((p, vec![p.verb])),
        }
    }
    groups
}

/// `get, list, watch databases.example.com; patch pods in namespace team-a`:
/// the verbs of each resource (and namespace) together, in order.
pub fn describe(missing: &[Permission]) -> String {
    by_resource(missing)
        .iter()
        .map(|(p, verbs)| format!("{} {}", verbs.join(", "), p.what()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `ServiceAccount kubeplug-system/kubeplug-plugin-database`.
pub fn account(grant: &Effective) -> String {
    format!(
        "ServiceAccount {}/{}",
        grant.identity_namespace, grant.service_account
    )
}

/// The plugin's ServiceAccount exists.
pub async fn service_account(client: &kube::Client, plugin: &str, grant: &Effective) -> Check {
    let name = format!("service account {plugin}");
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &grant.identity_namespace);
    match api.get_opt(&grant.service_account).await {
        Ok(Some(_)) => Check::ok(name, format!("{} exists", account(grant))),
        // The host impersonates it by name, which works without the object,
        // but its bindings then name an identity nobody created.
        Ok(None) => Check::warn(
            name,
            format!(
                "{} does not exist: create it with its role and binding (copy deploy/base/plugin-rbac.yaml)",
                account(grant)
            ),
        ),
        Err(error) => Check::warn(name, format!("cannot read {}: {error}", account(grant))),
    }
}

/// The permissions of `wanted` that `subject`'s ServiceAccount may not
/// have: one SubjectAccessReview each, as the API server judges that
/// ServiceAccount (its user name and groups).
async fn missing(
    client: &kube::Client,
    subject: &Effective,
    wanted: &[Permission],
) -> Result<Vec<Permission>, kube::Error> {
    let mut missing = Vec::new();
    for permission in wanted {
        let review = identity::review_of(
            subject,
            ResourceAttributes {
                namespace: (!permission.namespace.is_empty()).then(|| permission.namespace.clone()),
                verb: Some(permission.verb.into()),
                group: Some(permission.group.clone()),
                resource: Some(permission.resource.clone()),
                subresource: (!permission.subresource.is_empty())
                    .then(|| permission.subresource.clone()),
                name: (!permission.name.is_empty()).then(|| permission.name.clone()),
                ..Default::default()
            },
        );
        if !identity::allowed(client, &review).await? {
            missing.push(permission.clone());
        }
    }
    Ok(missing)
}

/// The check `name`: whether `subject`'s ServiceAccount may do each of
/// `wanted` (one SubjectAccessReview each). `ok` when it may do them all,
/// given the account's description (`ServiceAccount ns/name`); else a
/// failure, `fail` given the account and the missing permissions; a warning
/// when the API server cannot be asked.
pub async fn ask(
    client: &kube::Client,
    name: String,
    subject: &Effective,
    wanted: &[Permission],
    ok: impl FnOnce(&str) -> String,
    fail: impl FnOnce(&str, &[Permission]) -> String,
) -> Check {
    let account = account(subject);
    match missing(client, subject, wanted).await {
        Ok(missing) if missing.is_empty() => Check::ok(name, ok(&account)),
        Ok(missing) => Check::fail(name, fail(&account, &missing)),
        Err(error) => Check::warn(
            name,
            format!("cannot ask what {account} may do (SubjectAccessReview): {error}"),
        ),
    }
}

/// Ask one SubjectAccessReview per permission the plugin needs.
pub async fn check(
    client: &kube::Client,
    plugin: &str,
    manifest: &Manifest,
    grant: &Effective,
) -> Check {
    let wanted = required(manifest, grant);
    ask(
        client,
        format!("permissions {plugin}"),
        grant,
        &wanted,
        |account| {
            format!(
                "{account} may do all {} things the host asks in its name",
                wanted.len()
            )
        },
        |account, missing| {
            format!(
                "{account} may not {} (its Role/ClusterRole binding is missing?): add the rules to its ClusterRole (deploy/base/plugin-rbac.yaml, or the chart's plugins.identities.{plugin}.rules); `kubeplug platform <plugin.wasm>` writes them",
                describe(missing)
            )
        },
    )
    .await
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kubeplug_core::manifest::{ApiResource, Mode, Related};
    use kubeplug_core::policy::Policy;

    /// A composite with two children, a related and a referenced kind and
    /// a finalizer (the host's rights for it too: `host_rights`).
    pub(crate) fn database() -> Manifest {
        Manifest {
            children: vec![
                ApiResource::new("apps", "v1", "StatefulSet", "statefulsets", true),
                ApiResource::new("", "v1", "Service", "services", true),
            ],
            related: vec![Related {
                resource: ApiResource::new("", "v1", "Pod", "pods", true),
                match_labels: Vec::new(),
            }],
            finalizer: Some("database.kubeplug.io/cleanup".into()),
            references: vec![ApiResource::new("", "v1", "ConfigMap", "configmaps", true)],
            ..Manifest::new(
                "database",
                "0.1.0",
                ApiResource::new("example.com", "v1", "Database", "databases", true),
                Mode::Composite,
            )
        }
    }

    fn grant(name: &str) -> Effective {
        Policy::default().grant(name).unwrap()
    }

    fn lines(permissions: &[Permission]) -> Vec<String> {
        permissions
            .iter()
            .map(|p| {
                format!("{} {} {}", p.verb, p.resource(), p.namespace)
                    .trim_end()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn a_composite_needs_its_parent_status_children_reads_and_events() {
        assert_eq!(
            lines(&required(&database(), &grant("database"))),
            [
                "get databases.example.com",
                "list databases.example.com",
                "watch databases.example.com",
                "patch databases.example.com/status",
                // Its finalizer.
                "patch databases.example.com",
                // Its children's blockOwnerDeletion.
                "update databases.example.com/finalizers",
                "get statefulsets.apps",
                "list statefulsets.apps",
                "watch statefulsets.apps",
                "create statefulsets.apps",
                "patch statefulsets.apps",
                "delete statefulsets.apps",
                "get services",
                "list services",
                "watch services",
                "create services",
                "patch services",
                "delete services",
                "get pods",
                "list pods",
                "watch pods",
                "get configmaps",
                "list configmaps",
                "watch configmaps",
                "create events.events.k8s.io",
                "patch events.events.k8s.io",
            ]
        );
    }

    #[test]
    fn a_decorator_patches_its_parent_and_writes_no_status_in_each_of_its_namespaces() {
        let annotator = Manifest {
            name: "pod-annotator".into(),
            parent: ApiResource::new("", "v1", "Pod", "pods", true),
            mode: Mode::Decorator,
            children: Vec::new(),
            related: Vec::new(),
            references: Vec::new(),
            finalizer: None,
            namespaces: vec!["team-a".into(), "team-b".into()],
            ..database()
        };
        let lines = lines(&required(&annotator, &grant("pod-annotator")));
        assert_eq!(
            lines,
            [
                "get pods team-a",
                "list pods team-a",
                "watch pods team-a",
                "get pods team-b",
                "list pods team-b",
                "watch pods team-b",
                "patch pods team-a",
                "patch pods team-b",
                "create events.events.k8s.io team-a",
                "patch events.events.k8s.io team-a",
                "create events.events.k8s.io team-b",
                "patch events.events.k8s.io team-b",
            ]
        );
    }

    #[test]
    fn a_cluster_scoped_kind_is_asked_for_cluster_wide_and_a_kind_named_twice_once() {
        let manifest = Manifest {
            namespaces: vec!["shop".into()],
            finalizer: None,
            children: vec![ApiResource::new("", "v1", "ConfigMap", "configmaps", true)],
            related: vec![Related {
                resource: ApiResource::new("", "v1", "Namespace", "namespaces", false),
                match_labels: Vec::new(),
            }],
            ..database()
        };
        let lines = lines(&required(&manifest, &grant("database")));
        assert!(lines.contains(&"get namespaces".to_string()), "{lines:?}");
        let configmap_gets = lines.iter().filter(|l| *l == "get configmaps shop").count();
        assert_eq!(configmap_gets, 1, "a child also referenced: {lines:?}");
    }

    #[test]
    fn missing_permissions_read_per_resource_with_their_verbs() {
        let missing: Vec<Permission> = required(&database(), &grant("database"))
            .into_iter()
            .filter(|p| p.resource == "statefulsets" || p.subresource == "status")
            .collect();
        assert_eq!(
            describe(&missing),
            "patch databases.example.com/status; get, list, watch, create, patch, delete statefulsets.apps"
        );
        let namespaced = Permission {
            verb: "patch",
            group: String::new(),
            resource: "pods".into(),
            subresource: String::new(),
            name: String::new(),
            namespace: "team-a".into(),
        };
        assert_eq!(describe(&[namespaced]), "patch pods in namespace team-a");
    }

    #[test]
    fn owner_references_need_the_parents_finalizers_and_repeated_events_a_patch() {
        let all = lines(&required(&database(), &grant("database")));
        assert!(
            all.contains(&"update databases.example.com/finalizers".to_string()),
            "{all:?}"
        );
        assert!(
            all.contains(&"patch events.events.k8s.io".to_string()),
            "{all:?}"
        );
        // No children: no owner references, no finalizers right.
        let childless = Manifest {
            children: Vec::new(),
            ..database()
        };
        let none = lines(&required(&childless, &grant("database")));
        assert!(!none.iter().any(|l| l.contains("/finalizers")), "{none:?}");
    }
}
