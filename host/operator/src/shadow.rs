//! Shadow runs: a candidate version decides beside the live one and is
//! compared, never written.
//!
//! A plugin is a pure function of its request, so the host can hand the very
//! request the live version gets to a candidate (`<name>.next.wasm`) and
//! compare the two answers: children added, removed or changed, status,
//! parent patch, events, requeue, errors. Nothing the candidate answers
//! reaches the API server. A team promotes the candidate by renaming it over
//! the live file once the comparison says what they expect.
//!
//! A shadow never slows the live version down: once the live version has
//! decided, the comparison is handed to the background and the reconcile
//! goes on. At most `slots` candidate calls run at once; comparisons waiting
//! for a slot queue up (one per parent, the newest; at most [`QUEUE`] of
//! them and [`QUEUE_BYTES`] of requests and live answers, the oldest dropped
//! and counted `skipped` beyond that; one bigger than all of it is skipped
//! at once). A candidate that loops until its deadline costs the host CPU,
//! never a live reconcile's time.

mod job;

use job::Waiting;
pub use job::{Check, Job, value_bytes};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};
use tracing::Instrument;

use crate::metrics::OperatorMetrics;
use crate::whatif::{Report, WhatIf};
use kubeplug_core::plan::diff::{Fields, diff};
use kubeplug_core::plan::{Plan, TypedKey};
use kubeplug_kube::informers::ObjectKey;
use kubeplug_kube::report::format_chain;
use kubeplug_runtime::{Desired, Plugin};

/// Comparisons waiting for a slot, at most.
pub const QUEUE: usize = 1024;

/// Bytes of comparisons waiting for a slot, at most ([`Job::bytes`]): 16 MiB.
/// A live answer may be 4 MiB of text (`responseBytes`) and three to four
/// times that parsed, so 1,024 of them could hold gigabytes; a few
/// megabytes of typical answers (a few KiB each) is the whole queue.
pub const QUEUE_BYTES: usize = 16 << 20;

/// How many example differences a shadow keeps for `/plugins`.
const EXAMPLES: usize = 5;
/// How many differences of one parent an example keeps.
const DIFFERENCES_PER_EXAMPLE: usize = 20;

/// One version's decision for a parent: its [`Plan`], or why it failed
/// (as logged).
pub type Decision = Result<Plan, String>;

/// A candidate version running in shadow of the live one.
pub struct Shadow {
    plugin: Plugin,
    /// Content key (plugin + settings) of the candidate file.
    key: String,
    file: String,
    since: String,
    stats: Mutex<Stats>,
    /// Candidate calls that may run at once.
    slots: Arc<tokio::sync::Semaphore>,
    slot_count: usize,
    /// Comparisons waiting for a slot.
    waiting: Mutex<Waiting>,
    /// The candidate run once against every parent (see [`crate::whatif`]),
    /// once the controller starts it.
    whatif: Mutex<Option<WhatIf>>,
}

#[derive(Default)]
struct Stats {
    comparisons: u64,
    skipped: u64,
    candidate_errors: u64,
    /// The latest comparison of each parent: a fingerprint of its
    /// differences (`None`: the same answer).
    parents: HashMap<ObjectKey, Option<u64>>,
    /// A few parents that differ, with what differs.
    examples: BTreeMap<ObjectKey, Vec<Value>>,
}

/// What a shadow reports on `/plugins` and in the aggregated API.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    pub file: String,
    pub version: String,
    pub digest: String,
    /// RFC 3339 time the candidate started shadowing.
    pub since: String,
    /// Reconciles compared.
    pub comparisons: u64,
    /// Distinct parents compared at least once.
    pub parents_compared: usize,
    /// Parents whose latest comparison differs.
    pub parents_differing: usize,
    /// Comparisons where the candidate failed (and the live version did not).
    pub candidate_errors: u64,
    /// Reconciles not compared: too many comparisons were waiting.
    pub skipped: u64,
    /// A few differing parents and what differs (only for loopback
    /// clients and the aggregated API: they hold cluster data).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<Value>,
    /// The candidate against every parent (see [`crate::whatif`]); its
    /// details only where the examples are shown.
    #[serde(rename = "whatIf", skip_serializing_if = "Option::is_none")]
    pub whatif: Option<Report>,
}

/// What one comparison found, for the caller's log and metrics.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Same,
    /// Differs; `new` if this parent did not differ this way before.
    Differs {
        count: usize,
        first: String,
        new: bool,
    },
    /// The candidate failed where the live version answered.
    CandidateFailed {
        error: String,
        new: bool,
    },
}

impl Verdict {
    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Differs { .. } => "differs",
            Verdict::CandidateFailed { .. } => "candidate_error",
        }
    }
}

impl Shadow {
    /// A shadow of `plugin` (from `file`, content key `key`) running at most
    /// `slots` candidate calls at once.
    pub fn new(plugin: Plugin, key: String, file: String, slots: usize) -> Shadow {
        Shadow {
            plugin,
            key,
            file,
            since: format!("{:.0}", jiff::Timestamp::now()),
            stats: Mutex::default(),
            slots: Arc::new(tokio::sync::Semaphore::new(slots.max(1))),
            slot_count: slots.max(1),
            waiting: Mutex::default(),
            whatif: Mutex::default(),
        }
    }

    /// Run the candidate against every parent `serving` holds, in the
    /// background (see [`crate::whatif`]).
    pub fn start_whatif(&self, serving: crate::serving::Serving) {
        let run = crate::whatif::start(serving, self.plugin.clone());
        *self.whatif.lock() = Some(run);
    }

    /// The what-if's report, if one started.
    pub fn whatif(&self) -> Option<Report> {
        let run = self.whatif.lock();
        run.as_ref().map(|w| w.progress.report())
    }

    /// The what-if's report once complete (waiting for it), if one started.
    pub async fn whatif_finished(&self) -> Option<Report> {
        let progress = {
            let run = self.whatif.lock();
            run.as_ref().map(|w| w.progress.clone())?
        };
        Some(progress.finished().await)
    }

    /// Make the comparison in `job` in the background: at once if a slot is
    /// free, else when one frees up. Never waits.
    pub fn submit(self: &Arc<Self>, job: Job, metrics: &OperatorMetrics) {
        let span = tracing::Span::current();
        match self.slots.clone().try_acquire_owned() {
            Ok(slot) => {
                tokio::spawn(self.clone().drain(slot, Some((job, span)), metrics.clone()));
            }
            Err(_) => {
                // The newest request of a parent replaces an older one.
                let dropped = self.waiting.lock().push(job, span, (QUEUE, QUEUE_BYTES));
                if dropped > 0 {
                    self.stats.lock().skipped += dropped;
                }
            }
        }
    }

    /// Compare `first`, then whatever waits, while holding a slot.
    async fn drain(
        self: Arc<Self>,
        mut slot: tokio::sync::OwnedSemaphorePermit,
        mut next: Option<(Job, tracing::Span)>,
        metrics: OperatorMetrics,
    ) {
        loop {
            while let Some((job, span)) = next {
                self.compare(job, &metrics).instrument(span).await;
                next = self.waiting.lock().pop_front();
            }
            drop(slot);
            // A job queued after the last look, while every slot was held.
            if self.waiting.lock().is_empty() {
                return;
            }
            match self.slots.clone().try_acquire_owned() {
                Ok(again) => slot = again,
                // Another holder drains it.
                Err(_) => return,
            }
            next = self.waiting.lock().pop_front();
        }
    }

    /// Call the candidate on the job's request, check its answer and
    /// compare it with the live decision; log a parent that starts to
    /// differ (or differs anew) and count it in `metrics`.
    async fn compare(&self, job: Job, metrics: &OperatorMetrics) {
        let Job {
            key,
            request,
            live,
            check,
        } = job;
        let plugin = self.plugin.clone();
        let call = tokio::task::spawn_blocking(move || plugin.reconcile(&request)).await;
        let candidate = match call {
            Ok(Ok(desired)) => check(&self.plugin, desired),
            Ok(Err(error)) => Err(format_chain(&error)),
            Err(error) => Err(format!("the candidate's call was cancelled: {error}")),
        };
        let verdict = self.record(&key, &live, &candidate);
        let name = self.plugin.name();
        metrics.shadow_compared(name, verdict.label());
        metrics.shadow_parents(name, Some(self.counts()));
        let version = &self.plugin.manifest().version;
        match verdict {
            Verdict::Differs {
                count,
                first,
                new: true,
            } => tracing::info!(
                candidate_version = %version,
                differences = count,
                first = %first,
                "shadow: the candidate decides differently"
            ),
            Verdict::CandidateFailed { error, new: true } => tracing::warn!(
                candidate_version = %version,
                %error,
                "shadow: the candidate fails where the live version answers"
            ),
            _ => {}
        }
    }

    /// The same candidate with its comparisons cleared (the live version
    /// changed).
    pub fn restarted(&self) -> Shadow {
        Shadow::new(
            self.plugin.clone(),
            self.key.clone(),
            self.file.clone(),
            self.slot_count,
        )
    }

    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// Content key of the candidate file this shadow runs.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Record the comparison of both decisions for the parent at `key`.
    pub fn record(&self, key: &ObjectKey, live: &Decision, candidate: &Decision) -> Verdict {
        let differences = compare(live, candidate);
        let fingerprint = (!differences.is_empty()).then(|| fingerprint(&differences));
        let mut stats = self.stats.lock();
        stats.comparisons += 1;
        let candidate_failed = live.is_ok() && candidate.is_err();
        if candidate_failed {
            stats.candidate_errors += 1;
        }
        let before = stats.parents.insert(key.clone(), fingerprint);
        let new = before != Some(fingerprint);
        match fingerprint {
            None => {
                stats.examples.remove(key);
                Verdict::Same
            }
            Some(_) => {
                if stats.examples.contains_key(key) || stats.examples.len() < EXAMPLES {
                    let mut kept = differences.clone();
                    kept.truncate(DIFFERENCES_PER_EXAMPLE);
                    stats.examples.insert(key.clone(), kept);
                }
                match candidate {
                    Err(error) if candidate_failed => Verdict::CandidateFailed {
                        error: error.clone(),
                        new,
                    },
                    _ => Verdict::Differs {
                        count: differences.len(),
                        first: summary(&differences[0]),
                        new,
                    },
                }
            }
        }
    }

    /// The parent is gone: it no longer counts.
    pub fn forget(&self, key: &ObjectKey) {
        let mut stats = self.stats.lock();
        stats.parents.remove(key);
        stats.examples.remove(key);
    }

    /// Parents compared and parents differing now.
    pub fn counts(&self) -> (usize, usize) {
        let stats = self.stats.lock();
        let differing = stats.parents.values().filter(|f| f.is_some()).count();
        (stats.parents.len(), differing)
    }

    pub fn status(&self) -> ShadowStatus {
        let stats = self.stats.lock();
        let manifest = self.plugin.manifest();
        ShadowStatus {
            file: self.file.clone(),
            version: manifest.version.clone(),
            digest: self.plugin.digest().to_string(),
            since: self.since.clone(),
            comparisons: stats.comparisons,
            parents_compared: stats.parents.len(),
            parents_differing: stats.parents.values().filter(|f| f.is_some()).count(),
            candidate_errors: stats.candidate_errors,
            skipped: stats.skipped,
            examples: stats
                .examples
                .iter()
                .map(|(key, differences)| {
                    json!({"parent": parent_name(key), "differences": differences})
                })
                .collect(),
            whatif: self.whatif(),
        }
    }
}

impl ShadowStatus {
    /// The status without examples or the what-if's details (they hold
    /// cluster data), and the candidate's file by its name only (where the
    /// plugins live is the host's business).
    pub fn summary(self) -> ShadowStatus {
        let file = std::path::Path::new(&self.file)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        ShadowStatus {
            file,
            examples: Vec::new(),
            whatif: self.whatif.map(Report::summary),
            ..self
        }
    }
}

fn parent_name(key: &ObjectKey) -> String {
    if key.namespace.is_empty() {
        key.name.clone()
    } else {
        format!("{}/{}", key.namespace, key.name)
    }
}

/// One line naming a difference, for logs.
fn summary(difference: &Value) -> String {
    let what = difference["what"].as_str().unwrap_or_default();
    match what {
        "child" => {
            let paths: Vec<&str> = difference["diff"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["path"].as_str())
                .take(3)
                .collect();
            format!(
                "child {} {} {}{}",
                difference["kind"].as_str().unwrap_or_default(),
                difference["name"].as_str().unwrap_or_default(),
                difference["change"].as_str().unwrap_or_default(),
                if paths.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", paths.join(", "))
                }
            )
        }
        other => other.to_string(),
    }
}

fn fingerprint(differences: &[Value]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    Value::Array(differences.to_vec())
        .to_string()
        .hash(&mut hasher);
    hasher.finish()
}

/// What differs between the live decision and the candidate's, as a list of
/// `{what, ...}` objects (`what`: `error`, `child`, `status`, `parentPatch`,
/// `events`, `requeueAfterSeconds`); empty if both decided alike. Both
/// decided on the same request, so what the plans write follows from what
/// is compared: the answers and their prepared children.
pub fn compare(live: &Decision, candidate: &Decision) -> Vec<Value> {
    let (live, cand) = match (live, candidate) {
        (Ok(live), Ok(candidate)) if compared(live) == compared(candidate) => return Vec::new(),
        (Ok(live), Ok(candidate)) => (live, candidate),
        (Err(a), Err(b)) if a == b => return Vec::new(),
        (live, candidate) => {
            let text = |d: &Decision| match d {
                Ok(_) => Value::String("answered".into()),
                Err(error) => json!({"error": error}),
            };
            return vec![
                json!({"what": "error", "live": text(live), "candidate": text(candidate)}),
            ];
        }
    };
    let mut out = Vec::new();
    let index = |plan: &Plan| -> BTreeMap<TypedKey, Value> {
        plan.children
            .iter()
            .map(|step| (TypedKey::of(&step.child), step.child.clone()))
            .collect()
    };
    let (live_by_key, cand_by_key) = (index(live), index(cand));
    let row = |key: &TypedKey, change: &str| json!({"what": "child", "change": change, "kind": key.kind, "name": key.name, "namespace": key.namespace});
    for (key, child) in &cand_by_key {
        match live_by_key.get(key) {
            None => out.push(row(key, "added")),
            Some(live) if live != child => {
                let mut changed = row(key, "changed");
                changed["diff"] = changes(live, child);
                out.push(changed);
            }
            Some(_) => {}
        }
    }
    for key in live_by_key.keys().filter(|k| !cand_by_key.contains_key(k)) {
        out.push(row(key, "removed"));
    }
    let (live, cand) = (&live.answer, &cand.answer);
    let null = Value::Null;
    if live.status != cand.status {
        out.push(json!({
            "what": "status",
            "diff": changes(live.status.as_ref().unwrap_or(&null), cand.status.as_ref().unwrap_or(&null)),
        }));
    }
    if live.parent_patch != cand.parent_patch {
        out.push(json!({"what": "parentPatch", "live": live.parent_patch, "candidate": cand.parent_patch}));
    }
    if live.events != cand.events {
        out.push(json!({"what": "events", "live": live.events, "candidate": cand.events}));
    }
    if live.requeue_after != cand.requeue_after {
        let seconds = |d: Option<std::time::Duration>| d.map(|d| d.as_secs());
        out.push(json!({
            "what": "requeueAfterSeconds",
            "live": seconds(live.requeue_after),
            "candidate": seconds(cand.requeue_after),
        }));
    }
    out
}

/// What a comparison looks at in a plan: the answer and the children as
/// they would be applied.
fn compared(plan: &Plan) -> (&Desired, Vec<&Value>) {
    (
        &plan.answer,
        plan.children.iter().map(|s| &s.child).collect(),
    )
}

/// Field by field, where two objects differ, in both directions (see
/// [`Fields::Both`]), as `{path, live, candidate}` rows.
fn changes(live: &Value, candidate: &Value) -> Value {
    diff(live, candidate, Fields::Both)
        .into_iter()
        .map(|c| json!({"path": c.path, "live": c.before, "candidate": c.after}))
        .collect()
}

#[cfg(test)]
mod tests;
