//! A new version's probation: each finished reconcile counts towards it,
//! and a version that fails it is rolled back to the previous one (see
//! [`kubeplug_core::rollout`]).

use kubeplug_core::rollout::{Judged, RolledBack, State};
use kubeplug_kube::informers::ObjectKey;
use kubeplug_runtime::{Event, Plugin};

use super::{Shared, requeue_all};

/// Count a finished reconcile towards `plugin`'s probation, if it is on
/// probation, and roll it back if it fails it.
pub(super) async fn judge(shared: &Shared, plugin: &Plugin, key: &ObjectKey, fault: bool) {
    let (message, failed_on) = {
        let mut rollout = shared.rollout.lock();
        match rollout.record(|new| new.same(plugin), key, fault) {
            Judged::Judging => return,
            Judged::Passed => {
                tracing::info!(plugin = %plugin.name(), version = %plugin.manifest().version, "new version passed its probation");
                return;
            }
            Judged::RollBack {
                new,
                previous,
                key,
                reason,
                failed_on,
            } => {
                *shared.plugin.write() = previous.clone();
                let manifest = new.manifest();
                let back = RolledBack {
                    version: manifest.version.clone(),
                    digest: new.digest().to_string(),
                    key,
                    reason,
                    at: format!("{:.0}", jiff::Timestamp::now()),
                };
                let previous_manifest = previous.manifest();
                tracing::warn!(
                    plugin = %manifest.name,
                    version = %manifest.version,
                    digest = %back.digest,
                    previous_version = %previous_manifest.version,
                    reason = %back.reason,
                    "new version rolled back; the previous version serves again, and this file is not loaded again until it changes"
                );
                shared.metrics.rolled_back(&manifest.name);
                shared.metrics.plugin_info(
                    &manifest.name,
                    &previous_manifest.version,
                    previous.digest(),
                    State::RolledBack,
                );
                let message = format!(
                    "plugin {} {} was rolled back to {}: {}",
                    manifest.name, back.version, previous_manifest.version, back.reason
                );
                rollout.rolled_back_to_previous(back);
                (message, failed_on)
            }
        }
    };
    shared.failing.clear();
    shared.fence.last_calls.forget_all();
    requeue_all(shared);
    let event = Event {
        warning: true,
        reason: "PluginRolledBack".into(),
        message,
    };
    for key in failed_on {
        if let Some(parent) = shared.sources.parent.get(&key.namespace, &key.name) {
            shared
                .fence
                .post(&shared.writer_for(&key), &parent, &event, "Rollback");
        }
    }
}
