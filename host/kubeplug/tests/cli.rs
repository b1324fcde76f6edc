//! The `kubeplug` binary as a user runs it: `render` and `inspect` on the
//! built plugins and the files in `tests/fixtures/`, and the errors a user
//! sees for bad input (non-zero exit, one clear line on stderr).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The policies the live hosts of the acceptance tests run with: the seed
/// plugins' grants and the test guests'.
fn policies() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    format!(
        "{},{}",
        root.join("deploy/base/policy.yaml").display(),
        root.join("tests/e2e/manifests/policy.yaml").display()
    )
}

/// `kubeplug <args>` under [`policies`], with a compile cache shared by
/// these tests and no colours in the logs.
fn kubeplug<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    kubeplug_command()
        .args(args)
        .env("KUBEPLUG_POLICY", policies())
        .env_remove("KUBEPLUG_LOG")
        .output()
        .expect("running kubeplug")
}

fn render(plugin: &Path, parent: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "render".into(),
        "--plugin".into(),
        plugin.as_os_str().to_owned(),
        "-f".into(),
        fixture(parent).into_os_string(),
    ];
    args.extend(extra.iter().map(|a| {
        if a.ends_with(".yaml") {
            fixture(a).into_os_string()
        } else {
            a.into()
        }
    }));
    kubeplug(args)
}

fn stdout_json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "kubeplug failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is JSON")
}

/// The command failed with exit code 1, printed nothing on stdout and said
/// why on stderr; returns stderr.
fn failure(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "stdout: {:?}", output.stdout);
    assert!(stderr.contains("error: "), "{stderr}");
    stderr
}

fn kinds(children: &Value) -> Vec<&str> {
    children
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect()
}

// render.

#[test]
fn render_prints_the_children_status_and_events_the_operator_would_write() {
    let out = stdout_json(&render(
        &plugin_path("database"),
        "database.yaml",
        &["-o", "json"],
    ));
    assert_eq!(out["plugin"], "database@0.1.0");
    assert_eq!(
        kinds(&out["children"]),
        ["Service", "StatefulSet", "Secret"]
    );
    for child in out["children"].as_array().unwrap() {
        assert_eq!(child["metadata"]["namespace"], "default");
        assert_eq!(
            child["metadata"]["ownerReferences"][0]["uid"],
            kubeplug_kit::render::PLACEHOLDER_UID
        );
        assert_eq!(
            child["metadata"]["labels"]["kubeplug.io/plugin"],
            "database"
        );
    }
    assert_eq!(out["status"]["phase"], "Pending");
    assert_eq!(out["prune"], json!([]));
    assert_eq!(out["parentPatch"], Value::Null);
    assert_eq!(out["events"][0]["reason"], "CredentialsCreated");
}

/// Without `--policy`, as a newcomer first runs it: the answer, and what
/// the default grant would refuse as warnings; `--strict` makes them fatal.
#[test]
fn render_without_a_policy_shows_the_answer_and_warns_of_the_default_grants_refusals() {
    let args = |strict: bool| {
        let mut args = vec![
            "render".into(),
            "--plugin".into(),
            plugin_path("database").into_os_string(),
            "-f".into(),
            fixture("database.yaml").into_os_string(),
            "-o".into(),
            "json".into(),
        ];
        if strict {
            args.push("--strict".into());
        }
        args
    };
    let run = |strict: bool| {
        kubeplug_command()
            .args(args(strict))
            .env_remove("KUBEPLUG_POLICY")
            .env_remove("KUBEPLUG_LOG")
            .output()
            .expect("running kubeplug")
    };
    let output = run(false);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let out = stdout_json(&output);
    assert_eq!(
        kinds(&out["children"]),
        ["Service", "StatefulSet", "Secret"]
    );
    assert!(
        stderr.contains("warning: plugin database asks for more than it may (it has no entry in the policy; the default grant applies)")
            && stderr.contains("child kind Secret (sensitive kinds must be named)"),
        "{stderr}"
    );
    let stderr = failure(&run(true));
    assert!(
        stderr.contains(
            "the live host would refuse this plugin: plugin database asks for more than it may"
        ),
        "{stderr}"
    );
}

#[test]
fn render_reads_observed_children_and_related_pods_from_files() {
    let out = stdout_json(&render(
        &plugin_path("database"),
        "database.yaml",
        &[
            "--observed",
            "database-observed.yaml",
            "--related",
            "database-pods.yaml",
            "-o",
            "json",
        ],
    ));
    let status = &out["status"];
    assert_eq!(status["phase"], "Running", "{status:#}");
    assert_eq!(
        status["pods"],
        json!(["orders-0", "orders-1"]),
        "sorted, and without the other database's pod"
    );
    assert_eq!(status["readyReplicas"], 2);
    assert_eq!(
        out["prune"],
        json!(["Service/default/orders-legacy"]),
        "the controlled child the plugin no longer returns, not another controller's"
    );
    let notes = out["notes"]
        .as_array()
        .expect("a note on the passed-over child");
    let passed_over: Vec<&str> = notes
        .iter()
        .filter_map(|n| {
            n.as_str()?
                .split_once(" is not one of the parent's children")
        })
        .map(|(object, _)| object)
        .collect();
    assert_eq!(
        passed_over,
        ["Service/default/orders-metrics"],
        "another controller's Service, neither handed over nor pruned: {notes:#?}"
    );
}

#[test]
fn render_prints_yaml_by_default() {
    let output = render(&plugin_path("myapp"), "myapp.yaml", &[]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.starts_with("plugin: myapp@0.1.0\n"), "{text}");
    let out: Value = kubeplug_core::yaml::from_str(&text).expect("stdout is YAML");
    assert_eq!(out["children"][0]["metadata"]["name"], "web-deploy");
    assert_eq!(out["children"][0]["metadata"]["namespace"], "shop");
}

#[test]
fn render_runs_a_decorator_with_its_config_file() {
    let out = stdout_json(&render(
        &plugin_path("pod-annotator"),
        "pod.yaml",
        &["--config", "pod-annotator.yaml", "-o", "json"],
    ));
    assert_eq!(out["children"], json!([]));
    assert_eq!(out["status"], Value::Null);
    let annotations = &out["parentPatch"]["metadata"]["annotations"];
    assert_eq!(annotations["example.com/injected"], "true");
    assert!(annotations["example.com/injected-at"].is_string());
    assert_eq!(out["events"][0]["reason"], "Annotated");
}

// inspect.

#[test]
fn inspect_prints_the_contract_digest_size_and_manifest() {
    let path = plugin_path("database");
    let out = stdout_json(&kubeplug([
        "inspect".as_ref(),
        path.as_os_str(),
        "-o".as_ref(),
        "json".as_ref(),
    ]));
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(out["contract"], "kubeplug:plugin@0.1.0");
    assert_eq!(out["digest"], hex::encode(Sha256::digest(&bytes)));
    assert_eq!(out["sizeBytes"], bytes.len());
    assert_eq!(out["manifest"]["name"], "database");
    assert_eq!(out["manifest"]["mode"], "composite");
    assert_eq!(out["manifest"]["parent"]["kind"], "Database");
    assert_eq!(out["manifest"]["children"].as_array().unwrap().len(), 3);
}

#[test]
fn inspect_takes_the_config_a_plugin_needs_to_load() {
    let path = plugin_path("pod-annotator");
    let out = stdout_json(&kubeplug([
        "inspect".as_ref(),
        path.as_os_str(),
        "--config".as_ref(),
        fixture("pod-annotator.yaml").as_os_str(),
        "-o".as_ref(),
        "json".as_ref(),
    ]));
    assert_eq!(out["manifest"]["mode"], "decorator");
    assert_eq!(out["manifest"]["namespaces"], json!(["team-a"]));
}

// Bad input.

#[test]
fn a_missing_plugin_file_is_reported_with_its_path() {
    let stderr = failure(&kubeplug(["inspect", "/nonexistent/plugin.wasm"]));
    assert!(
        stderr.contains("cannot read /nonexistent/plugin.wasm: No such file"),
        "{stderr}"
    );
}

#[test]
fn a_file_that_is_not_a_component_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"#!/bin/sh\necho hello\n").unwrap();
    let stderr = failure(&kubeplug(["inspect".as_ref(), garbage.as_os_str()]));
    assert!(
        stderr.contains(&format!(
            "cannot load plugin {}: not a valid WebAssembly component",
            garbage.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_plugin_for_another_contract_is_refused_with_both_versions() {
    let path = test_plugin_path("contract-v1");
    let stderr = failure(&kubeplug(["inspect".as_ref(), path.as_os_str()]));
    assert!(
        stderr.contains(
            "built for contract kubeplug:plugin/reconciler@1.0.0, \
             this host speaks kubeplug:plugin/reconciler@0.1.0"
        ),
        "{stderr}"
    );
}

#[test]
fn a_config_the_plugin_refuses_is_reported_in_the_plugins_words() {
    let path = plugin_path("pod-annotator");
    let stderr = failure(&kubeplug(["inspect".as_ref(), path.as_os_str()]));
    assert!(
        stderr.contains("manifest refused")
            && stderr.contains("invalid config: `namespaces` must name at least one namespace"),
        "{stderr}"
    );
}

#[test]
fn a_parent_of_the_wrong_kind_is_refused() {
    let stderr = failure(&render(&plugin_path("database"), "myapp.yaml", &[]));
    assert!(
        stderr.contains(
            "parent is example.com/v1alpha1 MyApp but plugin database reconciles \
             example.com/v1 Database"
        ),
        "{stderr}"
    );
}

#[test]
fn a_parent_file_with_two_objects_is_refused() {
    let stderr = failure(&render(&plugin_path("database"), "two-databases.yaml", &[]));
    assert!(
        stderr.contains("two-databases.yaml: expected exactly one parent object, found 2"),
        "{stderr}"
    );
}

#[test]
fn a_parent_file_that_is_not_yaml_is_refused() {
    let stderr = failure(&render(&plugin_path("database"), "not-yaml.yaml", &[]));
    assert!(
        stderr.contains("not-yaml.yaml: document 0 is not valid YAML or JSON"),
        "{stderr}"
    );
}

#[test]
fn a_missing_parent_file_is_reported_with_its_path() {
    let stderr = failure(&render(&plugin_path("database"), "nonexistent.yaml", &[]));
    assert!(
        stderr.contains("cannot read") && stderr.contains("nonexistent.yaml"),
        "{stderr}"
    );
}

#[test]
fn a_parent_the_plugin_refuses_is_reported_in_the_plugins_words() {
    let stderr = failure(&render(
        &plugin_path("database"),
        "database-eleven-replicas.yaml",
        &[],
    ));
    assert!(
        stderr.contains(
            "plugin database returned an error: invalid input: \
             spec.replicas must be between 1 and 10, got 11"
        ),
        "{stderr}"
    );
}

#[test]
fn a_plugin_that_runs_past_its_deadline_is_reported() {
    // The deadline holds for `manifest()` at load too: long enough that a
    // busy machine never stops that call, and unlike the 2 s default, so
    // that the message shows the flag was honoured.
    let stderr = failure(&render(
        &test_plugin_path("hostile"),
        "hostile-loop.yaml",
        &["--timeout-ms", "1500"],
    ));
    assert!(
        stderr.contains("plugin hostile exceeded its deadline of 1.5s"),
        "{stderr}"
    );
}

#[test]
fn a_missing_argument_is_a_usage_error() {
    let output = kubeplug(["render", "--plugin", "x.wasm"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--filename"), "{stderr}");
}

// render --request: a failure the live host captured.

/// A capture of a `reconcile` of the database plugin on `spec`, as
/// `kubeplug replay -o` writes it (YAML), in `dir`.
fn capture_file(dir: &Path, spec: Value, entropy: &[u8], digest: &str, error: &str) -> PathBuf {
    let parent = json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": { "name": "orders", "namespace": "default", "uid": PARENT_UID, "generation": 1 },
        "spec": spec,
    });
    let capture = json!({
        "apiVersion": "kubeplug.io/v1alpha1",
        "kind": "Replay",
        "plugin": "database",
        "version": "0.1.0",
        "digest": digest,
        "call": "reconcile",
        "parent": "default/orders",
        "at": "2026-11-29T18:00:01.000Z",
        "error": error,
        "reason": "guest_error",
        "config": {},
        "limits": {
            "timeoutMs": 2000, "memoryBytes": 134217728, "instances": 20, "tables": 20,
            "tableElements": 100000, "responseBytes": 4194304, "children": 64, "logBytes": 65536,
        },
        "request": {
            "parent": parent.to_string(),
            "observed": [],
            "related": [],
            "now": NOW,
            "entropy": entropy.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        },
        "redacted": [],
    });
    let path = dir.join("replay.yaml");
    std::fs::write(&path, kubeplug_core::yaml::to_string(&capture)).unwrap();
    path
}

fn digest_of(path: &Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(path).unwrap()))
}

fn render_request(capture: &Path, extra: &[&str]) -> Output {
    let plugin = plugin_path("database");
    let mut args: Vec<&std::ffi::OsStr> = vec!["render".as_ref(), "--plugin".as_ref()];
    args.extend([
        plugin.as_os_str(),
        "--request".as_ref(),
        capture.as_os_str(),
    ]);
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    kubeplug(args)
}

#[test]
fn a_replayed_failure_prints_the_error_the_host_logged() {
    let dir = tempfile::tempdir().unwrap();
    let logged = "plugin database returned an error: invalid input: \
                  spec.replicas must be between 1 and 10, got 11";
    let spec = json!({ "engine": "mysql", "version": "8.4.3", "replicas": 11 });
    let capture = capture_file(dir.path(), spec, &entropy(), &"0".repeat(64), logged);
    let stderr = failure(&render_request(&capture, &[]));
    assert_eq!(
        stderr.lines().last(),
        Some(format!("error: {logged}").as_str())
    );
    assert!(
        stderr.contains(&format!(
            "note: the failure happened on database@0.1.0 (digest {})",
            "0".repeat(64)
        )),
        "{stderr}"
    );
}

#[test]
fn a_replay_uses_the_captured_entropy() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin_path("database");
    let spec = json!({ "engine": "postgresql", "version": "16.2.0", "replicas": 2 });
    // Too little entropy fails in the plugin: proof the capture's is used.
    let logged = "plugin database returned an error: host supplied too little entropy";
    let short = capture_file(
        dir.path(),
        spec.clone(),
        &[1, 2, 3],
        &digest_of(&plugin),
        logged,
    );
    let stderr = failure(&render_request(&short, &[]));
    assert_eq!(
        stderr.lines().last(),
        Some(format!("error: {logged}").as_str())
    );
    // The same inputs give the same answer, byte for byte, with no notes.
    let capture = capture_file(dir.path(), spec, &entropy(), &digest_of(&plugin), "x");
    let crd =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../crds/databases.example.com.yaml");
    let crd = crd.to_str().unwrap();
    let first = render_request(&capture, &["-o", "json", "--crd", crd]);
    let out = stdout_json(&first);
    assert_eq!(out["notes"], Value::Null);
    assert_eq!(
        kinds(&out["children"]),
        ["Service", "StatefulSet", "Secret"]
    );
    let again = render_request(&capture, &["-o", "json", "--crd", crd]);
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        String::from_utf8_lossy(&first.stdout)
    );
}

#[test]
fn a_request_excludes_a_parent_file() {
    let output = kubeplug([
        "render",
        "--plugin",
        "x.wasm",
        "--request",
        "r.yaml",
        "-f",
        "p.yaml",
    ]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

/// A Hostile parent doing `behave` (with `spec` extras), in a temporary file.
fn hostile_parent(dir: &Path, behave: &str, extra: &str) -> PathBuf {
    let path = dir.join(format!("hostile-{behave}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: h\nspec:\n  behave: {behave}\n{extra}"
        ),
    )
    .expect("write parent");
    path
}

fn render_hostile(parent: &Path, config: Option<&str>) -> Output {
    let dir = parent.parent().expect("parent dir");
    let mut args: Vec<std::ffi::OsString> = vec![
        "render".into(),
        "--plugin".into(),
        test_plugin_path("hostile").into_os_string(),
        "-f".into(),
        parent.as_os_str().to_owned(),
    ];
    if let Some(config) = config {
        let path = dir.join("config.yaml");
        std::fs::write(&path, config).expect("write config");
        args.extend(["--config".into(), path.into_os_string()]);
    }
    kubeplug(args)
}

#[test]
fn render_says_the_live_host_would_refuse_a_plugin_asking_beyond_its_grant() {
    let dir = tempfile::tempdir().unwrap();
    let parent = hostile_parent(dir.path(), "cluster-child", "");
    let stderr = failure(&render_hostile(
        &parent,
        Some(
            "children: [clusterrolebinding, namespace]\nfinalizer: kubernetes.io/pvc-protection\n",
        ),
    ));
    for needle in [
        "the live host would refuse this plugin: plugin hostile asks for more than it may",
        "cluster-scoped child kind ClusterRoleBinding.rbac.authorization.k8s.io/v1 cannot belong to a namespaced parent",
        "cluster-scoped child kind Namespace.v1",
        "; child kind ClusterRoleBinding.rbac.authorization.k8s.io;",
        "cluster-scoped Namespace (grant it under clusterScoped)",
        "finalizer kubernetes.io/pvc-protection",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
    }
}

#[test]
fn render_resolves_scopes_itself_and_refuses_a_lie_about_them() {
    let dir = tempfile::tempdir().unwrap();
    let parent = hostile_parent(dir.path(), "ok", "");
    // The ConfigMap is declared cluster-scoped, related Secrets too: render
    // uses the real scopes, so a Secret it is not granted is named.
    let stderr = failure(&render_hostile(
        &parent,
        Some("children: [configmap-lie]\nrelated: [secrets-everywhere]\n"),
    ));
    assert!(
        stderr.contains("related kind Secret") && !stderr.contains("cluster-scoped ConfigMap"),
        "{stderr}"
    );
}

#[test]
fn render_refuses_an_answer_over_the_plugins_quotas() {
    let dir = tempfile::tempdir().unwrap();
    let many = hostile_parent(dir.path(), "children", "  count: 100\n");
    let stderr = failure(&render_hostile(&many, None));
    assert!(
        stderr.contains("plugin hostile answered with 100 children (quota 64)"),
        "{stderr}"
    );
    let big = hostile_parent(dir.path(), "status-bomb", "  bytes: 100000\n");
    let stderr = failure(&render_hostile(&big, None));
    assert!(
        stderr.contains("a status of 100011 bytes, over the quota of 65536"),
        "{stderr}"
    );
    let chatty = hostile_parent(dir.path(), "events", "  count: 11\n");
    let stderr = failure(&render_hostile(&chatty, None));
    assert!(
        stderr.contains("11 events in one answer, over the quota of 10"),
        "{stderr}"
    );
}

#[test]
fn render_raises_a_zero_requeue_to_the_policys_floor() {
    let dir = tempfile::tempdir().unwrap();
    let parent = hostile_parent(dir.path(), "events", "  count: 3\n");
    let plugin = test_plugin_path("hostile");
    let rendered = stdout_json(&kubeplug([
        "render".as_ref(),
        "--plugin".as_ref(),
        plugin.as_os_str(),
        "-f".as_ref(),
        parent.as_os_str(),
        "-o".as_ref(),
        "json".as_ref(),
    ]));
    assert_eq!(rendered["requeueAfterSeconds"], 5);
    assert_eq!(rendered["events"].as_array().map(Vec::len), Some(3));
}

// `render --admission` and `--convert-to`: the plugins' webhooks.

/// `kubeplug render --plugin <plugin> <args>`, each `name: YAML` of
/// `files` written to a temporary file and passed as its path.
fn render_review(plugin: &Path, args: &[&str], files: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut command: Vec<std::ffi::OsString> = vec![
        "render".into(),
        "--plugin".into(),
        plugin.as_os_str().to_owned(),
    ];
    for arg in args {
        match files.iter().find(|(name, _)| name == arg) {
            Some((name, text)) => {
                let path = dir.path().join(format!("{name}.yaml"));
                std::fs::write(&path, text).unwrap();
                command.push(path.into_os_string());
            }
            None => command.push(arg.into()),
        }
    }
    kubeplug(command)
}

const WEB: &str = "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata: {name: web, namespace: shop}\nspec: {}\n";
const ORDERS_MYSQL: &str = "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\nspec: {engine: mysql, version: 8.0.26, replicas: 1}\n";
const ORDERS_POSTGRES: &str = "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\nspec: {engine: postgresql, version: 16.4.0, replicas: 1}\n";

#[test]
fn render_admission_prints_the_mutations_patch_then_the_verdict() {
    let out = stdout_json(&render_review(
        &plugin_path("myapp"),
        &["--admission", "create", "-f", "web", "-o", "json"],
        &[("web", WEB)],
    ));
    assert_eq!(out["plugin"], "myapp@0.1.0");
    assert_eq!(out["operation"], "create");
    assert_eq!(
        out["mutate"],
        json!({"patch": [
            {"op": "add", "path": "/spec/image", "value": "nginx:1.27"},
            {"op": "add", "path": "/spec/replicas", "value": 1},
        ]})
    );
    assert_eq!(out["validate"], json!({"allowed": true, "warnings": []}));
    // The shipped policy grants myapp its mutating webhook only.
    let notes = out["notes"].to_string();
    assert!(
        notes.contains("does not allow its validate webhook") && !notes.contains("mutate webhook"),
        "{notes}"
    );

    let text = render_review(
        &plugin_path("database"),
        &["--admission", "update", "-f", "new", "--old", "old"],
        &[("new", ORDERS_POSTGRES), ("old", ORDERS_MYSQL)],
    );
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    let out: Value = kubeplug_core::yaml::from_str(&String::from_utf8_lossy(&text.stdout))
        .expect("stdout is YAML");
    assert_eq!(
        out["mutate"],
        json!({"patch": []}),
        "database defaults nothing"
    );
    assert_eq!(
        out["validate"],
        json!({"denied": {
            "message": "spec.engine: is immutable after creation (was mysql)",
            "causes": [{"field": "spec.engine", "message": "is immutable after creation (was mysql)"}],
        }})
    );
}

#[test]
fn render_admission_of_a_delete_takes_the_object_deleted() {
    for flag in ["-f", "--old"] {
        let out = stdout_json(&render_review(
            &plugin_path("database"),
            &["--admission", "delete", flag, "old", "-o", "json"],
            &[("old", ORDERS_MYSQL)],
        ));
        assert_eq!(out["operation"], "delete");
        assert_eq!(out["mutate"], json!({"patch": []}), "never patched");
        assert_eq!(out["validate"], json!({"allowed": true, "warnings": []}));
    }
}

#[test]
fn render_admission_refuses_what_the_write_cannot_carry() {
    let plugin = plugin_path("database");
    for (args, says) in [
        (
            &["--admission", "update", "-f", "new"][..],
            "--admission update needs --old FILE",
        ),
        (
            &["--admission", "create", "-f", "new", "--old", "old"][..],
            "--admission create takes no --old",
        ),
        (
            &["--admission", "delete", "-f", "new", "--old", "old"][..],
            "takes the object deleted once",
        ),
        (
            &["--admission", "create", "-f", "web"][..],
            "the live host would not ask: plugin database serves admission for Database.example.com only, not MyApp.example.com",
        ),
        (
            &["--convert-to", "example.com/v2", "-f", "web"][..],
            "the live host would not ask: plugin database converts Database.example.com only, not MyApp example.com/v1alpha1",
        ),
    ] {
        let stderr = failure(&render_review(
            &plugin,
            args,
            &[
                ("new", ORDERS_POSTGRES),
                ("old", ORDERS_MYSQL),
                ("web", WEB),
            ],
        ));
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let usage = render_review(&plugin, &["--admission", "upsert", "-f", "new"], &[]);
    assert_eq!(usage.status.code(), Some(2), "a usage error");
}

#[test]
fn render_admission_shows_a_mutation_its_fence_refuses() {
    let escape = "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata: {name: h, namespace: default}\nspec: {admit: escape}\n";
    let out = stdout_json(&render_review(
        &test_plugin_path("hostile"),
        &["--admission", "create", "-f", "h", "-o", "json"],
        &[("h", escape)],
    ));
    assert_eq!(
        out["mutate"]["refused"],
        "plugin hostile failed: its mutation is refused by its fence: labels key \"kubeplug.io/shard\" is the host's (kubeplug.io/)"
    );
    assert_eq!(out["mutate"].get("patch"), None);
    assert_eq!(out["validate"]["allowed"], true, "validated as written");
    let warnings = "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata: {name: h, namespace: default}\nspec: {admit: warnings}\n";
    let out = stdout_json(&render_review(
        &test_plugin_path("hostile"),
        &["--admission", "create", "-f", "h", "-o", "json"],
        &[("h", warnings)],
    ));
    assert_eq!(
        out["validate"]["refused"],
        "plugin hostile failed: answered with 100 warnings (at most 16)"
    );
}

#[test]
fn render_convert_to_prints_the_objects_and_what_a_round_trip_loses() {
    let annotated = "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: ledger\n  namespace: shop\n  annotations: {databases.example.com/storage: '{\"size\":\"5Gi\"}'}\nspec: {engine: postgresql, version: 16.4.0}\n";
    let out = stdout_json(&render_review(
        &plugin_path("database"),
        &["--convert-to", "example.com/v2", "-f", "dbs", "-o", "json"],
        &[("dbs", &format!("{ORDERS_MYSQL}---\n{annotated}"))],
    ));
    assert_eq!(out["apiVersion"], "example.com/v2");
    let objects = out["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 2, "in the order given");
    assert_eq!(
        objects[0]["spec"],
        json!({"engine": {"name": "mysql", "version": "8.0.26"}, "replicas": 1})
    );
    assert_eq!(objects[1]["spec"]["storage"], json!({"size": "5Gi"}));
    assert_eq!(objects[1]["metadata"].get("annotations"), None);
    assert_eq!(out["roundTripLosses"], json!([]));

    let hostile = |convert: &str| {
        format!(
            "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata: {{name: h, namespace: default}}\nspec: {{convert: {convert}, replicas: 2}}\n"
        )
    };
    let out = stdout_json(&render_review(
        &test_plugin_path("hostile"),
        &[
            "--convert-to",
            "test.kubeplug.io/v2",
            "-f",
            "h",
            "-o",
            "json",
        ],
        &[("h", &hostile("lossy"))],
    ));
    assert_eq!(
        out["roundTripLosses"],
        json!([{
            "index": 0,
            "name": "h",
            "trip": "test.kubeplug.io/v1 → test.kubeplug.io/v2 → test.kubeplug.io/v1",
            "fields": [{"field": "/spec/replicas", "original": 2, "back": null}],
        }])
    );
    let stderr = failure(&render_review(
        &test_plugin_path("hostile"),
        &["--convert-to", "test.kubeplug.io/v2", "-f", "h"],
        &[("h", &hostile("rename"))],
    ));
    assert!(
        stderr.contains("plugin hostile failed: its conversion is refused by its fence: object 0 (h) changed metadata.name"),
        "{stderr}"
    );
}
