//! The API server's admission and conversion webhooks, answered by the
//! plugin that serves the parent kind: one review in, one review out.
//!
//! Every decision is `kubeplug_core::webhook`'s (what a review asks, what
//! the fence accepts of an answer); this module finds the plugin, checks
//! its grant, calls it on a blocking thread within a deadline below the
//! webhook's, and writes the review the API server expects. The binary
//! carries the HTTP and TLS (`kubeplug::webhooks`).
//!
//! What happens when a plugin fails (traps, runs out of time or memory,
//! answers over its quotas or outside its fence): an admission review gets
//! an HTTP 500 so that the webhook configuration's `failurePolicy`, the
//! platform's choice, decides the write; a conversion review answers
//! `Failure` with the reason, which fails the read or write that needed it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use kubeplug_core::policy::Effective;
use kubeplug_core::webhook::{
    self, AdmissionCall, ConversionCall, Operation, ReviewError, Verdict,
};
use kubeplug_runtime::Plugin;

use crate::metrics::OperatorMetrics;
use crate::registry::Registry;

/// Which webhook a review came to (its path: `/<endpoint>/<plugin>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Validate,
    Mutate,
    Convert,
}

impl Endpoint {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "validate" => Some(Endpoint::Validate),
            "mutate" => Some(Endpoint::Mutate),
            "convert" => Some(Endpoint::Convert),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Validate => "validate",
            Endpoint::Mutate => "mutate",
            Endpoint::Convert => "convert",
        }
    }
}

/// The answer to send: an HTTP status and a JSON body (a review, or a
/// Status for a request that is not served).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

/// Time kept between the plugin's deadline and the API server's, for the
/// answer to travel back.
const MARGIN: Duration = Duration::from_millis(500);
/// The shortest deadline given to a plugin, whatever the webhook's timeout.
const MIN_DEADLINE: Duration = Duration::from_millis(100);

/// The plugin's deadline for a webhook that times out after `timeout` (the
/// `timeout` the API server puts in the URL; 10 s, its default, if none).
pub fn deadline(timeout: Option<Duration>) -> Duration {
    timeout
        .unwrap_or(Duration::from_secs(10))
        .saturating_sub(MARGIN)
        .max(MIN_DEADLINE)
}

/// What serves a plugin's webhooks: the version serving now and its grant.
pub struct Target {
    pub plugin: Plugin,
    pub grant: Arc<Effective>,
}

impl Registry {
    /// The plugin named `plugin` as it serves now, for its webhooks.
    pub fn webhook_target(&self, plugin: &str) -> Option<Target> {
        let handle = self.preview_handle(plugin)?;
        Some(Target {
            plugin: handle.plugin(),
            grant: handle.grant(),
        })
    }
}

fn status(code: u16, reason: &str, message: String) -> Answer {
    Answer {
        status: code,
        body: json!({
            "apiVersion": "v1", "kind": "Status", "status": "Failure",
            "code": code, "reason": reason, "message": message,
        }),
    }
}

/// Answer one review sent to `endpoint` of `plugin`, with `body` as read.
pub async fn answer(
    registry: &Registry,
    metrics: &OperatorMetrics,
    plugin: &str,
    endpoint: Endpoint,
    body: &[u8],
    deadline: Duration,
) -> Answer {
    let started = Instant::now();
    let span = tracing::info_span!("webhook", plugin, webhook = endpoint.as_str());
    let (answer, result) =
        tracing::Instrument::instrument(review(registry, plugin, endpoint, body, deadline), span)
            .await;
    metrics.webhook_answered(plugin, endpoint.as_str(), result, started.elapsed());
    answer
}

async fn review(
    registry: &Registry,
    plugin: &str,
    endpoint: Endpoint,
    body: &[u8],
    deadline: Duration,
) -> (Answer, &'static str) {
    let review: Value = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(e) => {
            return (
                status(400, "BadRequest", format!("not a JSON review: {e}")),
                "malformed",
            );
        }
    };
    let Some(target) = registry.webhook_target(plugin) else {
        return (
            status(
                503,
                "ServiceUnavailable",
                format!("plugin {plugin} is not serving on this host"),
            ),
            "not_serving",
        );
    };
    let granted = target.grant.grant.webhooks;
    let (allowed, export) = match endpoint {
        Endpoint::Validate => (granted.validate, target.plugin.exports().validate),
        Endpoint::Mutate => (granted.mutate, target.plugin.exports().mutate),
        Endpoint::Convert => (granted.convert, target.plugin.exports().convert),
    };
    if !allowed {
        let what = match endpoint {
            Endpoint::Convert => "conversion: true",
            _ => "admission: [validate, mutate]",
        };
        return (
            status(
                403,
                "Forbidden",
                format!(
                    "plugin {plugin}'s grant does not allow its {} webhook ({what} in its grant)",
                    endpoint.as_str()
                ),
            ),
            "not_granted",
        );
    }
    if !export {
        return (
            status(
                501,
                "NotImplemented",
                format!(
                    "plugin {plugin} does not export {} (built before it existed?)",
                    endpoint.as_str()
                ),
            ),
            "not_exported",
        );
    }
    let outcome = match endpoint {
        Endpoint::Convert => match webhook::conversion_request(&review) {
            Ok(call) => Ok(convert(&target, plugin, call, deadline).await),
            Err(e) => Err(e),
        },
        Endpoint::Validate | Endpoint::Mutate => match webhook::admission_request(&review) {
            Ok(call) => admit(&target, plugin, endpoint, call, deadline).await,
            Err(e) => Err(e),
        },
    };
    match outcome {
        Ok(answered) => answered,
        Err(ReviewError::Malformed(m)) => (status(400, "BadRequest", m), "malformed"),
        Err(ReviewError::NotGranted(m)) => {
            tracing::warn!(reason = %m, "review refused: the webhook configuration sends what the grant does not cover");
            (status(403, "Forbidden", m), "not_granted")
        }
    }
}

fn now() -> String {
    format!("{:.0}", jiff::Timestamp::now())
}

/// Run a plugin call on a blocking thread (calls block on their deadline).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, kubeplug_runtime::CallError> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("the call's thread failed: {e}")),
    }
}

fn admission_review(uid: &str, response: Value) -> Answer {
    let mut response = response;
    response["uid"] = json!(uid);
    Answer {
        status: 200,
        body: json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }),
    }
}

/// A failed plugin: HTTP 500, so the webhook's `failurePolicy` decides.
fn failed(plugin: &str, reason: String) -> (Answer, &'static str) {
    tracing::warn!(%reason, "the plugin failed a review");
    (
        status(
            500,
            "InternalError",
            format!("kubeplug: plugin {plugin} failed: {reason}"),
        ),
        "failed",
    )
}

async fn admit(
    target: &Target,
    plugin: &str,
    endpoint: Endpoint,
    call: AdmissionCall,
    deadline: Duration,
) -> Result<(Answer, &'static str), ReviewError> {
    call.check_kind(plugin, &target.plugin.manifest().parent)?;
    let uid = call.uid.clone();
    // A plugin decides for the namespaces it serves only (its grant's): in
    // any other, it is not asked.
    if target.plugin.manifest().parent.namespaced
        && !target.plugin.manifest().watches_namespace(&call.namespace)
    {
        return Ok((
            admission_review(&uid, json!({"allowed": true})),
            "out_of_scope",
        ));
    }
    let plugin_handle = target.plugin.clone();
    Ok(match endpoint {
        Endpoint::Validate => {
            let verdict = blocking(move || plugin_handle.validate(&call, &now(), deadline)).await;
            let verdict = match verdict.and_then(|v| {
                webhook::check_verdict(&v).map_err(|over| format!("answered with {over}"))?;
                Ok(v)
            }) {
                Ok(verdict) => verdict,
                Err(reason) => return Ok(failed(plugin, reason)),
            };
            match verdict {
                Verdict::Allowed { warnings } => (
                    admission_review(&uid, json!({"allowed": true, "warnings": warnings})),
                    "allowed",
                ),
                Verdict::Denied { message, causes } => {
                    let causes: Vec<Value> = causes
                        .into_iter()
                        .map(|(field, message)| {
                            json!({"type": "FieldValueInvalid", "field": field, "message": message})
                        })
                        .collect();
                    (
                        admission_review(
                            &uid,
                            // 403 Forbidden, as controller-runtime denies: the
                            // API server prefixes the webhook's name, and
                            // the causes travel in the details.
                            json!({"allowed": false, "status": {
                                "status": "Failure", "code": 403, "reason": "Forbidden",
                                "message": message, "details": {"causes": causes},
                            }}),
                        ),
                        "denied",
                    )
                }
            }
        }
        Endpoint::Mutate => {
            let before = match (&call.operation, &call.object) {
                (Operation::Delete, _) | (_, None) => {
                    return Ok((
                        admission_review(&uid, json!({"allowed": true})),
                        "unchanged",
                    ));
                }
                (_, Some(object)) => object.clone(),
            };
            let mutated = blocking(move || plugin_handle.mutate(&call, &now(), deadline)).await;
            let after = match mutated {
                Ok(Some(after)) => after,
                Ok(None) => {
                    return Ok((
                        admission_review(&uid, json!({"allowed": true})),
                        "unchanged",
                    ));
                }
                Err(reason) => return Ok(failed(plugin, reason)),
            };
            let ops = match webhook::patch(&before, &after) {
                Ok(ops) if ops.is_empty() => {
                    return Ok((
                        admission_review(&uid, json!({"allowed": true})),
                        "unchanged",
                    ));
                }
                Ok(ops) => ops,
                Err(refused) => {
                    return Ok(failed(
                        plugin,
                        format!("its mutation is refused by its fence: {refused}"),
                    ));
                }
            };
            use base64::Engine as _;
            let patch = base64::engine::general_purpose::STANDARD
                .encode(serde_json::to_vec(&ops).expect("a JSON patch serializes"));
            (
                admission_review(
                    &uid,
                    json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}),
                ),
                "patched",
            )
        }
        Endpoint::Convert => unreachable!("conversions are not admissions"),
    })
}

async fn convert(
    target: &Target,
    plugin: &str,
    call: ConversionCall,
    deadline: Duration,
) -> (Answer, &'static str) {
    let review = |uid: &str, result: Result<Vec<Value>, String>| {
        let response = match result {
            Ok(objects) => json!({
                "uid": uid, "convertedObjects": objects, "result": {"status": "Success"},
            }),
            Err(message) => json!({
                "uid": uid, "convertedObjects": [],
                "result": {"status": "Failure", "message": message},
            }),
        };
        Answer {
            status: 200,
            body: json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "ConversionReview",
                "response": response,
            }),
        }
    };
    if let Err(refused) = call.check_kind(plugin, &target.plugin.manifest().parent) {
        tracing::warn!(reason = %refused, "conversion refused: the CRD sends what the grant does not cover");
        return (review(&call.uid, Err(refused.to_string())), "not_granted");
    }
    let uid = call.uid.clone();
    let (objects, version) = (call.objects.clone(), call.desired_api_version.clone());
    let plugin_handle = target.plugin.clone();
    let converted = blocking(move || plugin_handle.convert(&objects, &version, deadline))
        .await
        .and_then(|converted| {
            webhook::check_converted(&call, &converted)
                .map_err(|e| format!("its conversion is refused by its fence: {e}"))?;
            Ok(converted)
        });
    match converted {
        Ok(objects) => (review(&uid, Ok(objects)), "converted"),
        Err(reason) => {
            tracing::warn!(%reason, "the plugin failed a conversion");
            (
                review(
                    &uid,
                    Err(format!("kubeplug: plugin {plugin} failed: {reason}")),
                ),
                "failed",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugins_deadline_ends_before_the_webhooks() {
        assert_eq!(deadline(None), Duration::from_millis(9_500));
        assert_eq!(
            deadline(Some(Duration::from_secs(2))),
            Duration::from_millis(1_500)
        );
        assert_eq!(deadline(Some(Duration::from_millis(200))), MIN_DEADLINE);
    }

    #[test]
    fn endpoints_are_named_by_their_path() {
        for e in [Endpoint::Validate, Endpoint::Mutate, Endpoint::Convert] {
            assert_eq!(Endpoint::parse(e.as_str()), Some(e));
        }
        assert_eq!(Endpoint::parse("reconcile"), None);
    }
}
