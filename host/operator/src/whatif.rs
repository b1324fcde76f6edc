//! Fleet-wide what-if: a candidate version run once against every parent
//! the serving version's caches hold, each decided exactly as a preview
//! decides one (same request, same fence, same plan), nothing written; the
//! plans are tallied into a [`Report`] (see [`kubeplug_core::whatif`]).
//!
//! It runs when a candidate (`<name>.next.wasm`) starts shadowing, and when
//! a new version of a plugin whose grant has a promotion gate is about to
//! serve (see `registry::serving`). One parent at a time, in the
//! background: the candidate's calls run under its own limits on the
//! blocking pool; before each parent the run waits while the plugin's live
//! reconciles are queued or running, and it sleeps between parents so that
//! it takes at most [`CPU_SHARE`] of one core.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use crate::error::ReconcileError;
use crate::inputs::plan;
use crate::serving::{Run, Serving};
use kubeplug_core::key::ObjectKey;
use kubeplug_core::policy::KindRef;
use kubeplug_core::whatif::{Details, Summary, Tally};
use kubeplug_kube::report::format_chain;
use kubeplug_runtime::Plugin;

/// The share of one core a what-if may take, on average: it sleeps as long
/// as it worked. 200 parents of `database` take a fraction of a second.
pub const CPU_SHARE: f64 = 0.5;

/// How long a what-if waits before looking again whether live reconciles
/// are done.
const YIELD: Duration = Duration::from_millis(10);

/// Where a what-if is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Running,
    Complete,
    /// It cannot run: see [`Report::error`].
    Failed,
}

/// What a what-if found, so far or in all.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub phase: Phase,
    pub candidate_version: String,
    pub candidate_digest: String,
    pub live_version: String,
    pub live_digest: String,
    /// RFC 3339.
    pub started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Wall time of the run, once complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Parents in the caches when it started.
    pub parents_total: usize,
    #[serde(flatten)]
    pub summary: Summary,
    /// Why it cannot run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Which parents, and what the plugin wrote: cluster data, shown only
    /// to loopback clients and to callers who may get `plugins/details`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Details>,
}

impl Report {
    /// The report without [`Report::details`].
    pub fn summary(mut self) -> Report {
        self.details = None;
        self
    }

    pub fn complete(&self) -> bool {
        self.phase == Phase::Complete
    }
}

/// A what-if in progress, readable while it runs.
pub struct Progress {
    started: Instant,
    report: Mutex<Report>,
    tally: Mutex<Tally>,
    /// True once it is complete or failed.
    done: tokio::sync::watch::Sender<bool>,
}

/// A what-if running in the background: dropped, it stops.
pub struct WhatIf {
    pub progress: Arc<Progress>,
    task: tokio::task::AbortHandle,
}

impl Drop for WhatIf {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Progress {
    /// The report now (with details).
    pub fn report(&self) -> Report {
        let mut report = self.report.lock().clone();
        let tally = self.tally.lock();
        report.summary = tally.summary();
        report.details = Some(tally.details());
        report
    }

    /// Wait until the run is complete or failed, and return its report.
    pub async fn finished(&self) -> Report {
        let mut done = self.done.subscribe();
        // An error means the run was dropped: its report is all there is.
        let _ = done.wait_for(|done| *done).await;
        self.report()
    }
}

/// Start a what-if of `candidate` on `serving`'s caches, and run it to the
/// end in the background. The candidate must have the serving version's
/// shape (it reads that version's caches).
pub fn start(serving: Serving, candidate: Plugin) -> WhatIf {
    let live = serving.plugin();
    let now = format!("{:.0}", jiff::Timestamp::now());
    let progress = Arc::new(Progress {
        started: Instant::now(),
        report: Mutex::new(Report {
            phase: Phase::Running,
            candidate_version: candidate.manifest().version.clone(),
            candidate_digest: candidate.digest().to_string(),
            live_version: live.manifest().version.clone(),
            live_digest: live.digest().to_string(),
            started_at: now,
            finished_at: None,
            seconds: None,
            parents_total: 0,
            summary: Summary::default(),
            error: None,
            details: None,
        }),
        tally: Mutex::default(),
        done: tokio::sync::watch::Sender::new(false),
    });
    let running = progress.clone();
    let span = tracing::info_span!("whatif", plugin = %candidate.name(), candidate_version = %candidate.manifest().version);
    let task = tokio::spawn(tracing::Instrument::instrument(
        async move {
            run(&serving, &candidate, &running).await;
            running.done.send_replace(true);
        },
        span,
    ));
    WhatIf {
        progress,
        task: task.abort_handle(),
    }
}

/// Run `candidate` against every parent, tallying into `progress`.
async fn run(serving: &Serving, candidate: &Plugin, progress: &Progress) {
    if let Err(other) = crate::serving::fits(candidate, &serving.plugin(), Run::WhatIf) {
        let mut report = progress.report.lock();
        report.phase = Phase::Failed;
        report.error = Some(other.to_string());
        return;
    }
    let parents = serving.sources().parent.list(None);
    progress.report.lock().parents_total = parents.len();
    let kind = KindRef::of(&candidate.manifest().parent);
    for parent_obj in parents {
        // A parent being deleted is finalized, not reconciled.
        if parent_obj.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = ObjectKey::new(
            parent_obj.metadata.namespace.clone().unwrap_or_default(),
            parent_obj.metadata.name.clone().unwrap_or_default(),
        )
        .to_string();
        // Live reconciles first: a what-if only fills the gaps.
        while serving.busy() {
            tokio::time::sleep(YIELD).await;
        }
        let began = Instant::now();
        let decided = plan(candidate, serving.serves(), &parent_obj)
            .await
            .map(|(inputs, plan)| (inputs.parent, plan));
        {
            let mut tally = progress.tally.lock();
            match &decided {
                Ok((parent, plan)) => tally.plan(&name, &kind, parent, plan),
                Err(ReconcileError::Fence(refused)) => tally.refused(&name, &refused.to_string()),
                Err(error) => tally.failed(&name, &format_chain(error)),
            }
        }
        let worked = began.elapsed();
        tokio::time::sleep(worked.mul_f64((1.0 - CPU_SHARE) / CPU_SHARE)).await;
    }
    let elapsed = progress.started.elapsed();
    let summary = progress.tally.lock().summary();
    tracing::info!(
        parents = summary.parents,
        changed = summary.changed,
        refused = summary.refused,
        failed = summary.failed,
        seconds = elapsed.as_secs_f64(),
        "what-if complete"
    );
    let mut report = progress.report.lock();
    report.phase = Phase::Complete;
    report.finished_at = Some(format!("{:.0}", jiff::Timestamp::now()));
    report.seconds = Some(round_ms(elapsed));
    report.summary = summary;
}

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// Run a what-if of `candidate` on `serving`'s caches and wait for its end.
pub async fn run_to_end(serving: Serving, candidate: Plugin) -> Report {
    let whatif = start(serving, candidate);
    whatif.progress.finished().await
}
