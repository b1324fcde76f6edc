//! `previews` (namespaced, `create` only): what a plugin would do to a
//! parent right now, against the live cluster, with nothing written (see
//! [`kubeplug_operator::preview`]). The body names the plugin and either a live parent
//! (`spec.parentName`) or a parent object (`spec.parent`, e.g. a live one
//! with a changed spec); the answer is the same object with `status`.
//!
//! Beyond `create` on `previews` (checked, with the caller's limits, before
//! the body is read: see [`super::limits`]), the caller must be allowed to
//! `get` the parent: a preview shows what the plugin makes of it. That is
//! checked before any candidate is compiled or the plugin called. Of the
//! plugin's child kinds the caller may not `get`, and related and
//! referenced kinds it may not `list`, in the namespace, no values are shown ([`kubeplug_operator::preview`]).
//!
//! A parent object given in the body is the caller's text: its `uid` is
//! replaced by the live parent's of that name (or a fresh one, for a parent
//! that does not exist), so that it can never claim another object's
//! children.

use http::{Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ObjectMeta, StatusCause, StatusDetails, Time,
};
use kube::core::DynamicObject;
use schemars::JsonSchema;
use serde::Serialize;

use kubeplug_core::manifest::ApiResource;
use kubeplug_kube::informers::Object;
use serde_json::{Value, json};

use super::authorize::Attributes;
use super::openapi::free_form;
use super::requestheader::UserInfo;
use super::resources::about;
use super::{
    API_VERSION, Body, GROUP, Server, VERSION, failure, failure_about, forbidden, json_response,
};

pub const KIND: &str = "Preview";
pub const RESOURCE: &str = "previews";

/// A dry run: what a plugin would do to a parent right now against the live
/// cluster (children to create, update with a field-level diff, or prune;
/// the status, parent patch and events), with nothing written. Create only.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    rename = "io.kubeplug.v1alpha1.Preview",
    extend("x-kubernetes-group-version-kind" = [{"group": GROUP, "version": VERSION, "kind": KIND}])
)]
pub struct Preview {
    /// APIVersion: kubeplug.io/v1alpha1.
    pub api_version: &'static str,
    /// Kind: Preview.
    pub kind: &'static str,
    /// The preview's namespace (the parent's), its name if one was given,
    /// and when it ran (creationTimestamp).
    pub metadata: ObjectMeta,
    /// What to preview.
    pub spec: PreviewSpec,
    /// children (action create/update/unchanged/prune, kind, name, diff of
    /// path/live/desired), status (changes, desired, diff), parentPatch,
    /// events; or error, the plugin's or the fence's refusal.
    #[schemars(schema_with = "free_form")]
    pub status: Value,
}

/// PreviewSpec names the plugin to run and the parent to run it on:
/// parentName or parent.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.kubeplug.v1alpha1.PreviewSpec")]
pub struct PreviewSpec {
    /// The plugin to run.
    pub plugin: String,
    /// A live parent in this namespace, as the plugin's cache holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_name: Option<String>,
    /// Run the candidate version <plugin>.next.wasm beside the serving file
    /// instead of the serving version: what the upgrade would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<bool>,
    /// Or a parent object (e.g. a live one with a changed spec); its
    /// namespace is the preview's.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub parent: Option<Value>,
}

/// A 422 `Invalid`, naming the field at fault as kube-apiserver does
/// (`reason`: `FieldValueRequired`, `FieldValueInvalid`, ...).
fn invalid_preview(
    name: Option<&str>,
    field: &str,
    reason: &str,
    message: String,
) -> Response<Body> {
    let details = StatusDetails {
        group: Some(GROUP.into()),
        kind: Some(KIND.into()),
        name: name.map(String::from),
        causes: Some(vec![StatusCause {
            field: Some(field.into()),
            message: Some(message.clone()),
            reason: Some(reason.into()),
        }]),
        ..StatusDetails::default()
    };
    failure_about(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        message,
        details,
    )
}

impl Server {
    pub(super) async fn preview(
        &self,
        user: &UserInfo,
        namespace: &str,
        body: &[u8],
    ) -> Response<Body> {
        let request: Value = match serde_json::from_slice(body) {
            Ok(request) => request,
            Err(error) => {
                return failure(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("not a JSON object: {error}"),
                );
            }
        };
        let name = request["metadata"]["name"].as_str();
        let invalid = |field: &str, reason: &str, message: String| {
            invalid_preview(name, field, reason, message)
        };
        if !request["kind"].is_null() && request["kind"] != KIND {
            return invalid(
                "kind",
                "FieldValueNotSupported",
                format!("kind {} is not Preview", request["kind"]),
            );
        }
        let spec = &request["spec"];
        let Some(plugin) = spec["plugin"].as_str() else {
            return invalid(
                "spec.plugin",
                "FieldValueRequired",
                "spec.plugin: Required value: the plugin to preview".into(),
            );
        };
        let Some(handle) = self.registry.preview_handle(plugin) else {
            return failure_about(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("plugins.{GROUP} \"{plugin}\" is not loaded"),
                about(GROUP, super::plugin::RESOURCE, Some(plugin)),
            );
        };
        let kind = handle.parent_kind();
        if !kind.namespaced {
            return invalid(
                "spec.plugin",
                "FieldValueInvalid",
                format!(
                    "{} is cluster-scoped; previews take namespaced parents",
                    kind.kind
                ),
            );
        }
        let parent_name = spec["parentName"].as_str();
        // The caller must be able to read what the preview is about.
        let read = Attributes {
            group: kind.group.clone(),
            verb: "get".into(),
            resource: kind.plural.clone(),
            namespace: Some(namespace.into()),
            subresource: None,
            name: parent_name.map(String::from).or_else(|| {
                spec["parent"]["metadata"]["name"]
                    .as_str()
                    .map(String::from)
            }),
        };
        match self.authorizer.allowed(user, &read).await {
            Ok(true) => {}
            Ok(false) => return forbidden(user, &read),
            Err(error) => {
                return failure(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", error);
            }
        }
        let parent: Object = match (parent_name, &spec["parent"]) {
            (Some(name), Value::Null) => match handle.live_parent(namespace, name) {
                Some(parent) => (*parent).clone(),
                None => {
                    return failure_about(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        format!("{} \"{name}\" not found in {namespace}", kind.kind),
                        about(&kind.group, &kind.plural, Some(name)),
                    );
                }
            },
            (None, parent @ Value::Object(_)) => {
                let mut parent = parent.clone();
                if parent["kind"] != kind.kind.as_str() {
                    return invalid(
                        "spec.parent.kind",
                        "FieldValueInvalid",
                        format!(
                            "spec.parent: kind {} is not {}, the parent kind of {plugin}",
                            parent["kind"], kind.kind
                        ),
                    );
                }
                parent["metadata"]["namespace"] = json!(namespace);
                // Children are found by the parent's uid: only the live
                // parent's own counts.
                let live_uid = parent["metadata"]["name"]
                    .as_str()
                    .and_then(|name| handle.live_parent(namespace, name))
                    .and_then(|live| live.metadata.uid.clone());
                // A parent that does not exist yet gets a uid of its own,
                // which owns nothing (children refer to their parent's uid).
                let uid = live_uid.unwrap_or_else(fresh_uid);
                if let Some(metadata) = parent["metadata"].as_object_mut() {
                    metadata.insert("uid".into(), json!(uid));
                }
                match serde_json::from_value::<DynamicObject>(parent) {
                    Ok(parent) => Object::new(parent),
                    Err(error) => {
                        return invalid(
                            "spec.parent",
                            "FieldValueInvalid",
                            format!("spec.parent: {error}"),
                        );
                    }
                }
            }
            _ => {
                return invalid(
                    "spec",
                    "FieldValueInvalid",
                    "spec: give exactly one of parentName and parent".into(),
                );
            }
        };
        // What the caller may not read, of what the plugin is handed: shown
        // without values.
        let withheld = match self.unreadable(user, namespace, &handle).await {
            Ok(withheld) => withheld,
            Err(error) => {
                return failure(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", error);
            }
        };
        // `spec.candidate: true`: run `<plugin>.next.wasm` instead of the
        // version serving, to see what an upgrade would change.
        let candidate = match spec["candidate"].as_bool() {
            Some(true) => match self.registry.candidate(plugin).await {
                Ok(candidate) => Some(candidate),
                Err(error) => {
                    return invalid(
                        "spec.candidate",
                        "FieldValueInvalid",
                        format!("spec.candidate: {error}"),
                    );
                }
            },
            _ => None,
        };
        let status = match handle.run(&parent, candidate, &withheld).await {
            Ok(result) => result,
            Err(error) if withheld.is_empty() => json!({"error": error}),
            Err(error) => json!({
                "error": error,
                "withheld": kubeplug_operator::preview::withheld_note(&withheld, namespace),
            }),
        };
        let preview = Preview {
            api_version: API_VERSION,
            kind: KIND,
            metadata: ObjectMeta {
                name: name.map(String::from),
                namespace: Some(namespace.into()),
                creation_timestamp: Some(Time(jiff::Timestamp::now())),
                ..ObjectMeta::default()
            },
            spec: PreviewSpec {
                plugin: plugin.into(),
                parent_name: parent_name.map(String::from),
                candidate: spec["candidate"].as_bool(),
                parent: Some(spec["parent"].clone()).filter(|p| !p.is_null()),
            },
            status,
        };
        json_response(StatusCode::CREATED, &preview)
    }

    /// The plugin's child kinds the caller may not `get`, and related and
    /// referenced kinds it may not `list`, in `namespace` (one review per kind, cached).
    async fn unreadable(
        &self,
        user: &UserInfo,
        namespace: &str,
        handle: &kubeplug_operator::preview::PreviewHandle,
    ) -> Result<Vec<ApiResource>, String> {
        let (children, related) = handle.handed_kinds();
        let mut out: Vec<ApiResource> = Vec::new();
        let wanted = children
            .into_iter()
            .map(|k| ("get", k))
            .chain(related.into_iter().map(|k| ("list", k)));
        for (verb, kind) in wanted {
            if out.contains(&kind) {
                continue;
            }
            let read = Attributes {
                group: kind.group.clone(),
                verb: verb.into(),
                resource: kind.plural.clone(),
                subresource: None,
                namespace: kind.namespaced.then(|| namespace.to_string()),
                name: None,
            };
            if !self.authorizer.allowed(user, &read).await? {
                out.push(kind);
            }
        }
        Ok(out)
    }
}

/// A random version-4 UUID, as the API server gives new objects.
fn fresh_uid() -> String {
    let b: [u8; 16] = rand::random();
    let hex = hex::encode(
        [
            &b[..6],
            &[0x40 | (b[6] & 0x0f), b[7], 0x80 | (b[8] & 0x3f)],
            &b[9..],
        ]
        .concat(),
    );
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_fresh_uid_is_a_version_4_uuid_and_new_each_time() {
        let uid = super::fresh_uid();
        let parts: Vec<&str> = uid.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{uid}");
        assert_ne!(uid, super::fresh_uid());
    }
}
