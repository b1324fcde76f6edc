//! What a kind is without a cluster: Kubernetes' built-in kinds and the
//! CustomResourceDefinitions `render`, `inspect` and `kubeplug test` are
//! given. A kind neither names is [`Scope::Unknown`]: the plugin's claim
//! stands, with a note (the live host asks the API server instead, see
//! [`kubeplug_kube::discovery`]).

use std::collections::HashMap;

use serde_json::Value;

use super::{Scope, Served};
use crate::manifest::ApiResource;

/// Known kinds: (group, version, kind) → (plural, namespaced).
#[derive(Debug, Clone, Default)]
pub struct Offline {
    known: HashMap<(String, String, String), (String, bool)>,
}

fn key(r: &ApiResource) -> (String, String, String) {
    (r.group.clone(), r.version.clone(), r.kind.clone())
}

impl Offline {
    /// The built-in kinds plus the CustomResourceDefinitions among `crds`
    /// (other objects are ignored).
    pub fn from_crds(crds: &[Value]) -> Offline {
        let mut scopes = Offline::default();
        for r in builtin() {
            scopes.known.insert(key(&r), (r.plural, r.namespaced));
        }
        for crd in crds
            .iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
        {
            let spec = &crd["spec"];
            let group = spec["group"].as_str().unwrap_or_default();
            let kind = spec["names"]["kind"].as_str().unwrap_or_default();
            let plural = spec["names"]["plural"].as_str().unwrap_or_default();
            let namespaced = spec["scope"] == "Namespaced";
            for version in spec["versions"].as_array().into_iter().flatten() {
                if version["served"] == false {
                    continue;
                }
                let v = version["name"].as_str().unwrap_or_default();
                scopes.known.insert(
                    (group.into(), v.into(), kind.into()),
                    (plural.into(), namespaced),
                );
            }
        }
        scopes
    }

    /// The plural and scope of `r`, if known here.
    pub fn lookup(&self, r: &ApiResource) -> Option<(String, bool)> {
        self.known.get(&key(r)).cloned()
    }
}

impl Served for Offline {
    fn scope(&self, r: &ApiResource) -> Scope {
        match self.lookup(r) {
            Some((plural, namespaced)) => Scope::Served { plural, namespaced },
            None => Scope::Unknown,
        }
    }
}

/// The built-in kinds a plugin is likely to name: (group, version, kind,
/// plural, namespaced). Written out so that the pure core compiles no
/// Kubernetes types; `discovery`'s tests check every row against
/// k8s-openapi's.
pub const BUILTIN: &[(&str, &str, &str, &str, bool)] = &[
    ("", "v1", "Pod", "pods", true),
    ("", "v1", "Service", "services", true),
    ("", "v1", "ConfigMap", "configmaps", true),
    ("", "v1", "Secret", "secrets", true),
    ("", "v1", "ServiceAccount", "serviceaccounts", true),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
    ),
    ("", "v1", "PersistentVolume", "persistentvolumes", false),
    ("", "v1", "Namespace", "namespaces", false),
    ("", "v1", "Node", "nodes", false),
    ("", "v1", "Endpoints", "endpoints", true),
    ("", "v1", "Event", "events", true),
    ("", "v1", "LimitRange", "limitranges", true),
    ("", "v1", "ResourceQuota", "resourcequotas", true),
    ("apps", "v1", "Deployment", "deployments", true),
    ("apps", "v1", "StatefulSet", "statefulsets", true),
    ("apps", "v1", "DaemonSet", "daemonsets", true),
    ("apps", "v1", "ReplicaSet", "replicasets", true),
    ("batch", "v1", "Job", "jobs", true),
    ("batch", "v1", "CronJob", "cronjobs", true),
    ("networking.k8s.io", "v1", "Ingress", "ingresses", true),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
    ),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
    ),
    ("coordination.k8s.io", "v1", "Lease", "leases", true),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        false,
    ),
];

fn builtin() -> impl Iterator<Item = ApiResource> {
    BUILTIN
        .iter()
        .map(|&(group, version, kind, plural, namespaced)| {
            ApiResource::new(group, version, kind, plural, namespaced)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimed(g: &str, v: &str, kind: &str, plural: &str, namespaced: bool) -> ApiResource {
        ApiResource::new(g, v, kind, plural, namespaced)
    }

    #[test]
    fn a_claimed_scope_is_replaced_by_the_real_one() {
        let scopes = Offline::from_crds(&[]);
        assert_eq!(
            scopes.lookup(&claimed("", "v1", "Secret", "whatever", false)),
            Some(("secrets".into(), true))
        );
        assert_eq!(
            scopes.lookup(&claimed(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRoleBinding",
                "x",
                true
            )),
            Some(("clusterrolebindings".into(), false))
        );
    }

    #[test]
    fn custom_kinds_come_from_their_definitions() {
        let crd = serde_json::json!({
            "kind": "CustomResourceDefinition",
            "spec": {
                "group": "example.com",
                "names": {"kind": "Database", "plural": "databases"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true}, {"name": "v0", "served": false}],
            }
        });
        let scopes = Offline::from_crds(&[crd]);
        assert_eq!(
            scopes.lookup(&claimed(
                "example.com",
                "v1",
                "Database",
                "databasez",
                false
            )),
            Some(("databases".into(), true))
        );
        assert_eq!(
            scopes.lookup(&claimed("example.com", "v0", "Database", "d", true)),
            None
        );
    }
}
