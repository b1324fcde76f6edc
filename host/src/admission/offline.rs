//! What a kind is without a cluster: Kubernetes' built-in kinds and the
//! CustomResourceDefinitions `render`, `inspect` and `kubeplug test` are
//! given. A kind neither names is [`Scope::Unknown`]: the plugin's claim
//! stands, with a note (the live host asks the API server instead, see
//! [`crate::discovery`]).

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

fn of<K: k8s_openapi::Resource>() -> ApiResource
where
    K::Scope: 'static,
{
    let namespaced = std::any::TypeId::of::<K::Scope>()
        == std::any::TypeId::of::<k8s_openapi::NamespaceResourceScope>();
    ApiResource::new(
        K::GROUP,
        K::VERSION,
        K::KIND,
        K::URL_PATH_SEGMENT,
        namespaced,
    )
}

/// The built-in kinds a plugin is likely to name.
fn builtin() -> Vec<ApiResource> {
    use k8s_openapi::api::{
        admissionregistration::v1 as admission, apps::v1 as apps, autoscaling::v2 as autoscaling,
        batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
        networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac,
    };
    vec![
        of::<core::Pod>(),
        of::<core::Service>(),
        of::<core::ConfigMap>(),
        of::<core::Secret>(),
        of::<core::ServiceAccount>(),
        of::<core::PersistentVolumeClaim>(),
        of::<core::PersistentVolume>(),
        of::<core::Namespace>(),
        of::<core::Node>(),
        of::<core::Endpoints>(),
        of::<core::Event>(),
        of::<core::LimitRange>(),
        of::<core::ResourceQuota>(),
        of::<apps::Deployment>(),
        of::<apps::StatefulSet>(),
        of::<apps::DaemonSet>(),
        of::<apps::ReplicaSet>(),
        of::<batch::Job>(),
        of::<batch::CronJob>(),
        of::<networking::Ingress>(),
        of::<networking::NetworkPolicy>(),
        of::<policy::PodDisruptionBudget>(),
        of::<autoscaling::HorizontalPodAutoscaler>(),
        of::<coordination::Lease>(),
        of::<rbac::Role>(),
        of::<rbac::RoleBinding>(),
        of::<rbac::ClusterRole>(),
        of::<rbac::ClusterRoleBinding>(),
        of::<admission::ValidatingWebhookConfiguration>(),
        of::<admission::MutatingWebhookConfiguration>(),
    ]
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
