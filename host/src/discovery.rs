//! What the API server says a kind is: its plural and its scope.
//!
//! A plugin's manifest claims a plural and `namespaced` for every kind it
//! names; the host never uses those claims. `kubeplug run` asks the API
//! server ([`Scopes::discover`]); `kubeplug render`, offline, uses the
//! built-in kinds and any CustomResourceDefinitions it is given
//! ([`Scopes::offline`]).

use std::collections::HashMap;

use kube::Client;
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::manifest::{ApiResource, Manifest};

/// Known kinds: (group, version, kind) → (plural, namespaced).
#[derive(Debug, Clone, Default)]
pub struct Scopes {
    known: HashMap<(String, String, String), (String, bool)>,
}

fn key(r: &ApiResource) -> (String, String, String) {
    (r.group.clone(), r.version.clone(), r.kind.clone())
}

impl Scopes {
    pub fn lookup(&self, r: &ApiResource) -> Option<(String, bool)> {
        self.known.get(&key(r)).cloned()
    }

    /// Resolve `manifest` against these scopes (see [`Manifest::resolve`]).
    pub fn resolve(&self, manifest: &Manifest) -> Result<Manifest, Vec<String>> {
        manifest.resolve(|r| self.lookup(r))
    }

    /// Ask the API server about every kind `manifest` names. A kind it does
    /// not serve is simply absent (resolution reports it).
    pub async fn discover(client: &Client, manifest: &Manifest) -> Result<Scopes, kube::Error> {
        let mut scopes = Scopes::default();
        let mut manifest = manifest.clone();
        for r in manifest.resources_mut() {
            if scopes.known.contains_key(&key(r)) {
                continue;
            }
            let gvk = GroupVersionKind::gvk(&r.group, &r.version, &r.kind);
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok((resource, caps)) => {
                    let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
                    scopes.known.insert(key(r), (resource.plural, namespaced));
                }
                // Unknown group/version (404) or kind: not served.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(kube::Error::Discovery(_)) => {}
                Err(other) => return Err(other),
            }
        }
        Ok(scopes)
    }

    /// Kinds known without a cluster: Kubernetes' built-in kinds plus the
    /// CustomResourceDefinitions among `crds` (other objects are ignored).
    pub fn offline(crds: &[Value]) -> Scopes {
        let mut scopes = Scopes::default();
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
        let scopes = Scopes::offline(&[]);
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
        let scopes = Scopes::offline(&[crd]);
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
