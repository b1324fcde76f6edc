//! Acceptance tests of the host's resource budgets on the local control
//! plane: objects that anyone may create with a watch's labels fill that
//! watch's cache up to its byte budget and no further; the plugin reading it
//! is `degraded` with the reason while the host and the other plugins go on,
//! and it recovers once the objects are gone (or fit again). The compile
//! cache stays within its budget while distinct components cycle through it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kubeplug_e2e::{
    Host, Namespace, PluginDir, built, eventually, get_json, host_binary, install_crds, kubectl_ok,
};

const CONVERGE: Duration = Duration::from_secs(90);

/// ConfigMaps filling the hostile plugin's child watch (anyone who may
/// create ConfigMaps in a served namespace may label them so).
const FILLERS: usize = 15;
/// Bytes of data in each: 15 × 100 KiB is past a 1 MiB budget.
const FILLER_BYTES: usize = 100 << 10;

fn hostile(name: &str) -> String {
    format!(
        "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: {name}\nspec:\n  behave: ok\n"
    )
}

fn database(name: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n"
    )
}

/// `count` labelled ConfigMaps `filler-<i>`, one YAML stream, created in
/// order.
fn fillers(from: usize, count: usize) -> String {
    let blob = "x".repeat(FILLER_BYTES);
    (from..from + count)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: filler-{i:02}\n  labels:\n    kubeplug.io/plugin: hostile\n    kubeplug-test/filler: \"yes\"\ndata:\n  blob: {blob}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

fn apply_in(namespace: &str, yaml: &str) {
    // Server-side: a 100 KiB ConfigMap would not fit kubectl's last-applied
    // annotation (256 KiB in all) many times over, and the host drops it anyway.
    kubectl_ok(
        &["apply", "--server-side", "-n", namespace, "-f", "-"],
        Some(yaml),
    );
}

fn state(host: &Host, plugin: &str) -> (String, String) {
    let row = host.plugin(plugin).unwrap_or_default();
    (
        row["state"].as_str().unwrap_or_default().to_string(),
        row["reason"].as_str().unwrap_or_default().to_string(),
    )
}

/// The ConfigMap child watch of `hostile`: its series' resource label.
fn hostile_configmaps(host: &Host) -> Option<(String, f64)> {
    host.series("kubeplug_cached_bytes")
        .into_iter()
        .find(|(labels, _)| {
            labels.contains("ConfigMap.v1") && labels.contains("kubeplug.io/plugin=hostile")
        })
}

#[test]
fn labelled_objects_beyond_a_watchs_byte_budget_degrade_its_plugin_not_the_host() {
    install_crds();
    let ns = Namespace::new("budget");
    let dir = PluginDir::with(&["database"]);
    dir.settings(
        "hostile",
        &format!("config:\n  namespaces: [{}]\n", ns.name),
    );
    dir.install("hostile", "hostile");
    let host = Host::start_with(&dir, &["--watch-cache-bytes", "1Mi"]);
    apply_in(&ns.name, &hostile("first"));
    apply_in(&ns.name, &database("before"));
    eventually("hostile to reconcile", CONVERGE, || {
        get_json(&ns.name, "configmap/first-ok")
    });
    eventually("the database to run", CONVERGE, || {
        let db = get_json(&ns.name, "database/before")?;
        (db["status"]["phase"] == "Running").then_some(())
    });
    assert_eq!(state(&host, "hostile").0, "running");

    // Fill hostile's child watch past its budget.
    apply_in(&ns.name, &fillers(0, FILLERS));
    let reason = eventually("hostile to be degraded", CONVERGE, || {
        let (state, reason) = state(&host, "hostile");
        (state == "degraded").then_some(reason)
    });
    assert!(
        reason.contains("over its budget of 1048576 bytes")
            && reason.contains("ConfigMap.v1")
            && reason.contains("--watch-cache-bytes"),
        "the reason names the watch, its budget and the flag: {reason}"
    );
    let (labels, bytes) = hostile_configmaps(&host).expect("the watch is measured");
    assert!(
        bytes <= (1 << 20) as f64,
        "the cache stopped at its budget: {bytes} bytes ({labels})"
    );
    let left_out = host.metric(
        "kubeplug_cache_left_out_objects",
        "kubeplug.io/plugin=hostile",
    );
    assert!(left_out >= 1.0, "objects left out are counted: {left_out}");
    let info = host.series("kubeplug_plugin_info");
    assert!(
        info.iter().any(|(l, v)| *v == 1.0
            && l.contains("plugin=\"hostile\"")
            && l.contains("state=\"degraded\"")),
        "hostile is degraded in kubeplug_plugin_info: {info:?}"
    );

    // The host and the other plugin go on.
    assert_eq!(host.get("/healthz").expect("healthz").0, 200);
    assert_eq!(state(&host, "database").0, "running");
    apply_in(&ns.name, &database("during"));
    eventually("another plugin to reconcile meanwhile", CONVERGE, || {
        let db = get_json(&ns.name, "database/during")?;
        (db["status"]["phase"] == "Running").then_some(())
    });

    // Deleting the first ones makes room for what was left out: the watch
    // lists again and caches all that is left.
    for i in 0..8 {
        kubectl_ok(
            &[
                "delete",
                "configmap",
                "-n",
                &ns.name,
                &format!("filler-{i:02}"),
            ],
            None,
        );
    }
    eventually("hostile to recover", CONVERGE, || {
        (state(&host, "hostile").0 == "running").then_some(())
    });
    eventually("what was left out to be cached", CONVERGE, || {
        let objects = host.metric("kubeplug_cached_objects", "kubeplug.io/plugin=hostile");
        let left = host.metric(
            "kubeplug_cache_left_out_objects",
            "kubeplug.io/plugin=hostile",
        );
        // The 7 fillers left and hostile's own `first-ok`.
        (objects == (FILLERS - 8 + 1) as f64 && left == 0.0).then_some(())
    });

    // Over again, then everything deleted: recovered without a relist.
    apply_in(&ns.name, &fillers(FILLERS, FILLERS));
    eventually("hostile to be degraded again", CONVERGE, || {
        (state(&host, "hostile").0 == "degraded").then_some(())
    });
    kubectl_ok(
        &[
            "delete",
            "configmap",
            "-n",
            &ns.name,
            "-l",
            "kubeplug-test/filler=yes",
        ],
        None,
    );
    eventually("hostile to recover once they are deleted", CONVERGE, || {
        (state(&host, "hostile").0 == "running").then_some(())
    });
    apply_in(&ns.name, &hostile("after"));
    eventually("hostile to reconcile again", CONVERGE, || {
        get_json(&ns.name, "configmap/after-ok")
    });
    let log = std::fs::read_to_string(&host.log).unwrap_or_default();
    assert!(
        log.contains("cache over its byte budget")
            && log.contains("cache back within its byte budget"),
        "going over and back are logged"
    );
}

/// `bytes` with a custom section holding `tag` appended: the same
/// component, other bytes, so another digest and another compiled artefact.
fn variant(bytes: &[u8], tag: u32) -> Vec<u8> {
    let name = b"kubeplug-test";
    let payload = format!("variant {tag:08}");
    let mut out = bytes.to_vec();
    // Custom section: id 0, size, name length, name, payload (all < 128).
    out.push(0);
    out.push((1 + name.len() + payload.len()) as u8);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(payload.as_bytes());
    out
}

/// `kubeplug inspect` of `file`, compiling into `cache`: the digest.
fn inspect(file: &Path, cache: &Path) -> String {
    let out = Command::new(host_binary())
        .args([
            "inspect",
            file.to_str().unwrap(),
            "-o",
            "json",
            "--cache-dir",
        ])
        .arg(cache)
        .output()
        .expect("run kubeplug inspect");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    report["digest"].as_str().expect("a digest").to_string()
}

/// The artefacts in a compile cache: (file names, bytes of every file).
fn artefacts(cache: &Path) -> (Vec<String>, u64) {
    let mut names = Vec::new();
    let mut total = 0;
    for entry in std::fs::read_dir(cache).into_iter().flatten().flatten() {
        total += entry.metadata().map(|m| m.len()).unwrap_or(0);
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".cwasm") {
            names.push(name);
        }
    }
    (names, total)
}

#[test]
fn the_compile_cache_stays_within_its_budget_while_distinct_components_cycle_through_it() {
    install_crds();
    let scratch = tempfile::tempdir().unwrap();
    let original = std::fs::read(built("hostile")).expect("hostile is built");
    let variants: Vec<Vec<u8>> = (0..8).map(|i| variant(&original, i)).collect();
    let mut digests = Vec::new();
    for (i, bytes) in variants.iter().enumerate() {
        let file = scratch.path().join(format!("v{i}.wasm"));
        std::fs::write(&file, bytes).unwrap();
        digests.push(inspect(&file, &scratch.path().join("measure")));
    }
    let size = {
        let (names, total) = artefacts(&scratch.path().join("measure"));
        assert_eq!(
            names.len(),
            variants.len(),
            "each variant is its own artefact"
        );
        total / names.len() as u64
    };
    // Room for three and a half: the version serving, the one before it
    // (kept to roll back to while the new one is on probation) and the one
    // loading are in use and never pruned.
    let budget = size * 7 / 2;
    let cache = scratch.path().join("cache");
    let dir = PluginDir::with(&[]);
    dir.put("hostile", &variants[0]);
    let host = Host::start_with(
        &dir,
        &[
            "--cache-dir",
            cache.to_str().unwrap(),
            "--compile-cache-bytes",
            &budget.to_string(),
        ],
    );
    for (i, bytes) in variants.iter().enumerate() {
        if i > 0 {
            dir.put("hostile", bytes);
        }
        eventually(&format!("variant {i} to serve"), CONVERGE, || {
            let row = host.plugin("hostile")?;
            (row["digest"] == digests[i].as_str()).then_some(())
        });
        let (names, total) = artefacts(&cache);
        assert!(
            total <= budget,
            "after variant {i}: {total} bytes cached, budget {budget}: {names:?}"
        );
        assert!(
            names.iter().any(|n| n.starts_with(&digests[i])),
            "the serving version's artefact is kept: {names:?}"
        );
    }
    let (names, _) = artefacts(&cache);
    assert!(
        names.len() <= 3,
        "{} variants went through, at most three stay: {names:?}",
        variants.len()
    );
    assert!(
        std::fs::read_to_string(&host.log)
            .unwrap_or_default()
            .contains("pruned a precompiled component"),
        "pruning is logged"
    );
}
