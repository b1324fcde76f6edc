//! The plugin's side of the fence at run time, and the per-parent state a
//! controller keeps beside it.

pub mod budget;
pub mod echoes;
pub mod references;
pub mod unchanged;

use std::sync::Arc;

use budget::EventBudget;
use kubeplug_core::manifest::Manifest;
use kubeplug_core::policy::Effective;
use kubeplug_kube::apply::Writer;
use kubeplug_kube::identity::{Access, AccessError};
use kubeplug_kube::informers::{Object, ObjectKey};
use kubeplug_runtime::Event;

use crate::metrics::OperatorMetrics;

/// The plugin's side of the fence at run time: its grant, the read checks
/// made for its ServiceAccount, and its event budget.
pub struct Fence {
    /// Shared with shadow comparisons, which finish after the reconcile.
    pub grant: Arc<Effective>,
    pub access: Arc<Access>,
    pub events: EventBudget,
    pub metrics: OperatorMetrics,
    /// Each parent's last call that wrote nothing (see [`unchanged`]).
    pub last_calls: unchanged::LastCalls,
    /// The resourceVersions of our own status writes (see [`echoes`]).
    pub echoes: echoes::Echoes,
    /// What each parent names, and who names what (see [`references`]).
    pub references: references::Referrers,
}

impl Fence {
    /// Record `events` on the parent at `key` within its budget (see
    /// [`EventBudget`]); the rest are dropped and counted. Every event an
    /// answer causes goes through here: a reconcile's, a finalize's, a
    /// `ChildClash` warning.
    pub(crate) fn record(
        &self,
        writer: &Writer,
        parent: &Object,
        key: &ObjectKey,
        events: &[Event],
        action: &str,
    ) {
        let allowed = self.events.take(key, events.len());
        for event in &events[..allowed] {
            self.post(writer, parent, event, action);
        }
        if allowed < events.len() {
            self.metrics
                .events_dropped(writer.plugin(), events.len() - allowed);
        }
    }

    /// Queue one event on `parent`, outside any budget (the host's own
    /// warnings: a failed reconcile, a rollback); counted if the writer's
    /// queue is full and it is dropped.
    pub(crate) fn post(&self, writer: &Writer, parent: &Object, event: &Event, action: &str) {
        if !writer.event(parent, event, action) {
            self.metrics.events_dropped(writer.plugin(), 1);
        }
    }

    /// Ok if the plugin's ServiceAccount may read everything this reconcile
    /// would hand it in `namespace`: the parent, its children's kinds, the
    /// related and referenced kinds.
    pub(crate) async fn check_reads(
        &self,
        manifest: &Manifest,
        namespace: &str,
    ) -> Result<(), AccessError> {
        let access = &self.access;
        access
            .check(&self.grant, "get", &manifest.parent, namespace)
            .await?;
        for child in &manifest.children {
            access.check(&self.grant, "list", child, namespace).await?;
        }
        for related in &manifest.related {
            access
                .check(&self.grant, "list", &related.resource, namespace)
                .await?;
        }
        for kind in &manifest.references {
            access.check(&self.grant, "list", kind, namespace).await?;
        }
        Ok(())
    }
}
