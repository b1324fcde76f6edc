//! The kubelet for the Pod `helm test` makes (deploy/chart/templates/tests/
//! doctor.yaml), played with real parts: kwok's simulated nodes run no
//! container, so the test waits until the scheduler has bound the Pod and
//! kwok marked it Running, runs its container from the image as the kubelet
//! would (the Pod as the API server stored it: args, env, mounts, a token
//! of its ServiceAccount; [`crate::pod`]), keeps its log, and writes the
//! outcome through the status subresource as a kubelet does (phase
//! Succeeded or Failed, the container terminated with its exit code and,
//! under `FallbackToLogsOnError`, the log's tail as its message). kwok's
//! stages leave a pod alone once it has left `Pending` (pod-ready) unless a
//! Job owns it (pod-complete), so nothing overwrites that status. Helm then
//! judges the hook by the phase.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::pod::{Pod, UID};
use crate::{eventually, get_json, kubectl_ok};

const SYSTEM: &str = "kubeplug-system";
/// The hook Pod's name (the chart's names are fixed).
pub const TEST_POD: &str = "kubeplug-test";
/// Helm's wait for the hook, and this side's for the Pod: doctor compiles
/// the plugins in the Pod (seconds each).
pub const TIMEOUT: Duration = Duration::from_secs(240);
/// What the kubelet keeps of a failed container's log as its termination
/// message under `FallbackToLogsOnError` (kubelet:
/// `MaxContainerTerminationMessageLogLines`, `...LogLength`).
const MESSAGE_LINES: usize = 80;
const MESSAGE_BYTES: usize = 2048;

/// What the simulated kubelet saw of one run of the hook Pod.
pub struct Ran {
    pub exit_code: i32,
    /// The container's log (stdout and stderr, as the kubelet keeps it).
    pub log: String,
    /// The Pod as its status was written.
    pub pod: Value,
}

/// The uid of the hook Pod there is now, if any.
pub fn hook_pod_uid() -> Option<String> {
    get_json(SYSTEM, &format!("pod/{TEST_POD}"))
        .and_then(|pod| pod["metadata"]["uid"].as_str().map(String::from))
}

/// Play the kubelet for the hook Pod `helm test` makes (another than the
/// Pod `before`, which a previous run left): wait until it is bound and
/// Running, run its container from the image, then write its terminal
/// status as a kubelet does.
pub fn run_hook_pod(before: Option<&str>) -> Ran {
    let pod = eventually(
        "helm test to make its Pod, bound and Running",
        TIMEOUT,
        || {
            let pod = get_json(SYSTEM, &format!("pod/{TEST_POD}"))?;
            let fresh = pod["metadata"]["uid"].as_str() != before;
            let running =
                pod["status"]["phase"] == "Running" && pod["spec"]["nodeName"].is_string();
            (fresh && running && pod["metadata"]["deletionTimestamp"].is_null()).then_some(pod)
        },
    );
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    let spec = &pod["spec"];
    let container = &spec["containers"][0];
    assert_eq!(
        pod["metadata"]["annotations"]["helm.sh/hook"], "test",
        "{pod}"
    );
    assert_eq!(spec["serviceAccountName"], "kubeplug-test");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);

    let simulated = Pod::prepare(SYSTEM, spec, 0, TEST_POD, |a| a);
    assert_eq!(simulated.user(), format!("{UID}:{UID}"));
    assert_eq!(simulated.args()[0], "doctor", "{:?}", simulated.args());
    let log_path = simulated.work.path().join("doctor.log");
    let log_file = std::fs::File::create(&log_path).expect("log file");
    let started = now();
    let status = simulated
        .command()
        .stdout(log_file.try_clone().expect("log file"))
        .stderr(log_file)
        .status()
        .expect("run the hook Pod's container");
    let finished = now();
    let log = std::fs::read_to_string(&log_path).expect("the container's log");
    eprintln!("--- the hook Pod's log ---\n{log}");
    let exit_code = status.code().expect("the container exits (not killed)");

    // The kubelet's status: the container terminated, the pod in its
    // terminal phase (restartPolicy Never), Ready no more.
    let mut terminated = json!({
        "exitCode": exit_code,
        "reason": if exit_code == 0 { "Completed" } else { "Error" },
        "startedAt": started,
        "finishedAt": finished,
    });
    if exit_code != 0 && container["terminationMessagePolicy"] == "FallbackToLogsOnError" {
        terminated["message"] = json!(log_tail(&log));
    }
    let not_ready = |kind: &str| {
        json!({
            "type": kind,
            "status": "False",
            "reason": "PodCompleted",
            "lastTransitionTime": finished,
        })
    };
    let patch = json!({
        "metadata": {"uid": uid},
        "status": {
            "phase": if exit_code == 0 { "Succeeded" } else { "Failed" },
            "conditions": [not_ready("Ready"), not_ready("ContainersReady")],
            "containerStatuses": [{
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": false,
                "started": false,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }],
        },
    });
    let written = kubectl_ok(
        &[
            "patch",
            "pod",
            TEST_POD,
            "-n",
            SYSTEM,
            "--subresource=status",
            "--type=strategic",
            "-p",
            &patch.to_string(),
            "-o",
            "json",
        ],
        None,
    );
    let pod: Value = serde_json::from_str(&written).expect("the Pod as written");
    Ran {
        exit_code,
        log,
        pod,
    }
}

/// What the kubelet keeps of a log as a termination message: its last
/// lines, then its last bytes.
fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(MESSAGE_LINES)..].join("\n");
    let mut start = tail.len().saturating_sub(MESSAGE_BYTES);
    while !tail.is_char_boundary(start) {
        start += 1;
    }
    tail[start..].to_string()
}

/// RFC 3339 now, as the kubelet stamps a container's times.
fn now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
