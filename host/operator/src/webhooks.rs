//! The API server's admission and conversion webhooks, answered by the
//! plugin that serves the parent kind: one review in, one review out.
//!
//! Every decision is `kubeplug_core`'s: `webhook` reads what a review asks,
//! `review` decides what the answer is (whether the plugin is asked, what
//! its answer comes to within its `fence`, every refusal's words), as it
//! does for the offline kit; this module finds the plugin, checks its
//! grant, calls it on a blocking thread within a deadline below the
//! webhook's, and writes the review the API server expects with kube's
//! typed `AdmissionResponse` and `ConversionResponse`. The binary carries the HTTP and TLS
//! (`kubeplug::webhooks`).
//!
//! What happens when a plugin fails (traps, runs out of time or memory,
//! answers over its quotas or outside its fence): an admission review is
//! answered by the grant's `failurePolicy` (`Fail`, the default, denies the
//! write with the reason; `Ignore` allows it with the reason as a warning);
//! a conversion review answers `Failure` with the reason, which fails the
//! read or write that needed it. A review the host cannot serve at all (the
//! plugin not serving, a webhook not granted or not exported) gets an HTTP
//! error, so that the webhook configuration's own `failurePolicy` decides.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use kube::core::Status;
use kube::core::admission::AdmissionResponse;
use kube::core::conversion::ConversionResponse;
use kube::core::response::{StatusCause, StatusDetails};

use kubeplug_core::fence::Fence;
use kubeplug_core::policy::Effective;
use kubeplug_core::review::{self, AdmissionAnswer, ConversionAnswer, Refusal};
use kubeplug_core::webhook::{self, AdmissionCall, ConversionCall, ReviewError, Webhook};
use kubeplug_runtime::Plugin;

mod limits;

use crate::registry::Registry;
use limits::{Entry, busy, enter, too_large};
pub use limits::{HOST_REVIEWS, Hold, PLUGIN_REVIEWS, ReviewLimits, Reviews};

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

/// The longest webhook timeout the API server allows (`timeoutSeconds`).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// The plugin's deadline for a webhook that times out after `timeout` (the
/// `timeout` the API server puts in the URL; 10 s, its default, if none;
/// at most [`MAX_TIMEOUT`], since whoever reaches the port writes the URL).
pub fn deadline(timeout: Option<Duration>) -> Duration {
    timeout
        .unwrap_or(Duration::from_secs(10))
        .min(MAX_TIMEOUT)
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
        let serving = self.serving(plugin)?;
        Some(Target {
            plugin: serving.plugin(),
            grant: serving.grant(),
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

/// The answer to send, serialized, and what it still holds of the review
/// bounds: kept with the response body until the body has been handed over,
/// so an answer a client is slow to take still counts.
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub hold: Option<Hold>,
}

/// Answer one review sent to `webhook` of `plugin` (the path
/// `/<webhook>/<plugin>`). What serves it, and whether its grant allows the
/// webhook, is decided from the path before `read` is called for the body
/// (with the most bytes to read); then the review takes its place within
/// the limits, waiting inside `deadline` counted from `arrived` (when the
/// review reached the host: its connection's accept for the first review
/// on it, so a slow handshake counts too), which the plugin's call gets the
/// rest of.
///
/// The review runs as a task of its own: a client that hangs up does not
/// give back the review's place and memory while its call still runs and
/// holds the parsed review; the task does, when it ends (by the deadline).
pub async fn answer<B, R>(
    reviews: &Arc<Reviews>,
    plugin: &str,
    webhook: Webhook,
    declared: Option<u64>,
    read: R,
    (started, deadline): (Instant, Duration),
) -> Reply
where
    B: AsRef<[u8]> + Send + 'static,
    R: Future<Output = Result<B, String>> + Send + 'static,
{
    let span = tracing::info_span!("webhook", plugin, webhook = webhook.as_str());
    let (reviews, plugin) = (reviews.clone(), plugin.to_string());
    let task = tokio::spawn(tracing::Instrument::instrument(
        async move {
            let (answer, result, entry) = match review(
                &reviews, &plugin, webhook, declared, read, started, deadline,
            )
            .await
            {
                Ok(answered) => answered,
                Err((answer, result)) => (answer, result, None),
            };
            let body = serde_json::to_vec(&answer.body).unwrap_or_default();
            // A name the host does not serve is counted under one label: the
            // path is the sender's, and metrics must not grow with what
            // strangers send.
            let label = if result == "not_serving" {
                ""
            } else {
                plugin.as_str()
            };
            reviews
                .metrics
                .webhook_answered(label, webhook.as_str(), result, started.elapsed());
            Reply {
                status: answer.status,
                body,
                hold: entry.map(|entry| Hold { _entry: entry }),
            }
        },
        span,
    ));
    task.await.unwrap_or_else(|e| Reply {
        status: 500,
        body: serde_json::to_vec(
            &status(500, "InternalError", format!("the review failed: {e}")).body,
        )
        .unwrap_or_default(),
        hold: None,
    })
}

type Answered = (Answer, &'static str, Option<Entry>);

async fn review<B, R>(
    reviews: &Reviews,
    plugin: &str,
    webhook: Webhook,
    declared: Option<u64>,
    read: R,
    started: Instant,
    deadline: Duration,
) -> Result<Answered, (Answer, &'static str)>
where
    B: AsRef<[u8]>,
    R: Future<Output = Result<B, String>>,
{
    let limits = &reviews.limits;
    let target = serving(&reviews.registry, plugin, webhook)?;
    let declared = declared.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if declared.is_some_and(|n| n > webhook.max_body()) {
        return Err(too_long(webhook));
    }
    let until = started + deadline;
    let mut entry = enter(limits, plugin, webhook, declared, until).await?;
    let body = match tokio::time::timeout_at(until.into(), read).await {
        Ok(Ok(body)) => body,
        Ok(Err(e)) if e.contains("length limit") => return Err(too_long(webhook)),
        Ok(Err(e)) => {
            return Err((
                status(
                    400,
                    "BadRequest",
                    format!("the review could not be read: {e}"),
                ),
                "malformed",
            ));
        }
        Err(_) => {
            return Err((
                status(
                    408,
                    "Timeout",
                    format!(
                        "the review's body was still arriving after {:.1?}",
                        started.elapsed()
                    ),
                ),
                "busy",
            ));
        }
    };
    let cost = webhook::review_cost(body.as_ref());
    if cost > limits.plugin_share() {
        return Err(too_large(plugin, cost, limits.plugin_share()));
    }
    if entry.memory.cover(cost).is_err() {
        return Err(busy(plugin, "memory", started.elapsed()));
    }
    let review: Value = serde_json::from_slice(body.as_ref()).map_err(|e| {
        (
            status(400, "BadRequest", format!("not a JSON review: {e}")),
            "malformed",
        )
    })?;
    drop(body);
    let left = until.saturating_duration_since(Instant::now());
    if left < MIN_DEADLINE {
        return Err(busy(plugin, "time", started.elapsed()));
    }
    let (answer, result) = review_of(&target, plugin, webhook, review, until).await;
    Ok((answer, result, Some(entry)))
}

fn too_long(webhook: Webhook) -> (Answer, &'static str) {
    (
        status(
            413,
            "RequestEntityTooLarge",
            format!(
                "a {} review is at most {} MiB",
                webhook.as_str(),
                webhook.max_body() >> 20
            ),
        ),
        "too_large",
    )
}

/// What serves `webhook` of `plugin`, decided from the path alone: the
/// plugin serving now, its grant allowing the webhook, its build exporting
/// it.
fn serving(
    registry: &Registry,
    plugin: &str,
    webhook: Webhook,
) -> Result<Target, (Answer, &'static str)> {
    let Some(target) = registry.webhook_target(plugin) else {
        return Err((
            status(
                503,
                "ServiceUnavailable",
                format!("plugin {plugin} is not serving on this host"),
            ),
            "not_serving",
        ));
    };
    let granted = target.grant.grant.webhooks;
    if !granted.has(webhook) {
        return Err((
            status(
                403,
                "Forbidden",
                format!(
                    "plugin {plugin}'s grant does not allow its {} webhook ({} in its grant)",
                    webhook.as_str(),
                    webhook.grant_key()
                ),
            ),
            "not_granted",
        ));
    }
    if !target.plugin.exports().has(webhook) {
        return Err((
            status(
                501,
                "NotImplemented",
                format!(
                    "plugin {plugin} does not export {} (built before it existed?)",
                    webhook.as_str()
                ),
            ),
            "not_exported",
        ));
    }
    Ok(target)
}

async fn review_of(
    target: &Target,
    plugin: &str,
    webhook: Webhook,
    review: Value,
    until: Instant,
) -> (Answer, &'static str) {
    let outcome = match webhook {
        Webhook::Convert => match webhook::conversion_request(review) {
            Ok(call) => Ok(convert(target, plugin, call, until).await),
            Err(e) => Err(e),
        },
        Webhook::Validate | Webhook::Mutate => match webhook::admission_request(review) {
            Ok(call) => admit(target, plugin, webhook, call, until).await,
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

/// Run a plugin call on a blocking thread (calls block on their deadline),
/// with what is left until `until` once it has its thread: a wait for a
/// thread counts against the review's time, and a call left with less than
/// [`MIN_DEADLINE`] does not start (the host was busy, not the plugin slow).
async fn blocking<T: Send + 'static>(
    until: Instant,
    f: impl FnOnce(Duration) -> Result<T, kubeplug_runtime::CallError> + Send + 'static,
) -> Result<T, String> {
    let call = move || {
        let left = until.saturating_duration_since(Instant::now());
        if left < MIN_DEADLINE {
            return Err(format!(
                "the host was busy: no thread for the call before {} ms of the review's time were left",
                MIN_DEADLINE.as_millis()
            ));
        }
        f(left).map_err(|e| e.to_string())
    };
    match tokio::task::spawn_blocking(call).await {
        Ok(answer) => answer,
        Err(e) => Err(format!("the call's thread failed: {e}")),
    }
}

/// kube's admission response to the review `uid`, saying what `answer`
/// says. kube builds a response from its own typed request; the host reads
/// reviews itself ([`webhook::admission_request`]), so it starts from kube's
/// response to no request and gives it the review's uid.
fn admission_review(uid: &str, answer: review::AdmissionResponse) -> Answer {
    let mut response = AdmissionResponse::invalid("");
    response.uid = uid.to_string();
    response.allowed = answer.allowed;
    response.result = match answer.status {
        None => Status::default(),
        Some(denial) => {
            let status = Status::failure(&denial.message, denial.reason).with_code(denial.code);
            match denial.causes.is_empty() {
                true => status,
                false => status.with_details(StatusDetails {
                    name: String::new(),
                    group: String::new(),
                    kind: String::new(),
                    uid: String::new(),
                    causes: denial
                        .causes
                        .into_iter()
                        .map(|(field, message)| StatusCause {
                            reason: review::CAUSE_TYPE.into(),
                            message,
                            field,
                        })
                        .collect(),
                    retry_after_seconds: 0,
                }),
            }
        }
    };
    response.warnings = (!answer.warnings.is_empty()).then_some(answer.warnings);
    if let Some(ops) = answer.patch {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))
            .expect("kubeplug_core::webhook::patch writes RFC 6902 operations");
        response = response.with_patch(patch).expect("a JSON patch serializes");
    }
    Answer {
        status: 200,
        body: serde_json::to_value(response.into_review()).expect("a review serializes"),
    }
}

async fn admit(
    target: &Target,
    plugin: &str,
    webhook: Webhook,
    call: AdmissionCall,
    until: Instant,
) -> Result<(Answer, &'static str), ReviewError> {
    let manifest = target.plugin.manifest();
    let fence = Fence::new(&target.grant, manifest);
    // A plugin decides for the namespaces it serves only (its grant's): in
    // any other, it is not asked.
    // Shared with the call's thread, not copied: a review may hold two
    // objects of up to 3 MiB.
    let call = Arc::new(call);
    let answer = match review::admission_scope(&call, plugin, &fence)? {
        Some(unasked) => unasked,
        None => ask(target, webhook, &fence, &call, until).await,
    };
    if let AdmissionAnswer::Failed(refusal) = &answer {
        tracing::warn!(reason = %refusal, "the plugin failed a review");
    }
    let response = answer.response(plugin, target.grant.grant.failure_policy);
    Ok((admission_review(&call.uid, response), answer.result()))
}

/// Ask the plugin's `validate` or `mutate` about `call`, and what its answer
/// comes to.
async fn ask(
    target: &Target,
    webhook: Webhook,
    fence: &Fence<'_>,
    call: &Arc<AdmissionCall>,
    until: Instant,
) -> AdmissionAnswer {
    let (plugin, asked) = (target.plugin.clone(), call.clone());
    match webhook {
        Webhook::Validate => {
            match blocking(until, move |left| plugin.validate(&asked, &now(), left)).await {
                Ok(verdict) => review::validated(verdict),
                Err(reason) => AdmissionAnswer::Failed(Refusal::Call(reason)),
            }
        }
        Webhook::Mutate => {
            let Some(before) = review::mutation_input(call) else {
                return AdmissionAnswer::Unchanged;
            };
            match blocking(until, move |left| plugin.mutate(&asked, &now(), left)).await {
                Ok(after) => review::mutated(fence, before, after.as_ref()),
                Err(reason) => AdmissionAnswer::Failed(Refusal::Call(reason)),
            }
        }
        Webhook::Convert => unreachable!("conversions are not admissions"),
    }
}

async fn convert(
    target: &Target,
    plugin: &str,
    call: ConversionCall,
    until: Instant,
) -> (Answer, &'static str) {
    let fence = Fence::new(&target.grant, target.plugin.manifest());
    let uid = call.uid.clone();
    let answer = match review::conversion_scope(&call, plugin, &fence) {
        Some(unasked) => {
            match &unasked {
                ConversionAnswer::NotGranted(refused) => tracing::warn!(
                    reason = %refused,
                    "conversion refused: the CRD sends what the grant does not cover"
                ),
                ConversionAnswer::OutOfScope(refused) => tracing::warn!(
                    reason = %refused,
                    "conversion refused: the review holds objects outside the plugin's namespaces"
                ),
                _ => {}
            }
            unasked
        }
        None => {
            // Shared with the call's thread, not copied: the objects may be
            // 32 MiB.
            let call = Arc::new(call);
            let (asked, plugin_handle) = (call.clone(), target.plugin.clone());
            match blocking(until, move |left| {
                plugin_handle.convert(&asked.objects, &asked.desired_api_version, left)
            })
            .await
            {
                Ok(converted) => review::converted(&call, converted),
                Err(reason) => ConversionAnswer::Failed(Refusal::Call(reason)),
            }
        }
    };
    if let ConversionAnswer::Failed(refusal) = &answer {
        tracing::warn!(reason = %refusal, "the plugin failed a conversion");
    }
    let result = answer.result();
    // kube builds a response from its own typed request; the host reads
    // reviews itself (`webhook::conversion_request`), so it starts from
    // kube's response to no request and gives it the review's uid.
    let mut response = ConversionResponse::invalid(Status::default());
    response.uid = uid;
    let response = match answer.response(plugin) {
        Ok(objects) => response.success(objects),
        Err(message) => response.failure(Status::failure(&message, "")),
    };
    (
        Answer {
            status: 200,
            body: serde_json::to_value(response.into_review()).expect("a review serializes"),
        },
        result,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeplug_runtime::MemoryBudget;

    #[test]
    fn a_plugins_deadline_ends_before_the_webhooks() {
        assert_eq!(deadline(None), Duration::from_millis(9_500));
        assert_eq!(
            deadline(Some(Duration::from_secs(2))),
            Duration::from_millis(1_500)
        );
        assert_eq!(deadline(Some(Duration::from_millis(200))), MIN_DEADLINE);
        assert_eq!(
            deadline(Some(Duration::from_secs(100_000_000))),
            MAX_TIMEOUT - MARGIN
        );
    }

    #[test]
    fn an_answer_is_kubes_typed_admission_review() {
        let denied = review::AdmissionResponse {
            allowed: false,
            warnings: Vec::new(),
            patch: None,
            status: Some(review::Denial {
                code: 403,
                reason: "Forbidden",
                message: "no".into(),
                causes: vec![("spec.a".into(), "bad".into())],
            }),
        };
        let answer = admission_review("u1", denied);
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer.body["kind"], "AdmissionReview");
        let response = &answer.body["response"];
        assert_eq!(
            (&response["uid"], &response["allowed"]),
            (&json!("u1"), &json!(false))
        );
        assert_eq!(
            response["status"],
            json!({"status": "Failure", "code": 403, "reason": "Forbidden", "message": "no",
                   "details": {"causes": [{"reason": "FieldValueInvalid", "field": "spec.a", "message": "bad"}]}})
        );
        let patched = review::AdmissionResponse {
            allowed: true,
            warnings: vec!["w".into()],
            patch: Some(vec![json!({"op": "add", "path": "/spec/a", "value": 1})]),
            status: None,
        };
        let response = admission_review("u2", patched).body["response"].clone();
        assert_eq!(response["patchType"], "JSONPatch");
        assert_eq!(response["warnings"], json!(["w"]));
        let bytes: Vec<u8> = serde_json::from_value(response["patch"].clone()).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&bytes).unwrap(),
            json!([{"op": "add", "path": "/spec/a", "value": 1}])
        );
    }

    #[tokio::test]
    async fn a_review_waits_for_its_place_within_its_deadline_and_one_plugin_cannot_take_all() {
        let limits = ReviewLimits::with(MemoryBudget::new(64 << 20), 3, 2);
        let until = || Instant::now() + Duration::from_millis(200);
        let refused = |entered: Result<Entry, (Answer, &'static str)>| {
            let (answer, result) = entered.err().expect("refused");
            (answer.status, result)
        };
        let small = Some(1000);
        let a1 = enter(&limits, "a", Webhook::Validate, small, until()).await;
        let a2 = enter(&limits, "a", Webhook::Validate, small, until()).await;
        assert!(a1.is_ok() && a2.is_ok());
        // A third of plugin a waits out its deadline; plugin b goes on.
        let waited = Instant::now();
        assert_eq!(
            refused(enter(&limits, "a", Webhook::Validate, small, until()).await),
            (429, "busy")
        );
        assert!(waited.elapsed() < Duration::from_secs(1));
        let b = enter(&limits, "b", Webhook::Validate, small, until()).await;
        assert!(b.is_ok());
        // The host's bound (3) is reached: nobody else enters...
        assert_eq!(
            refused(enter(&limits, "c", Webhook::Validate, small, until()).await),
            (429, "busy")
        );
        // ...until one ends.
        drop(a1);
        assert!(
            enter(&limits, "c", Webhook::Validate, small, until())
                .await
                .is_ok()
        );
        drop((a2, b));

        // Memory: a review that could never fit is refused at once; one
        // that fits waits for the memory another review of its plugin holds.
        assert_eq!(
            refused(enter(&limits, "a", Webhook::Convert, Some(20 << 20), until()).await),
            (413, "too_large")
        );
        let big = enter(&limits, "a", Webhook::Convert, Some(10 << 20), until()).await;
        assert!(big.is_ok());
        assert_eq!(
            refused(enter(&limits, "a", Webhook::Convert, Some(1 << 20), until()).await),
            (429, "busy")
        );
        assert!(
            enter(&limits, "b", Webhook::Convert, Some(1 << 20), until())
                .await
                .is_ok()
        );
        // A body of unknown length is weighed at the most it may be.
        assert_eq!(
            refused(enter(&limits, "b", Webhook::Convert, None, until()).await),
            (413, "too_large")
        );
    }
}
