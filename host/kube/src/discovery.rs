//! What the API server says a kind is: its plural and its scope.
//!
//! A plugin's manifest claims a plural and `namespaced` for every kind it
//! names; the host never uses those claims. `kubeplug run` asks the API
//! server ([`Discovered::discover`]) and hands the answer to the one
//! admission ([`kubeplug_core::admission`]); offline commands use
//! [`kubeplug_core::admission::Offline`].

use std::collections::HashMap;

use kube::Client;
use kube::core::GroupVersionKind;

use kubeplug_core::admission::{Scope, Served};
use kubeplug_core::manifest::{ApiResource, Manifest};

/// What the API server serves of a manifest's kinds: (group, version, kind)
/// → (plural, namespaced). A kind it does not serve is absent.
#[derive(Debug, Clone, Default)]
pub struct Discovered {
    known: HashMap<(String, String, String), (String, bool)>,
}

fn key(r: &ApiResource) -> (String, String, String) {
    (r.group.clone(), r.version.clone(), r.kind.clone())
}

impl Discovered {
    /// Ask the API server about every kind `manifest` names. A kind it does
    /// not serve is simply absent (admission reports it).
    pub async fn discover(client: &Client, manifest: &Manifest) -> Result<Discovered, kube::Error> {
        let mut scopes = Discovered::default();
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
}

impl Served for Discovered {
    fn scope(&self, r: &ApiResource) -> Scope {
        match self.known.get(&key(r)) {
            Some((plural, namespaced)) => Scope::Served {
                plural: plural.clone(),
                namespaced: *namespaced,
            },
            None => Scope::Absent,
        }
    }
}

#[cfg(test)]
mod tests {
    /// The offline table of built-in kinds (pure, written out) says what
    /// k8s-openapi's types say.
    #[test]
    fn the_offline_builtin_kinds_match_k8s_openapi() {
        use k8s_openapi::api::{
            admissionregistration::v1 as admission, apps::v1 as apps,
            autoscaling::v2 as autoscaling, batch::v1 as batch, coordination::v1 as coordination,
            core::v1 as core, networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac,
        };
        fn of<K: k8s_openapi::Resource>()
        -> (&'static str, &'static str, &'static str, &'static str, bool)
        where
            K::Scope: 'static,
        {
            let namespaced = std::any::TypeId::of::<K::Scope>()
                == std::any::TypeId::of::<k8s_openapi::NamespaceResourceScope>();
            (
                K::GROUP,
                K::VERSION,
                K::KIND,
                K::URL_PATH_SEGMENT,
                namespaced,
            )
        }
        let expected = [
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
        ];
        assert_eq!(kubeplug_core::admission::offline::BUILTIN, &expected[..]);
    }
}
