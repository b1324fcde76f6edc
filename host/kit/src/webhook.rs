//! A plugin's optional exports run offline as the live host serves them as
//! the API server's webhooks: `validate` and `mutate` ([`admit`]),
//! `convert` ([`convert`]). `kubeplug test` cases and `kubeplug render
//! --admission` / `--convert-to` both go through here.
//!
//! Every decision on a review or an answer is [`kubeplug_core::webhook`]'s,
//! as in the live host: whether the plugin is asked at all (its parent
//! kind and version, its namespaces), the mutation's fence and JSON patch,
//! the verdict's quotas, what a conversion may change. This module builds
//! the review that files describe and words the host's refusals.
//!
//! One difference: the live host gives each call the webhook's timeout
//! less a margin; here a call runs within the plugin's own limits
//! (`--timeout`), which are shorter by default.

pub mod admit;
pub mod convert;

use kubeplug_core::policy::Effective;
use kubeplug_core::webhook::Webhook;

/// Why the live host would never call `webhook`: the component does not
/// export it (a plugin built before the export existed).
pub fn missing(webhook: Webhook, plugin: &kubeplug_runtime::Plugin) -> Option<String> {
    (!plugin.exports().has(webhook)).then(|| {
        format!(
            "plugin {} does not export {} (built before it existed?)",
            plugin.name(),
            webhook.as_str()
        )
    })
}

/// What the platform's grant leaves out of `exports`: the live host
/// answers those webhooks 403 without asking the plugin. A note, not a
/// failure: the answer is the plugin's, the grant the platform's.
pub fn ungranted(grant: &Effective, exports: &[Webhook]) -> Vec<String> {
    exports
        .iter()
        .filter(|webhook| !grant.grant.webhooks.has(**webhook))
        .map(|webhook| {
            format!(
                "the grant of plugin {} does not allow its {} webhook ({} in its grant): the live host would not serve it",
                grant.plugin,
                webhook.as_str(),
                webhook.grant_key()
            )
        })
        .collect()
}

/// An answer the live host refuses, in the words of the review it fails
/// (without the `kubeplug: ` its messages start with).
fn refusal(plugin: &str, reason: impl std::fmt::Display) -> String {
    format!("plugin {plugin} failed: {reason}")
}

/// The deadline of a call made offline: the plugin's own limits decide.
const NO_WEBHOOK_DEADLINE: std::time::Duration = std::time::Duration::MAX;

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use kubeplug_core::fence::Fence;
    use kubeplug_core::manifest::{ApiResource, Manifest, Mode};
    use kubeplug_core::policy::Policy;
    use kubeplug_core::webhook::{self, ConversionCall};

    /// The cases the Python SDK's fixture runner checks its port of these
    /// decisions against: the core must give exactly the answers recorded
    /// there, or the two runners would judge one fixture differently.
    fn python_port_cases() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../plugins/sdk-python/tests/webhook_cases.json"
        );
        let text = std::fs::read_to_string(path).expect("the Python port's webhook cases");
        serde_json::from_str(&text).expect("the cases are JSON")
    }

    #[test]
    fn the_python_port_computes_patches_and_refusals_as_the_core_does() {
        let cases = python_port_cases();
        let cases = cases["patch"].as_array().expect("patch cases");
        assert!(cases.len() > 10, "cases to check");
        // The port judges a composite plugin under the default grant.
        let grant = Policy::default().grant("x").expect("the default grant");
        let manifest = Manifest::new(
            "x",
            "0.1.0",
            ApiResource::new("example.com", "v1", "X", "xs", true),
            Mode::Composite,
        );
        let fence = Fence::new(&grant, &manifest);
        for case in cases {
            let answered = fence.mutation(&case["before"], &case["after"]);
            let recorded = match case.get("refused") {
                Some(refused) => Err(refused.as_str().expect("a reason").to_string()),
                None => Ok(case["ops"].as_array().expect("ops").clone()),
            };
            assert_eq!(answered, recorded, "{}", case["name"]);
        }
    }

    #[test]
    fn the_python_port_checks_conversions_as_the_core_does() {
        let cases = python_port_cases();
        let cases = cases["conversion"].as_array().expect("conversion cases");
        assert!(cases.len() > 5, "cases to check");
        for case in cases {
            let call = ConversionCall {
                uid: "u".into(),
                desired_api_version: case["apiVersion"].as_str().expect("a version").into(),
                objects: case["objects"].as_array().expect("objects").clone(),
            };
            let converted = case["converted"].as_array().expect("converted");
            let recorded = case
                .get("refused")
                .map(|r| r.as_str().expect("a reason").to_string());
            assert_eq!(
                webhook::check_converted(&call, converted).err(),
                recorded,
                "{}",
                case["name"]
            );
        }
    }
}
