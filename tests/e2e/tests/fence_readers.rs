//! Issue 42: who reads what-ifs and the admin port, against the real
//! control plane. A hostile candidate builds label and status keys from a
//! Secret it is handed; its what-if's summary (every reader of the
//! plugin's status, `/plugins` to a client that is not on loopback) names
//! only the schema parts of what it would change, and only a loopback
//! client or a caller allowed `plugins/details` sees the whole paths. The
//! admin listener, bound to this machine's non-loopback address, serves
//! file paths, error texts and replays to loopback clients only.

use std::collections::BTreeSet;
use std::time::Duration;

use kubeplug_e2e::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

/// A hostile plugin's grant: Hostile parents, ConfigMap children, Secrets
/// to read.
fn grant(name: &str) -> String {
    format!(
        "plugins:\n  {name}:\n    serviceAccount: kubeplug-plugin-hostile\n    parent: [Hostile.test.kubeplug.io]\n    children: [ConfigMap]\n    related: [Secret]\n"
    )
}

/// `--listen` on this machine's non-loopback address (a free port), and
/// that address.
fn listen_outside() -> (String, String) {
    let ip = non_loopback_address().expect("this machine has a non-loopback address");
    let listen = format!("{ip}:{}", free_port());
    (ip, listen)
}

/// The `field`s of a what-if's rows `report[rows]`.
fn fields(report: &Value, rows: &str) -> BTreeSet<String> {
    report[rows]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["field"].as_str())
        .map(String::from)
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A what-if `report` as `who` sees it without details: the schema parts
/// of the ConfigMap's labels and of the status, and nowhere `secret`.
fn assert_summary_only(report: &Value, secret: &str, who: &str) {
    assert_eq!(report["phase"], "complete", "{who}: {report:#}");
    assert!(report.get("details").is_none(), "{who}: {report:#}");
    assert_eq!(
        fields(report, "updates"),
        set(&["metadata.labels"]),
        "{who}: {report:#}"
    );
    assert_eq!(
        fields(report, "status"),
        set(&["status"]),
        "{who}: {report:#}"
    );
    assert!(!report.to_string().contains(secret), "{who}: {report:#}");
}

#[test]
fn a_hostile_candidate_s_whatif_shows_keys_it_built_from_a_secret_only_to_readers_of_details() {
    install_crds();
    let ns = Namespace::new("fr-whatif");
    let n = ns.name.as_str();
    const PLUGIN: &str = "labeller";
    let dir = PluginDir::with(&[]);
    let config = format!("related: [secrets]\nnamespaces: [{n}]");
    hostile_as(&dir, PLUGIN, &config);
    let (ip, listen) = listen_outside();
    let policy = with_policy(&dir, &grant(PLUGIN));
    let api = ApiHost::start(&dir, &["--policy", &policy, "--listen", &listen]);
    let host = &api.host;
    running(host, PLUGIN);

    // The serving version (`ok`) reads the Secret and writes only its
    // ConfigMap; the parent has a status of its own, so that keys the
    // candidate adds to it are paths of their own.
    let secret = format!("team-swordfish-{}", std::process::id());
    apply(
        n,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: vault\n  labels:\n    kubeplug-test/steal: \"yes\"\nstringData:\n  token: {secret}\n"
        ),
    );
    apply(n, &hostile("h", "ok", ""));
    kubectl_ok(
        &[
            "patch",
            "-n",
            n,
            "hostile/h",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"seeded":"yes"}}"#,
        ],
        None,
    );
    eventually("the serving version's ConfigMap", TIMEOUT, || {
        get_json(n, "configmap/h-ok")
    });

    // The candidate labels the ConfigMap, and keys the status, with the
    // Secret's value: its shadow runs a what-if over every parent.
    hostile_candidate(&dir, PLUGIN, &format!("{config}\nbehave: label-from"));
    let report = eventually("the what-if to complete", TIMEOUT, || {
        let report = host.plugin(PLUGIN)?["shadow"]["whatIf"].clone();
        (report["phase"] == "complete").then_some(report)
    });
    eprintln!("the what-if, to a loopback client: {report:#}");

    // A loopback client: the summary's schema parts, and the whole paths
    // (the Secret's value in them) in the details.
    assert_eq!(
        (report["parents"].as_u64(), report["changed"].as_u64()),
        (Some(1), Some(1)),
        "{report:#}"
    );
    assert_eq!(fields(&report, "updates"), set(&["metadata.labels"]));
    assert_eq!(fields(&report, "status"), set(&["status"]));
    let details = &report["details"];
    assert_eq!(
        fields(details, "updates"),
        set(&[&format!("metadata.labels.{secret}")]),
        "{report:#}"
    );
    assert_eq!(
        fields(details, "status"),
        set(&[&format!("status.{secret}")]),
        "{report:#}"
    );

    // Any client of the admin port from another address: the summary only.
    let (code, body) = host.get_at(&ip, "/plugins").expect("/plugins from outside");
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains(&secret), "{body}");
    // Nor where the plugins live (the candidate's file by name only).
    assert!(!body.contains(&dir.path.display().to_string()), "{body}");
    let rows: Value = serde_json::from_str(&body).expect("JSON");
    let row = rows
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["name"] == PLUGIN))
        .unwrap_or_else(|| panic!("the {PLUGIN} row: {body}"));
    assert_summary_only(&row["shadow"]["whatIf"], &secret, "a client from outside");

    // Through the aggregated API: a namespaced user allowed to read the
    // plugins but not their details sees the summary; one allowed
    // `plugins/details` sees the paths.
    let tenant = PluginReader::new("tenant", "kubeplug-plugin-viewer");
    role(
        n,
        &tenant.name,
        "- apiGroups: [test.kubeplug.io]\n  resources: [hostiles]\n  verbs: [get, list, watch]\n",
    );
    let inspector = PluginReader::new("inspector", "kubeplug-plugin-details-viewer");
    let seen = eventually("the tenant to see the what-if", TIMEOUT, || {
        let plugin = tenant.plugin(PLUGIN)?;
        (plugin["status"]["shadow"]["whatIf"]["phase"] == "complete").then_some(plugin)
    });
    assert!(seen["status"]["withheld"].is_string(), "{seen:#}");
    assert_summary_only(&seen["status"]["shadow"]["whatIf"], &secret, "the tenant");
    let yaml = kubectl_ok(
        &["get", "plugins", "-o", "yaml", "--as", &tenant.name],
        None,
    );
    assert!(yaml.contains("field: metadata.labels"), "{yaml}");
    assert!(!yaml.contains(&secret), "{yaml}");
    let full = eventually(
        "the inspector to see the what-if's details",
        TIMEOUT,
        || {
            let plugin = inspector.plugin(PLUGIN)?;
            let report = plugin["status"]["shadow"]["whatIf"].clone();
            report["details"].is_object().then_some(report)
        },
    );
    assert_eq!(
        fields(&full["details"], "updates"),
        set(&[&format!("metadata.labels.{secret}")]),
        "{full:#}"
    );
    assert_eq!(fields(&full, "updates"), set(&["metadata.labels"]));
}

#[test]
fn the_admin_port_serves_paths_errors_and_replays_to_loopback_clients_only() {
    install_crds();
    let ns = Namespace::new("fr-admin");
    let n = ns.name.as_str();
    const PLUGIN: &str = "failer";
    let dir = PluginDir::with(&[]);
    hostile_as(&dir, PLUGIN, &format!("namespaces: [{n}]"));
    // A file that does not load: an error text.
    dir.put("broken", b"\0asm not really");
    let (ip, listen) = listen_outside();
    let host = Host::start_with(
        &dir,
        &[
            "--policy",
            &with_policy(&dir, &grant(PLUGIN)),
            "--listen",
            &listen,
        ],
    );
    running(&host, PLUGIN);

    // A parent the plugin fails on: a capture kept for replay.
    apply(n, &hostile("fails", "error", ""));
    let parent = format!("{n}/fails");
    let replays = format!("/plugins/{PLUGIN}/replays");
    let one = format!("{replays}/{parent}");
    eventually("a capture of the failure", TIMEOUT, || {
        let (code, body) = host.get(&replays).ok()?;
        (code == 200 && body.contains(&parent)).then_some(())
    });

    // A loopback client: the file's path, the load error, the captures.
    let directory = dir.path.display().to_string();
    let (code, local) = host.get("/plugins").expect("/plugins on loopback");
    assert_eq!(code, 200, "{local}");
    assert!(local.contains(&directory), "{local}");
    let error = host
        .plugin_file("broken.wasm")
        .and_then(|row| row["lastError"].as_str().map(String::from))
        .expect("the load error, to a loopback client");
    let (code, capture) = host.get(&one).expect("a capture on loopback");
    assert_eq!(code, 200, "{capture}");
    assert!(capture.contains("\"kind\": \"Replay\""), "{capture}");

    // From this machine's other address: names, states, no paths, no
    // error text, no captures.
    let (code, remote) = host.get_at(&ip, "/plugins").expect("/plugins from outside");
    assert_eq!(code, 200, "{remote}");
    let rows: Value = serde_json::from_str(&remote).expect("JSON");
    let row = |file: &str| {
        rows.as_array()
            .and_then(|rows| rows.iter().find(|r| r["file"] == file))
            .cloned()
            .unwrap_or_else(|| panic!("the row of {file}: {remote}"))
    };
    assert_eq!(row(&format!("{PLUGIN}.wasm"))["state"], "running");
    let broken = row("broken.wasm");
    assert_eq!(broken["state"], "failed", "{remote}");
    assert!(broken.get("lastError").is_none(), "{remote}");
    assert!(!remote.contains(&directory), "{remote}");
    assert!(!remote.contains(&error), "{remote}");
    for path in [&replays, &one] {
        let (code, body) = host.get_at(&ip, path).expect("replays from outside");
        assert_eq!(code, 403, "{path}: {body}");
        assert!(body.contains("loopback clients only"), "{path}: {body}");
        assert!(!body.contains(&parent), "{path}: {body}");
    }
    // Probes and metrics are for everyone.
    assert_eq!(host.get_at(&ip, "/readyz").expect("/readyz").0, 200);
    assert_eq!(host.get_at(&ip, "/metrics").expect("/metrics").0, 200);
}
