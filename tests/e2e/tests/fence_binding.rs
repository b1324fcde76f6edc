//! Grants bound to where the platform puts a file, tried as a team that
//! fills a folder of the plugin directory (an image volume of its own, a key
//! of a projected ConfigMap) would: files that declare another team's plugin,
//! a candidate for it, a file named like it, settings linked to a token.
//! None of them serves, shadows or gets another plugin's settings, at any
//! restart, and the real plugins go on.
//!
//! The team's files are the hostile guest (`plugins/hostile`), which
//! declares whatever name its settings give it.

use std::path::Path;
use std::time::Duration;

use kubeplug_e2e::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(90);

/// How often the host is started again on the same directory: the old
/// binding by declared name raced the real file at every start.
const RESTARTS: usize = 3;

/// Copy built plugin `built_name` to `rel` under the plugin directory, with
/// settings `rel` minus `.wasm` plus `.yaml` when given.
fn place(dir: &PluginDir, built_name: &str, rel: &str, settings: Option<&str>) {
    let path = dir.path.join(rel);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("create folder");
    std::fs::copy(built(built_name), &path).expect("copy plugin");
    if let Some(yaml) = settings {
        std::fs::write(path.with_extension("yaml"), yaml).expect("write settings");
    }
}

/// The `/plugins` row whose file is `rel` under the plugin directory.
fn row(host: &Host, dir: &PluginDir, rel: &str) -> Option<Value> {
    let file = dir.path.join(rel).display().to_string();
    host.plugins()
        .as_array()?
        .iter()
        .find(|p| p["file"] == file.as_str())
        .cloned()
}

/// The row of `rel` once it is refused: failed, never named, never run.
fn refused(host: &Host, dir: &PluginDir, rel: &str) -> String {
    let row = eventually(&format!("{rel} to be refused"), TIMEOUT, || {
        row(host, dir, rel).filter(|p| p["state"] == "failed")
    });
    for never in ["name", "version", "digest", "loadedAt", "shadow"] {
        assert!(row[never].is_null(), "{rel} ran: {row}");
    }
    row["lastError"].as_str().unwrap_or_default().to_string()
}

fn assert_mentions(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
}

#[test]
fn files_in_a_teams_folder_declaring_other_plugins_never_serve_shadow_or_race_across_restarts() {
    install_crds();
    let ns = Namespace::new("binding-folder");
    let dir = PluginDir::with(&["database"]);
    // The team's folder: a file declaring `database` (and claiming its
    // parent kind), one declaring `pod-labeler`, one named like `myapp` and
    // declaring it, and a candidate for `database` that is the real
    // database's bytes (the same shape: it would be accepted as a shadow).
    place(
        &dir,
        "hostile",
        "team-a/database.wasm",
        Some("config:\n  name: database\n  claim: databases\n"),
    );
    place(
        &dir,
        "hostile",
        "team-a/pod-labeler.wasm",
        Some("config:\n  name: pod-labeler\n"),
    );
    place(
        &dir,
        "hostile",
        "team-a/myapp.wasm",
        Some("config:\n  name: myapp\n"),
    );
    place(&dir, "database", "team-a/database.next.wasm", None);

    for round in 0..RESTARTS {
        let host = Host::start(&dir);
        let serving = eventually("database to serve", TIMEOUT, || {
            host.plugin("database").filter(|p| p["state"] == "running")
        });
        assert_eq!(
            serving["file"],
            dir.path.join("database.wasm").display().to_string(),
            "round {round}: {serving}"
        );
        for (file, name) in [
            ("team-a/database.wasm", "database"),
            ("team-a/pod-labeler.wasm", "pod-labeler"),
            ("team-a/myapp.wasm", "myapp"),
        ] {
            let error = refused(&host, &dir, file);
            assert_mentions(
                &error,
                &[
                    &format!("no plugin is placed at {file}"),
                    &format!("plugin {name}'s file is {name}.wasm or {name}/{name}.wasm"),
                ],
            );
        }
        let error = refused(&host, &dir, "team-a/database.next.wasm");
        assert_mentions(
            &error,
            &["team-a/database.next.wasm is not beside plugin database's file"],
        );

        let parent = format!("round-{round}");
        apply(&ns.name, &database(&parent));
        database_runs(&ns.name, &parent);
        // Nothing of the team's ran: no shadow of the real database, no
        // ConfigMap the hostile guest makes for its parents, no load.
        let serving = host.plugin("database").expect("database listed");
        assert!(serving["shadow"].is_null(), "{serving}");
        assert!(
            get_json(&ns.name, &format!("configmap/{parent}-ok")).is_none(),
            "the team's file reconciled a Database"
        );
        let log = std::fs::read_to_string(&host.log).expect("read host log");
        for line in log.lines().filter(|l| l.contains("team-a/")) {
            assert!(
                !line.contains("plugin loaded") && !line.contains("candidate loaded"),
                "round {round}: {line}"
            );
        }
        assert_eq!(
            host.plugins().as_array().map(Vec::len),
            Some(5),
            "{}",
            host.plugins()
        );
        host.stop();
    }
}

#[test]
fn a_file_named_like_another_plugin_gets_none_of_its_settings_and_no_settings_link_leaks_or_lends()
{
    install_crds();
    let ns = Namespace::new("binding-settings");
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    // Settings come from a directory of their own (as from a ConfigMap).
    let settings = dir.path.with_extension("settings");
    std::fs::create_dir_all(&settings).expect("create settings dir");
    // Settings beside the files are not read with --settings; drop them
    // so that only the settings directory is in play.
    let _ = std::fs::remove_file(dir.path.join("pod-annotator.yaml"));
    let secret = format!("kubeplug-e2e-token-{:08x}", rand::random::<u32>());
    // A token outside the settings directory, and the myapp settings a team
    // (or a careless mount) links to it.
    let token = dir.path.with_extension("token");
    std::fs::write(&token, format!("eyJhbGciOiJSUzI1NiJ9.{secret}\n")).expect("write token");
    std::os::unix::fs::symlink(&token, settings.join("myapp.yaml")).expect("link settings");
    // The real hostile plugin's settings, and a file in a team's folder
    // named like it: under a binding by file name it would get them.
    std::fs::write(settings.join("hostile.yaml"), "config: {}\n").expect("write settings");
    // pod-annotator's settings linked to another plugin's (hostile's), inside
    // the settings directory: refused, since a plugin's settings are its own.
    std::os::unix::fs::symlink("hostile.yaml", settings.join("pod-annotator.yaml"))
        .expect("link settings");
    place(&dir, "hostile", "hostile.wasm", None);
    place(&dir, "hostile", "team-a/hostile.wasm", None);

    let host = Host::start_with(
        &dir,
        &["--settings", settings.to_str().expect("utf-8 path")],
    );
    eventually("hostile to serve from the top", TIMEOUT, || {
        host.plugin("hostile")
            .filter(|p| p["state"] == "running")
            .filter(|p| p["file"] == dir.path.join("hostile.wasm").display().to_string())
    });
    assert_mentions(
        &refused(&host, &dir, "team-a/hostile.wasm"),
        &["no plugin is placed at team-a/hostile.wasm"],
    );
    assert_mentions(
        &refused(&host, &dir, "myapp.wasm"),
        &[&format!(
            "myapp.yaml is a symlink that resolves outside {}: refused, not read",
            settings.display()
        )],
    );
    assert_mentions(
        &refused(&host, &dir, "pod-annotator.wasm"),
        &[
            "pod-annotator.yaml is a symlink to hostile.yaml",
            "read only from its own file in its own folder",
            "refused, not read",
        ],
    );
    apply(&ns.name, &database("after-links"));
    database_runs(&ns.name, "after-links");

    let (_, plugins) = host.get("/plugins").expect("/plugins");
    let log = std::fs::read_to_string(&host.log).expect("read host log");
    for (what, text) in [("/plugins", &plugins), ("the host log", &log)] {
        assert!(!text.contains(&secret), "{what} leaks the token:\n{text}");
        assert!(
            !text.contains("eyJhbGci"),
            "{what} leaks the token:\n{text}"
        );
    }
    assert!(Path::new(&token).exists());
    let _ = std::fs::remove_dir_all(&settings);
    let _ = std::fs::remove_file(&token);
}
