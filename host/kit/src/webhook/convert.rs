//! Objects of a plugin's parent kind through its `convert` as the live
//! host serves it: whether the plugin is asked at all ([`unasked`]), the
//! host's check of the answer ([`convert`]), and what a round trip to
//! another version and back loses ([`round_trip`]), the property a
//! conversion must have before a new version is served or stored.

use serde::Serialize;
use serde_json::Value;

use super::NO_WEBHOOK_DEADLINE;
use crate::render::PLACEHOLDER_UID;
use kubeplug_core::review::{self, ConversionAnswer};
use kubeplug_core::webhook::{self, ConversionCall};
use kubeplug_runtime::{CallError, Plugin};

/// Why the live host would not ask `plugin` to convert `objects` to
/// `api_version`, if it would not: objects of another kind, a version of
/// another group. (Whether it exports `convert` is [`super::missing`].)
pub fn unasked(plugin: &Plugin, objects: &[Value], api_version: &str) -> Option<String> {
    call(objects, api_version)
        .check_kind(plugin.name(), &plugin.manifest().parent)
        .err()
        .map(|refused| refused.to_string())
}

fn call(objects: &[Value], api_version: &str) -> ConversionCall {
    ConversionCall {
        uid: PLACEHOLDER_UID.into(),
        desired_api_version: api_version.into(),
        objects: objects.to_vec(),
    }
}

/// What the live host makes of a `convert` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    /// The objects as the plugin answered them.
    pub objects: Vec<Value>,
    /// Why the host refuses them (it fails the conversion instead).
    pub refused: Option<String>,
}

/// Ask `plugin` to convert `objects` to `api_version`.
pub fn convert(
    plugin: &Plugin,
    objects: &[Value],
    api_version: &str,
) -> Result<Conversion, CallError> {
    let converted = plugin.convert(objects, api_version, NO_WEBHOOK_DEADLINE)?;
    let refused = match review::converted(&call(objects, api_version), converted.clone()) {
        ConversionAnswer::Failed(refusal) => Some(refusal.failed(plugin.name())),
        _ => None,
    };
    Ok(Conversion {
        objects: converted,
        refused,
    })
}

/// One object that does not survive a round trip.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Loss {
    /// Its index among the objects converted.
    pub index: usize,
    pub name: String,
    /// The versions it went through: `example.com/v1 → example.com/v2 →
    /// example.com/v1`.
    pub trip: String,
    /// Each field that came back different (a JSON Pointer), with both
    /// values (`null`: absent).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<LostField>,
    /// Why it could not be converted back (then no fields are compared).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LostField {
    pub field: String,
    pub original: Value,
    pub back: Value,
}

/// Convert each of `converted` (the answer for `originals`, in order) back
/// to its original's version and compare it with the original, field by
/// field ([`webhook::round_trip_losses`]). Empty: nothing is lost. A back
/// conversion the plugin refuses with its own error, or the host refuses,
/// is a loss of the whole object.
pub fn round_trip(
    plugin: &Plugin,
    originals: &[Value],
    converted: &[Value],
    api_version: &str,
) -> Result<Vec<Loss>, CallError> {
    let mut losses = Vec::new();
    for (index, (original, there)) in originals.iter().zip(converted).enumerate() {
        let home = original["apiVersion"].as_str().unwrap_or_default();
        let loss = |fields, failed| Loss {
            index,
            name: original["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            trip: format!("{home} → {api_version} → {home}"),
            fields,
            failed,
        };
        let back = match convert(plugin, std::slice::from_ref(there), home) {
            Ok(Conversion {
                refused: None,
                objects,
            }) => objects,
            Ok(Conversion {
                refused: Some(refused),
                ..
            }) => {
                losses.push(loss(Vec::new(), Some(refused)));
                continue;
            }
            Err(CallError::Guest { error, .. }) => {
                losses.push(loss(
                    Vec::new(),
                    Some(format!("converting back failed: {error}")),
                ));
                continue;
            }
            Err(other) => return Err(other),
        };
        let fields: Vec<LostField> = webhook::round_trip_losses(original, &back[0])
            .into_iter()
            .map(|change| LostField {
                field: change.path,
                original: change.before,
                back: change.after,
            })
            .collect();
        if !fields.is_empty() {
            losses.push(loss(fields, None));
        }
    }
    Ok(losses)
}
