//! The host's metrics registries, composed from each subsystem's families:
//! kubeplug's own under the `kubeplug_` prefix, and beside them, without
//! prefix, the families stock client-go and controller-runtime dashboards
//! query (`workqueue_*`, `rest_client_requests_total`,
//! `leader_election_master_status`, `controller_runtime_reconcile_*`) and
//! the process metrics of the Prometheus client libraries ([`process`]).
//! `/metrics` serves both as one exposition.

mod process;

use prometheus_client::registry::Registry;

use kubeplug_kube::apply::metrics::ApplyMetrics;
use kubeplug_kube::client::metrics::RequestMetrics;
use kubeplug_kube::health::metrics::HealthMetrics;
use kubeplug_kube::identity::metrics::AccessMetrics;
use kubeplug_kube::informers::metrics::InformerMetrics;
use kubeplug_kube::leader::metrics::LeaderMetrics;
use kubeplug_operator::metrics::OperatorMetrics;

/// Every subsystem's metrics.
pub struct HostMetrics {
    /// kubeplug's own families, under the `kubeplug` prefix.
    pub own: Registry,
    /// The families named as client-go, controller-runtime and the
    /// Prometheus client libraries name them: no prefix.
    pub standard: Registry,
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
        let mut own = Registry::with_prefix("kubeplug");
        let mut standard = Registry::default();
        let operator = OperatorMetrics::register(&mut own, &mut standard);
        let apply = ApplyMetrics::register(&mut own);
        let access = AccessMetrics::register(&mut own);
        let leader = LeaderMetrics::register(&mut own, &mut standard);
        let informers = InformerMetrics::register(&mut own);
        let health = HealthMetrics::register(&mut own);
        let requests = RequestMetrics::register(&mut own, &mut standard);
        standard.register_collector(Box::new(process::ProcessCollector::new()));
        HostMetrics {
            own,
            standard,
            operator,
            informers,
            leader,
            apply,
            access,
            health,
            requests,
        }
    }

    /// What `/metrics` serves, in order.
    pub fn registries(self) -> Vec<Registry> {
        vec![self.own, self.standard]
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
    use kubeplug_kube::queue::{Debounce, Queue};
    use kubeplug_operator::metrics::Ended;

    /// The snapshot of the exposition, regenerated with `UPDATE_SNAPSHOTS=1`.
    const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/run/testdata/metrics.txt");

    /// The exposition's lines sorted, the process metrics' values (which
    /// change with every scrape) replaced by `<value>`.
    fn snapshot_lines(text: &str) -> String {
        let mut lines: Vec<String> = text
            .lines()
            .map(|line| match line.strip_prefix("process_") {
                Some(_) => match line.rsplit_once(' ') {
                    Some((series, _)) => format!("{series} <value>"),
                    None => line.to_string(),
                },
                None => line.to_string(),
            })
            .collect();
        lines.sort();
        lines.join("\n") + "\n"
    }

    /// Dashboards, alerts, tests and docs name these series: every name,
    /// type, label and help text stays as it was when one `Metrics` held
    /// them all (`testdata/metrics.txt`, the sorted exposition), and the
    /// families named as client-go, controller-runtime and the Prometheus
    /// client libraries name them are served beside them, without prefix.
    #[tokio::test(start_paused = true)]
    async fn every_series_keeps_its_name_type_labels_and_help() {
        let m = HostMetrics::new();
        m.operator
            .call_memory(kubeplug_runtime::BudgetStats::default());
        let queue = Queue::observed(Debounce::NONE, m.operator.controller_started("p"));
        queue.add("a");
        assert_eq!(queue.next().await, Some("a"));
        m.operator
            .reconciled("p", "ok", Ended::Success, Duration::from_millis(3));
        queue.done(&"a");
        queue.retry_after("a", Duration::from_secs(1));
        m.operator.skipped("p", Duration::from_millis(1));
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
        m.requests
            .request("host", "10.0.0.1:6443", "GET", Some(200));
        m.requests.request("p", "10.0.0.1:6443", "WATCH", None);
        let lines = snapshot_lines(&crate::admin::encode(&m.registries()));
        if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
            std::fs::write(SNAPSHOT, &lines).expect("write the snapshot");
            return;
        }
        assert_eq!(
            lines,
            include_str!("testdata/metrics.txt"),
            "regenerate with UPDATE_SNAPSHOTS=1 if the change is meant"
        );
    }
}
