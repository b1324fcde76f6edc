//! The answers every route shares: JSON bodies, and `Status` failures as
//! kube-apiserver words them (401, 403, 404, 429, ...).

use http::{Response, StatusCode};
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use hyper::body::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusDetails;
use serde::Serialize;

use crate::authorize::Attributes;
use crate::limits;
use crate::requestheader::UserInfo;
use crate::resources;

/// The body of every answer.
pub type Body = BoxBody<Bytes, std::convert::Infallible>;

pub fn json_response(code: StatusCode, body: &impl Serialize) -> Response<Body> {
    let (code, body) = match serde_json::to_vec(body) {
        Ok(body) => (code, Bytes::from(body)),
        Err(error) => {
            // Only a bug gets here: every type served serializes.
            tracing::error!(%error, "cannot serialize an API response");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Bytes::from_static(UNSERIALIZABLE),
            )
        }
    };
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(body).boxed())
        .expect("static response parts are valid")
}

/// The answer when an answer cannot be serialized.
const UNSERIALIZABLE: &[u8] = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the response could not be serialized","reason":"InternalError","code":500}"#;

pub fn failure(code: StatusCode, reason: &str, message: String) -> Response<Body> {
    json_response(code, &resources::failure(code, reason, message, None))
}

/// A failure about one object (or collection), named in `details`.
pub fn failure_about(
    code: StatusCode,
    reason: &str,
    message: String,
    details: StatusDetails,
) -> Response<Body> {
    json_response(
        code,
        &resources::failure(code, reason, message, Some(details)),
    )
}

/// 429 with `Retry-After`, as kube-apiserver's flow control answers.
pub fn too_many(refused: &limits::Refused) -> Response<Body> {
    let seconds = refused.retry_after.as_secs().max(1);
    let mut response = failure_about(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        format!("too many previews: {}", refused.why),
        StatusDetails {
            retry_after_seconds: Some(i32::try_from(seconds).unwrap_or(i32::MAX)),
            ..StatusDetails::default()
        },
    );
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
    response
}

/// The 403 kube-apiserver would give, naming the user and what they lack.
pub fn forbidden(user: &UserInfo, attributes: &Attributes) -> Response<Body> {
    let Attributes {
        group,
        verb,
        resource,
        subresource,
        namespace,
        name,
    } = attributes;
    // kube-apiserver names the resource in the details, the subresource in
    // the message.
    let details = resources::about(group, resource, name.as_deref());
    let resource = match subresource {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.clone(),
    };
    let what = if group.is_empty() {
        resource.clone()
    } else {
        format!("{resource}.{group}")
    };
    let scope = match namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".into(),
    };
    let message = format!(
        "{what}{} is forbidden: User \"{}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}",
        name.as_deref()
            .map(|n| format!(" \"{n}\""))
            .unwrap_or_default(),
        user.name,
    );
    failure_about(StatusCode::FORBIDDEN, "Forbidden", message, details)
}
