//! The error policy: what happens after a reconcile, kept apart from the
//! reconciler (kube-runtime's `applier` habit).
//!
//! A success forgets the parent's failures and requeues it when the plugin
//! asked; a lost leadership hands the parent to whoever leads next; a
//! failure is counted, backed off (doubling, jittered), kept for replay
//! when it is the plugin's fault, logged and told on the parent as an
//! Event. Every finished reconcile counts towards a new version's
//! probation ([`judge`]).

use std::time::Duration;

use tracing::{Instrument, Span};

use super::Shared;
use super::probation::judge;
use crate::metrics::Ended;
use crate::reconcile::{Handed, Outcome, ReconcileError};
use crate::replay::{Call, Capture};
use kubeplug_core::contract::Event;
use kubeplug_kube::informers::ObjectKey;
use kubeplug_kube::report::format_chain;
use kubeplug_runtime::Plugin;

/// Act on a finished reconcile of `key` by `plugin`, which took `took`.
pub(super) async fn settle(
    shared: &Shared,
    plugin: &Plugin,
    key: &ObjectKey,
    result: Result<Outcome, ReconcileError>,
    handed: &Handed,
    took: Duration,
    span: &Span,
) {
    let name = plugin.name();
    ended(span, &result);
    if let Ok(outcome) = &result
        && outcome.skipped
    {
        // Not a call: nothing to count towards probation or the deadlines.
        shared.metrics.skipped(name, took);
        return;
    }
    if !matches!(&result, Err(error) if error.not_leader()) {
        use std::sync::atomic::Ordering::Relaxed;
        shared.counts.reconciles.fetch_add(1, Relaxed);
        if result.is_err() {
            shared.counts.errors.fetch_add(1, Relaxed);
        }
        shared.overdue.lock().record(&result);
        let fault = matches!(&result, Err(error) if error.plugin_fault());
        judge(shared, plugin, key, fault)
            .instrument(span.clone())
            .await;
    }
    match result {
        Ok(outcome) => {
            shared.failing.succeeded(key);
            let ended = match outcome.requeue_after {
                Some(_) => Ended::RequeueAfter,
                None => Ended::Success,
            };
            shared.metrics.reconciled(name, "ok", ended, took);
            if let Some(after) = outcome.requeue_after {
                shared.queue.add_after(key.clone(), after);
            }
        }
        Err(error) if error.not_leader() => {
            shared
                .metrics
                .reconciled(name, "not_leader", Ended::Requeue, took);
            // Whoever leads meanwhile may write: call every parent again.
            shared.fence.last_calls.forget_all();
            span.in_scope(|| {
                tracing::info!("leadership lost; reconcile stopped, nothing more written")
            });
            // Whoever leads next reconciles it; if it is this replica
            // again, the key is waiting.
            shared.queue.add(key.clone());
        }
        Err(error) => failed(shared, plugin, key, &error, handed, took, span).await,
    }
}

/// How the reconcile ended, on its span: `result` as the metrics label it
/// (`ok`, `skipped`, `not_leader` or the error's label), and a failure as
/// the error status a trace shows.
fn ended(span: &Span, result: &Result<Outcome, ReconcileError>) {
    let label = match result {
        Ok(outcome) if outcome.skipped => "skipped",
        Ok(_) => "ok",
        Err(error) if error.not_leader() => "not_leader",
        Err(error) => {
            span.record("otel.status_code", "error");
            error.label()
        }
    };
    span.record("result", label);
}

/// A failed reconcile: back off, keep it for replay, log it, tell the parent.
async fn failed(
    shared: &Shared,
    plugin: &Plugin,
    key: &ObjectKey,
    error: &ReconcileError,
    handed: &Handed,
    took: Duration,
    span: &Span,
) {
    let failures = shared.failing.failed(key, format_chain(error));
    // Never sooner than a throttling server asked (client-go's habit): a
    // write the client's retries gave up on must not come back at once.
    let delay = shared
        .settings
        .jittered_backoff(failures)
        .min(error.retry_within().unwrap_or(Duration::MAX))
        .max(error.retry_after().unwrap_or_default());
    shared
        .metrics
        .reconciled(plugin.name(), error.label(), Ended::Error, took);
    if let (true, Some(request)) = (error.plugin_fault(), &handed.request) {
        let call = if handed.finalize {
            Call::Finalize
        } else {
            Call::Reconcile
        };
        shared.replays.record(Capture::new(
            plugin,
            call,
            &key.namespace,
            &key.name,
            request,
            &format_chain(error),
            error.label(),
        ));
    }
    span.in_scope(|| {
        tracing::warn!(error = %format_chain(error), failures, retry_in = ?delay, "reconcile failed")
    });
    if let Some(parent) = shared.sources.parent.get(&key.namespace, &key.name) {
        let event = Event {
            warning: true,
            reason: error.reason().into(),
            message: format_chain(error),
        };
        shared
            .fence
            .post(&shared.writer_for(key), &parent, &event, "Reconcile");
    }
    // A retry: counted in `workqueue_retries_total`.
    shared.queue.retry_after(key.clone(), delay);
}
