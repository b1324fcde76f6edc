//! `helm test` of the chart on the real local control plane: its hook Pod
//! (deploy/chart/templates/tests/doctor.yaml) runs `kubeplug doctor` from
//! the host image in installation mode against the release, as its own
//! ServiceAccount with the chart's read-only RBAC, in the `restricted`
//! namespace.
//!
//! kwok's simulated nodes run no container, so this test plays the kubelet
//! for that Pod, with real parts: `helm test` runs in the background and
//! creates the Pod; the scheduler binds it and kwok marks it Running; the
//! test runs its container from the image as the kubelet would (the Pod as
//! the API server stored it: args, env, mounts, a token of its
//! ServiceAccount; `kubeplug_e2e::pod`), keeps its log, and writes the
//! outcome through the status subresource as a kubelet does (phase
//! Succeeded or Failed, the container terminated with its exit code and,
//! under `FallbackToLogsOnError`, the log's tail as its message). kwok's
//! stages leave a pod alone once it has left `Pending` (pod-ready) unless a
//! Job owns it (pod-complete), so nothing overwrites that status. Helm then
//! judges the hook by the phase.
//!
//! Passing, then a right the host needs taken away through the chart's
//! values (`plugins.identities.database.impersonate=false`: the host may no
//! longer act as the database plugin) fails `helm test` with doctor naming
//! the right and its fix, and putting it back passes again.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kubeplug_e2e::pod::{Pod, UID};
use kubeplug_e2e::*;
use serde_json::{Value, json};

const SYSTEM: &str = "kubeplug-system";
/// The hook Pod's name (the chart's names are fixed).
const TEST_POD: &str = "kubeplug-test";
/// Helm's wait for the hook, and this test's for the Pod: doctor compiles
/// the three seeds in the Pod (seconds each).
const TIMEOUT: Duration = Duration::from_secs(240);
/// What the kubelet keeps of a failed container's log as its termination
/// message under `FallbackToLogsOnError` (kubelet:
/// `MaxContainerTerminationMessageLogLines`, `...LogLength`).
const MESSAGE_LINES: usize = 80;
const MESSAGE_BYTES: usize = 2048;

/// `helm upgrade --install` of the chart with its defaults and `set`, as
/// install.rs installs it: server-side, adopting what other tests applied.
/// Without the aggregated API: no host serves it here (kwok runs the
/// Deployment's pods as nothing), so its APIService would never be
/// `Available` and doctor would rightly fail on it.
fn install(set: &[&str]) -> String {
    let mut args = Vec::new();
    for value in ["aggregatedApi.enabled=false"].iter().chain(set) {
        args.extend(["--set", value]);
    }
    helm_install(&args)
}

/// `helm test kubeplug`, started in the background: its output (stdout and
/// stderr) goes to a file read when it ends.
struct HelmTest {
    child: Child,
    output: tempfile::NamedTempFile,
}

impl HelmTest {
    fn start() -> HelmTest {
        let output = tempfile::NamedTempFile::new().expect("a temporary file");
        // One open file for both streams: their writes share its offset.
        let file = output.reopen().expect("reopen");
        let timeout = format!("{}s", TIMEOUT.as_secs());
        let child = Command::new(std::env::var("HELM").expect("HELM (tests/e2e/run sets it)"))
            .args(["test", "kubeplug", "--namespace", SYSTEM, "--timeout"])
            .arg(&timeout)
            .arg("--color=never")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("clone"))
            .stderr(file)
            .spawn()
            .expect("start helm test");
        HelmTest { child, output }
    }

    /// Whether `helm test` passed, and what it printed.
    fn finish(mut self) -> (bool, String) {
        let status = self.child.wait().expect("helm test ends");
        let text = std::fs::read_to_string(self.output.path()).expect("helm test's output");
        (status.success(), text)
    }
}

impl Drop for HelmTest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the simulated kubelet saw of one run of the hook Pod.
struct Ran {
    exit_code: i32,
    /// The container's log (stdout and stderr, as the kubelet keeps it).
    log: String,
    /// The Pod as its status was written.
    pod: Value,
}

/// The uid of the hook Pod there is now, if any.
fn hook_pod_uid() -> Option<String> {
    get_json(SYSTEM, &format!("pod/{TEST_POD}"))
        .and_then(|pod| pod["metadata"]["uid"].as_str().map(String::from))
}

/// Play the kubelet for the hook Pod `helm test` makes (another than the
/// Pod `before`, which a previous run left): wait until it is bound and
/// Running, run its container from the image, then write its terminal
/// status as a kubelet does.
fn run_hook_pod(before: Option<&str>) -> Ran {
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

/// One `helm test`, with this test as the Pod's kubelet.
fn helm_test() -> (bool, String, Ran) {
    let before = hook_pod_uid();
    let helm = HelmTest::start();
    let ran = run_hook_pod(before.as_deref());
    let (passed, output) = helm.finish();
    eprintln!("--- helm test ---\n{output}");
    (passed, output, ran)
}

/// Whether the host's ServiceAccount may act as the database plugin, as
/// the authorizer answers now.
fn host_may_impersonate_database() -> bool {
    let out = kubectl(
        &[
            "auth",
            "can-i",
            "impersonate",
            "serviceaccounts/kubeplug-plugin-database",
            "-n",
            SYSTEM,
            "--as",
            "system:serviceaccount:kubeplug-system:kubeplug",
        ],
        None,
    );
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// Leaves the cluster as the other tests expect it: no release (it keeps
/// the namespace and the teams' ConfigMaps), no hook Pod, the seeds'
/// identities as `deploy/` has them.
struct Uninstall;

impl Drop for Uninstall {
    fn drop(&mut self) {
        if let Ok(helm) = std::env::var("HELM") {
            let _ = Command::new(helm)
                .args(["uninstall", "kubeplug", "--namespace", SYSTEM])
                .output();
        }
        let _ = kubectl(
            &[
                "delete",
                "pod",
                TEST_POD,
                "-n",
                SYSTEM,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
        install_crds();
    }
}

#[test]
fn helm_test_runs_doctor_in_the_cluster_and_fails_naming_a_right_the_host_lacks() {
    install_crds();
    let _uninstall = Uninstall;
    for name in ["database", "myapp", "pod-annotator"] {
        ship_plugin(name, &built(name));
    }
    let out = install(&[]);
    assert!(out.contains("STATUS: deployed"), "{out}");

    // The whole installation reads right: `helm test` passes.
    let (passed, output, ran) = helm_test();
    assert_eq!(ran.exit_code, 0, "doctor passes in the pod:\n{}", ran.log);
    assert_eq!(ran.pod["status"]["phase"], "Succeeded");
    for needle in [
        "in-cluster (the pod's ServiceAccount)",
        "kubeplug-system exists",
        "Deployment kubeplug-system/kubeplug (installation mode",
        "ConfigMap kubeplug-system/kubeplug-policy key policy.yaml",
        "kubeplug-plugin-database, kubeplug-plugin-myapp, kubeplug-plugin-pod-annotator",
        "ServiceAccount kubeplug-system/kubeplug (the Deployment's) may impersonate kubeplug-plugin-database",
    ] {
        assert!(ran.log.contains(needle), "no {needle:?} in:\n{}", ran.log);
    }
    // Every line but the optional aggregated API's reads ok: the hook's
    // RBAC lets doctor read all it checks.
    for line in ran.log.lines().filter(|l| !l.is_empty()) {
        assert!(
            line.starts_with("ok ") || line.contains("APIService"),
            "not ok: {line}\n{}",
            ran.log
        );
    }
    assert!(passed, "helm test passes: {output}");
    assert!(output.contains("TEST SUITE:     kubeplug-test"), "{output}");
    assert!(output.contains("Phase:          Succeeded"), "{output}");
    // hook-succeeded: the passing Pod is removed.
    eventually("the passing hook Pod to go", TIMEOUT, || {
        hook_pod_uid().is_none().then_some(())
    });

    // The host may no longer act as the database plugin.
    install(&["plugins.identities.database.impersonate=false"]);
    // RBAC reaches the authorizer through its informers: a moment.
    eventually("the right to be gone", TIMEOUT, || {
        (!host_may_impersonate_database()).then_some(())
    });
    let (passed, output, ran) = helm_test();
    assert!(!passed, "helm test fails: {output}");
    assert!(output.contains("Phase:          Failed"), "{output}");
    assert!(output.contains("pod kubeplug-test failed"), "{output}");
    assert_ne!(ran.exit_code, 0, "doctor fails in the pod:\n{}", ran.log);
    let right = "ServiceAccount kubeplug-system/kubeplug (the Deployment's) may not impersonate serviceaccounts kubeplug-plugin-database in namespace kubeplug-system";
    let fix = "plugins.identities.database.impersonate: true";
    let failed: Vec<&str> = ran.log.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        failed
            .iter()
            .all(|l| l.contains("host rights database") && l.contains(right) && l.contains(fix)),
        "only the host's right for database fails, naming it: {failed:#?}"
    );
    assert!(!failed.is_empty(), "{}", ran.log);
    // The failed Pod stays, its status saying why (its log's tail, which
    // ends with the failures).
    let pod = get_json(SYSTEM, &format!("pod/{TEST_POD}")).expect("the failed hook Pod stays");
    assert_eq!(pod["status"]["phase"], "Failed");
    let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 1, "{pod}");
    let message = terminated["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("check(s) failed:") && message.contains(right),
        "the termination message names the right: {message}"
    );

    // Put back, `helm test` passes again (and replaces the failed Pod).
    install(&[]);
    eventually("the right to be back", TIMEOUT, || {
        host_may_impersonate_database().then_some(())
    });
    let (passed, output, ran) = helm_test();
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    assert!(passed, "helm test passes again: {output}");
}
