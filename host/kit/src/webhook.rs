//! A plugin's optional exports run offline as the live host serves them as
//! the API server's webhooks: `validate` and `mutate` ([`admit`]),
//! `convert` ([`convert`]). `kubeplug test` cases and `kubeplug render
//! --admission` / `--convert-to` both go through here.
//!
//! Every decision on a review or an answer is [`kubeplug_core::review`]'s,
//! as in the live host: whether the plugin is asked at all (its parent
//! kind and version, its namespaces), the mutation's fence and JSON patch,
//! the verdict's quotas, what a conversion may change, and the words of
//! every refusal. This module builds the review that files describe.
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

/// The deadline of a call made offline: the plugin's own limits decide.
const NO_WEBHOOK_DEADLINE: std::time::Duration = std::time::Duration::MAX;
