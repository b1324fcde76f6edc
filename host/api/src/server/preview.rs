//! `previews` (namespaced, `create` only): what a plugin would do to a
//! parent right now, against the live cluster, with nothing written (see
//! [`kubeplug_operator::preview`]). The body names the plugin and either a live parent
//! (`spec.parentName`) or a parent object (`spec.parent`, e.g. a live one
//! with a changed spec); the answer is the same object with `status`.
//!
//! Beyond `create` on `previews` (checked, with the caller's limits, before
//! the body is read: see [`crate::limits`]), the caller must be allowed to
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
use kubeplug_core::manifest::ApiResource;
use kubeplug_kube::informers::Object;
use kubeplug_operator::serving::Serving;
use serde_json::{Value, json};

use super::Server;
use crate::authorize::{AccessReviewError, Attributes};
use crate::group::{API_VERSION, GROUP};
use crate::plugin;
use crate::previews::{KIND, Preview, PreviewSpec};
use crate::requestheader::UserInfo;
use crate::resources::about;
use crate::responses::{Body, failure, failure_about, forbidden, json_response};

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
    /// `create` on `previews`: run the plugin named in `body` on its parent
    /// and answer with the Preview and its status (or the refusal).
    pub(super) async fn preview(
        &self,
        user: &UserInfo,
        namespace: &str,
        body: &[u8],
    ) -> Response<Body> {
        self.create_preview(user, namespace, body)
            .await
            .unwrap_or_else(|refused| refused)
    }

    /// [`Server::preview`], with every refusal an `Err`.
    async fn create_preview(
        &self,
        user: &UserInfo,
        namespace: &str,
        body: &[u8],
    ) -> Result<Response<Body>, Response<Body>> {
        let request: Value = serde_json::from_slice(body).map_err(|error| {
            failure(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("not a JSON object: {error}"),
            )
        })?;
        let name = request["metadata"]["name"].as_str();
        let invalid = |field: &str, reason: &str, message: String| {
            invalid_preview(name, field, reason, message)
        };
        if !request["kind"].is_null() && request["kind"] != KIND {
            return Err(invalid(
                "kind",
                "FieldValueNotSupported",
                format!("kind {} is not Preview", request["kind"]),
            ));
        }
        let spec = &request["spec"];
        let Some(plugin) = spec["plugin"].as_str() else {
            return Err(invalid(
                "spec.plugin",
                "FieldValueRequired",
                "spec.plugin: Required value: the plugin to preview".into(),
            ));
        };
        let Some(serving) = self.registry.serving(plugin) else {
            return Err(failure_about(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("plugins.{GROUP} \"{plugin}\" is not loaded"),
                about(GROUP, plugin::RESOURCE, Some(plugin)),
            ));
        };
        let kind = serving.parent_kind();
        if !kind.namespaced {
            return Err(invalid(
                "spec.plugin",
                "FieldValueInvalid",
                format!(
                    "{} is cluster-scoped; previews take namespaced parents",
                    kind.kind
                ),
            ));
        }
        let parent_name = spec["parentName"].as_str();
        self.may_read_parent(user, namespace, &kind, parent_name, &spec["parent"])
            .await?;
        let parent = parent(&serving, plugin, namespace, parent_name, &spec["parent"]).map_err(
            |refused| match refused {
                ParentRefused::NotFound => failure_about(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!(
                        "{} \"{}\" not found in {namespace}",
                        kind.kind,
                        parent_name.unwrap_or_default()
                    ),
                    about(&kind.group, &kind.plural, parent_name),
                ),
                ParentRefused::Invalid(field, why) => invalid(field, "FieldValueInvalid", why),
            },
        )?;
        // What the caller may not read, of what the plugin is handed: shown
        // without values.
        let withheld = self
            .unreadable(user, namespace, &serving)
            .await
            .map_err(|error| {
                failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    error.to_string(),
                )
            })?;
        // `spec.candidate: true`: run `<plugin>.next.wasm` instead of the
        // version serving, to see what an upgrade would change.
        let candidate = match spec["candidate"].as_bool() {
            Some(true) => Some(self.registry.candidate(plugin).await.map_err(|error| {
                invalid(
                    "spec.candidate",
                    "FieldValueInvalid",
                    format!("spec.candidate: {error}"),
                )
            })?),
            _ => None,
        };
        let status = match serving.run(&parent, candidate, &withheld).await {
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
        Ok(json_response(StatusCode::CREATED, &preview))
    }

    /// The caller must be able to `get` what the preview is about: the
    /// parent named, or given.
    async fn may_read_parent(
        &self,
        user: &UserInfo,
        namespace: &str,
        kind: &ApiResource,
        parent_name: Option<&str>,
        given: &Value,
    ) -> Result<(), Response<Body>> {
        let read = Attributes {
            group: kind.group.clone(),
            verb: "get".into(),
            resource: kind.plural.clone(),
            namespace: Some(namespace.into()),
            subresource: None,
            name: parent_name
                .map(String::from)
                .or_else(|| given["metadata"]["name"].as_str().map(String::from)),
        };
        match self.authorizer.allowed(user, &read).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(forbidden(user, &read)),
            Err(error) => Err(failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                error.to_string(),
            )),
        }
    }

    /// The plugin's child kinds the caller may not `get`, and related and
    /// referenced kinds it may not `list`, in `namespace` (one review per kind, cached).
    async fn unreadable(
        &self,
        user: &UserInfo,
        namespace: &str,
        serving: &Serving,
    ) -> Result<Vec<ApiResource>, AccessReviewError> {
        let (children, related) = serving.handed_kinds();
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

/// The parent to preview: the live one named (`parentName`), or the one
/// given (`parent`) with the live parent's uid of that name, or a fresh
/// one.
fn parent(
    serving: &Serving,
    plugin: &str,
    namespace: &str,
    parent_name: Option<&str>,
    given: &Value,
) -> Result<Object, ParentRefused> {
    let kind = serving.parent_kind();
    match (parent_name, given) {
        (Some(name), Value::Null) => match serving.live_parent(namespace, name) {
            Some(parent) => Ok((*parent).clone()),
            None => Err(ParentRefused::NotFound),
        },
        (None, parent @ Value::Object(_)) => {
            let mut parent = parent.clone();
            if parent["kind"] != kind.kind.as_str() {
                return Err(ParentRefused::Invalid(
                    "spec.parent.kind",
                    format!(
                        "spec.parent: kind {} is not {}, the parent kind of {plugin}",
                        parent["kind"], kind.kind
                    ),
                ));
            }
            parent["metadata"]["namespace"] = json!(namespace);
            // Children are found by the parent's uid: only the live
            // parent's own counts.
            let live_uid = parent["metadata"]["name"]
                .as_str()
                .and_then(|name| serving.live_parent(namespace, name))
                .and_then(|live| live.metadata.uid.clone());
            // A parent that does not exist yet gets a uid of its own,
            // which owns nothing (children refer to their parent's uid).
            let uid = live_uid.unwrap_or_else(fresh_uid);
            if let Some(metadata) = parent["metadata"].as_object_mut() {
                metadata.insert("uid".into(), json!(uid));
            }
            serde_json::from_value::<DynamicObject>(parent)
                .map(Object::new)
                .map_err(|error| {
                    ParentRefused::Invalid("spec.parent", format!("spec.parent: {error}"))
                })
        }
        _ => Err(ParentRefused::Invalid(
            "spec",
            "spec: give exactly one of parentName and parent".into(),
        )),
    }
}

/// Why [`parent`] has no parent to preview.
enum ParentRefused {
    /// The live parent named is not in the plugin's cache.
    NotFound,
    /// A 422 on this field, saying why.
    Invalid(&'static str, String),
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
