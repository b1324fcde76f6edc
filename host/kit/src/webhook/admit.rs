//! One write of a plugin's parent, described by files, through the
//! plugin's `mutate` and `validate` as the live host serves them: the
//! review the API server would send ([`review`]), whether the plugin is
//! asked at all ([`unasked`]), and the host's decision on each answer
//! ([`mutate`]: the JSON patch or its refusal, [`validate`]: the verdict
//! within its quotas).

use serde_json::{Map, Value, json};

use super::NO_WEBHOOK_DEADLINE;
use crate::render::PLACEHOLDER_UID;
use kubeplug_core::fence::Fence;
use kubeplug_core::policy::Effective;
use kubeplug_core::review::{self, AdmissionAnswer};
use kubeplug_core::webhook::{AdmissionCall, Operation, Verdict};
use kubeplug_runtime::{CallError, Plugin};

/// The user of a review that names none: the SDKs' test user.
pub const TEST_USER: &str = "test";

/// The operation a fixture or a flag names (`create`, `update`, `delete`).
pub fn operation(text: &str) -> Option<Operation> {
    match text {
        "create" => Some(Operation::Create),
        "update" => Some(Operation::Update),
        "delete" => Some(Operation::Delete),
        _ => None,
    }
}

/// How fixtures and flags name `operation`.
pub fn operation_name(operation: Operation) -> &'static str {
    match operation {
        Operation::Create => "create",
        Operation::Update => "update",
        Operation::Delete => "delete",
    }
}

/// Which objects a review of `operation` carries, as the API server sends
/// them: `(object, old object)`. No old object on create; on delete only
/// the stored object, as the old one.
pub fn carries(operation: Operation) -> (bool, bool) {
    match operation {
        Operation::Create => (true, false),
        Operation::Update => (true, true),
        Operation::Delete => (false, true),
    }
}

/// Objects no review of a write could carry ([`review`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewInputError {
    /// The object or old object (named) is not a JSON object.
    #[error("the {0} is not a JSON object")]
    NotAnObject(&'static str),
    #[error("a review carries an object or an old object")]
    NoObject,
    #[error("the object has no apiVersion or kind")]
    Untyped,
}

/// The review of a write: uid the placeholder, kind, namespace and name
/// those of the object (of the old object on delete), the test user, not
/// a dry run. The caller has checked which objects the operation carries.
pub fn review(
    operation: Operation,
    object: Option<Value>,
    old_object: Option<Value>,
) -> Result<AdmissionCall, ReviewInputError> {
    for (what, given) in [("object", &object), ("old object", &old_object)] {
        if given.as_ref().is_some_and(|o| !o.is_object()) {
            return Err(ReviewInputError::NotAnObject(what));
        }
    }
    let named = object
        .as_ref()
        .or(old_object.as_ref())
        .ok_or(ReviewInputError::NoObject)?;
    let text = |pointer: &str| {
        named
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind) = (text("/apiVersion"), text("/kind"));
    if api_version.is_empty() || kind.is_empty() {
        return Err(ReviewInputError::Untyped);
    }
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group.to_string(), version.to_string()),
        None => (String::new(), api_version),
    };
    Ok(AdmissionCall {
        uid: PLACEHOLDER_UID.into(),
        group,
        version,
        kind,
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name"),
        operation,
        object,
        old_object,
        username: TEST_USER.into(),
        groups: Vec::new(),
        dry_run: false,
    })
}

/// Why the live host would not ask `plugin` about `call`, if it would not:
/// a review of another kind or version than its parent's, a parent in a
/// namespace it does not serve. (Whether it exports the webhook's function
/// is [`super::missing`].)
pub fn unasked(plugin: &Plugin, call: &AdmissionCall) -> Option<String> {
    let parent = &plugin.manifest().parent;
    if let Err(refused) = call.check_kind(plugin.name(), parent) {
        return Some(refused.to_string());
    }
    if parent.namespaced && !plugin.manifest().watches_namespace(&call.namespace) {
        return Some(format!(
            "plugin {} does not serve namespace {:?}: the live host allows the write without asking it",
            plugin.name(),
            call.namespace
        ));
    }
    None
}

/// What the live host makes of a `mutate` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    /// The JSON patch (RFC 6902) the API server would apply; empty when
    /// the object stays as it is.
    pub patch: Vec<Value>,
    /// The object as stored after the patch (the object as given when
    /// nothing changes or the answer is refused; none on delete).
    pub object: Option<Value>,
    /// Why the host refuses the answer (it fails the review instead).
    pub refused: Option<String>,
}

/// Ask `plugin`'s `mutate` about `call`, its answer held to the fence of
/// `grant` as the live host holds it. On delete, as the live host, the
/// plugin is not asked: there is no object to patch.
pub fn mutate(
    plugin: &Plugin,
    grant: &Effective,
    call: &AdmissionCall,
    now: &str,
) -> Result<Mutation, CallError> {
    let unchanged = |refused| Mutation {
        patch: Vec::new(),
        object: call.object.clone(),
        refused,
    };
    let Some(before) = review::mutation_input(call) else {
        return Ok(unchanged(None));
    };
    let after = plugin.mutate(call, now, NO_WEBHOOK_DEADLINE)?;
    let fence = Fence::new(grant, plugin.manifest());
    Ok(match review::mutated(&fence, before, after.as_ref()) {
        AdmissionAnswer::Patched { patch } => Mutation {
            patch,
            object: after,
            refused: None,
        },
        AdmissionAnswer::Failed(refusal) => unchanged(Some(refusal.failed(plugin.name()))),
        // No answer, or one that changes nothing.
        _ => Mutation {
            patch: Vec::new(),
            object: after.or_else(|| call.object.clone()),
            refused: None,
        },
    })
}

/// What the live host makes of a `validate` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    pub verdict: Verdict,
    /// Why the host refuses the verdict (over its quotas): it fails the
    /// review instead.
    pub refused: Option<String>,
}

/// Ask `plugin`'s `validate` about `call`.
pub fn validate(plugin: &Plugin, call: &AdmissionCall, now: &str) -> Result<Validation, CallError> {
    let verdict = plugin.validate(call, now, NO_WEBHOOK_DEADLINE)?;
    let refused = match review::validated(verdict.clone()) {
        AdmissionAnswer::Failed(refusal) => Some(refusal.failed(plugin.name())),
        _ => None,
    };
    Ok(Validation { verdict, refused })
}

/// A verdict as fixtures write it: `allowed: true` and its `warnings`, or
/// `denied: {message, causes: [{field, message}]}`.
pub fn verdict_fields(verdict: &Verdict) -> Map<String, Value> {
    let mut fields = Map::new();
    match verdict {
        Verdict::Allowed { warnings } => {
            fields.insert("allowed".into(), true.into());
            fields.insert("warnings".into(), json!(warnings));
        }
        Verdict::Denied { message, causes } => {
            let causes: Vec<Value> = causes
                .iter()
                .map(|(field, message)| json!({"field": field, "message": message}))
                .collect();
            fields.insert(
                "denied".into(),
                json!({"message": message, "causes": causes}),
            );
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "orders", "namespace": "shop"}})
    }

    #[test]
    fn a_review_is_named_after_its_object_or_on_delete_the_old_one() {
        let call = review(Operation::Create, Some(db()), None).unwrap();
        assert_eq!(
            (
                call.group.as_str(),
                call.version.as_str(),
                call.kind.as_str(),
                call.namespace.as_str(),
                call.name.as_str()
            ),
            ("example.com", "v1", "Database", "shop", "orders")
        );
        assert_eq!(call.uid, PLACEHOLDER_UID);
        assert_eq!(call.username, TEST_USER);
        let deleted = review(Operation::Delete, None, Some(db())).unwrap();
        assert_eq!((deleted.name.as_str(), deleted.object), ("orders", None));
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let core = review(Operation::Create, Some(pod), None).unwrap();
        assert_eq!((core.group.as_str(), core.version.as_str()), ("", "v1"));
    }

    #[test]
    fn a_review_needs_an_object_with_a_kind() {
        assert!(review(Operation::Create, None, None).is_err());
        let error = review(Operation::Create, Some(json!({"metadata": {}})), None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("apiVersion or kind"), "{error}");
        let error = review(Operation::Update, Some(db()), Some(json!([])))
            .unwrap_err()
            .to_string();
        assert!(error.contains("old object"), "{error}");
    }

    #[test]
    fn verdicts_read_as_fixtures_write_them() {
        let allowed = Verdict::Allowed {
            warnings: vec!["w".into()],
        };
        assert_eq!(
            Value::Object(verdict_fields(&allowed)),
            json!({"allowed": true, "warnings": ["w"]})
        );
        let denied = Verdict::Denied {
            message: "no".into(),
            causes: vec![("spec.a".into(), "bad".into())],
        };
        assert_eq!(
            Value::Object(verdict_fields(&denied)),
            json!({"denied": {"message": "no", "causes": [{"field": "spec.a", "message": "bad"}]}})
        );
    }
}
