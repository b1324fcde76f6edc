//! The API server's admission and conversion webhooks for a plugin's parent
//! kind: what a review asks ([`AdmissionCall`], [`ConversionCall`]), and what
//! the host accepts of a plugin's answer ([`patch`], [`check_verdict`],
//! [`check_converted`]).
//!
//! The fence is the same as for reconciles: the platform grants a plugin
//! webhooks for its own parent kind only ([`crate::policy::Grant::webhooks`]);
//! a review of any other kind is refused before the plugin is called, and an
//! answer that would write outside the object's own `spec`, labels and
//! annotations, or claim the host's `kubeplug.io/` keys, is refused whole.
//! The operator calls the plugin between these steps and the binary serves
//! the HTTP; every decision is here.

use serde_json::Value;

use crate::manifest::ApiResource;
pub use crate::manifest::{Webhook, Webhooks};
use crate::plan::diff::{self, Fields};

/// Most warnings one validation may return (the API server shows each).
pub const MAX_WARNINGS: usize = 16;
/// Longest warning, denial message or cause kept, in bytes.
pub const MAX_TEXT: usize = 1024;
/// Most field causes of one denial.
pub const MAX_CAUSES: usize = 32;
/// The host's own label and annotation domain, which no answer may touch.
pub(crate) const HOST_DOMAIN: &str = "kubeplug.io";

// Beside the bounds it reads by, not with the type (`crate::manifest`).
impl Webhook {
    /// The largest review body of this webhook the host reads.
    pub fn max_body(self) -> usize {
        match self {
            Webhook::Convert => MAX_CONVERSION_BODY,
            Webhook::Validate | Webhook::Mutate => MAX_ADMISSION_BODY,
        }
    }
}

/// Largest AdmissionReview read: an object and its old version, each at
/// most the API server's 3 MiB request body, and the review around them.
pub const MAX_ADMISSION_BODY: usize = 7 << 20;
/// Largest ConversionReview read: a list the API server converts is sent
/// whole, each object at most etcd's 1.5 MiB.
pub const MAX_CONVERSION_BODY: usize = 32 << 20;

/// What one parsed JSON value holds, on average, beyond its text: the
/// `Value` itself and its share of a map entry, a key and allocator
/// overhead.
const VALUE_BYTES: usize = std::mem::size_of::<Value>() + 48;

/// The memory answering a review of `body_len` bytes holds at least,
/// reserved before its body is read: the body, its parsed objects, and the
/// plugin's copy of them.
pub fn review_floor(body_len: usize) -> usize {
    body_len.saturating_mul(3)
}

/// The memory answering the review `body` holds at most, estimated before
/// it is parsed: [`review_floor`] for its text, and every JSON value in it
/// twice (the review parsed, and the plugin's answer parsed). Text is cheap
/// to send and dear to hold: `[0,0,...]` is 2 bytes a value on the wire and
/// ~100 once parsed, so a review is weighed by its values, not its length.
pub fn review_cost(body: &[u8]) -> usize {
    let (mut values, mut in_string, mut escaped) = (1usize, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' | b'[' | b'{' => values += 1,
            _ => {}
        }
    }
    review_floor(body.len()).saturating_add(values.saturating_mul(2 * VALUE_BYTES))
}

/// What an admission review gets when the plugin fails it: a grant's
/// `failurePolicy`. (The webhook configuration's own `failurePolicy`
/// covers the host being unreachable; this one, the plugin failing.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
pub enum FailurePolicy {
    /// Deny the write with the reason.
    #[default]
    Fail,
    /// Allow it, with the reason as a warning.
    Ignore,
}

/// What a write does, as a review names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

/// One AdmissionReview (`admission.k8s.io/v1`) request, read.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionCall {
    pub uid: String,
    /// `group`, `version`, `kind` of the object, as the webhook's rules
    /// matched it (the plugin's own version when the rules name it).
    pub group: String,
    pub version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub operation: Operation,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    pub username: String,
    pub groups: Vec<String>,
    pub dry_run: bool,
}

/// Why a review is not served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// Not a review this host reads (HTTP 400).
    #[error("not an {0}")]
    Malformed(String),
    /// A review for a kind or an operation the plugin's grant does not
    /// cover: the platform's webhook configuration sends what it should not.
    #[error("{0}")]
    NotGranted(String),
}

fn text(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Read an AdmissionReview's request. `CONNECT` (a Pod's exec, never a
/// plugin's parent) is not one the host serves.
pub fn admission_request(mut review: Value) -> Result<AdmissionCall, ReviewError> {
    let malformed = |why: &str| ReviewError::Malformed(format!("AdmissionReview v1: {why}"));
    if review["apiVersion"] != "admission.k8s.io/v1" || review["kind"] != "AdmissionReview" {
        return Err(malformed(
            "apiVersion and kind must be admission.k8s.io/v1 AdmissionReview",
        ));
    }
    // Taken, not copied: a review may hold two objects of up to 3 MiB.
    let mut request = review["request"].take();
    let uid = text(&request, "/uid");
    if uid.is_empty() {
        return Err(malformed("request.uid is missing"));
    }
    let operation = match request["operation"].as_str() {
        Some("CREATE") => Operation::Create,
        Some("UPDATE") => Operation::Update,
        Some("DELETE") => Operation::Delete,
        other => {
            return Err(malformed(&format!(
                "request.operation {} is not CREATE, UPDATE or DELETE",
                other.unwrap_or("(missing)")
            )));
        }
    };
    let mut object = |key: &str| Some(request[key].take()).filter(Value::is_object);
    let (object, old_object) = (object("object"), object("oldObject"));
    let request = &request;
    Ok(AdmissionCall {
        uid,
        group: text(request, "/kind/group"),
        version: text(request, "/kind/version"),
        kind: text(request, "/kind/kind"),
        namespace: text(request, "/namespace"),
        name: text(request, "/name"),
        operation,
        object,
        old_object,
        username: text(request, "/userInfo/username"),
        groups: request["userInfo"]["groups"]
            .as_array()
            .map(|g| {
                g.iter()
                    .filter_map(|g| g.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        dry_run: request["dryRun"].as_bool().unwrap_or(false),
    })
}

impl AdmissionCall {
    /// Is this a review of `parent` (the plugin's parent kind at the
    /// plugin's version)? A review at another version means the webhook's
    /// rules name a version the plugin does not read.
    pub fn check_kind(&self, plugin: &str, parent: &ApiResource) -> Result<(), ReviewError> {
        if self.group != parent.group || self.kind != parent.kind {
            return Err(ReviewError::NotGranted(format!(
                "plugin {plugin} serves admission for {} only, not {}",
                kind_name(&parent.group, &parent.kind),
                kind_name(&self.group, &self.kind)
            )));
        }
        if self.version != parent.version {
            return Err(ReviewError::NotGranted(format!(
                "plugin {plugin} reads {} at {}; the webhook's rules must name that version (and matchPolicy Equivalent), not {}",
                parent.kind,
                parent.api_version(),
                self.version
            )));
        }
        Ok(())
    }
}

fn kind_name(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

/// A validation's answer, as the host passes it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed {
        warnings: Vec<String>,
    },
    Denied {
        message: String,
        /// `(field, message)`.
        causes: Vec<(String, String)>,
    },
}

/// A verdict over its quotas.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerdictError {
    #[error("{0} warnings (at most {MAX_WARNINGS})")]
    Warnings(usize),
    #[error("{0} causes (at most {MAX_CAUSES})")]
    Causes(usize),
    /// A warning or denial text (`what`) of `bytes` bytes.
    #[error("a {what} of {bytes} bytes (at most {MAX_TEXT})")]
    TooLong { what: &'static str, bytes: usize },
}

/// Refuse a verdict over its quotas: more warnings or causes, or longer
/// texts, than the API server should be asked to carry for one write.
pub fn check_verdict(verdict: &Verdict) -> Result<(), VerdictError> {
    let long = |what: &'static str, t: &str| {
        (t.len() > MAX_TEXT).then_some(VerdictError::TooLong {
            what,
            bytes: t.len(),
        })
    };
    match verdict {
        Verdict::Allowed { warnings } => {
            if warnings.len() > MAX_WARNINGS {
                return Err(VerdictError::Warnings(warnings.len()));
            }
            if let Some(too_long) = warnings.iter().find_map(|w| long("warning", w)) {
                return Err(too_long);
            }
        }
        Verdict::Denied { message, causes } => {
            if causes.len() > MAX_CAUSES {
                return Err(VerdictError::Causes(causes.len()));
            }
            if let Some(too_long) = std::iter::once(message)
                .chain(causes.iter().flat_map(|(f, m)| [f, m]))
                .find_map(|t| long("denial text", t))
            {
                return Err(too_long);
            }
        }
    }
    Ok(())
}

/// A key in the host's own domain (`kubeplug.io/...`, `*.kubeplug.io/...`),
/// which no answer may set or change.
pub(crate) fn host_key(key: &str) -> bool {
    key.split_once('/').is_some_and(|(prefix, _)| {
        prefix == HOST_DOMAIN || prefix.ends_with(&format!(".{HOST_DOMAIN}"))
    })
}

/// The JSON Patch (RFC 6902) that turns `before` into the plugin's
/// `after`, or why it is refused: one change that `may_change` refuses
/// (the plugin's fence decides: [`crate::fence::Fence::mutation`]) refuses
/// the whole answer. Lists are replaced whole.
pub fn patch<E>(
    before: &Value,
    after: &Value,
    may_change: impl Fn(&str) -> Result<(), E>,
) -> Result<Vec<Value>, E> {
    let mut ops = Vec::new();
    for change in diff::diff(before, after, Fields::Both) {
        may_change(&change.path)?;
        let op = match (before.pointer(&change.path), after.pointer(&change.path)) {
            (None, Some(value)) => {
                serde_json::json!({"op": "add", "path": change.path, "value": value})
            }
            (Some(_), None) => serde_json::json!({"op": "remove", "path": change.path}),
            (Some(_), Some(value)) => {
                serde_json::json!({"op": "replace", "path": change.path, "value": value})
            }
            (None, None) => continue,
        };
        ops.push(op);
    }
    Ok(ops)
}

/// One ConversionReview (`apiextensions.k8s.io/v1`) request, read.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversionCall {
    pub uid: String,
    /// The version to convert to, e.g. `example.com/v2`.
    pub desired_api_version: String,
    pub objects: Vec<Value>,
}

/// Read a ConversionReview's request.
pub fn conversion_request(mut review: Value) -> Result<ConversionCall, ReviewError> {
    let malformed = |why: &str| ReviewError::Malformed(format!("ConversionReview v1: {why}"));
    if review["apiVersion"] != "apiextensions.k8s.io/v1" || review["kind"] != "ConversionReview" {
        return Err(malformed(
            "apiVersion and kind must be apiextensions.k8s.io/v1 ConversionReview",
        ));
    }
    let request = &mut review["request"];
    let uid = text(request, "/uid");
    let desired = text(request, "/desiredAPIVersion");
    if uid.is_empty() || desired.is_empty() {
        return Err(malformed(
            "request.uid and request.desiredAPIVersion are required",
        ));
    }
    // Taken, not copied: a list's conversion is sent whole.
    let objects = match request["objects"].take() {
        Value::Array(objects) => objects,
        _ => return Err(malformed("request.objects must be a list")),
    };
    Ok(ConversionCall {
        uid,
        desired_api_version: desired,
        objects,
    })
}

impl ConversionCall {
    /// Is every object of the plugin's parent kind, and the target one of
    /// its group? The CRD names one conversion webhook, so anything else is
    /// a configuration sending another kind here.
    pub fn check_kind(&self, plugin: &str, parent: &ApiResource) -> Result<(), ReviewError> {
        let group_of = |api_version: &str| {
            api_version
                .split_once('/')
                .map(|(g, _)| g.to_string())
                .unwrap_or_default()
        };
        let refuse = |what: String| {
            ReviewError::NotGranted(format!(
                "plugin {plugin} converts {} only, not {what}",
                kind_name(&parent.group, &parent.kind)
            ))
        };
        if group_of(&self.desired_api_version) != parent.group {
            return Err(refuse(self.desired_api_version.clone()));
        }
        for object in &self.objects {
            let (api_version, kind) = (text(object, "/apiVersion"), text(object, "/kind"));
            if group_of(&api_version) != parent.group || kind != parent.kind {
                return Err(refuse(format!("{kind} {api_version}")));
            }
        }
        Ok(())
    }
}

/// Metadata a conversion may not change: all but labels and annotations
/// (as the API server itself requires), and of those the host's keys.
fn fixed_metadata(object: &Value) -> Value {
    let mut meta = object["metadata"].clone();
    if let Some(meta) = meta.as_object_mut() {
        for map in ["labels", "annotations"] {
            match meta.get_mut(map).and_then(Value::as_object_mut) {
                Some(entries) => {
                    entries.retain(|k, _| host_key(k));
                    if entries.is_empty() {
                        meta.remove(map);
                    }
                }
                None => {
                    meta.remove(map);
                }
            }
        }
    }
    meta
}

/// A conversion's answer that is not the same objects at the desired
/// version. `at` names the object: `object <index> (<name>)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertedError {
    #[error("{answered} objects answered for {asked} asked")]
    Count { answered: usize, asked: usize },
    /// Answered at `api_version` (as JSON), not the desired one.
    #[error("{at} is answered at {api_version}, not {desired}")]
    ApiVersion {
        at: String,
        api_version: Value,
        desired: String,
    },
    #[error("{at} changed kind to {kind}")]
    Kind { at: String, kind: Value },
    /// Changed fixed metadata at `field` (dotted, with its leading dot).
    #[error(
        "{at} changed metadata{field} (only labels and annotations outside {HOST_DOMAIN}/ may change)"
    )]
    Metadata { at: String, field: String },
}

/// Refuse a conversion's answer that is not the same objects at the
/// desired version: a different count, kind, or fixed metadata (name,
/// namespace, uid, resourceVersion, owners, the host's keys...).
pub fn check_converted(call: &ConversionCall, converted: &[Value]) -> Result<(), ConvertedError> {
    if converted.len() != call.objects.len() {
        return Err(ConvertedError::Count {
            answered: converted.len(),
            asked: call.objects.len(),
        });
    }
    for (i, (before, after)) in call.objects.iter().zip(converted).enumerate() {
        let name = text(before, "/metadata/name");
        let at = || format!("object {i} ({name})");
        if after["apiVersion"].as_str() != Some(&call.desired_api_version) {
            return Err(ConvertedError::ApiVersion {
                at: at(),
                api_version: after["apiVersion"].clone(),
                desired: call.desired_api_version.clone(),
            });
        }
        if after["kind"] != before["kind"] {
            return Err(ConvertedError::Kind {
                at: at(),
                kind: after["kind"].clone(),
            });
        }
        let (was, is) = (fixed_metadata(before), fixed_metadata(after));
        if let Some(change) = diff::diff(&was, &is, Fields::Both).first() {
            return Err(ConvertedError::Metadata {
                at: at(),
                field: change.path.replace('/', "."),
            });
        }
    }
    Ok(())
}

/// What an object loses in a round trip through a conversion (to another
/// version and back): every field where `back` differs from `original`,
/// both values shown. A conversion that may serve a new version, or move
/// storage to it, loses nothing from any stored object.
pub fn round_trip_losses(original: &Value, back: &Value) -> Vec<diff::Change> {
    diff::diff(original, back, Fields::Both)
}

#[cfg(test)]
mod tests;
