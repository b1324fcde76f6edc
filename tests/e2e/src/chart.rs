//! The host as the chart installs it: the Deployment's pod, as the API
//! server stored it, run from the host image by the pod simulator
//! ([`crate::pod`]) as this test's only host (kwok's pods run nothing, and
//! the Deployment goes once read); and the chart's APIService routed to it.

use std::process::Stdio;

use serde_json::Value;

use crate::pod::Pod;
use crate::{Host, apply, eventually, free_port, get_json, kubectl, kubectl_ok};

/// The release's namespace.
pub const SYSTEM: &str = "kubeplug-system";

/// The host of the installed chart, running as its pod would. Dropped, it
/// takes the APIService routed to it away first, even when a test fails.
pub struct ChartHost {
    host: Option<Host>,
    /// The port its aggregated API listens on (the pod's 8443, moved to
    /// a free one on this machine).
    pub api_port: u16,
    /// Dropped after the host: its volumes stop with it.
    pub pod: Pod,
}

impl ChartHost {
    /// Run the pod of the installed Deployment `kubeplug` as pod
    /// `pod_name`, then remove the Deployment (whose simulated pods run
    /// nothing) so that this process is the only host.
    pub fn start(pod_name: &str) -> ChartHost {
        Self::run(pod_name, true)
    }

    /// Run the pod of the installed Deployment `kubeplug` as pod
    /// `pod_name` and leave the Deployment, for what reads it (`helm test`'s
    /// doctor, a `helm upgrade` that changes it).
    pub fn start_beside_deployment(pod_name: &str) -> ChartHost {
        Self::run(pod_name, false)
    }

    fn run(pod_name: &str, remove: bool) -> ChartHost {
        let spec = get_json(SYSTEM, "deployment/kubeplug").expect("the chart's Deployment")["spec"]
            ["template"]["spec"]
            .clone();
        if remove {
            remove_deployment();
        }
        let (port, api_port) = (free_port(), free_port());
        let pod = Pod::prepare(SYSTEM, &spec, 0, pod_name, |a| {
            if a.starts_with("--listen=") {
                format!("--listen=0.0.0.0:{port}")
            } else if a.starts_with("--api-listen=") {
                format!("--api-listen=0.0.0.0:{api_port}")
            } else {
                a
            }
        });
        let log = pod.work.path().join("host.log");
        let child = pod
            .command()
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start the host as in its pod");
        ChartHost {
            host: Some(Host::adopt(child, port, log)),
            api_port,
            pod,
        }
    }

    /// The host process.
    pub fn host(&self) -> &Host {
        self.host.as_ref().expect("the host runs until stopped")
    }

    /// Point the chart's Service `kubeplug-api` at this machine's loopback
    /// and the APIService at this host's port (what register-loopback
    /// does: an ExternalName Service is what reaches a process outside
    /// any pod network). The APIService keeps the caBundle the host
    /// injected. A `helm upgrade` puts the chart's back: route again after
    /// one.
    pub fn route_api(&self) {
        delete_api_service();
        apply(
            SYSTEM,
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: kubeplug-api\nspec:\n  type: ExternalName\n  externalName: localhost\n",
        );
        point_apiservice_at(self.api_port);
    }

    /// Undo [`ChartHost::route_api`], as a `helm upgrade` without
    /// `--force-conflicts` needs: the ExternalName Service gone (Helm makes
    /// the chart's again) and the APIService's port the chart's, so that
    /// no field this test changed differs from the chart's.
    pub fn unroute_api(&self) {
        delete_api_service();
        // The chart's port.
        point_apiservice_at(443);
    }

    /// The next pod of a Deployment an upgrade changed: this host stopped
    /// (its APIService kept, routed anew) and `pod_name` started from the
    /// Deployment as it is now, as a rollout replaces a pod. True: the old
    /// one exited cleanly.
    pub fn roll(mut self, pod_name: &str) -> (bool, ChartHost) {
        let clean = self.host.take().expect("not stopped yet").terminate();
        let next = Self::run(pod_name, false);
        next.route_api();
        (clean, next)
    }

    /// Stop the host cleanly, the APIService first. True: it exited
    /// cleanly.
    pub fn stop(mut self) -> bool {
        remove_apiservice();
        self.host.take().expect("not stopped yet").terminate()
    }
}

impl Drop for ChartHost {
    fn drop(&mut self) {
        if self.host.is_some() {
            remove_apiservice();
        }
    }
}

/// Set the port of the APIService's Service.
fn point_apiservice_at(port: u16) {
    kubectl_ok(
        &[
            "patch",
            "apiservice",
            "v1alpha1.kubeplug.io",
            "--type=merge",
            "-p",
            &format!("{{\"spec\":{{\"service\":{{\"port\":{port}}}}}}}"),
        ],
        None,
    );
}

/// Remove the chart's Service `kubeplug-api` (or the test's in its place).
fn delete_api_service() {
    kubectl_ok(
        &[
            "delete",
            "service",
            "kubeplug-api",
            "-n",
            SYSTEM,
            "--ignore-not-found",
        ],
        None,
    );
}

/// Remove the APIService: one whose server is gone makes discovery
/// incomplete for every client (and namespaces wait to be deleted).
fn remove_apiservice() {
    let _ = kubectl(
        &[
            "delete",
            "apiservice",
            "v1alpha1.kubeplug.io",
            "--ignore-not-found",
        ],
        None,
    );
}

/// `kubectl get plugin NAME -o json` through the aggregation layer, once
/// it answers.
pub fn get_plugin(name: &str) -> Option<Value> {
    let out = kubectl(&["get", "plugin", name, "-o", "json"], None);
    serde_json::from_slice(&out.stdout).ok()
}

/// Remove the chart's Deployment (after an install or upgrade made it).
pub fn remove_deployment() {
    kubectl_ok(
        &[
            "delete",
            "deployment",
            "kubeplug",
            "-n",
            SYSTEM,
            "--ignore-not-found",
        ],
        None,
    );
}

/// The size of each stored revision of release `kubeplug` (its Secrets'
/// `release` data, base64), as Helm keeps it: what the 1 MiB cap of a
/// Secret applies to.
pub fn release_sizes() -> Vec<usize> {
    let releases: Value = serde_json::from_str(&kubectl_ok(
        &[
            "get",
            "secrets",
            "-n",
            SYSTEM,
            "-l",
            "owner=helm,name=kubeplug",
            "-o",
            "json",
        ],
        None,
    ))
    .expect("release Secrets");
    releases["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|r| r["data"]["release"].as_str().map_or(0, str::len))
        .collect()
}

/// The pods of the Deployment `kubeplug` (kwok's, which run nothing).
pub fn kubeplug_pods() -> Vec<Value> {
    crate::items(&[
        "pods",
        "-n",
        SYSTEM,
        "-l",
        "app.kubernetes.io/name=kubeplug",
    ])
}

/// Wait until `want` pods of the Deployment run, scheduled on a node, each
/// passing `check`.
pub fn wait_for_pods(
    what: &str,
    want: usize,
    timeout: std::time::Duration,
    check: impl Fn(&Value) -> bool,
) {
    eventually(what, timeout, || {
        let running = kubeplug_pods()
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| p["status"]["phase"] == "Running" && p["spec"]["nodeName"].is_string())
            .filter(|p| check(p))
            .count();
        (running == want).then_some(())
    });
}
