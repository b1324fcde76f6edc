//! The install guide (`docs/install.md`, "Install in a cluster", where the
//! README sends a platform team) as a platform engineer types it: every
//! `sh` block of the page runs as written, in order, in bash from
//! the repository root (`set -euo pipefail`), with `kubectl`, `helm` and the
//! `kubeplug` under test first on `PATH`, against the local control plane.
//! A block that stops working fails this test, and so does a block it does
//! not know (a new one must be given its place here).
//!
//! What a reader puts in for the guide's placeholders:
//! - `<registry>`, where the host's image goes: a registry serving HTTPS
//!   only (CNCF Distribution) at `localhost:<port>`, its certificate from a
//!   CA of its own that this machine trusts (`SSL_CERT_FILE`: skopeo checks
//!   certificates as Go does), as a platform's private registry would be;
//! - `registry.example.com` and `localhost:5000`, where plugins are pushed
//!   and whence the host pulls them: a plain HTTP registry on loopback;
//! - `./database.wasm` (a team's next build, shipped as a ConfigMap): the
//!   database with one more label (`database-v2`); `dist/database.wasm` (a
//!   team's build, pushed as an artifact): the seed's.
//!
//! What this test does in a kubelet's place (kwok's nodes run nothing):
//! - `make plugins image` is what `make e2e` ran before this test (its
//!   prerequisites); run again here it would rewrite files the other
//!   shard's tests are reading, so its outputs are checked instead;
//! - it runs the Deployment's pod from the image as the kubelet would
//!   ([`kubeplug_e2e::chart`]) once the release is installed, and anew when
//!   an upgrade changes the pod, and it runs `helm test`'s Pod
//!   ([`kubeplug_e2e::hook`]);
//! - the pod's aggregated API is reached through a Service and APIService
//!   port pointed at this machine, as no pod network does it here; they
//!   are put back as the chart has them before the guide's `helm upgrade`
//!   (which would otherwise conflict with the test's change, rightly);
//! - the three commands that stream from a kubelet (`kubectl port-forward
//!   deploy/kubeplug 8080`, `kubectl logs deploy/kubeplug` and `helm test
//!   --logs`, which reads the hook Pod's log) cannot run here: kwok's nodes
//!   serve no kubelet API. What they would reach is on this machine, and the
//!   test rewrites them to it: the pod's admin port on loopback for
//!   `localhost:8080`, the pod's log file for its logs; `helm test` runs
//!   without `--logs`, and the hook Pod's log is checked here instead.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kubeplug_e2e::chart::{ChartHost, SYSTEM, get_plugin, wait_for_pods};
use kubeplug_e2e::hook::{hook_pod_uid, run_hook_pod};
use kubeplug_e2e::registry::Registry;
use kubeplug_e2e::*;

/// The install guide, from the repository root, and its title.
const PAGE: &str = "docs/install.md";
const TITLE: &str = "# Install in a cluster";
const TIMEOUT: Duration = Duration::from_secs(180);
/// The guide's blocks, in order, by their first command.
const BLOCKS: &[&str] = &[
    "make plugins image",
    "helm install kubeplug deploy/chart",
    "for p in database myapp pod-annotator",
    "kubectl create configmap kubeplug-plugin-database",
    "openssl genpkey",
    "# push prints",
    "helm test kubeplug",
    "kubectl get plugins -o wide",
];

/// The `sh` blocks of the install guide `PAGE`, each with the reader's
/// values for its placeholders.
fn blocks(registry: &str, plugins: &str) -> Vec<String> {
    let page = std::fs::read_to_string(repo().join(PAGE)).expect(PAGE);
    assert!(
        page.starts_with(&format!("{TITLE}\n")),
        "{PAGE} does not start with {TITLE:?}"
    );
    let mut blocks = Vec::new();
    let mut text = page.as_str();
    while let Some(at) = text.find("```sh\n") {
        let body = &text[at + "```sh\n".len()..];
        let end = body.find("\n```").expect("the block ends");
        blocks.push(
            body[..end + 1]
                .replace("<registry>", registry)
                .replace("registry.example.com", plugins)
                .replace("localhost:5000", plugins),
        );
        text = &body[end + 4..];
    }
    blocks
}

/// Replace `what` in `block`, which must hold it: the guide and this test
/// stay in step.
fn rewrite(block: &str, what: &str, with: &str) -> String {
    assert!(block.contains(what), "no {what:?} in the block:\n{block}");
    block.replace(what, with)
}

/// `block` cut before its line that starts with `line`.
fn split_at_line<'a>(block: &'a str, line: &str) -> (&'a str, &'a str) {
    let at = block
        .find(&format!("\n{line}"))
        .unwrap_or_else(|| panic!("no line {line:?} in the block:\n{block}"));
    (&block[..at + 1], &block[at + 1..])
}

/// The reader's shell: bash in the repository, the tools on `PATH`.
struct Shell {
    bin: tempfile::TempDir,
    docker_config: tempfile::TempDir,
    ca: PathBuf,
}

impl Shell {
    fn new(ca: PathBuf) -> Shell {
        let bin = tempfile::tempdir().expect("temp dir");
        for (name, target) in [
            (
                "kubectl",
                PathBuf::from(std::env::var("KUBECTL").expect("KUBECTL")),
            ),
            ("helm", PathBuf::from(std::env::var("HELM").expect("HELM"))),
            ("kubeplug", host_binary()),
        ] {
            std::os::unix::fs::symlink(&target, bin.path().join(name)).expect("symlink");
        }
        Shell {
            bin,
            docker_config: tempfile::tempdir().expect("temp dir"),
            ca,
        }
    }

    fn command(&self, script: &str) -> Command {
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(format!("set -euo pipefail\n{script}"))
            .current_dir(repo())
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.bin.path().display(),
                    std::env::var("PATH").unwrap()
                ),
            )
            // The machine trusts the image registry's CA, and holds no
            // registry credentials (neither registry asks for any).
            .env("SSL_CERT_FILE", &self.ca)
            .env("DOCKER_CONFIG", self.docker_config.path())
            .env_remove("KUBEPLUG_POLICY")
            .stdin(Stdio::null());
        command
    }

    /// Run `script`; its output (stdout, then stderr), or a panic with it.
    fn run(&self, what: &str, script: &str) -> String {
        let out = self.command(script).output().expect("run bash");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("--- {what} ---\n{script}--- its output ---\n{text}");
        assert!(
            out.status.success(),
            "{what} failed ({}):\n{text}",
            out.status
        );
        text
    }

    /// Start `script` in the background, its output to a file.
    fn spawn(&self, script: &str, output: &Path) -> Child {
        let file = std::fs::File::create(output).expect("output file");
        self.command(script)
            .stdout(file.try_clone().expect("clone"))
            .stderr(file)
            .spawn()
            .expect("start bash")
    }
}

/// What the reader leaves in the checkout, and the release: gone when the
/// test ends, however it ends, and the cluster as the other tests expect it.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let root = repo();
        for file in ["database.wasm", "key.pem", "key.pub"] {
            let _ = std::fs::remove_file(root.join(file));
        }
        for dir in ["dist", "deploy/overlays/mine"] {
            let _ = std::fs::remove_dir_all(root.join(dir));
        }
        uninstall_release();
        install_crds();
    }
}

/// `helm uninstall kubeplug`, if there is a release (and even while a test
/// is failing: no panic).
fn uninstall_release() {
    if let Ok(helm) = std::env::var("HELM") {
        let _ = Command::new(helm)
            .args(["uninstall", "kubeplug", "--namespace", SYSTEM, "--wait"])
            .output();
    }
}

/// No install of kubeplug: whatever other tests left of it removed, as on
/// a cluster that never had it. A plain `helm install` adopts nothing, so
/// every object the chart renders goes (other tests make some of them by
/// hand, e.g. the ClusterRole `kubeplug-plugin-viewer`), and deploy/'s.
fn fresh_cluster() {
    uninstall_release();
    let chart = repo().join("deploy/chart");
    let rendered = helm(&[
        "template",
        "kubeplug",
        chart.to_str().unwrap(),
        "--namespace",
        SYSTEM,
    ]);
    kubectl_ok(
        &["delete", "--ignore-not-found", "--wait", "-f", "-"],
        Some(&rendered),
    );
    let deploy = repo().join("deploy");
    kubectl_ok(
        &[
            "delete",
            "-k",
            deploy.to_str().unwrap(),
            "--ignore-not-found",
            "--wait",
        ],
        None,
    );
}

/// `kubectl get plugin NAME`'s status once it is running `digest`.
fn listed_running(name: &str, digest: &str) -> serde_json::Value {
    eventually(
        &format!("kubectl get plugin {name} to be running {digest}"),
        TIMEOUT,
        || {
            get_plugin(name)
                .filter(|p| p["status"]["state"] == "running" && p["status"]["digest"] == digest)
        },
    )
}

#[test]
fn the_install_guide_runs_as_typed() {
    let (image_registry, ca) = Registry::start_tls();
    let plugin_registry = Registry::start();
    let registry = format!("localhost:{}", image_registry.port);
    let plugins = format!("localhost:{}", plugin_registry.port);
    let blocks = blocks(&registry, &plugins);
    let firsts: Vec<&str> = blocks
        .iter()
        .map(|b| b.lines().next().unwrap_or_default())
        .collect();
    assert_eq!(
        blocks.len(),
        BLOCKS.len(),
        "the guide's blocks: {firsts:#?}"
    );
    for (first, known) in firsts.iter().zip(BLOCKS) {
        assert!(first.starts_with(known), "{first:?} where {known:?} was");
    }
    let shell = Shell::new(ca);
    let _cleanup = Cleanup;
    fresh_cluster();
    let root = repo();

    // 1. deploy/ with the image in the platform's registry.
    let archive = root.join("target/images/kubeplug-0.1.0.oci.tar");
    for built in [
        archive.as_path(),
        &root.join("deploy/overlays/configmaps/plugins/database.wasm"),
    ] {
        assert!(
            built.exists(),
            "{} missing: `make e2e` builds it first",
            built.display()
        );
    }
    let block = rewrite(
        &blocks[0],
        "make plugins image ",
        "ls target/images/kubeplug-0.1.0.oci.tar deploy/overlays/configmaps/plugins/ # make plugins image ",
    );
    let out = shell.run("the kustomization", &block);
    assert!(
        out.contains("deployment.apps/kubeplug serverside-applied"),
        "{out}"
    );
    // The registry holds the image `make image` built, byte for byte.
    let index = Command::new("tar")
        .args(["-xOf", archive.to_str().unwrap(), "./index.json"])
        .output()
        .expect("tar");
    let index: serde_json::Value = serde_json::from_slice(&index.stdout).expect("index.json");
    let image_digest = index["manifests"][0]["digest"]
        .as_str()
        .expect("a manifest")
        .to_string();
    let pushed = shell.run(
        "the image in the registry",
        &format!("skopeo inspect --raw docker://{registry}/kubeplug:0.1.0 | sha256sum"),
    );
    assert_eq!(
        format!("sha256:{}", pushed.split_whitespace().next().unwrap()),
        image_digest
    );
    let deployment = get_json(SYSTEM, "deployment/kubeplug").expect("the Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("{registry}/kubeplug:0.1.0")
    );
    wait_for_pods("both replicas admitted and running", 2, TIMEOUT, |_| true);
    // The platform moves to Helm: the kustomization's objects go first
    // (Helm adopts nothing it did not make).
    let mine = root.join("deploy/overlays/mine");
    kubectl_ok(&["delete", "-k", mine.to_str().unwrap(), "--wait"], None);

    // 2. The chart, with the same image: `kubectl get plugins` answers.
    let (install, rest) = split_at_line(&blocks[1], "kubectl wait");
    let out = shell.run("helm install", install);
    assert!(out.contains("STATUS: deployed"), "{out}");
    let mut chart = ChartHost::start_beside_deployment("kubeplug-5f8d7-rdm01");
    eventually("the pod to be ready", TIMEOUT, || {
        chart.host().get("/readyz").ok().filter(|(s, _)| *s == 200)
    });
    chart.route_api();
    let out = shell.run("kubectl get plugins", rest);
    assert!(out.contains("condition met"), "{out}");

    // 3. The seeds, shipped as ConfigMaps.
    shell.run("the seeds", &blocks[2]);
    let seed = root.join("target/plugins");
    for name in ["database", "myapp", "pod-annotator"] {
        listed_running(name, &sha256_of(&seed.join(format!("{name}.wasm"))));
    }

    // 4. One plugin upgraded by its ConfigMap.
    std::fs::copy(built("database-v2"), root.join("database.wasm")).expect("copy");
    shell.run("the upgrade", &blocks[3]);
    listed_running("database", &sha256_of(&built("database-v2")));

    // 5. Signed, pushed, verified.
    let out = shell.run("push and verify", &blocks[4]);
    assert!(
        out.contains(&format!("{plugins}/plugins/database:0.1.0@sha256:")),
        "{out}"
    );

    // 6. Pulled by the host, by digest: the pod changes, so it starts anew.
    std::fs::create_dir_all(root.join("dist")).unwrap();
    std::fs::copy(seed.join("database.wasm"), root.join("dist/database.wasm")).expect("copy");
    chart.unroute_api();
    let out = shell.run("the artifact", &blocks[5]);
    assert!(out.contains("STATUS: deployed"), "{out}");
    let named = get_json(SYSTEM, "configmap/kubeplug-plugin-artifacts").expect("the artifacts");
    let seed_digest = sha256_of(&seed.join("database.wasm"));
    assert!(
        named["data"]["artifacts.yaml"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("{plugins}/team-a/database@sha256:")),
        "{named}"
    );
    assert!(
        out.contains("plugins from OCI artifacts the host pulls by digest"),
        "{out}"
    );
    let (clean, next) = chart.roll("kubeplug-69c4b-rdm02");
    assert!(clean, "the old pod exits cleanly");
    chart = next;
    let listed = listed_running("database", &seed_digest);
    assert_eq!(listed["status"]["version"], "0.1.0", "{listed}");

    // 7. helm test, twice, this test as its Pod's kubelet.
    let block = rewrite(
        &blocks[6],
        "helm test kubeplug -n kubeplug-system --logs   #",
        "helm test kubeplug -n kubeplug-system          # --logs:",
    );
    let output = tempfile::NamedTempFile::new().unwrap();
    let mut helm_test = shell.spawn(&block, output.path());
    let mut before = hook_pod_uid();
    for _ in 0..2 {
        let ran = run_hook_pod(before.as_deref());
        assert_eq!(ran.exit_code, 0, "doctor passes:\n{}", ran.log);
        // What `--logs` prints: every check passes, the artifact's too.
        for line in ran.log.lines().filter(|l| !l.is_empty()) {
            assert!(line.starts_with("ok "), "not ok: {line}\n{}", ran.log);
        }
        assert!(
            ran.log.contains("pulled and checked database"),
            "doctor pulls what the host pulls:\n{}",
            ran.log
        );
        before = ran.pod["metadata"]["uid"].as_str().map(String::from);
    }
    let status = helm_test.wait().expect("helm test ends");
    let text = std::fs::read_to_string(output.path()).unwrap();
    eprintln!("--- helm test ---\n{text}");
    assert!(status.success(), "helm test:\n{text}");
    assert_eq!(
        text.matches("Phase:          Succeeded").count(),
        2,
        "{text}"
    );

    // 8. When a plugin is degraded or failed: each command answers (here
    // every plugin runs, so the filters print nothing of them).
    let host = chart.host();
    let block = rewrite(
        &blocks[7],
        "kubectl -n kubeplug-system port-forward deploy/kubeplug 8080 &",
        "true # kubectl -n kubeplug-system port-forward deploy/kubeplug 8080 &",
    );
    let block = rewrite(
        &block,
        "localhost:8080",
        &format!("localhost:{}", host.port),
    );
    let block = rewrite(
        &block,
        "kubectl -n kubeplug-system logs deploy/kubeplug",
        &format!("cat {}", host.log.display()),
    );
    let out = shell.run("when a plugin is degraded or failed", &block);
    // `kubectl get plugins -o wide`: its row; `-o yaml`: its digest; the
    // Leases: this pod leads it.
    assert!(
        out.lines()
            .any(|l| l.starts_with("database ") && l.contains("running")),
        "{out}"
    );
    assert!(out.contains(&format!("digest: {seed_digest}")), "{out}");
    assert!(out.contains("kubeplug-69c4b-rdm02"), "the leader:\n{out}");
    assert!(chart.stop(), "a clean exit");
}
