//! Events are posted off the reconcile's path, as client-go's event
//! broadcaster does: a reconcile queues its events and goes on, and one task
//! per plugin posts them, a few at a time.
//!
//! Why: an event is one more round trip, and a worker that waits for it
//! waits for nothing it needs (N = 1,000 Databases: one of the six requests
//! each first reconcile made in a row). What it keeps: every event passes
//! the writer's [`Gate`] when it is sent, so a replica that lost the
//! plugin's Lease posts none of the events still queued; the per-parent
//! budget is taken before queueing (see the operator's `Fence::record`).
//! What it gives up: an event may appear a moment after the status written
//! after it, and events still queued when the process exits are lost (as
//! with client-go). A full queue drops new events and says so to the caller.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, Recorder};
use tokio::sync::mpsc;

use super::Gate;
use crate::leader::Leadership;

#[cfg(test)]
mod tests;

/// Events waiting to be posted per plugin (client-go's broadcaster keeps
/// 1,000). Each parent's own budget bounds how many one parent can queue.
const QUEUED: usize = 1024;

/// Events of one plugin posted at once.
const IN_FLIGHT: usize = 4;

struct Pending {
    event: KubeEvent,
    reference: ObjectReference,
    /// The leadership the event is fenced by when it is sent.
    leadership: Leadership,
}

/// The queue of one plugin's events; the posting task ends when the last
/// clone is dropped and the queue is empty.
#[derive(Clone)]
pub(super) struct Events {
    queue: mpsc::Sender<Pending>,
}

impl Events {
    /// Start the task that posts what is queued through `gate`.
    pub(super) fn start(recorder: Recorder, gate: Gate) -> Self {
        let (queue, waiting) = mpsc::channel(QUEUED);
        tokio::spawn(post(waiting, recorder, gate));
        Events { queue }
    }

    /// Queue one event; false if the queue is full (or the task is gone).
    pub(super) fn queue(
        &self,
        event: KubeEvent,
        reference: ObjectReference,
        leadership: Leadership,
    ) -> bool {
        self.queue
            .try_send(Pending {
                event,
                reference,
                leadership,
            })
            .is_ok()
    }
}

async fn post(mut waiting: mpsc::Receiver<Pending>, recorder: Recorder, gate: Gate) {
    let pending = futures::stream::poll_fn(move |cx| waiting.poll_recv(cx));
    pending
        .for_each_concurrent(IN_FLIGHT, |pending| {
            let Pending {
                event,
                reference,
                leadership,
            } = pending;
            let recorder = &recorder;
            let gate = Gate {
                leadership,
                ..gate.clone()
            };
            async move {
                let gate = &gate;
                let what = format!("event {}", event.reason);
                match gate
                    .send("event", &what, recorder.publish(&event, &reference))
                    .await
                {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        tracing::warn!(plugin = %gate.plugin, %error, "failed to record event")
                    }
                    Err(error) => {
                        tracing::debug!(plugin = %gate.plugin, %error, "event not recorded")
                    }
                }
            }
        })
        .await;
}
