//! `disruption-budget`: a decorator with attachments. Each Deployment
//! annotated `example.com/min-available` (a count, `2`, or a percentage,
//! `50%`) gets a PodDisruptionBudget `<name>-pdb` over its Pods, owned by
//! the Deployment: updated when the annotation or the selector changes,
//! pruned when the annotation goes, garbage-collected with the Deployment.
//! Metacontroller's DecoratorController example, on kubeplug.
//!
//! Configuration: `{"namespaces": [...]}` (default: every namespace the
//! grant allows).

// Deny, not forbid: the generated export glue is unsafe and allowed where
// it is expanded; everything written here stays safe.
#![deny(unsafe_code)]

use kubeplug_sdk::k8s_openapi::api::apps::v1::Deployment;
use kubeplug_sdk::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kubeplug_sdk::serde_json::{Value, json};
use kubeplug_sdk::{Context, Error, Manifest, Plugin, Resource, Response};
use serde::Deserialize;

/// The annotation that asks for a budget, and its `minAvailable`.
pub const MIN_AVAILABLE: &str = "example.com/min-available";

/// The plugin's configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub namespaces: Vec<String>,
}

/// Name of the budget of Deployment `name`.
pub fn budget_name(name: &str) -> String {
    format!("{name}-pdb")
}

/// `minAvailable` as the API takes it: an integer for a count, the text for
/// a percentage; anything else is the author's mistake, reported.
fn min_available(text: &str) -> Result<Value, Error> {
    let refuse = || {
        Error::InvalidInput(format!(
            "annotation {MIN_AVAILABLE}: {text:?} is neither a count (2) nor a percentage (50%)"
        ))
    };
    match text.strip_suffix('%') {
        Some(percent) => match percent.parse::<u8>() {
            Ok(p) if p <= 100 => Ok(json!(text)),
            _ => Err(refuse()),
        },
        None => text.parse::<u32>().map(|n| json!(n)).map_err(|_| refuse()),
    }
}

/// The plugin.
pub struct DisruptionBudget;

impl Plugin for DisruptionBudget {
    type Config = Config;

    fn manifest(config: &Config) -> Result<Manifest, Error> {
        Ok(Manifest::decorator(
            "disruption-budget",
            env!("CARGO_PKG_VERSION"),
            Resource::of::<Deployment>(),
        )
        .child(Resource::of::<PodDisruptionBudget>())
        .namespaces(config.namespaces.iter().cloned()))
    }

    fn reconcile(ctx: &Context<Config>) -> Result<Response, Error> {
        let annotations = &ctx.parent["metadata"]["annotations"];
        let Some(wanted) = annotations[MIN_AVAILABLE].as_str() else {
            // Not asked (or no longer): no attachment, so any is pruned.
            return Ok(Response::default());
        };
        let selector = &ctx.parent["spec"]["selector"];
        if !selector.is_object() {
            return Err(Error::InvalidInput("the Deployment has no selector".into()));
        }
        Response::default().child(&json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": budget_name(ctx.name())},
            "spec": {
                "minAvailable": min_available(wanted)?,
                "selector": selector,
            },
        }))
    }
}

kubeplug_sdk::export_plugin!(DisruptionBudget);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_percentages_are_taken_and_the_rest_refused() {
        assert_eq!(min_available("2").unwrap(), json!(2));
        assert_eq!(min_available("50%").unwrap(), json!("50%"));
        assert_eq!(min_available("100%").unwrap(), json!("100%"));
        for bad in ["", "-1", "two", "101%", "%", "1.5"] {
            assert!(min_available(bad).is_err(), "{bad:?}");
        }
    }
}
