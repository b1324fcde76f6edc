//! What the admin server (`/healthz`, `/readyz`, `/metrics`, `/plugins`,
//! replays) reads from the running host.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::admin::{Detail, Probes};
use kubeplug_kube::health::ApiHealth;
use kubeplug_operator::metrics::OperatorMetrics;
use kubeplug_operator::registry::Registry;
use kubeplug_runtime::Runtime;

/// What the admin server reads from the host.
pub(super) fn probes(
    metrics: Vec<prometheus_client::registry::Registry>,
    registry: &Arc<Registry>,
    runtime: &Runtime,
    (health, client): (&Arc<ApiHealth>, &kube::Client),
    scanned: &Arc<AtomicBool>,
    operator: &OperatorMetrics,
) -> Probes {
    Probes {
        metrics,
        refresh: {
            let (registry, budget, metrics) = (
                registry.clone(),
                runtime.memory_budget().clone(),
                operator.clone(),
            );
            Box::new(move || {
                registry.report_states();
                metrics.call_memory(budget.stats());
            })
        },
        // Ready: the plugins present at start are loaded, their caches have
        // listed once, and the API server answers (see kubeplug_kube::health:
        // from the host's own requests and watches, a probe only after a
        // silence).
        ready: {
            let (health, client, scanned, registry) = (
                health.clone(),
                client.clone(),
                scanned.clone(),
                registry.clone(),
            );
            Box::new(move || {
                if !scanned.load(Ordering::Relaxed) {
                    return Err("loading the plugins present at start".into());
                }
                health.ready(&client)?;
                let unsynced = registry.unsynced();
                if !unsynced.is_empty() {
                    return Err(format!("caches of {} not listed yet", unsynced.join(", ")));
                }
                Ok(())
            })
        },
        plugins: {
            let registry = registry.clone();
            Box::new(move |detail| {
                let rows = registry.status();
                let rows: Vec<_> = match detail {
                    Detail::Full => rows,
                    Detail::Summary => rows.into_iter().map(|row| row.summary()).collect(),
                };
                serde_json::to_value(rows).unwrap_or_default()
            })
        },
        replays: {
            let registry = registry.clone();
            Box::new(move |plugin, parent| {
                let ring = registry.replays(plugin)?;
                match parent {
                    None => serde_json::to_value(ring.list()).ok(),
                    Some(parent) => serde_json::to_value(ring.get(parent)?).ok(),
                }
            })
        },
        stopping: AtomicBool::new(false),
    }
}
