//! `myapp`: a `MyApp` (`example.com/v1alpha1`) becomes a Deployment named
//! `<name>-deploy`; its status reports the phase and available replicas.

// Deny, not forbid: the generated export glue is unsafe and allowed where
// it is expanded; everything written here stays safe.
#![deny(unsafe_code)]

use std::collections::BTreeMap;

use kubeplug_sdk::k8s_openapi::api::apps::v1::Deployment;
use kubeplug_sdk::serde_json::{self, Value, json};
use kubeplug_sdk::{
    Condition, Context, Error, Manifest, Meta, Plugin, Resource, Response, set_condition, time,
};
use serde::{Deserialize, Serialize};

/// Image used when `spec.image` is empty: a pinned, widely mirrored tag.
pub const DEFAULT_IMAGE: &str = "nginx:1.27";

/// `MyApp.spec`.
#[derive(Debug, Clone, Deserialize)]
pub struct MyAppSpec {
    #[serde(default = "one")]
    pub replicas: i32,
    #[serde(default)]
    pub image: Option<String>,
}

fn one() -> i32 {
    1
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

/// Name of the Deployment of MyApp `name`.
pub fn deployment_name(name: &str) -> String {
    format!("{name}-deploy")
}

fn deployment(ctx: &Context<Value>, app: &MyApp) -> Value {
    let selector = BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "myapp".to_string()),
        (
            "app.kubernetes.io/instance".to_string(),
            ctx.name().to_string(),
        ),
    ]);
    let mut labels = selector.clone();
    labels.insert("app.kubernetes.io/managed-by".into(), "kubeplug".into());
    let image = app
        .spec
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string());
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
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": image}]},
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

fn status(ctx: &Context<Value>, app: &MyApp) -> MyAppStatus {
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
                last_transition_time: now,
                observed_generation: ctx.generation(),
            },
        );
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
        .child(Resource::of::<Deployment>()))
    }

    fn reconcile(ctx: &Context<Self::Config>) -> Result<Response, Error> {
        let app: MyApp = ctx.parent()?;
        if app.spec.replicas < 0 {
            return Err(Error::InvalidInput(format!(
                "spec.replicas must not be negative, got {}",
                app.spec.replicas
            )));
        }
        Response::default()
            .child(&deployment(ctx, &app))?
            .status(&status(ctx, &app))
    }
}

kubeplug_sdk::export_plugin!(MyAppPlugin);
