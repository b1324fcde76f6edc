//! A guest's answer, copied out and turned into the contract's data: its
//! size checked against the call's limits before anything is parsed, then
//! the manifest, children, status and events parsed and bounded.

use std::time::Duration;

use serde_json::Value;

use super::bindings::types;
use super::error::GuestError;
use kubeplug_core::contract::{Desired, Event, MetadataPatch};
use kubeplug_core::manifest::{self, Manifest};

/// What each item of a list in an answer (a child, an event, a label)
/// costs against `responseBytes` beyond its text.
const ITEM_BYTES: usize = 16;
/// Longest error text of a guest kept, in bytes.
const GUEST_ERROR_MAX: usize = 16 << 10;

/// What an answer costs the host once copied out of the guest: its strings,
/// plus [`ITEM_BYTES`] per list item so that millions of empty items are
/// not free. Counted against `responseBytes` before anything is parsed.
pub(super) trait AnswerBytes {
    fn bytes(&self) -> usize;
}

fn events_bytes(events: &[types::Event]) -> usize {
    events
        .iter()
        .map(|e| ITEM_BYTES + e.reason.len() + e.message.len())
        .sum()
}

impl AnswerBytes for types::Response {
    fn bytes(&self) -> usize {
        let patch = self.parent_patch.as_ref().map_or(0, |p| {
            p.labels
                .iter()
                .chain(&p.annotations)
                .map(|(k, v)| ITEM_BYTES + k.len() + v.len())
                .sum()
        });
        self.children
            .iter()
            .map(|c| ITEM_BYTES + c.len())
            .sum::<usize>()
            + self.status.as_ref().map_or(0, String::len)
            + events_bytes(&self.events)
            + patch
    }
}

impl AnswerBytes for types::FinalizeResponse {
    fn bytes(&self) -> usize {
        events_bytes(&self.events)
    }
}

impl AnswerBytes for types::Error {
    fn bytes(&self) -> usize {
        match self {
            types::Error::InvalidConfig(m)
            | types::Error::InvalidInput(m)
            | types::Error::Failed(m) => m.len(),
        }
    }
}

pub(super) fn events(events: Vec<types::Event>) -> Vec<Event> {
    events
        .into_iter()
        .map(|e| Event {
            warning: e.warning,
            reason: e.reason,
            message: e.message,
        })
        .collect()
}

/// The guest's own error, its text clipped to [`GUEST_ERROR_MAX`].
pub(super) fn guest_error(e: types::Error) -> GuestError {
    let clip = |mut m: String| {
        m.truncate(m.floor_char_boundary(GUEST_ERROR_MAX));
        m
    };
    match e {
        types::Error::InvalidConfig(m) => GuestError::InvalidConfig(clip(m)),
        types::Error::InvalidInput(m) => GuestError::InvalidInput(clip(m)),
        types::Error::Failed(m) => GuestError::Failed(clip(m)),
    }
}

pub(super) fn api_resource(r: types::ApiResource) -> manifest::ApiResource {
    manifest::ApiResource {
        group: r.group,
        version: r.version,
        kind: r.kind,
        plural: r.plural,
        namespaced: r.namespaced,
    }
}

pub(super) fn host_manifest(m: types::PluginManifest) -> Manifest {
    Manifest {
        name: m.name,
        version: m.version,
        parent: api_resource(m.parent),
        mode: match m.mode {
            types::Mode::Composite => manifest::Mode::Composite,
            types::Mode::Decorator => manifest::Mode::Decorator,
        },
        children: m.children.into_iter().map(api_resource).collect(),
        related: m
            .related
            .into_iter()
            .map(|r| manifest::Related {
                resource: api_resource(r.resource),
                match_labels: r
                    .match_labels
                    .into_iter()
                    .map(|l| {
                        let value = match l.value {
                            types::LabelValue::Literal(s) => manifest::LabelValue::Literal(s),
                            types::LabelValue::ParentName => manifest::LabelValue::ParentName,
                        };
                        (l.key, value)
                    })
                    .collect(),
            })
            .collect(),
        namespaces: m.namespaces,
        finalizer: m.finalizer,
        resync_seconds: m.resync_seconds,
        excluded_namespaces: Vec::new(),
        metadata_only: Vec::new(),
        references: Vec::new(),
        webhooks: Default::default(),
    }
}

/// Parse one child: a JSON object that names its type and itself.
fn parse_child(index: usize, text: &str) -> Result<Value, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("child #{index} is not JSON: {e}"))?;
    let Value::Object(_) = &value else {
        return Err(format!("child #{index} is not a JSON object"));
    };
    for field in ["apiVersion", "kind"] {
        if value[field].as_str().is_none_or(str::is_empty) {
            return Err(format!("child #{index} has no {field}"));
        }
    }
    if value["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        return Err(format!("child #{index} has no metadata.name"));
    }
    Ok(value)
}

pub(super) fn parse_response(r: types::Response) -> Result<Desired, String> {
    let children = r
        .children
        .iter()
        .enumerate()
        .map(|(i, c)| parse_child(i, c))
        .collect::<Result<Vec<_>, _>>()?;
    let status = match r.status {
        None => None,
        Some(text) => {
            let v: Value =
                serde_json::from_str(&text).map_err(|e| format!("status is not JSON: {e}"))?;
            if !v.is_object() {
                return Err("status is not a JSON object".into());
            }
            Some(v)
        }
    };
    Ok(Desired {
        children,
        status,
        parent_patch: r.parent_patch.map(|p| MetadataPatch {
            labels: p.labels.into_iter().collect(),
            annotations: p.annotations.into_iter().collect(),
        }),
        requeue_after: r
            .requeue_after_seconds
            .map(|s| Duration::from_secs(s.into())),
        events: events(r.events),
    })
}
