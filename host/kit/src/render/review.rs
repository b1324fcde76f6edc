//! `kubeplug render --admission` and `--convert-to`: what the live host
//! would answer the API server's webhooks about objects read from files,
//! through the same decisions as `kubeplug test` ([`crate::webhook`]).
//! The answers print in the words of fixtures' `expect`, so that one can
//! become a case.

use serde::Serialize;
use serde_json::{Map, Value};

use super::RenderError;
use crate::webhook::convert::Loss;
use crate::webhook::{self, admit, convert};
use kubeplug_core::policy::Effective;
use kubeplug_core::webhook::Operation;
use kubeplug_core::webhook::Webhook;
use kubeplug_runtime::Plugin;

/// What the live host would answer for one write: its mutating webhook,
/// then its validating webhook on the object as mutated (the API server
/// validates after every mutation).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedAdmission {
    /// `name@version` of the plugin.
    pub plugin: String,
    pub operation: String,
    /// `patch` (the JSON patch the API server would apply; empty: the
    /// object stays as written), or `refused` and why. Absent when the
    /// plugin does not export `mutate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mutate: Option<Value>,
    /// `allowed` and `warnings`, or `denied` with its message and causes;
    /// `refused` when over the host's quotas. Absent when the plugin does
    /// not export `validate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validate: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Fill in what the API server would have set on the review's objects:
/// the namespace of a namespaced kind (`default`, as `render` assumes).
fn in_namespace(object: Option<Value>, namespaced: bool) -> Option<Value> {
    object.map(|mut object| {
        if namespaced && let Some(meta) = object["metadata"].as_object_mut() {
            meta.entry("namespace").or_insert_with(|| "default".into());
        }
        object
    })
}

/// Ask `plugin` about one write of `object` (`old_object` before it), as
/// the live host would for its webhooks: `mutate`, then `validate` on the
/// mutated object. A refused mutation leaves the object as written for
/// `validate` (what `failurePolicy: Ignore` would store; the shipped
/// `Fail` refuses the write).
pub fn admission(
    plugin: &Plugin,
    grant: &Effective,
    operation: Operation,
    object: Option<Value>,
    old_object: Option<Value>,
) -> Result<RenderedAdmission, RenderError> {
    let namespaced = plugin.manifest().parent.namespaced;
    let mut call = admit::review(
        operation,
        in_namespace(object, namespaced),
        in_namespace(old_object, namespaced),
    )
    .map_err(RenderError::Review)?;
    if let Some(why) = admit::unasked(plugin, &call) {
        return Err(RenderError::NotAsked(why));
    }
    let exports: Vec<Webhook> = [Webhook::Mutate, Webhook::Validate]
        .into_iter()
        .filter(|export| webhook::missing(*export, plugin).is_none())
        .collect();
    if exports.is_empty() {
        return Err(RenderError::NotAsked(format!(
            "plugin {} exports neither validate nor mutate (built before they existed?)",
            plugin.name()
        )));
    }
    let mut notes = webhook::ungranted(grant, &exports);
    let now = format!("{:.0}", jiff::Timestamp::now());
    let mut mutate = None;
    if exports.contains(&Webhook::Mutate) {
        let mutation = admit::mutate(plugin, grant, &call, &now)?;
        let mut answer = Map::new();
        match mutation.refused {
            Some(refused) => {
                answer.insert("refused".into(), refused.into());
                notes.push("the mutation is refused, so validate saw the object as written".into());
            }
            None => {
                answer.insert("patch".into(), Value::Array(mutation.patch));
                call.object = mutation.object;
            }
        }
        mutate = Some(Value::Object(answer));
    }
    let mut validate = None;
    if exports.contains(&Webhook::Validate) {
        let validation = admit::validate(plugin, &call, &now)?;
        let mut answer = admit::verdict_fields(&validation.verdict);
        if let Some(refused) = validation.refused {
            answer.insert("refused".into(), refused.into());
        }
        validate = Some(Value::Object(answer));
    }
    let manifest = plugin.manifest();
    Ok(RenderedAdmission {
        plugin: format!("{}@{}", manifest.name, manifest.version),
        operation: admit::operation_name(operation).into(),
        mutate,
        validate,
        notes,
    })
}

/// What the live host would answer a conversion, and what converting the
/// answer back would lose.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedConversion {
    /// `name@version` of the plugin.
    pub plugin: String,
    /// The version converted to.
    pub api_version: String,
    /// The converted objects, in the order given.
    pub objects: Vec<Value>,
    /// Each object that does not come back the same when converted back to
    /// its own version, field by field. Empty: nothing is lost.
    pub round_trip_losses: Vec<Loss>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Convert `objects` to `api_version` through `plugin` as the live host
/// would (an answer its fence refuses is an error), then each back to its
/// own version.
pub fn conversion(
    plugin: &Plugin,
    grant: &Effective,
    objects: Vec<Value>,
    api_version: &str,
) -> Result<RenderedConversion, RenderError> {
    if let Some(why) = convert::unasked(plugin, &objects, api_version)
        .or_else(|| webhook::missing(Webhook::Convert, plugin))
    {
        return Err(RenderError::NotAsked(why));
    }
    let converted = convert::convert(plugin, &objects, api_version)?;
    if let Some(refused) = converted.refused {
        return Err(RenderError::Refused(refused));
    }
    let round_trip_losses = convert::round_trip(plugin, &objects, &converted.objects, api_version)?;
    let manifest = plugin.manifest();
    Ok(RenderedConversion {
        plugin: format!("{}@{}", manifest.name, manifest.version),
        api_version: api_version.into(),
        objects: converted.objects,
        round_trip_losses,
        notes: webhook::ungranted(grant, &[Webhook::Convert]),
    })
}
