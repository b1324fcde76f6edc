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

use kubeplug_e2e::chart::{ChartHost, SYSTEM, get_plugin, release_sizes, remove_deployment};
use kubeplug_e2e::registry::Registry;
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

/// `kubectl delete -f FILE --ignore-not-found` and `extra`, for a
/// [`Cleanup`].
fn delete_later(file: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "delete".to_string(),
        "-f".into(),
        file.display().to_string(),
        "--ignore-not-found".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
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

/// `kubeplug push` of the project's build as `127.0.0.1:<port>/team-a/<name>:<tag>`:
/// the artifact by digest, as the platform names it.
fn push(project: &Path, registry: &Registry, name: &str, tag: &str, extra: &[&str]) -> String {
    let repository = format!("127.0.0.1:{}/team-a/{name}", registry.port);
    let (wasm, reference) = (format!("dist/{name}.wasm"), format!("{repository}:{tag}"));
    let mut args = vec!["push", wasm.as_str(), reference.as_str()];
    args.extend_from_slice(extra);
    let out = kubeplug(project, &args);
    let digest = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{repository}:{tag}@")))
        .unwrap_or_else(|| panic!("no digest in {out}"));
    format!("{repository}@{digest}")
}

/// The plugins the platform already runs beside the teams' new ones: the
/// seeds, the Python `pod-labeler` (18 MB) and test plugins of other
/// kinds, each its own file and parent kind (a second composite of one
/// kind would be refused).
const OTHERS: [&str; 7] = [
    "database",
    "myapp",
    "pod-annotator",
    "pod-labeler",
    "disruption-budget",
    "plain",
    "hostile",
];

/// The whole path of three teams' plugins (Rust, Python, TypeScript) into
/// one release of ten plugins, three of them Python, each command as its
/// user types it: `kubeplug new` → `build` → `test` → `push` to a registry
/// → `kubeplug platform --format helm` → the chart installed with those
/// values and the ten artifacts' digests (no size error: the release holds
/// references) → the host, run as the chart's pod (its args, its
/// ServiceAccount), pulls all ten, and the new ones reconcile the templates'
/// samples → the Rust plugin upgraded by changing one digest → `kubectl get
/// plugins` shows the new version → a routine `helm upgrade` keeps it →
/// `helm uninstall` leaves the namespace and what the chart did not create.
#[test]
fn ten_plugins_of_three_languages_go_from_kubeplug_new_through_a_registry_and_one_release_to_serving()
 {
    let team = workspace();
    kubeplug(team.path(), &["new", "--lang", "rust", "greeting"]);
    let rust = team.path().join("greeting");
    kubeplug(&rust, &["build"]);
    let tested = kubeplug(
        &rust,
        &["test", ".", "--crd", "crds/greetings.example.com.yaml"],
    );
    assert!(tested.contains("passed"), "{tested}");
    kubeplug(team.path(), &["new", "--lang", "python", "stamper"]);
    let python = team.path().join("stamper");
    kubeplug(&python, &["build"]);
    let tested = kubeplug(&python, &["test", "."]);
    assert!(tested.contains("passed"), "{tested}");
    kubeplug(team.path(), &["new", "--lang", "ts", "example"]);
    let ts = team.path().join("example");
    kubeplug(&ts, &["build"]);
    let tested = kubeplug(
        &ts,
        &["test", ".", "--crd", "crds/examples.example.com.yaml"],
    );
    assert!(tested.contains("passed"), "{tested}");

    let registry = Registry::start();
    let greeting_v1 = push(&rust, &registry, "greeting", "0.1.0", &[]);
    let stamper = push(&python, &registry, "stamper", "0.1.0", &[]);
    let example = push(&ts, &registry, "example", "0.1.0", &[]);
    // The platform's other plugins, pushed from its own directory.
    let platform = team.path().join("platform");
    std::fs::create_dir_all(platform.join("dist")).unwrap();
    // pod-annotator needs its configuration to say what it is (as in
    // deploy/base/settings and the chart's plugins.settings).
    std::fs::write(
        platform.join("pod-annotator.config.yaml"),
        "namespaces: [team-a]\n",
    )
    .unwrap();
    let config = |name: &str| -> Vec<&'static str> {
        match name {
            "pod-annotator" => vec!["--config", "pod-annotator.config.yaml"],
            _ => Vec::new(),
        }
    };
    let mut artifacts = vec![
        format!("plugins.artifacts.greeting={greeting_v1}"),
        format!("plugins.artifacts.stamper={stamper}"),
        format!("plugins.artifacts.example={example}"),
    ];
    for name in OTHERS {
        std::fs::copy(built(name), platform.join(format!("dist/{name}.wasm"))).unwrap();
        let reference = push(&platform, &registry, name, "1", &config(name));
        artifacts.push(format!("plugins.artifacts.{name}={reference}"));
    }

    // The platform side as Helm values; each keeps the host reads of the
    // values given before it (Helm replaces lists).
    let release = repo().join("deploy/chart/values.yaml");
    let release = release.to_str().unwrap();
    kubeplug(
        &rust,
        &[
            "platform",
            "dist/greeting.wasm",
            "--format",
            "helm",
            "--out",
            "platform",
            "--helm-values",
            release,
        ],
    );
    let rust_values = rust.join("platform/values-greeting.yaml");
    kubeplug(
        &python,
        &[
            "platform",
            "dist/stamper.wasm",
            "--format",
            "helm",
            "--out",
            "platform",
            "--decorator-key",
            "example.com/stamper",
            "--helm-values",
            release,
            "--helm-values",
            rust_values.to_str().unwrap(),
        ],
    );
    let python_values = python.join("platform/values-stamper.yaml");
    kubeplug(
        &ts,
        &[
            "platform",
            "dist/example.wasm",
            "--format",
            "helm",
            "--out",
            "platform",
            "--helm-values",
            release,
            "--helm-values",
            python_values.to_str().unwrap(),
        ],
    );
    let mut values = vec![
        rust_values,
        python_values,
        ts.join("platform/values-example.yaml"),
    ];
    for name in OTHERS {
        let wasm = format!("dist/{name}.wasm");
        let mut args = vec![
            "platform",
            wasm.as_str(),
            "--format",
            "helm",
            "--out",
            "values",
        ];
        args.extend(["--helm-values", release]);
        let previous = values.last().unwrap().display().to_string();
        args.extend(["--helm-values", previous.as_str()]);
        args.extend(config(name));
        kubeplug(&platform, &args);
        values.push(platform.join(format!("values/values-{name}.yaml")));
    }

    install_crds();
    let crd = rust.join("crds/greetings.example.com.yaml");
    let ts_crd = ts.join("crds/examples.example.com.yaml");
    let greeting_sample = rust.join("samples/greeting.yaml");
    let pod_sample = python.join("samples/pod.yaml");
    let example_sample = ts.join("samples/example.yaml");
    let _cleanup = Cleanup(vec![
        delete_later(&crd, &[]),
        delete_later(&ts_crd, &[]),
        delete_later(&greeting_sample, &[]),
        delete_later(&example_sample, &[]),
        delete_later(&pod_sample, &["--wait=false"]),
    ]);
    for crd in [&crd, &ts_crd] {
        kubectl_ok(&["apply", "-f", crd.to_str().unwrap()], None);
    }
    for crd in ["greetings.example.com", "examples.example.com"] {
        kubectl_ok(
            &[
                "wait",
                "--for=condition=Established",
                &format!("crd/{crd}"),
                "--timeout=60s",
            ],
            None,
        );
    }
    let mut args: Vec<String> = Vec::new();
    for file in &values {
        args.extend(["-f".into(), file.display().to_string()]);
    }
    args.extend(["--set".into(), "plugins.source=artifacts".into()]);
    for artifact in &artifacts {
        args.extend(["--set".into(), artifact.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = helm_install(&args);
    assert!(out.contains("STATUS: deployed"), "{out}");
    // The release holds ten references, not ten plugins (which weigh
    // over 40 MB together).
    let largest = release_sizes().into_iter().max().unwrap();
    assert!(largest < 256 << 10, "the release Secret is {largest} bytes");

    let chart = ChartHost::start("kubeplug-6c4f9-jrn01");
    let host = chart.host();
    serving(host, "greeting", "0.1.0");
    serving(host, "stamper", "0.1.0");
    serving(host, "example", "0.1.0");
    for name in OTHERS {
        eventually(&format!("{name} to serve"), TIMEOUT, || {
            host.plugin(name).filter(|p| p["state"] == "running")
        });
    }

    kubectl_ok(&["apply", "-f", greeting_sample.to_str().unwrap()], None);
    kubectl_ok(&["apply", "-f", pod_sample.to_str().unwrap()], None);
    kubectl_ok(&["apply", "-f", example_sample.to_str().unwrap()], None);
    eventually("the sample's ConfigMap and Ready", TIMEOUT, || {
        let map = get_json("default", "configmap/hello-greeting")?;
        let greeting = get_json("default", "greeting/hello")?;
        (map["data"]["message"] == "Hello, World!" && greeting["status"]["phase"] == "Ready")
            .then_some(())
    });
    eventually("the sample pod stamped", TIMEOUT, || {
        let pod = get_json("default", "pod/web-1")?;
        (pod["metadata"]["labels"]["example.com/stamper"] == "seen").then_some(())
    });
    eventually("the TypeScript sample's ConfigMap", TIMEOUT, || {
        let map = get_json("default", "configmap/hello-message")?;
        (map["data"]["message"] == "hi").then_some(())
    });
    // Every reconcile passed under the chart's rights and the generated ones.
    no_failures(host, "greeting");
    no_failures(host, "stamper");
    no_failures(host, "example");

    // The team's next version, pushed; the platform changes one digest.
    let lib = rust.join("src/lib.rs");
    let code = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, code.replace("\"Hello, {}!\"", "\"Hi, {}!\"")).unwrap();
    let cargo = rust.join("Cargo.toml");
    let manifest = std::fs::read_to_string(&cargo).unwrap();
    std::fs::write(
        &cargo,
        manifest.replacen("version = \"0.1.0\"", "version = \"0.2.0\"", 1),
    )
    .unwrap();
    kubeplug(&rust, &["build"]);
    let greeting_v2 = push(&rust, &registry, "greeting", "0.2.0", &[]);
    helm_install(&[
        "--reuse-values",
        "--set",
        &format!("plugins.artifacts.greeting={greeting_v2}"),
    ]);
    remove_deployment();
    serving(host, "greeting", "0.2.0");
    eventually("the upgraded message", TIMEOUT, || {
        let map = get_json("default", "configmap/hello-greeting")?;
        (map["data"]["message"] == "Hi, World!").then_some(())
    });
    chart.route_api();
    eventually("kubectl get plugins to show 0.2.0", TIMEOUT, || {
        get_plugin("greeting")
            .filter(|p| p["status"]["version"] == "0.2.0" && p["status"]["state"] == "running")
    });

    // A routine upgrade of the release keeps the version the platform named.
    helm_install(&["--reuse-values", "--set", "logLevel=debug"]);
    remove_deployment();
    let artifacts = get_json(SYSTEM, "configmap/kubeplug-plugin-artifacts").unwrap();
    let named = artifacts["data"]["artifacts.yaml"].as_str().unwrap();
    assert!(named.contains(&greeting_v2), "{named}");
    chart.route_api();
    let listed = eventually(
        "kubectl get plugins after the routine upgrade",
        TIMEOUT,
        || get_plugin("greeting"),
    );
    assert_eq!(listed["status"]["version"], "0.2.0", "{listed}");
    assert_eq!(host.plugin("stamper").unwrap()["state"], "running");
    assert!(chart.stop(), "a clean exit");

    // `helm uninstall` leaves the namespace and what the chart did not
    // make: the team's CRD and its objects.
    helm(&["uninstall", "kubeplug", "--namespace", SYSTEM, "--wait"]);
    assert!(get_json("", &format!("namespace/{SYSTEM}")).is_some());
    assert!(get_json("", "crd/greetings.example.com").is_some());
    assert!(get_json("default", "greeting/hello").is_some());
    install_crds();
}
