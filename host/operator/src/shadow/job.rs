//! A comparison waiting to be made: the live decision and the request, and
//! the queue of them that waits for a candidate slot (bounded in count and
//! bytes, see [`super::QUEUE`] and [`super::QUEUE_BYTES`]).

use std::sync::Arc;

use serde_json::Value;

use super::Decision;
use crate::error::ReconcileError;
use kubeplug_core::plan::Plan;
use kubeplug_core::policy::Effective;
use kubeplug_kube::informers::ObjectKey;
use kubeplug_kube::report::format_chain;
use kubeplug_runtime::{Desired, Plugin, Request};

/// Comparisons waiting for a slot, and their bytes ([`Job::bytes`]).
#[derive(Default)]
pub(super) struct Waiting {
    pub(super) jobs: std::collections::VecDeque<(Job, tracing::Span, usize)>,
    pub(super) bytes: usize,
}

impl Waiting {
    pub(super) fn pop_front(&mut self) -> Option<(Job, tracing::Span)> {
        let (job, span, bytes) = self.jobs.pop_front()?;
        self.bytes -= bytes;
        Some((job, span))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Queue `job` in place of an older one of its parent, dropping the
    /// oldest while over [`QUEUE`] or [`QUEUE_BYTES`]; returns how many
    /// comparisons were dropped (`job` itself, if it alone is too big).
    pub(super) fn push(&mut self, job: Job, span: tracing::Span, limits: (usize, usize)) -> u64 {
        let (count, max_bytes) = limits;
        // The one replaced is superseded, not skipped.
        let mut replaced = 0;
        self.jobs.retain(|(j, _, b)| {
            let same = j.key == job.key;
            if same {
                replaced += b;
            }
            !same
        });
        self.bytes -= replaced;
        let bytes = job.bytes();
        if bytes > max_bytes {
            return 1;
        }
        let mut dropped = 0;
        while !self.jobs.is_empty() && (self.jobs.len() >= count || self.bytes + bytes > max_bytes)
        {
            self.pop_front();
            dropped += 1;
        }
        self.bytes += bytes;
        self.jobs.push_back((job, span, bytes));
        dropped
    }
}

/// A comparison to make: the request and what the live version decided.
pub struct Job {
    pub key: ObjectKey,
    pub request: Arc<Request>,
    /// The live version's decision, owned (the comparison outlives the
    /// reconcile).
    pub live: Decision,
    /// Decides the candidate's answer as the live version's was: the same
    /// fence, parent and observed children.
    pub check: Check,
}

impl Job {
    /// The comparison of the live version's decision `live` for the parent
    /// at `key`, decided under `grant` on `request` for `parent`: the
    /// candidate's answer is to be decided as the live one was.
    pub(crate) fn new(
        key: ObjectKey,
        grant: Arc<Effective>,
        parent: Value,
        request: Arc<Request>,
        live: &Result<Plan, ReconcileError>,
    ) -> Job {
        let live = match live {
            Ok(plan) => Ok(plan.clone()),
            Err(error) => Err(format_chain(error)),
        };
        let handed = request.clone();
        Job {
            key,
            request,
            live,
            check: Box::new(move |plugin, desired| {
                // Parsed again here, off the reconcile's path: a waiting
                // comparison holds only the request's texts.
                let observed = handed
                    .observed
                    .iter()
                    .filter_map(|text| serde_json::from_str(text).ok())
                    .collect::<Vec<Value>>();
                kubeplug_core::plan::decide(plugin.manifest(), &grant, &parent, &observed, desired)
                    .map_err(|error| format_chain(&error))
            }),
        }
    }

    /// Bytes the job holds, roughly: the request's texts (shared with the
    /// caches while they hold the same versions, kept alive by the job once
    /// they change) and the live answer's parsed values.
    pub fn bytes(&self) -> usize {
        let request = &self.request;
        let texts: usize = std::iter::once(&request.parent)
            .chain(&request.observed)
            .chain(&request.related)
            .map(|t| t.len())
            .sum();
        let live = match &self.live {
            Ok(plan) => {
                let answer = &plan.answer;
                answer.children.iter().map(value_bytes).sum::<usize>()
                    + answer.status.as_ref().map_or(0, value_bytes)
                    + answer
                        .events
                        .iter()
                        .map(|e| e.reason.len() + e.message.len())
                        .sum::<usize>()
                    + plan
                        .children
                        .iter()
                        .map(|step| {
                            value_bytes(&step.child)
                                + match &step.action {
                                    kubeplug_core::plan::Action::Update { live, .. } => {
                                        value_bytes(live)
                                    }
                                    _ => 0,
                                }
                        })
                        .sum::<usize>()
                    + plan.prune.iter().map(value_bytes).sum::<usize>()
                    + plan.status.as_ref().map_or(0, value_bytes)
            }
            Err(error) => error.len(),
        };
        std::mem::size_of::<Job>() + texts + request.now.len() + request.entropy.len() + live
    }
}

/// Heap bytes of a parsed JSON value, roughly: a fixed cost per node plus
/// its text, so that a deep or wide tree counts what it costs.
pub fn value_bytes(value: &Value) -> usize {
    const NODE: usize = std::mem::size_of::<Value>();
    match value {
        Value::String(s) => NODE + s.len(),
        Value::Array(items) => NODE + items.iter().map(value_bytes).sum::<usize>(),
        Value::Object(map) => {
            NODE + map
                .iter()
                .map(|(k, v)| NODE + k.len() + value_bytes(v))
                .sum::<usize>()
        }
        _ => NODE,
    }
}

/// See [`Job::check`].
pub type Check = Box<dyn FnOnce(&Plugin, Desired) -> Decision + Send>;
