//! CA bundle injection: the `caBundle` of the objects the flags name (the
//! APIService, the webhook configurations, CRDs with a conversion webhook)
//! set to the bundle of the Secret, wherever they point at one of the
//! host's Services. Re-checked every round rather than watched: a few GETs
//! a minute, rights by name only (`get`, `patch`), and a `helm upgrade`
//! that resets a bundle is repaired within a round.

use base64::Engine as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

/// The objects whose `caBundle` the host keeps, by name.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    pub api_services: Vec<String>,
    pub validating_webhooks: Vec<String>,
    pub mutating_webhooks: Vec<String>,
    pub crds: Vec<String>,
}

impl Targets {
    pub fn is_empty(&self) -> bool {
        self.api_services.is_empty()
            && self.validating_webhooks.is_empty()
            && self.mutating_webhooks.is_empty()
            && self.crds.is_empty()
    }
}

/// The kinds of [`Targets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ApiService,
    ValidatingWebhooks,
    MutatingWebhooks,
    Crd,
}

impl Kind {
    fn resource(self) -> ApiResource {
        let (group, version, kind, plural) = match self {
            Kind::ApiService => ("apiregistration.k8s.io", "v1", "APIService", "apiservices"),
            Kind::ValidatingWebhooks => (
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
            ),
            Kind::MutatingWebhooks => (
                "admissionregistration.k8s.io",
                "v1",
                "MutatingWebhookConfiguration",
                "mutatingwebhookconfigurations",
            ),
            Kind::Crd => (
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    }
}

/// Who the host is: the Services of its namespace an object must point at
/// for its `caBundle` to be the host's to set.
#[derive(Debug, Clone)]
pub struct Services {
    pub namespace: String,
    pub names: Vec<String>,
}

impl Services {
    /// Whether a `service` reference (`{namespace, name, ...}`) is one of
    /// them.
    fn own(&self, service: &Value) -> bool {
        service["namespace"].as_str() == Some(self.namespace.as_str())
            && service["name"]
                .as_str()
                .is_some_and(|name| self.names.iter().any(|own| own == name))
    }
}

/// Sets the bundle on the targets.
pub struct Injector {
    client: kube::Client,
    services: Services,
    targets: Targets,
}

impl Injector {
    pub fn new(client: kube::Client, services: Services, targets: Targets) -> Self {
        Injector {
            client,
            services,
            targets,
        }
    }

    /// Set `bundle` (PEM) wherever a target differs; failures are logged
    /// (a missing object at debug: webhooks may be off) and retried next
    /// round. How many objects were patched.
    pub async fn inject(&self, bundle: &str) -> usize {
        let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
        let mut patched = 0;
        for (kind, names) in [
            (Kind::ApiService, &self.targets.api_services),
            (Kind::ValidatingWebhooks, &self.targets.validating_webhooks),
            (Kind::MutatingWebhooks, &self.targets.mutating_webhooks),
            (Kind::Crd, &self.targets.crds),
        ] {
            let resource = kind.resource();
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            for name in names {
                match self.one(&api, kind, name, &encoded).await {
                    Ok(true) => {
                        patched += 1;
                        tracing::info!(kind = resource.kind, %name, "CA bundle injected");
                    }
                    Ok(false) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        tracing::debug!(kind = resource.kind, %name, "no such object to inject the CA bundle into");
                    }
                    Err(error) => {
                        tracing::warn!(kind = resource.kind, %name, %error, "cannot inject the CA bundle");
                    }
                }
            }
        }
        patched
    }

    async fn one(
        &self,
        api: &Api<DynamicObject>,
        kind: Kind,
        name: &str,
        bundle: &str,
    ) -> Result<bool, kube::Error> {
        let object = serde_json::to_value(api.get(name).await?).unwrap_or_default();
        let Some(patch) = patch(kind, &object, &self.services, bundle) else {
            return Ok(false);
        };
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(true)
    }
}

/// The merge patch that sets `bundle` (base64) on `object`'s references
/// to `services`, at the resourceVersion read (a concurrent change makes
/// it fail with a conflict, retried next round); `None` when every such
/// reference has it already, or there is none.
fn patch(kind: Kind, object: &Value, services: &Services, bundle: &str) -> Option<Value> {
    let version = &object["metadata"]["resourceVersion"];
    match kind {
        Kind::ApiService => {
            let spec = &object["spec"];
            let ours = services.own(&spec["service"])
                && spec["insecureSkipTLSVerify"].as_bool() != Some(true);
            (ours && spec["caBundle"].as_str() != Some(bundle)).then(
                || json!({"metadata": {"resourceVersion": version}, "spec": {"caBundle": bundle}}),
            )
        }
        Kind::ValidatingWebhooks | Kind::MutatingWebhooks => {
            let mut webhooks = object["webhooks"].as_array()?.clone();
            let mut changed = false;
            for webhook in &mut webhooks {
                let config = &mut webhook["clientConfig"];
                if services.own(&config["service"]) && config["caBundle"].as_str() != Some(bundle) {
                    config["caBundle"] = bundle.into();
                    changed = true;
                }
            }
            // A merge patch replaces the list whole: the resourceVersion
            // keeps it from undoing a change made since the read.
            changed.then(|| json!({"metadata": {"resourceVersion": version}, "webhooks": webhooks}))
        }
        Kind::Crd => {
            let config = &object["spec"]["conversion"]["webhook"]["clientConfig"];
            (services.own(&config["service"]) && config["caBundle"].as_str() != Some(bundle)).then(
                || {
                    json!({
                        "metadata": {"resourceVersion": version},
                        "spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": bundle}}}},
                    })
                },
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn services() -> Services {
        Services {
            namespace: "kubeplug-system".into(),
            names: vec!["kubeplug-api".into(), "kubeplug-webhooks".into()],
        }
    }

    fn service(name: &str) -> Value {
        json!({"namespace": "kubeplug-system", "name": name, "port": 443})
    }

    #[test]
    fn an_apiservice_of_the_hosts_service_gets_the_bundle_once() {
        let object = json!({
            "metadata": {"resourceVersion": "7"},
            "spec": {"service": service("kubeplug-api"), "caBundle": "old"},
        });
        let patch = patch(Kind::ApiService, &object, &services(), "new").unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"caBundle": "new"}})
        );
        assert_eq!(patch_of(&object, "old"), None, "already set: no write");
    }

    fn patch_of(object: &Value, bundle: &str) -> Option<Value> {
        patch(Kind::ApiService, object, &services(), bundle)
    }

    #[test]
    fn an_apiservice_of_another_server_is_left_alone() {
        for spec in [
            json!({"service": {"namespace": "elsewhere", "name": "kubeplug-api"}}),
            json!({"service": service("metrics-server")}),
            json!({"service": service("kubeplug-api"), "insecureSkipTLSVerify": true}),
            json!({}),
        ] {
            assert_eq!(patch_of(&json!({"spec": spec}), "new"), None, "{spec}");
        }
    }

    #[test]
    fn only_the_webhooks_that_call_the_host_get_the_bundle() {
        let object = json!({
            "metadata": {"resourceVersion": "3"},
            "webhooks": [
                {"name": "a", "clientConfig": {"service": service("kubeplug-webhooks")}},
                {"name": "b", "clientConfig": {"url": "https://elsewhere"}},
                {"name": "c", "clientConfig": {"service": service("kubeplug-webhooks"), "caBundle": "new"}},
            ],
        });
        let patch = patch(Kind::ValidatingWebhooks, &object, &services(), "new").unwrap();
        assert_eq!(patch["metadata"]["resourceVersion"], "3");
        let hooks = patch["webhooks"].as_array().unwrap();
        assert_eq!(hooks[0]["clientConfig"]["caBundle"], "new");
        assert_eq!(
            hooks[1]["clientConfig"],
            json!({"url": "https://elsewhere"})
        );
        assert_eq!(hooks[2]["name"], "c");
        let done = json!({"webhooks": patch["webhooks"]});
        assert_eq!(patch_of_kind(Kind::MutatingWebhooks, &done), None);
    }

    fn patch_of_kind(kind: Kind, object: &Value) -> Option<Value> {
        patch(kind, object, &services(), "new")
    }

    #[test]
    fn a_crds_conversion_webhook_of_the_host_gets_the_bundle() {
        let object = json!({
            "metadata": {"resourceVersion": "9"},
            "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": service("kubeplug-webhooks")}}}},
        });
        assert_eq!(
            patch_of_kind(Kind::Crd, &object).unwrap()["spec"]["conversion"]["webhook"]["clientConfig"],
            json!({"caBundle": "new"})
        );
        let none = json!({"spec": {"conversion": {"strategy": "None"}}});
        assert_eq!(patch_of_kind(Kind::Crd, &none), None);
    }
}
