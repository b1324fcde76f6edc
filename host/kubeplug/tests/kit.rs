//! The plugin author's loop as a user runs it: `kubeplug new` scaffolds a
//! plugin project outside the checkout, `kubeplug build` unpacks the SDK
//! it pins and builds it, `kubeplug test` passes on its fixture and fails
//! with a diff once the fixture expects something else. Also `kubeplug
//! test` on the shipped plugins, its exit codes, and the admission it
//! shares with the live host.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

/// `kubeplug <args>` with no policy (the default grant) and the shared
/// compile cache.
fn kubeplug<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    kubeplug_command()
        .args(args)
        .env_remove("KUBEPLUG_POLICY")
        .output()
        .expect("running kubeplug")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// Where scaffolded plugins build: kept between runs so that only the
/// plugin itself recompiles. Not the target directory of this very build,
/// whose lock cargo may hold while tests run.
fn scaffold_target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kit-scaffold-target")
}

/// `command` run as a team's CI runs it: from the project's directory,
/// with `home` as HOME (the toolchains' homes named explicitly, crates from
/// their local registry cache, offline), so that nothing of this checkout
/// or of the user's home is used; the Python, TypeScript and Go toolchains'
/// caches (venv, npm ci, componentized outputs, Go's build cache) stay
/// shared between runs.
fn as_a_team(command: &mut std::process::Command, dir: &Path, home: &Path) {
    let real_home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let toolchain_home = |var: &str, default: &str| {
        std::env::var_os(var).map_or_else(|| real_home.join(default), PathBuf::from)
    };
    command
        .current_dir(dir)
        .env("HOME", home)
        .env("CARGO_HOME", toolchain_home("CARGO_HOME", ".cargo"))
        .env("RUSTUP_HOME", toolchain_home("RUSTUP_HOME", ".rustup"))
        .env("CARGO_NET_OFFLINE", "true")
        .env(
            "KUBEPLUG_CACHE",
            std::env::var_os("KUBEPLUG_CACHE")
                .map_or_else(|| real_home.join(".cache/kubeplug"), PathBuf::from),
        )
        .env("npm_config_cache", real_home.join(".npm"))
        .env(
            "GOCACHE",
            std::env::var_os("GOCACHE")
                .map_or_else(|| real_home.join(".cache/go-build"), PathBuf::from),
        )
        .env("CARGO_TARGET_DIR", scaffold_target_dir())
        .env_remove("KUBEPLUG_PYTHON_SDK");
}

/// `kubeplug build` in the project `dir`, as a team's CI runs it: from
/// the project's directory, with a HOME of its own (the toolchains' homes
/// named explicitly, crates from their local registry cache, offline), so
/// that nothing of this checkout or of the user's home is used.
fn build(dir: &Path) {
    let home = tempfile::tempdir().unwrap();
    let mut command = kubeplug_command();
    as_a_team(&mut command, dir, home.path());
    let output = command
        .arg("build")
        .output()
        .expect("running kubeplug build");
    assert!(
        output.status.success(),
        "kubeplug build failed:\n{}",
        text(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.trim_end().ends_with(".wasm"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("kubeplug build: built "),
        "{}",
        text(&output)
    );
}

/// No file of the project (the unpacked SDK included; not the build's
/// output) names this checkout or any absolute path of this machine.
fn assert_no_path_into_the_checkout(dir: &Path) {
    let checkout = repo("").canonicalize().unwrap();
    assert!(
        !dir.canonicalize().unwrap().starts_with(&checkout),
        "{} is inside the checkout",
        dir.display()
    );
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["dist", "target", "node_modules"].contains(&name.as_str()) {
                    stack.push(path);
                }
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            seen += 1;
            for needle in [
                checkout.to_str().unwrap(),
                "/work/main",
                dir.to_str().unwrap(),
            ] {
                assert!(!text.contains(needle), "{} names {needle}", path.display());
            }
        }
    }
    assert!(seen > 10, "only {seen} files in {}", dir.display());
}

/// Every `sh` block of the project's README, run as typed: in bash from
/// the project's directory, with the `kubeplug` under test first on PATH
/// and the toolchains as [`build`] gives them. Blocks that need a registry
/// or a cluster are `text` (the e2e journey types those).
fn readme_runs_as_typed(dir: &Path) {
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut rest = readme.as_str();
    while let Some(start) = rest.find("```sh\n") {
        let body = &rest[start + "```sh\n".len()..];
        let end = body.find("```").expect("the block ends");
        blocks.push(body[..end].to_string());
        rest = &body[end + 3..];
    }
    assert!(!blocks.is_empty(), "no sh block in {}", dir.display());
    let bin = Path::new(env!("CARGO_BIN_EXE_kubeplug")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let home = tempfile::tempdir().unwrap();
    for block in blocks {
        let mut command = std::process::Command::new("bash");
        as_a_team(&mut command, dir, home.path());
        let output = command
            .args(["-c", &format!("set -euo pipefail\n{block}")])
            .env("PATH", &path)
            .env("KUBEPLUG_CACHE_DIR", shared_cache_dir())
            .env("NO_COLOR", "1")
            .env_remove("KUBEPLUG_POLICY")
            .output()
            .expect("run bash");
        assert!(
            output.status.success(),
            "the README's block failed as typed:\n{block}\n{}",
            text(&output)
        );
    }
}

/// `kubeplug new --lang <lang> <name>` into `parent`; the plugin's dir.
fn scaffold(lang: &str, name: &str, parent: &Path) -> PathBuf {
    let created = kubeplug(
        ["new", "--lang", lang, name, "--dir"]
            .map(Into::into)
            .into_iter()
            .chain([parent.as_os_str().to_owned()]),
    );
    assert!(created.status.success(), "{}", text(&created));
    parent.join(name)
}

/// A scaffold in another language builds with its SDK's pinned toolchain
/// and passes its own fixtures through the real runtime, with no flags.
fn scaffold_builds_and_passes(lang: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let name = format!("hello-{lang}");
    let dir = scaffold(lang, &name, tmp.path());
    build(&dir);
    assert!(dir.join(format!("dist/{name}.wasm")).is_file());
    assert_no_path_into_the_checkout(&dir);
    let passed = kubeplug(["test".as_ref(), dir.as_os_str()]);
    let out = text(&passed);
    assert_eq!(passed.status.code(), Some(0), "{out}");
    assert!(out.contains("test result: ok."), "{out}");
    readme_runs_as_typed(&dir);
}

#[test]
fn a_scaffolded_python_plugin_builds_and_passes_its_fixtures() {
    scaffold_builds_and_passes("python");
}

#[test]
fn a_scaffolded_typescript_plugin_builds_and_passes_its_fixtures() {
    scaffold_builds_and_passes("ts");
}

#[test]
fn a_scaffolded_go_plugin_builds_and_passes_its_fixtures() {
    scaffold_builds_and_passes("go");
}

#[test]
fn a_scaffolded_rust_plugin_builds_outside_the_checkout_and_passes_its_fixture_then_fails_with_a_diff()
 {
    let tmp = tempfile::tempdir().unwrap();
    let created = kubeplug(
        ["new", "--lang", "rust", "hello-kit", "--dir"]
            .map(Into::into)
            .into_iter()
            .chain([tmp.path().as_os_str().to_owned()]),
    );
    assert!(created.status.success(), "{}", text(&created));
    let dir = tmp.path().join("hello-kit");
    assert!(
        text(&created).contains(&dir.display().to_string()),
        "{}",
        text(&created)
    );
    let pins = std::fs::read_to_string(dir.join("kubeplug.toml")).unwrap();
    assert!(pins.contains("lang = \"rust\""), "{pins}");

    build(&dir);
    assert!(dir.join("dist/hello-kit.wasm").is_file());
    assert_no_path_into_the_checkout(&dir);
    // Cargo took the SDK from the project's .kubeplug/, nowhere else.
    let metadata = std::process::Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--offline"])
        .current_dir(&dir)
        .output()
        .expect("cargo metadata");
    assert!(metadata.status.success(), "{}", text(&metadata));
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).unwrap();
    let sdk = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "kubeplug-sdk")
        .expect("the SDK is a dependency");
    let manifest = PathBuf::from(sdk["manifest_path"].as_str().unwrap());
    assert!(
        manifest.starts_with(dir.canonicalize().unwrap().join(".kubeplug/sdk")),
        "{}",
        manifest.display()
    );

    let passed = kubeplug_command()
        .args(["test", ".", "--crd", "crds/greetings.example.com.yaml"])
        .current_dir(&dir)
        .env_remove("KUBEPLUG_POLICY")
        .output()
        .unwrap();
    assert_eq!(passed.status.code(), Some(0), "{}", text(&passed));
    assert!(
        text(&passed).contains("test result: ok. 3 passed; 0 failed"),
        "{}",
        text(&passed)
    );
    // The README's render runs as typed.
    let rendered = kubeplug_command()
        .args([
            "render",
            "--plugin",
            "dist/hello-kit.wasm",
            "-f",
            "samples/greeting.yaml",
        ])
        .current_dir(&dir)
        .env_remove("KUBEPLUG_POLICY")
        .output()
        .unwrap();
    assert!(rendered.status.success(), "{}", text(&rendered));
    assert!(
        text(&rendered).contains("message: Hello, World!"),
        "{}",
        text(&rendered)
    );

    // Again: the SDK is already there, nothing is unpacked anew.
    let again = kubeplug_command()
        .args(["build".as_ref(), dir.as_os_str()])
        .env("CARGO_TARGET_DIR", scaffold_target_dir())
        .env("CARGO_NET_OFFLINE", "true")
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", text(&again));
    assert!(text(&again).contains("up to date"), "{}", text(&again));

    let fixture = dir.join("fixtures/example.yaml");
    let original = std::fs::read_to_string(&fixture).unwrap();
    std::fs::write(
        &fixture,
        original.replacen("Hello, World!", "Goodbye, World!", 1),
    )
    .unwrap();
    let failed = kubeplug(["test".as_ref(), dir.as_os_str()]);
    let out = text(&failed);
    assert_eq!(failed.status.code(), Some(1), "{out}");
    assert!(out.contains("FAILED"), "{out}");
    assert!(out.contains("children (- expected, + actual):"), "{out}");
    assert!(out.contains("-    message: Goodbye, World!"), "{out}");
    assert!(out.contains("+    message: Hello, World!"), "{out}");
    assert!(
        out.contains("test result: FAILED. 2 passed; 1 failed"),
        "{out}"
    );

    let updated = kubeplug(["test".as_ref(), dir.as_os_str(), "--update".as_ref()]);
    assert_eq!(updated.status.code(), Some(0), "{}", text(&updated));
    let rewritten = std::fs::read_to_string(&fixture).unwrap();
    assert!(rewritten.contains("message: Hello, World!"), "{rewritten}");
    assert!(
        rewritten.starts_with("# Fixtures:"),
        "comments kept: {rewritten}"
    );
    let again = kubeplug(["test".as_ref(), dir.as_os_str()]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    readme_runs_as_typed(&dir);
}

#[test]
fn build_refuses_a_directory_that_is_no_project_and_a_version_it_does_not_carry() {
    let tmp = tempfile::tempdir().unwrap();
    let build = |dir: &Path| kubeplug(["build".as_ref(), dir.as_os_str()]);
    let none = build(tmp.path());
    assert_eq!(none.status.code(), Some(1));
    assert!(
        text(&none).contains("kubeplug.toml not found: not a kubeplug project"),
        "{}",
        text(&none)
    );

    let dir = scaffold("ts", "pinned", tmp.path());
    let file = dir.join("kubeplug.toml");
    let pins = std::fs::read_to_string(&file).unwrap();
    let carried = pins
        .lines()
        .find_map(|l| l.strip_prefix("sdk = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap()
        .to_string();
    std::fs::write(
        &file,
        pins.replace(&format!("sdk = \"{carried}\""), "sdk = \"99.0.0\""),
    )
    .unwrap();
    let old = build(&dir);
    let out = text(&old);
    assert_eq!(old.status.code(), Some(1), "{out}");
    assert!(out.contains("pins kubeplug SDK 99.0.0"), "{out}");
    assert!(out.contains(&format!("carries SDK {carried}")), "{out}");
    assert!(out.contains("build it with kubeplug 99.0.0"), "{out}");
    assert!(!dir.join("dist").exists());

    // --sdk is gone: the SDK comes with kubeplug.
    let sdk = kubeplug([
        "new".as_ref(),
        "--lang".as_ref(),
        "rust".as_ref(),
        "other".as_ref(),
        "--dir".as_ref(),
        tmp.path().as_os_str(),
        "--sdk".as_ref(),
        tmp.path().as_os_str(),
    ]);
    assert_eq!(sdk.status.code(), Some(1));
    assert!(text(&sdk).contains("no longer used"), "{}", text(&sdk));
    assert!(!tmp.path().join("other").exists());
}

#[test]
fn new_refuses_a_bad_name_an_existing_directory_and_a_language_it_has_no_kit_for() {
    let tmp = tempfile::tempdir().unwrap();
    let new = |lang: &str, name: &str| {
        kubeplug([
            "new".as_ref(),
            "--lang".as_ref(),
            lang.as_ref(),
            name.as_ref(),
            "--dir".as_ref(),
            tmp.path().as_os_str(),
        ])
    };
    let bad = new("rust", "My_Plugin");
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad).contains("\"My_Plugin\" is not a valid plugin name"),
        "{}",
        text(&bad)
    );
    std::fs::create_dir(tmp.path().join("taken")).unwrap();
    let taken = new("rust", "taken");
    assert!(text(&taken).contains("already exists"), "{}", text(&taken));
    let cobol = new("cobol", "other");
    assert!(!cobol.status.success());
    assert!(
        text(&cobol).contains("possible values: rust, python, ts, go"),
        "{}",
        text(&cobol)
    );
}

#[test]
fn test_runs_a_shipped_plugins_fixtures_and_exits_2_when_nothing_can_be_tested() {
    // Under the shipped policy, which grants myapp its mutating webhook.
    let ok = kubeplug([
        "test".as_ref(),
        repo("plugins/myapp").as_os_str(),
        "--plugin".as_ref(),
        plugin_path("myapp").as_os_str(),
        "--policy".as_ref(),
        repo("deploy/base/policy.yaml").as_os_str(),
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    assert!(
        text(&ok).contains("test deployment.yaml: a Deployment named after the app ... ok"),
        "{}",
        text(&ok)
    );

    let tmp = tempfile::tempdir().unwrap();
    let no_plugin = kubeplug(["test".as_ref(), repo("plugins/myapp").as_os_str()]);
    assert_eq!(no_plugin.status.code(), Some(2), "{}", text(&no_plugin));
    assert!(
        text(&no_plugin).contains("no plugin"),
        "{}",
        text(&no_plugin)
    );
    let empty = kubeplug([
        "test".as_ref(),
        tmp.path().as_os_str(),
        "--plugin".as_ref(),
        plugin_path("myapp").as_os_str(),
    ]);
    assert_eq!(empty.status.code(), Some(2), "{}", text(&empty));
    assert!(text(&empty).contains("no fixtures"), "{}", text(&empty));
    std::fs::write(
        tmp.path().join("bad.yaml"),
        "parent: {}\nexpect: {childs: []}\n",
    )
    .unwrap();
    let bad = kubeplug([
        "test".as_ref(),
        tmp.path().as_os_str(),
        "--plugin".as_ref(),
        plugin_path("myapp").as_os_str(),
    ]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(
        text(&bad).contains("unknown key \"childs\""),
        "{}",
        text(&bad)
    );
    std::fs::write(tmp.path().join("bad.yaml"), "parent: {apiVersion: example.com/v1alpha1, kind: MyApp, metadata: {name: a, namespace: x}, spec: {}}\n").unwrap();
    let not_wasm = tmp.path().join("x.wasm");
    std::fs::write(&not_wasm, "nope").unwrap();
    let unloadable = kubeplug([
        "test".as_ref(),
        tmp.path().as_os_str(),
        "--plugin".as_ref(),
        not_wasm.as_os_str(),
    ]);
    assert_eq!(unloadable.status.code(), Some(2), "{}", text(&unloadable));
}

#[test]
fn a_fence_refusal_fails_the_case_with_the_hosts_reason_unless_expected() {
    let tmp = tempfile::tempdir().unwrap();
    let hostile = |behave: &str| {
        format!(
            "name: {behave}\nparent: {{apiVersion: test.kubeplug.io/v1, kind: Hostile, metadata: {{name: h, namespace: default}}, spec: {{behave: {behave}}}}}\n"
        )
    };
    let fixture = tmp.path().join("hostile.yaml");
    std::fs::write(
        &fixture,
        [hostile("undeclared"), hostile("error")].join("---\n"),
    )
    .unwrap();
    let test = |extra: &[&str]| test_hostile(tmp.path(), extra);
    let out = test(&[]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("refused (- expected, + actual):"), "{shown}");
    assert!(
        shown.contains("+'plugin hostile crossed its fence: child Secret/h-smuggled"),
        "{shown}"
    );
    assert!(shown.contains("+kind: failed"), "{shown}");

    let updated = test(&["--update"]);
    assert_eq!(updated.status.code(), Some(0), "{}", text(&updated));
    let written = std::fs::read_to_string(&fixture).unwrap();
    assert!(
        written.contains("  refused: 'plugin hostile crossed its fence"),
        "{written}"
    );
    assert!(written.contains("kind: failed"), "{written}");
    let out = test(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // A trap is no answer: the case fails and --update leaves it alone.
    std::fs::write(&fixture, hostile("panic")).unwrap();
    let out = test(&["--update"]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("trapped"), "{shown}");
    assert_eq!(std::fs::read_to_string(&fixture).unwrap(), hostile("panic"));
}

#[test]
fn test_refuses_a_plugin_the_live_host_would_refuse_under_the_same_policy() {
    let database = |extra: &[PathBuf]| {
        let mut args = vec![
            "test".into(),
            repo("plugins/database").into_os_string(),
            "--plugin".into(),
            plugin_path("database").into_os_string(),
        ];
        args.extend(extra.iter().map(|p| p.clone().into_os_string()));
        kubeplug(args)
    };
    // No policy: the default grant names no sensitive kind, and database
    // writes Secrets. The live host refuses it; so does `kubeplug test`.
    let refused = database(&[]);
    let shown = text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{shown}");
    assert!(
        shown.contains("the live host would refuse plugin "),
        "{shown}"
    );
    for refused in [
        "plugin database asks for more than it may (it has no entry in the policy; the default grant applies): ",
        "child kind Secret (sensitive kinds must be named)",
    ] {
        assert!(shown.contains(refused), "{refused:?} not in {shown}");
    }
    assert!(!shown.contains("test result"), "no case ran: {shown}");

    // The shipped policy grants it; without its CRD the parent's scope is
    // the plugin's claim, and the report says so.
    let granted = database(&["--policy".into(), repo("deploy/base/policy.yaml")]);
    let shown = text(&granted);
    assert_eq!(granted.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("note: the scope of Database.example.com/v1 is the plugin's own claim"),
        "{shown}"
    );
    let checked = database(&[
        "--policy".into(),
        repo("deploy/base/policy.yaml"),
        "--crd".into(),
        repo("crds/databases.example.com.yaml"),
    ]);
    let shown = text(&checked);
    assert_eq!(checked.status.code(), Some(0), "{shown}");
    assert!(!shown.contains("note:"), "{shown}");
}

/// `kubeplug test DIR --plugin <the hostile guest> EXTRA...`.
fn test_hostile(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "test".into(),
        dir.as_os_str().to_owned(),
        "--plugin".into(),
        test_plugin_path("hostile").into_os_string(),
    ];
    args.extend(extra.iter().map(Into::into));
    kubeplug(args)
}

/// A Hostile (test.kubeplug.io/v1) whose webhooks misbehave as `spec` says
/// (plugins/hostile/src/webhooks.rs), as a flow mapping.
fn hostile_object(spec: &str) -> String {
    format!(
        "{{apiVersion: test.kubeplug.io/v1, kind: Hostile, metadata: {{name: h, namespace: default}}, spec: {spec}}}"
    )
}

#[test]
fn webhook_cases_fail_with_the_hosts_refusal_and_update_to_it_but_never_to_a_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = tmp.path().join("webhooks.yaml");
    let cases = [
        format!(
            "name: escape\ncall: mutate\noperation: create\nobject: {}\n",
            hostile_object("{admit: escape}")
        ),
        format!(
            "name: defaults\ncall: mutate\noperation: update\noldObject: {}\nobject: {}\n",
            hostile_object("{}"),
            hostile_object("{admit: defaults}")
        ),
        format!(
            "name: deny\ncall: validate\noperation: delete\noldObject: {}\n",
            hostile_object("{admit: deny}")
        ),
        format!(
            "name: rename\ncall: convert\napiVersion: test.kubeplug.io/v2\nobjects: [{}]\n",
            hostile_object("{convert: rename}")
        ),
        format!(
            "name: lossy\ncall: convert\napiVersion: test.kubeplug.io/v2\nroundTrip: true\nobjects: [{}]\n",
            hostile_object("{convert: lossy, replicas: 2}")
        ),
    ];
    std::fs::write(&fixture, cases.join("---\n")).unwrap();
    let test = |extra: &[&str]| test_hostile(tmp.path(), extra);
    let out = test(&[]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    for needle in [
        "+'plugin hostile failed: its mutation is refused by its fence: labels key \"kubeplug.io/shard\" is the host''s (kubeplug.io/)'",
        "+- op: add\n+  path: /spec/defaulted\n+  value: true",
        "+  message: the hostile plugin denies on request",
        "+- field: spec.admit",
        "its conversion is refused by its fence: object 0 (h) changed metadata.name",
        "roundTrip (- original, + back):\n object 0 (h): test.kubeplug.io/v1 → test.kubeplug.io/v2 → test.kubeplug.io/v1\n-/spec/replicas: 2\n+/spec/replicas: null\n",
        // The default grant serves no webhook: said once per webhook.
        "note: the grant of plugin hostile does not allow its mutate webhook",
    ] {
        assert!(shown.contains(needle), "{needle:?} not in {shown}");
    }
    assert_eq!(
        shown.matches("does not allow its mutate webhook").count(),
        1
    );

    let updated = test(&["--update"]);
    let shown = text(&updated);
    assert_eq!(updated.status.code(), Some(1), "the loss stays: {shown}");
    assert!(
        shown.contains("test webhooks.yaml: lossy ... FAILED"),
        "{shown}"
    );
    assert_eq!(shown.matches("... updated").count(), 4, "{shown}");
    let written = std::fs::read_to_string(&fixture).unwrap();
    for needle in [
        "  refused: 'plugin hostile failed: its mutation is refused by its fence",
        "  patch:\n  - op: add\n    path: /spec/defaulted",
        "  denied:\n",
        "  refused: 'plugin hostile failed: its conversion is refused by its fence",
    ] {
        assert!(written.contains(needle), "{needle:?} not in {written}");
    }
    let again = test(&[]);
    let shown = text(&again);
    assert_eq!(again.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("test result: FAILED. 4 passed; 1 failed"),
        "{shown}"
    );
}

#[test]
fn a_webhook_case_the_live_host_would_not_ask_is_no_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = tmp.path().join("elsewhere.yaml");
    let case = "call: validate\noperation: create\nobject: {apiVersion: example.com/v1alpha1, kind: MyApp, metadata: {name: web, namespace: shop}, spec: {}}\n";
    std::fs::write(&fixture, case).unwrap();
    let out = kubeplug([
        "test".as_ref(),
        tmp.path().as_os_str(),
        "--plugin".as_ref(),
        plugin_path("database").as_os_str(),
        "--policy".as_ref(),
        repo("deploy/base/policy.yaml").as_os_str(),
        "--update".as_ref(),
    ]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("the live host would not ask: plugin database serves admission for Database.example.com only, not MyApp.example.com"),
        "{shown}"
    );
    assert_eq!(
        std::fs::read_to_string(&fixture).unwrap(),
        case,
        "left alone"
    );
}
