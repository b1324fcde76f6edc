//! The host's own rights for a plugin (installation mode): what its
//! ServiceAccount (the Deployment's `serviceAccountName`) must be allowed,
//! asked with SubjectAccessReviews as [`permissions`](super::permissions)
//! asks for a plugin's identity ([`permissions::ask`]):
//!
//! - what it needs for each plugin, [`kubeplug_core::rights::host`]:
//!   impersonate the plugin's ServiceAccount (by name, in the policy's
//!   identity namespace), and read every kind the plugin is handed in the
//!   namespaces it serves;
//! - `create` SubjectAccessReviews: before handing the plugin an object, the
//!   host asks whether its ServiceAccount may read it;
//! - under a promotion gate, the record of promoted versions (ConfigMap
//!   `kubeplug-promotions`: `create`, and `get`, `patch` by name);
//! - with `--leader-elect`, `get`, `list`, `create`, `update`, `delete`
//!   Leases in the lease namespace.
//!
//! A missing right fails with the RBAC rule to add and where.

use crate::kinds;
use crate::permissions::{self, Permission};
use crate::report::Check;
use kubeplug_core::manifest::Manifest;
use kubeplug_core::policy::Effective;
use kubeplug_core::rights;

/// The host's identity and its flags that add rights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdentity {
    pub namespace: String,
    pub service_account: String,
    /// The lease namespace, with `--leader-elect`.
    pub leases: Option<String>,
}

/// What the host needs for the plugin `manifest` describes (as admitted:
/// its namespaces narrowed by the grant and `--namespaces`) under `grant`.
pub fn required(manifest: &Manifest, grant: &Effective, host: &HostIdentity) -> Vec<Permission> {
    let rights = rights::host(manifest, &grant.service_account);
    let mut out = Vec::new();
    permissions::add(
        &mut out,
        std::slice::from_ref(&rights.impersonate),
        std::slice::from_ref(&grant.identity_namespace),
    );
    permissions::add(&mut out, &rights.reads, &manifest.namespaces);
    let permission = |verb, group: &str, resource: &str, namespace: &str| Permission {
        verb,
        group: group.into(),
        resource: resource.into(),
        subresource: String::new(),
        name: String::new(),
        namespace: namespace.into(),
    };
    out.push(permission(
        "create",
        "authorization.k8s.io",
        "subjectaccessreviews",
        "",
    ));
    if grant.grant.promotion.is_some() {
        // The promotion record (kubeplug_operator's registry::promoted):
        // read at start, written when a gated version starts serving, in
        // the lease namespace (the host's own by default).
        let at = host.leases.as_deref().unwrap_or(&host.namespace);
        out.push(permission("create", "", "configmaps", at));
        for verb in ["get", "patch"] {
            out.push(Permission {
                name: "kubeplug-promotions".into(),
                ..permission(verb, "", "configmaps", at)
            });
        }
    }
    if let Some(leases) = &host.leases {
        // Each election round lists the namespace's Leases; a replica
        // deletes its membership Lease and releases its leases on shutdown
        // (kubeplug_kube::leader).
        for verb in ["get", "list", "create", "update", "delete"] {
            out.push(permission(verb, "coordination.k8s.io", "leases", leases));
        }
    }
    out
}

/// `{apiGroups: [apps], resources: [statefulsets], verbs: [get, list,
/// watch]}`: an RBAC rule granting `verbs` on `p`'s resource (and name).
fn rule(p: &Permission, verbs: &[&str]) -> String {
    let group = if p.group.is_empty() {
        "\"\"".to_string()
    } else {
        p.group.clone()
    };
    let mut text = format!(
        "{{apiGroups: [{group}], resources: [{}], verbs: [{}]",
        p.resource,
        verbs.join(", ")
    );
    if !p.name.is_empty() {
        text.push_str(&format!(", resourceNames: [{}]", p.name));
    }
    text.push('}');
    text
}

/// Where the rule for `p` goes, for plugin `plugin`.
fn place(p: &Permission, plugin: &str, host: &HostIdentity) -> String {
    let account = format!("{}/{}", host.namespace, host.service_account);
    match (p.resource.as_str(), p.group.as_str()) {
        ("serviceaccounts", "") => format!(
            "in Role kubeplug-host-{plugin} in namespace {} bound to ServiceAccount {account} (`kubeplug platform` writes it in host-rbac.yaml), or in ClusterRole kubeplug's impersonate rule (deploy/base/rbac.yaml; that name in any namespace), or with the chart set plugins.identities.{plugin}.impersonate: true",
            p.namespace
        ),
        ("subjectaccessreviews", _) => {
            "in ClusterRole kubeplug (deploy/base/rbac.yaml; the chart's ClusterRole has it)".into()
        }
        ("leases", _) => format!(
            "in Role kubeplug-leader-election in namespace {} bound to ServiceAccount {account} (deploy/base/rbac.yaml; the chart's with leaderElection)",
            p.namespace
        ),
        _ if p.namespace.is_empty() => {
            "in ClusterRole kubeplug (deploy/base/rbac.yaml), or the chart's rbac.hostReadRules"
                .into()
        }
        _ => format!(
            "in ClusterRole kubeplug (deploy/base/rbac.yaml) or the chart's rbac.hostReadRules, or a Role in namespace {} bound to ServiceAccount {account}",
            p.namespace
        ),
    }
}

/// Each missing right as `may not VERBS RESOURCE: add RULE PLACE`, one per
/// resource (name and namespace).
pub fn fixes(missing: &[Permission], plugin: &str, host: &HostIdentity) -> Vec<String> {
    permissions::by_resource(missing)
        .into_iter()
        .map(|(p, verbs)| {
            format!(
                "may not {} {}: add {} {}",
                verbs.join(", "),
                p.what(),
                rule(p, &verbs),
                place(p, plugin, host)
            )
        })
        .collect()
}

/// The `host rights <plugin>` check: one SubjectAccessReview per right, as
/// the host's ServiceAccount.
pub async fn check(
    client: &kube::Client,
    plugin: &str,
    manifest: &Manifest,
    grant: &Effective,
    host: &HostIdentity,
) -> Check {
    let wanted = required(manifest, grant, host);
    // The host's ServiceAccount, judged as the API server judges it.
    let subject = Effective {
        service_account: host.service_account.clone(),
        identity_namespace: host.namespace.clone(),
        ..grant.clone()
    };
    permissions::ask(
        client,
        format!("host rights {plugin}"),
        &subject,
        &wanted,
        |account| {
            format!(
                "{account} (the Deployment's) may impersonate {}, read the plugin's {} kind(s){} and create SubjectAccessReviews{}",
                grant.service_account,
                kinds::named(manifest).len(),
                if manifest.namespaces.is_empty() {
                    String::new()
                } else {
                    format!(" in {}", manifest.namespaces.join(", "))
                },
                match &host.leases {
                    Some(ns) => format!(", hold Leases in {ns}"),
                    None => String::new(),
                }
            )
        },
        |account, missing| {
            format!(
                "{account} (the Deployment's) {}; `kubeplug platform <{plugin}.wasm>` writes the host's rules for a plugin (kustomize, or --format helm)",
                fixes(missing, plugin, host).join("; ")
            )
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permissions::tests::database;
    use kubeplug_core::manifest::{ApiResource, Related};
    use kubeplug_core::policy::Policy;

    fn host(leases: Option<&str>) -> HostIdentity {
        HostIdentity {
            namespace: "kubeplug-system".into(),
            service_account: "kubeplug".into(),
            leases: leases.map(str::to_string),
        }
    }

    fn lines(permissions: &[Permission]) -> Vec<String> {
        permissions
            .iter()
            .map(|p| {
                let mut line = format!("{} {}", p.verb, p.resource());
                if !p.name.is_empty() {
                    line = format!("{line} {}", p.name);
                }
                if !p.namespace.is_empty() {
                    line = format!("{line} in {}", p.namespace);
                }
                line
            })
            .collect()
    }

    #[test]
    fn the_host_impersonates_the_plugin_reads_its_kinds_reviews_and_holds_leases() {
        let grant = Policy::default().grant("database").unwrap();
        assert_eq!(
            lines(&required(
                &database(),
                &grant,
                &host(Some("kubeplug-system"))
            )),
            [
                "impersonate serviceaccounts kubeplug-plugin-database in kubeplug-system",
                "get databases.example.com",
                "list databases.example.com",
                "watch databases.example.com",
                "get statefulsets.apps",
                "list statefulsets.apps",
                "watch statefulsets.apps",
                "get services",
                "list services",
                "watch services",
                "get pods",
                "list pods",
                "watch pods",
                "get configmaps",
                "list configmaps",
                "watch configmaps",
                "create subjectaccessreviews.authorization.k8s.io",
                "get leases.coordination.k8s.io in kubeplug-system",
                "list leases.coordination.k8s.io in kubeplug-system",
                "create leases.coordination.k8s.io in kubeplug-system",
                "update leases.coordination.k8s.io in kubeplug-system",
                "delete leases.coordination.k8s.io in kubeplug-system",
            ]
        );
    }

    #[test]
    fn reads_are_asked_in_the_served_namespaces_and_leases_only_with_leader_election() {
        let manifest = Manifest {
            namespaces: vec!["team-a".into()],
            related: vec![Related {
                resource: ApiResource::new("", "v1", "Namespace", "namespaces", false),
                match_labels: Vec::new(),
            }],
            ..database()
        };
        let grant = Policy::default().grant("database").unwrap();
        let lines = lines(&required(&manifest, &grant, &host(None)));
        assert!(lines.contains(&"get databases.example.com in team-a".to_string()));
        assert!(
            lines.contains(&"list namespaces".to_string()),
            "cluster-scoped: everywhere: {lines:?}"
        );
        assert!(!lines.iter().any(|l| l.contains("leases")), "{lines:?}");
    }

    #[test]
    fn a_gated_plugin_needs_the_promotion_record_by_name() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            file.path(),
            "plugins:\n  database:\n    parent: [Database.example.com]\n    children: [StatefulSet.apps, Service, Secret]\n    related: [Pod]\n    promotion: {maxChangedPercent: 10}\n",
        )
        .unwrap();
        let policy = Policy::load(&[file.path()]).unwrap();
        let grant = policy.grant("database").unwrap();
        let gated = lines(&required(&database(), &grant, &host(None)));
        for want in [
            "create configmaps in kubeplug-system",
            "get configmaps kubeplug-promotions in kubeplug-system",
            "patch configmaps kubeplug-promotions in kubeplug-system",
        ] {
            assert!(gated.contains(&want.to_string()), "{want}: {gated:?}");
        }
        let ungated = Policy::default().grant("database").unwrap();
        let plain = lines(&required(&database(), &ungated, &host(None)));
        assert!(
            !plain
                .iter()
                .any(|l| l.contains("kubeplug-promotions") || l.starts_with("create configmaps")),
            "{plain:?}"
        );
    }

    #[test]
    fn each_missing_right_names_the_rule_to_add_and_where() {
        let grant = Policy::default().grant("database").unwrap();
        let wanted = required(&database(), &grant, &host(Some("kubeplug-system")));
        let missing: Vec<Permission> = wanted
            .into_iter()
            .filter(|p| {
                p.verb == "impersonate" || p.resource == "statefulsets" || p.verb == "update"
            })
            .collect();
        let fixes = fixes(&missing, "database", &host(Some("kubeplug-system")));
        assert_eq!(
            fixes,
            [
                "may not impersonate serviceaccounts kubeplug-plugin-database in namespace kubeplug-system: add {apiGroups: [\"\"], resources: [serviceaccounts], verbs: [impersonate], resourceNames: [kubeplug-plugin-database]} in Role kubeplug-host-database in namespace kubeplug-system bound to ServiceAccount kubeplug-system/kubeplug (`kubeplug platform` writes it in host-rbac.yaml), or in ClusterRole kubeplug's impersonate rule (deploy/base/rbac.yaml; that name in any namespace), or with the chart set plugins.identities.database.impersonate: true",
                "may not get, list, watch statefulsets.apps: add {apiGroups: [apps], resources: [statefulsets], verbs: [get, list, watch]} in ClusterRole kubeplug (deploy/base/rbac.yaml), or the chart's rbac.hostReadRules",
                "may not update leases.coordination.k8s.io in namespace kubeplug-system: add {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [update]} in Role kubeplug-leader-election in namespace kubeplug-system bound to ServiceAccount kubeplug-system/kubeplug (deploy/base/rbac.yaml; the chart's with leaderElection)",
            ]
        );
    }
}
