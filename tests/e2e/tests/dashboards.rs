//! Stock dashboards and alerts, made for client-go and controller-runtime
//! operators, find their series on `/metrics`: a leader-elected host with
//! the seed plugins reconciles a Database, and the queries such a dashboard
//! runs (workqueue depth, adds and latencies, REST client requests by code
//! and method, leader election status, controller-runtime's reconciles, the
//! process' memory) each return data.

use std::time::Duration;

use kubeplug_e2e::*;

/// How long anything the host and the control plane do together may take.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The value of an unlabelled series `name` (e.g. `process_open_fds`).
fn scalar(host: &Host, name: &str) -> Option<f64> {
    let (_, body) = host.get("/metrics").expect("metrics endpoint");
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
}

/// The series of `name` whose labels hold every one of `labels` (each
/// `key="value"`), as (labels, value).
fn matching(host: &Host, name: &str, labels: &[&str]) -> Vec<(String, f64)> {
    host.series(name)
        .into_iter()
        .filter(|(set, _)| {
            let set: Vec<&str> = set.split(',').collect();
            labels.iter().all(|label| set.contains(label))
        })
        .collect()
}

/// The sum of the series of `name` that hold every one of `labels`.
fn sum(host: &Host, name: &str, labels: &[&str]) -> f64 {
    matching(host, name, labels).iter().map(|(_, v)| v).sum()
}

#[test]
fn the_queries_of_stock_dashboards_return_data() {
    install_crds();
    let ns = Namespace::new("dashboards");
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    let mut args = vec!["--leader-elect", "--lease-namespace", ns.name.as_str()];
    args.extend(LEASE);
    let host = Host::start_with(&dir, &args);
    running(&host, "database");
    eventually("this replica to lead database", TIMEOUT, || {
        (sum(
            &host,
            "leader_election_master_status",
            &[r#"name="kubeplug-database""#],
        ) == 1.0)
            .then_some(())
    });

    apply(&ns.name, &database("orders"));
    database_runs(&ns.name, "orders");
    let queue = [r#"controller="database""#, r#"name="database""#];
    eventually("a successful reconcile of the Database", TIMEOUT, || {
        (sum(
            &host,
            "controller_runtime_reconcile_total",
            &[r#"controller="database""#, r#"result="success""#],
        ) > 0.0)
            .then_some(())
    });

    // client-go's workqueue, per controller.
    assert_eq!(
        matching(&host, "workqueue_depth", &queue).len(),
        1,
        "workqueue_depth{{name=\"database\",controller=\"database\"}}"
    );
    assert!(sum(&host, "workqueue_adds_total", &queue) > 0.0);
    for histogram in [
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_bucket",
    ] {
        let inf = [queue[0], queue[1], r#"le="+Inf""#];
        assert!(
            sum(&host, histogram, &inf) > 0.0,
            "{histogram}{{le=\"+Inf\"}} of database: {:?}",
            host.series(histogram)
        );
    }
    for gauge in [
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
    ] {
        assert_eq!(matching(&host, gauge, &queue).len(), 1, "{gauge}");
    }
    assert_eq!(
        matching(&host, "workqueue_retries_total", &queue).len(),
        1,
        "workqueue_retries_total"
    );

    // client-go's REST client: answered requests by code and method.
    let requests = host.series("rest_client_requests_total");
    assert!(
        requests.iter().any(|(labels, value)| {
            (labels.contains(r#"code="200""#) || labels.contains(r#"code="201""#))
                && labels.contains("method=\"")
                && labels.contains("host=\"")
                && *value > 0.0
        }),
        "rest_client_requests_total: {requests:?}"
    );
    assert!(
        !requests.iter().any(|(labels, _)| labels.contains("WATCH")),
        "a watch is a GET: {requests:?}"
    );

    // controller-runtime's reconciles: every result shown, errors at zero or more.
    for result in ["success", "error", "requeue", "requeue_after"] {
        let result_label = format!("result=\"{result}\"");
        let labels = [r#"controller="database""#, result_label.as_str()];
        assert_eq!(
            matching(&host, "controller_runtime_reconcile_total", &labels).len(),
            1,
            "controller_runtime_reconcile_total{{result=\"{result}\"}}"
        );
    }
    assert_eq!(
        matching(
            &host,
            "controller_runtime_reconcile_errors_total",
            &[r#"controller="database""#]
        )
        .len(),
        1
    );
    assert!(
        sum(
            &host,
            "controller_runtime_reconcile_time_seconds_count",
            &[r#"controller="database""#]
        ) > 0.0
    );

    // The Prometheus client libraries' process metrics.
    assert!(scalar(&host, "process_resident_memory_bytes").is_some_and(|b| b > 0.0));
    assert!(scalar(&host, "process_open_fds").is_some_and(|n| n > 0.0));
    assert!(scalar(&host, "process_start_time_seconds").is_some_and(|t| t > 0.0));
    assert!(scalar(&host, "process_cpu_seconds_total").is_some());

    // kubeplug's own families are still served beside them, with one EOF.
    let (_, body) = host.get("/metrics").expect("metrics endpoint");
    assert!(host.reconciles("database") > 0.0);
    assert_eq!(body.matches("# EOF").count(), 1);

    kubectl_ok(
        &[
            "delete",
            "databases",
            "--all",
            "-n",
            &ns.name,
            "--wait=true",
            "--timeout=120s",
        ],
        None,
    );
}
