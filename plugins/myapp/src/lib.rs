//! `myapp`: a `MyApp` (`example.com/v1alpha1`) becomes a Deployment named
//! `<name>-deploy`; its status reports the phase and available replicas.
//! Where the platform serves it, its mutating webhook stores the spec's
//! defaults ([`defaults`]) on create and update. A MyApp may name a
//! ConfigMap in its namespace (`spec.configRef`, [`config`]) whose content
//! rolls the Deployment when it changes.

// Deny, not forbid: the generated export glue is unsafe and allowed where
// it is expanded; everything written here stays safe.
#![deny(unsafe_code)]

pub mod config;
pub mod defaults;

use std::collections::BTreeMap;

use kubeplug_sdk::k8s_openapi::api::apps::v1::Deployment;
use kubeplug_sdk::k8s_openapi::api::core::v1::ConfigMap;
use kubeplug_sdk::serde_json::{self, Value, json};
use kubeplug_sdk::{
    AdmissionRequest, Condition, Context, Error, Manifest, Meta, Operation, Plugin, Reference,
    Resource, Response, set_condition, time,
};
use serde::{Deserialize, Serialize};

pub use defaults::DEFAULT_IMAGE;

/// `MyApp.spec`. What it leaves out stands for its default ([`defaults`]),
/// whether or not the webhook stored it.
#[derive(Debug, Clone, Deserialize)]
pub struct MyAppSpec {
    #[serde(default = "defaults::replicas")]
    pub replicas: i32,
    #[serde(default)]
    pub image: Option<String>,
    /// A ConfigMap in the MyApp's namespace (see [`config`]).
    #[serde(default, rename = "configRef")]
    pub config_ref: Option<config::ConfigRef>,
}

impl MyAppSpec {
    /// The image to run.
    pub fn image(&self) -> &str {
        defaults::image(self.image.as_deref())
    }
}

/// A `MyApp` object.
#[derive(Debug, Clone, Deserialize)]
pub struct MyApp {
    pub metadata: Meta,
    pub spec: MyAppSpec,
}

/// `MyApp.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MyAppStatus {
    /// Pending, Progressing or Running.
    pub phase: String,
    pub available_replicas: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The condition saying whether `spec.configRef`'s ConfigMap exists (only
/// while the spec names one).
pub const CONFIG_READY: &str = "ConfigReady";

/// Name of the Deployment of MyApp `name`.
pub fn deployment_name(name: &str) -> String {
    format!("{name}-deploy")
}

/// The ConfigMap `spec.configRef` names, if it exists, read as far as its
/// hash needs.
fn config_map(ctx: &Context<Value>, app: &MyApp) -> Option<config::ConfigMapView> {
    let name = &app.spec.config_ref.as_ref()?.name;
    ctx.related_named_as::<ConfigMap, config::ConfigMapView>(name)
}

fn deployment(ctx: &Context<Value>, app: &MyApp, config: Option<&config::ConfigMapView>) -> Value {
    let selector = BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "myapp".to_string()),
        (
            "app.kubernetes.io/instance".to_string(),
            ctx.name().to_string(),
        ),
    ]);
    let mut labels = selector.clone();
    labels.insert("app.kubernetes.io/managed-by".into(), "kubeplug".into());
    let mut template_meta = json!({"labels": labels});
    if let Some(config) = config {
        template_meta["annotations"] = json!({config::HASH_ANNOTATION: config::hash(config)});
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(ctx.name()),
            "namespace": ctx.namespace(),
            "labels": labels,
        },
        "spec": {
            "replicas": app.spec.replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": template_meta,
                "spec": {"containers": [{"name": "app", "image": app.spec.image()}]},
            },
        },
    })
}

/// The part of the observed Deployment the status reads (the whole
/// `Deployment` type would link its deserializer into the plugin).
#[derive(Deserialize)]
struct DeploymentView {
    #[serde(default)]
    status: Option<DeploymentStatusView>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeploymentStatusView {
    #[serde(default)]
    available_replicas: Option<i32>,
}

fn status(ctx: &Context<Value>, app: &MyApp, found: bool) -> MyAppStatus {
    let observed =
        ctx.observed_named_as::<Deployment, DeploymentView>(&deployment_name(ctx.name()));
    let available = observed
        .as_ref()
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    let want = app.spec.replicas;
    let phase = match observed {
        None => "Pending",
        Some(_) if available >= want => "Running",
        Some(_) => "Progressing",
    };
    let previous: MyAppStatus = serde_json::from_value(ctx.status().clone()).unwrap_or_default();
    let mut conditions = previous.conditions;
    if let Some(now) = time(&ctx.now) {
        set_condition(
            &mut conditions,
            Condition {
                type_: "Available".into(),
                status: if phase == "Running" { "True" } else { "False" }.into(),
                reason: phase.into(),
                message: format!("{available}/{want} replicas available"),
                last_transition_time: now.clone(),
                observed_generation: ctx.generation(),
            },
        );
        match &app.spec.config_ref {
            Some(config) => {
                let (status, reason, verb) = if found {
                    ("True", "Found", "found")
                } else {
                    ("False", "NotFound", "not found")
                };
                set_condition(
                    &mut conditions,
                    Condition {
                        type_: CONFIG_READY.into(),
                        status: status.into(),
                        reason: reason.into(),
                        message: format!("ConfigMap {} {verb}", config.name),
                        last_transition_time: now,
                        observed_generation: ctx.generation(),
                    },
                );
            }
            None => conditions.retain(|c| c.type_ != CONFIG_READY),
        }
    }
    MyAppStatus {
        phase: phase.into(),
        available_replicas: available,
        observed_generation: ctx.generation(),
        conditions,
    }
}

/// The plugin.
pub struct MyAppPlugin;

impl Plugin for MyAppPlugin {
    type Config = Value;

    fn manifest(_config: &Self::Config) -> Result<Manifest, Error> {
        Ok(Manifest::composite(
            "myapp",
            env!("CARGO_PKG_VERSION"),
            Resource::namespaced("example.com", "v1alpha1", "MyApp", "myapps"),
        )
        .child(Resource::of::<Deployment>())
        // spec.configRef (config.rs).
        .references(Resource::of::<ConfigMap>())
        // Its defaults, stored with the object (defaults.rs).
        .mutates())
    }

    /// The ConfigMap `spec.configRef` names, if any.
    fn references(parent: &Value, _config: &Self::Config) -> Result<Vec<Reference>, Error> {
        let name = parent["spec"]["configRef"]["name"]
            .as_str()
            .unwrap_or_default();
        if name.is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![Reference::named(Resource::of::<ConfigMap>(), name)])
    }

    fn reconcile(ctx: &Context<Self::Config>) -> Result<Response, Error> {
        let app: MyApp = ctx.parent()?;
        if app.spec.replicas < 0 {
            return Err(Error::InvalidInput(format!(
                "spec.replicas must not be negative, got {}",
                app.spec.replicas
            )));
        }
        let config = config_map(ctx, &app);
        Response::default()
            .child(&deployment(ctx, &app, config.as_ref()))?
            .status(&status(ctx, &app, config.is_some()))
    }

    /// The object with its spec's defaults stored, or `None` when it has
    /// them all (the webhook may run more than once for one write).
    fn mutate(request: &AdmissionRequest<Self::Config>) -> Result<Option<Value>, Error> {
        if request.operation == Operation::Delete {
            return Ok(None);
        }
        let Some(mut object) = request.object.clone() else {
            return Ok(None);
        };
        let changed = object.get_mut("spec").is_some_and(defaults::apply);
        Ok(changed.then_some(object))
    }
}

kubeplug_sdk::export_plugin!(MyAppPlugin);

#[cfg(test)]
mod tests {
    use super::*;

    fn myapp(spec: Value) -> Value {
        json!({
            "apiVersion": "example.com/v1alpha1",
            "kind": "MyApp",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"team": "a"}},
            "spec": spec,
        })
    }

    fn mutate(operation: Operation, object: Option<Value>) -> Option<Value> {
        let old = (operation != Operation::Create).then(|| myapp(json!({})));
        let request = AdmissionRequest::new(operation, object, old, json!({}));
        MyAppPlugin::mutate(&request).expect("mutate does not fail")
    }

    #[test]
    fn create_and_update_store_the_defaults() {
        for operation in [Operation::Create, Operation::Update] {
            for spec in [
                json!({}),
                json!({"image": null}),
                json!({"image": "", "replicas": 1}),
            ] {
                assert_eq!(
                    mutate(operation, Some(myapp(spec.clone()))),
                    Some(myapp(json!({"image": "nginx:1.27", "replicas": 1}))),
                    "{operation:?} {spec}"
                );
            }
            assert_eq!(
                mutate(
                    operation,
                    Some(myapp(json!({"image": "ghcr.io/acme/web:1.4"})))
                ),
                Some(myapp(
                    json!({"image": "ghcr.io/acme/web:1.4", "replicas": 1})
                ))
            );
            assert_eq!(
                mutate(operation, Some(myapp(json!({"replicas": 0})))),
                Some(myapp(json!({"image": "nginx:1.27", "replicas": 0})))
            );
        }
    }

    #[test]
    fn a_spec_with_every_default_is_left_alone() {
        let full = myapp(json!({"image": "ghcr.io/acme/web:1.4", "replicas": 3}));
        assert_eq!(mutate(Operation::Create, Some(full)), None);
        let mutated = mutate(Operation::Create, Some(myapp(json!({})))).unwrap();
        assert_eq!(mutate(Operation::Update, Some(mutated)), None, "idempotent");
    }

    #[test]
    fn deletes_and_specs_that_are_not_objects_are_left_alone() {
        assert_eq!(mutate(Operation::Delete, None), None);
        assert_eq!(mutate(Operation::Delete, Some(myapp(json!({})))), None);
        let mut no_spec = myapp(json!({}));
        no_spec.as_object_mut().unwrap().remove("spec");
        assert_eq!(mutate(Operation::Create, Some(no_spec)), None);
        assert_eq!(mutate(Operation::Create, Some(myapp(json!("web")))), None);
    }

    #[test]
    fn reconcile_answers_the_same_before_and_after_the_defaults_are_stored() {
        for spec in [json!({}), json!({"image": ""}), json!({"replicas": 2})] {
            let before = myapp(spec);
            let after = mutate(Operation::Create, Some(before.clone())).unwrap();
            let reconcile = |parent: Value| {
                let ctx = Context::new(parent, json!({}), "2026-11-29T18:00:00Z");
                MyAppPlugin::reconcile(&ctx).expect("reconciles")
            };
            assert_eq!(
                format!("{:?}", reconcile(before)),
                format!("{:?}", reconcile(after))
            );
        }
    }
}
