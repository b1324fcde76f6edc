//! The host's one metrics registry, composed from each subsystem's families.

use prometheus_client::registry::Registry;

use kubeplug_kube::apply::metrics::ApplyMetrics;
use kubeplug_kube::client::metrics::RequestMetrics;
use kubeplug_kube::health::metrics::HealthMetrics;
use kubeplug_kube::identity::metrics::AccessMetrics;
use kubeplug_kube::informers::metrics::InformerMetrics;
use kubeplug_kube::leader::metrics::LeaderMetrics;
use kubeplug_operator::metrics::OperatorMetrics;

/// Every subsystem's metrics, registered under the `kubeplug` prefix.
pub struct HostMetrics {
    /// What `/metrics` serves.
    pub registry: Registry,
    pub operator: OperatorMetrics,
    pub informers: InformerMetrics,
    pub leader: LeaderMetrics,
    pub apply: ApplyMetrics,
    pub access: AccessMetrics,
    pub health: HealthMetrics,
    pub requests: RequestMetrics,
}

impl HostMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kubeplug");
        let operator = OperatorMetrics::register(&mut registry);
        let apply = ApplyMetrics::register(&mut registry);
        let access = AccessMetrics::register(&mut registry);
        let leader = LeaderMetrics::register(&mut registry);
        let informers = InformerMetrics::register(&mut registry);
        let health = HealthMetrics::register(&mut registry);
        let requests = RequestMetrics::register(&mut registry);
        HostMetrics {
            registry,
            operator,
            informers,
            leader,
            apply,
            access,
            health,
            requests,
        }
    }
}

impl Default for HostMetrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Dashboards, alerts, tests and docs name these series: every name,
    /// type, label and help text stays as it was when one `Metrics` held
    /// them all (`testdata/metrics.txt`, the sorted exposition).
    #[test]
    fn every_series_keeps_its_name_type_labels_and_help() {
        let m = HostMetrics::new();
        m.operator
            .call_memory(kubeplug_runtime::BudgetStats::default());
        m.operator.reconciled("p", "ok", Duration::from_millis(3));
        m.operator.skipped("p");
        m.apply.read("p", "get");
        m.access.access_review();
        m.apply.write("p", "apply");
        m.operator.queue_depth("p", 2);
        m.operator
            .plugin_info("p", "1.0.0", "abc", kubeplug_core::rollout::State::Running);
        m.operator
            .plugin_info("q", "1.0.0", "abc", kubeplug_core::rollout::State::Running);
        m.operator.plugin_removed("q");
        m.operator.load_failed("p");
        m.operator.child_clash("p");
        m.operator.events_dropped("p", 2);
        m.operator
            .webhook_answered("p", "validate", "allowed", Duration::from_millis(3));
        m.leader.leading("p", true);
        m.informers.watch_error("r");
        m.informers.cached_objects("r", 1, 2, 3);
        m.informers.cached_objects("s", 1, 2, 3);
        m.informers.informer_stopped("s");
        m.operator.shadow_compared("p", "same");
        m.operator.shadow_parents("p", Some((2, 1)));
        m.operator.rolled_back("p");
        m.health.api_reachable(true);
        m.requests.request("host", "GET", Some(200));
        m.requests.request("p", "WATCH", None);
        let mut lines: Vec<_> = crate::admin::encode(&m.registry)
            .lines()
            .map(String::from)
            .collect();
        lines.sort();
        assert_eq!(
            lines.join("\n") + "\n",
            include_str!("testdata/metrics.txt")
        );
    }
}
