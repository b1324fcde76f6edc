//! A team's path, each command as a user types it, in a directory outside
//! the checkout: `kubeplug new` → `kubeplug build` → `kubeplug test` →
//! `kubeplug platform` → its manifests applied → the host, as its own
//! ServiceAccount with only deploy/base's rules and the generated ones,
//! reconciles the template's sample → an upgrade serves the new version.
//!
//! What the platform applies is what `kubeplug platform` wrote and nothing
//! else: if its least-privilege roles missed a right the host uses, the
//! plugin would show `degraded` here, and these tests fail.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kubeplug_e2e::*;

const TIMEOUT: Duration = Duration::from_secs(120);

/// `kubeplug ARGS` in `dir`; its output, or a panic with it.
fn kubeplug(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(host_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run kubeplug");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "kubeplug {args:?} in {}:\n{text}",
        dir.display()
    );
    text
}

/// A team's checkout: a fresh directory under the system's temp dir, never
/// inside this repository.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    assert!(!dir.path().starts_with(repo()), "outside the checkout");
    dir
}

/// The plugin's platform side as `kubeplug platform` writes it, applied as
/// a platform engineer would; the grant is returned as one more `--policy`.
fn admit(project: &Path, name: &str, extra: &[&str]) -> PathBuf {
    // The host's installation comes first (its namespace, the seeds).
    install_crds();
    let platform = project.join("platform");
    let wasm = format!("dist/{name}.wasm");
    let mut args = vec!["platform", wasm.as_str(), "--out", "platform"];
    args.extend_from_slice(extra);
    kubeplug(project, &args);
    // Idempotent: a second run is current.
    let mut check = args.clone();
    check.push("--check");
    kubeplug(project, &check);
    kubectl_ok(
        &["apply", "--server-side", "-k", platform.to_str().unwrap()],
        None,
    );
    platform.join(format!("policy-{name}.yaml"))
}

/// Takes away what [`admit`] applied and the objects a test made, even when
/// it fails.
struct Cleanup(Vec<Vec<String>>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for args in self.0.iter().rev() {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let _ = kubectl(&args, None);
        }
    }
}

/// Put the project's `dist/<name>.wasm` in `dir`, as a platform ships a
/// team's build.
fn ship(dir: &PluginDir, project: &Path, name: &str) {
    let wasm = project.join(format!("dist/{name}.wasm"));
    dir.put(name, &std::fs::read(wasm).expect("the built plugin"));
}

/// The project's plugin in a fresh plugin directory, and the host as
/// deploy/base's ServiceAccount `kubeplug` (its own rules plus the
/// generated ones) serving it under deploy/base's grants and `policy`, in
/// the namespace the template's samples use.
fn serve(project: &Path, name: &str, policy: &Path) -> (PluginDir, Host) {
    let dir = PluginDir::with(&[]);
    ship(&dir, project, name);
    let kubeconfig = service_account_kubeconfig(&dir);
    let policy = format!(
        "{},{}",
        repo().join("deploy/base/policy.yaml").display(),
        policy.display()
    );
    let host = Host::start_as(
        &dir,
        &["--policy", &policy, "--namespaces", "default"],
        &kubeconfig,
    );
    (dir, host)
}

/// `plugin` reconciled, and never failed.
fn no_failures(host: &Host, plugin: &str) {
    let of = format!("controller=\"{plugin}\"");
    assert!(host.metric("controller_runtime_reconcile_total", &of) > 0.0);
    assert_eq!(
        host.metric("controller_runtime_reconcile_errors_total", &of),
        0.0,
        "{}",
        host.log_tail()
    );
}

fn serving(host: &Host, name: &str, version: &str) -> serde_json::Value {
    eventually(&format!("{name} {version} running"), TIMEOUT, || {
        host.plugin(name)
            .filter(|p| p["state"] == "running" && p["version"] == version)
    })
}

#[test]
fn a_rust_plugin_goes_from_kubeplug_new_to_serving_and_upgraded_with_generated_platform_manifests()
{
    let team = workspace();
    kubeplug(team.path(), &["new", "--lang", "rust", "greeting"]);
    let project = team.path().join("greeting");
    kubeplug(&project, &["build"]);
    let tested = kubeplug(
        &project,
        &["test", ".", "--crd", "crds/greetings.example.com.yaml"],
    );
    assert!(tested.contains("passed"), "{tested}");

    let mut cleanup = Cleanup(vec![vec![
        "delete".into(),
        "-k".into(),
        project.join("platform").display().to_string(),
        "--ignore-not-found".into(),
    ]]);
    let policy = admit(&project, "greeting", &[]);
    let crd = project.join("crds/greetings.example.com.yaml");
    kubectl_ok(&["apply", "-f", crd.to_str().unwrap()], None);
    cleanup.0.push(vec![
        "delete".into(),
        "-f".into(),
        crd.display().to_string(),
        "--ignore-not-found".into(),
    ]);
    kubectl_ok(
        &[
            "wait",
            "--for=condition=Established",
            "crd/greetings.example.com",
            "--timeout=60s",
        ],
        None,
    );

    let (dir, host) = serve(&project, "greeting", &policy);
    serving(&host, "greeting", "0.1.0");

    let sample = project.join("samples/greeting.yaml");
    kubectl_ok(&["apply", "-f", sample.to_str().unwrap()], None);
    cleanup.0.push(vec![
        "delete".into(),
        "-f".into(),
        sample.display().to_string(),
        "--ignore-not-found".into(),
    ]);
    eventually("the sample's ConfigMap and Ready", TIMEOUT, || {
        let map = get_json("default", "configmap/hello-greeting")?;
        let greeting = get_json("default", "greeting/hello")?;
        (map["data"]["message"] == "Hello, World!" && greeting["status"]["phase"] == "Ready")
            .then_some(())
    });
    // Every reconcile passed under the generated rights.
    no_failures(&host, "greeting");

    // The team changes its plugin and ships the new build: it serves, and
    // the cluster follows.
    let lib = project.join("src/lib.rs");
    let code = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, code.replace("\"Hello, {}!\"", "\"Hi, {}!\"")).unwrap();
    let cargo = project.join("Cargo.toml");
    let manifest = std::fs::read_to_string(&cargo).unwrap();
    std::fs::write(
        &cargo,
        manifest.replacen("version = \"0.1.0\"", "version = \"0.2.0\"", 1),
    )
    .unwrap();
    kubeplug(&project, &["build"]);
    ship(&dir, &project, "greeting");
    serving(&host, "greeting", "0.2.0");
    eventually("the upgraded message", TIMEOUT, || {
        let map = get_json("default", "configmap/hello-greeting")?;
        (map["data"]["message"] == "Hi, World!").then_some(())
    });
    drop(host);
}

#[test]
fn a_python_plugin_goes_from_kubeplug_new_to_serving_with_generated_platform_manifests() {
    let team = workspace();
    kubeplug(team.path(), &["new", "--lang", "python", "stamper"]);
    let project = team.path().join("stamper");
    kubeplug(&project, &["build"]);
    let tested = kubeplug(&project, &["test", "."]);
    assert!(tested.contains("passed"), "{tested}");

    let _cleanup = Cleanup(vec![vec![
        "delete".into(),
        "-k".into(),
        project.join("platform").display().to_string(),
        "--ignore-not-found".into(),
    ]]);
    let policy = admit(
        &project,
        "stamper",
        &["--decorator-key", "example.com/stamper"],
    );
    let (_dir, host) = serve(&project, "stamper", &policy);
    serving(&host, "stamper", "0.1.0");

    let sample = project.join("samples/pod.yaml");
    let _pod = Cleanup(vec![vec![
        "delete".into(),
        "-f".into(),
        sample.display().to_string(),
        "--ignore-not-found".into(),
        "--wait=false".into(),
    ]]);
    kubectl_ok(&["apply", "-f", sample.to_str().unwrap()], None);
    eventually("the sample pod stamped", TIMEOUT, || {
        let pod = get_json("default", "pod/web-1")?;
        (pod["metadata"]["labels"]["example.com/stamper"] == "seen").then_some(())
    });
    no_failures(&host, "stamper");
    drop(host);
}
