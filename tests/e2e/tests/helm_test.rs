//! `helm test` of the chart on the real local control plane: its hook Pod
//! (deploy/chart/templates/tests/doctor.yaml) runs `kubeplug doctor` from
//! the host image in installation mode against the release, as its own
//! ServiceAccount with the chart's read-only RBAC, in the `restricted`
//! namespace.
//!
//! kwok's simulated nodes run no container, so this test plays the kubelet
//! for that Pod (`kubeplug_e2e::hook`): `helm test` runs in the background
//! and creates the Pod, the test runs its container from the image and
//! writes its outcome as a kubelet does, and Helm judges the hook by it.
//!
//! Passing, then a right the host needs taken away through the chart's
//! values (`plugins.identities.database.impersonate=false`: the host may no
//! longer act as the database plugin) fails `helm test` with doctor naming
//! the right and its fix, and putting it back passes again.

use std::process::{Child, Command, Stdio};

use kubeplug_e2e::hook::{Ran, TEST_POD, TIMEOUT, hook_pod_uid, run_hook_pod};
use kubeplug_e2e::*;

const SYSTEM: &str = "kubeplug-system";

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
