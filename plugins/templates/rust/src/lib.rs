//! A kubeplug plugin: each `Greeting` (`example.com/v1alpha1`) becomes a
//! ConfigMap holding its message, and its status says whether the
//! ConfigMap exists yet.
//!
//! Edit `fixtures/` first (what the plugin should answer), then this file
//! until `kubeplug test .` passes.

use kubeplug_sdk::k8s_openapi::api::core::v1::ConfigMap;
use kubeplug_sdk::serde_json::{Value, json};
use kubeplug_sdk::{Context, Error, Manifest, Meta, Plugin, Resource, Response};
use serde::{Deserialize, Serialize};

/// A `Greeting` object (what the plugin reads of it).
#[derive(Deserialize)]
pub struct Greeting {
    pub metadata: Meta,
    pub spec: GreetingSpec,
}

/// `Greeting.spec`.
#[derive(Deserialize)]
pub struct GreetingSpec {
    /// Whom to greet; a greeting with no one to greet is refused.
    pub name: String,
}

/// `Greeting.status`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GreetingStatus {
    /// `Pending` until the ConfigMap is observed, then `Ready`.
    pub phase: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The name of a greeting's ConfigMap.
pub fn config_map_name(greeting: &str) -> String {
    format!("{greeting}-greeting")
}

pub struct GreetingPlugin;

impl Plugin for GreetingPlugin {
    /// No configuration: any document is accepted.
    type Config = Value;

    fn manifest(_config: &Self::Config) -> Result<Manifest, Error> {
        Ok(Manifest::composite(
            env!("CARGO_PKG_NAME"),
            env!("CARGO_PKG_VERSION"),
            Resource::namespaced("example.com", "v1alpha1", "Greeting", "greetings"),
        )
        .child(Resource::of::<ConfigMap>()))
    }

    fn reconcile(ctx: &Context<Self::Config>) -> Result<Response, Error> {
        let greeting: Greeting = ctx.parent()?;
        if greeting.spec.name.trim().is_empty() {
            return Err(Error::InvalidInput("spec.name must not be empty".into()));
        }
        let name = config_map_name(ctx.name());
        let observed = ctx.observed.iter().any(|o| {
            o["kind"] == "ConfigMap" && o["metadata"]["name"].as_str() == Some(name.as_str())
        });
        Response::default()
            .child(&json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name},
                "data": {"message": format!("Hello, {}!", greeting.spec.name)},
            }))?
            .status(&GreetingStatus {
                phase: if observed { "Ready" } else { "Pending" },
                observed_generation: greeting.metadata.generation,
            })
    }
}

kubeplug_sdk::export_plugin!(GreetingPlugin);
