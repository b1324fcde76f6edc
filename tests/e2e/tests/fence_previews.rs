//! Issue 21, class 4: previews and the aggregated API as a confused deputy,
//! against the real control plane. A preview shows its caller no live value
//! of a kind the caller may not read; a caller-supplied parent with another
//! namespace's uid is handed none of that namespace's children; a flood of
//! previews with new parent names costs the replica none of its Leases; and
//! `kubectl get plugins` shows error texts and shadow examples only to a
//! caller RBAC allows `get` on `plugins/details`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kubeplug_e2e::*;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(90);

/// Wait until kube-apiserver routes previews to the host.
fn wait_for_previews() {
    eventually("kubectl to discover previews", TIMEOUT, || {
        let out = kubectl(&["api-resources", "--api-group=kubeplug.io"], None);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with("previews "))
            .then_some(())
    });
}

/// A Preview in `ns` through the aggregator, as `user` (admin if `None`).
fn preview(ns: &str, body: &Value, user: Option<&str>) -> Value {
    let mut args = vec!["create", "-n", ns, "-f", "-", "-o", "json"];
    if let Some(user) = user {
        args.extend(["--as", user, "--validate=false"]);
    }
    let out = kubectl(&args, Some(&body.to_string()));
    assert!(
        out.status.success(),
        "preview as {user:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the preview as JSON")
}

/// A Preview in `ns` as `user`, once RBAC lets the user create it (a new
/// Role takes a moment to be seen by the API server).
fn user_preview(ns: &str, body: &Value, user: &str) -> Value {
    eventually("the user's preview", TIMEOUT, || {
        let out = kubectl(
            &[
                "create",
                "-n",
                ns,
                "-f",
                "-",
                "-o",
                "json",
                "--as",
                user,
                "--validate=false",
            ],
            Some(&body.to_string()),
        );
        out.status
            .success()
            .then(|| serde_json::from_slice::<Value>(&out.stdout).ok())
            .flatten()
    })
}

fn database(ns: &str, name: &str) {
    apply(
        ns,
        &format!(
            "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n"
        ),
    );
    eventually("the database to run", TIMEOUT, || {
        (get_json(ns, &format!("database/{name}"))?["status"]["phase"] == "Running").then_some(())
    });
}

fn rows(answer: &Value) -> Vec<Value> {
    answer["status"]["children"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_preview_shows_no_live_values_of_kinds_its_caller_may_not_read() {
    install_crds();
    let ns = Namespace::new("fp-read");
    let dir = PluginDir::with(&["database"]);
    let _api = ApiHost::start(&dir, &[]);
    database(&ns.name, "shop");
    wait_for_previews();
    let password = get_json(&ns.name, "secret/shop-credentials")
        .or_else(|| {
            get_json(&ns.name, "secrets")?["items"]
                .as_array()?
                .first()
                .cloned()
        })
        .expect("the credentials Secret")["data"]["password"]
        .as_str()
        .expect("a password")
        .to_string();

    // May create previews and get this one Database: nothing else.
    let user = format!("reader-{}", std::process::id());
    role(
        &ns.name,
        &user,
        "- apiGroups: [kubeplug.io]\n  resources: [previews]\n  verbs: [create]\n- apiGroups: [example.com]\n  resources: [databases]\n  resourceNames: [shop]\n  verbs: [get]\n",
    );
    let mut parent = get_json(&ns.name, "database/shop").expect("the database");
    parent["spec"]["replicas"] = json!(3);
    let body = json!({
        "apiVersion": "kubeplug.io/v1alpha1",
        "kind": "Preview",
        "spec": {"plugin": "database", "parent": parent},
    });

    // The admin sees the StatefulSet's live replicas.
    let admin = preview(&ns.name, &body, None);
    let sts = rows(&admin)
        .into_iter()
        .find(|c| c["kind"] == "StatefulSet")
        .expect("the StatefulSet");
    assert!(
        sts["diff"].as_array().is_some_and(|d| d
            .iter()
            .any(|c| c["path"] == "/spec/replicas" && c["live"] == 1)),
        "{admin:#}"
    );
    assert!(admin["status"].get("withheld").is_none(), "{admin:#}");

    // The user sees what would change, not the values of what it may not read.
    let answer = user_preview(&ns.name, &body, &user);
    let text = answer.to_string();
    assert!(!text.contains(&password), "the Secret's value: {answer:#}");
    let sts = rows(&answer)
        .into_iter()
        .find(|c| c["kind"] == "StatefulSet")
        .expect("the StatefulSet row stays");
    assert_eq!(sts["action"], "update", "{answer:#}");
    assert!(sts.get("diff").is_none(), "no live values: {answer:#}");
    assert!(
        sts["withheld"]
            .as_str()
            .is_some_and(|w| w.contains("statefulsets.apps")),
        "{answer:#}"
    );
    let kinds = &answer["status"]["withheld"]["kinds"];
    for kind in ["statefulsets.apps", "services", "secrets"] {
        assert!(
            kinds
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == kind)),
            "{kind} withheld: {answer:#}"
        );
    }

    // Given `get` on StatefulSets, the same user sees their values (and
    // still not the Secrets').
    role(
        &ns.name,
        &user,
        "- apiGroups: [kubeplug.io]\n  resources: [previews]\n  verbs: [create]\n- apiGroups: [example.com]\n  resources: [databases]\n  resourceNames: [shop]\n  verbs: [get]\n- apiGroups: [apps]\n  resources: [statefulsets]\n  verbs: [get]\n",
    );
    let granted = eventually("the StatefulSet's diff to be shown", TIMEOUT, || {
        let answer = preview(&ns.name, &body, Some(&user));
        rows(&answer)
            .iter()
            .any(|c| c["kind"] == "StatefulSet" && c["diff"].is_array())
            .then_some(answer)
    });
    assert!(!granted.to_string().contains(&password), "{granted:#}");
    assert!(
        granted["status"]["withheld"]["kinds"]
            .as_array()
            .is_some_and(
                |k| k.iter().any(|k| k == "secrets") && !k.iter().any(|k| k == "statefulsets.apps")
            ),
        "{granted:#}"
    );
}

#[test]
fn a_spoofed_parent_uid_is_handed_no_other_namespace_s_children() {
    install_crds();
    let victim = Namespace::new("fp-victim");
    let caller = Namespace::new("fp-caller");
    let dir = PluginDir::with(&["database"]);
    let _api = ApiHost::start(&dir, &[]);
    database(&victim.name, "shop");
    wait_for_previews();
    let live = get_json(&victim.name, "database/shop").expect("the victim's database");
    let uid = live["metadata"]["uid"].as_str().expect("uid").to_string();

    // The victim's own preview observes its children: unchanged.
    let own = preview(
        &victim.name,
        &json!({"kind": "Preview", "apiVersion": "kubeplug.io/v1alpha1",
                "spec": {"plugin": "database", "parentName": "shop"}}),
        None,
    );
    assert!(
        rows(&own).iter().all(|c| c["action"] == "unchanged"),
        "{own:#}"
    );

    // The same parent, uid and all, previewed in another namespace: no
    // child of the victim's is observed, so all would be created.
    let mut spoofed = live.clone();
    spoofed["metadata"] = json!({"name": "shop", "uid": uid});
    let user = format!("spoofer-{}", std::process::id());
    role(
        &caller.name,
        &user,
        "- apiGroups: [kubeplug.io]\n  resources: [previews]\n  verbs: [create]\n- apiGroups: [example.com]\n  resources: [databases]\n  verbs: [get]\n- apiGroups: ['', apps]\n  resources: [secrets, services, statefulsets]\n  verbs: [get, list]\n",
    );
    let body = json!({"kind": "Preview", "apiVersion": "kubeplug.io/v1alpha1",
                      "spec": {"plugin": "database", "parent": spoofed}});
    let answer = user_preview(&caller.name, &body, &user);
    let children = rows(&answer);
    assert!(!children.is_empty(), "{answer:#}");
    assert!(
        children.iter().all(|c| c["action"] == "create"),
        "nothing of {} observed: {answer:#}",
        victim.name
    );
    assert!(!answer.to_string().contains(&victim.name), "{answer:#}");
    // As the admin too (who could read everything): the same.
    let admin = preview(&caller.name, &body, None);
    assert!(
        rows(&admin).iter().all(|c| c["action"] == "create"),
        "{admin:#}"
    );
}

/// One preview straight at the host's port as the front proxy would send
/// it, for `user`: the HTTP status.
fn post_direct(port: u16, ca: &Path, user: &str, ns: &str, body: &str) -> String {
    let pki = cluster_dir().join("pki");
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "20",
        ])
        .arg("--cacert")
        .arg(ca)
        .arg("--cert")
        .arg(pki.join("front-proxy-client.crt"))
        .arg("--key")
        .arg(pki.join("front-proxy-client.key"))
        .args(["-H", &format!("X-Remote-User: {user}")])
        .args(["-H", "X-Remote-Group: system:authenticated"])
        .args(["-H", "Content-Type: application/json"])
        .args(["--data-binary", body])
        .arg(format!(
            "https://127.0.0.1:{port}/apis/kubeplug.io/v1alpha1/namespaces/{ns}/previews"
        ))
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (holder, renewTime) of `ns/name`.
fn lease(ns: &str, name: &str) -> Option<(String, String)> {
    let lease = get_json(ns, &format!("lease/{name}"))?;
    Some((
        lease["spec"]["holderIdentity"].as_str()?.to_string(),
        lease["spec"]["renewTime"].as_str()?.to_string(),
    ))
}

#[test]
fn a_flood_of_previews_with_new_names_costs_the_replica_none_of_its_leases() {
    install_crds();
    let ns = Namespace::new("fp-flood");
    let dir = PluginDir::with(&["database"]);
    // A small rate limit, so that reviews and renewals sharing it would show.
    let api = ApiHost::unregistered(
        &dir,
        &[
            "--leader-elect",
            "--lease-namespace",
            &ns.name,
            "--api-qps",
            "5",
            "--api-burst",
            "5",
        ],
    );
    let (host, certs, port) = (&api.host, &api.certs, api.port);
    database(&ns.name, "shop");
    let (holder, _) = eventually("a lease holder", TIMEOUT, || {
        lease(&ns.name, "kubeplug-database")
    });
    let users: Vec<String> = (0..3)
        .map(|i| format!("flooder-{i}-{}", std::process::id()))
        .collect();
    for user in &users {
        role(
            &ns.name,
            user,
            "- apiGroups: [kubeplug.io]\n  resources: [previews]\n  verbs: [create]\n- apiGroups: [example.com]\n  resources: [databases]\n  verbs: [get]\n",
        );
    }
    let parent = get_json(&ns.name, "database/shop").expect("the database");
    let ca = certs.join("ca.crt");

    // 3 users × 6 workers, each sending previews of a parent with a new
    // name (a new review each), as fast as they are answered, for 45 s:
    // with one shared client at 5 requests a second, 18 reviews waiting
    // would hold a renewal past its 2 s timeout.
    const FLOOD: Duration = Duration::from_secs(45);
    let start = Instant::now();
    let workers: Vec<_> = (0..18)
        .map(|w| {
            let (user, ns, ca) = (users[w % 3].clone(), ns.name.clone(), ca.clone());
            let mut parent = parent.clone();
            std::thread::spawn(move || {
                let mut codes: std::collections::BTreeMap<String, u32> = Default::default();
                let mut n = 0u32;
                while start.elapsed() < FLOOD {
                    n += 1;
                    parent["metadata"] = json!({"name": format!("new-{w}-{n}")});
                    let body = json!({"kind": "Preview", "apiVersion": "kubeplug.io/v1alpha1",
                                      "spec": {"plugin": "database", "parent": parent}});
                    let code = post_direct(port, &ca, &user, &ns, &body.to_string());
                    if code == "429" {
                        // Refused at once: spare the shared CPU, keep the pressure.
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    *codes.entry(code).or_default() += 1;
                }
                codes
            })
        })
        .collect();

    // Meanwhile the Lease keeps its holder and keeps being renewed.
    let mut renewals = Vec::new();
    let mut last_change = Instant::now();
    let mut longest_gap = Duration::ZERO;
    let mut last: Option<String> = None;
    while start.elapsed() < FLOOD {
        let (now_holder, renewed) = lease(&ns.name, "kubeplug-database").expect("the lease");
        assert_eq!(now_holder, holder, "the holder changed during the flood");
        if last.as_ref() != Some(&renewed) {
            longest_gap = longest_gap.max(last_change.elapsed());
            last_change = Instant::now();
            renewals.push(renewed.clone());
            last = Some(renewed);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    longest_gap = longest_gap.max(last_change.elapsed());
    let mut codes: std::collections::BTreeMap<String, u32> = Default::default();
    for worker in workers {
        for (code, n) in worker.join().expect("worker") {
            *codes.entry(code).or_default() += n;
        }
    }
    eprintln!(
        "flood answers: {codes:?}; {} renewals seen, longest gap {longest_gap:?}",
        renewals.len()
    );
    assert!(codes.get("201").is_some_and(|n| *n > 0), "{codes:?}");
    assert!(
        codes.get("429").is_some_and(|n| *n > 0),
        "the limits engaged: {codes:?}"
    );
    // Renewals every retry period (2 s); never a gap near the renew deadline
    // (10 s), seen at 1 s resolution (renewTime has microseconds, but a
    // get may land just before a renewal).
    assert!(
        longest_gap < Duration::from_secs(8),
        "renewals stalled for {longest_gap:?}"
    );
    assert!(renewals.len() >= 10, "{renewals:?}");
    let log = std::fs::read_to_string(&host.log).unwrap_or_default();
    assert!(
        !log.lines()
            .any(|l| l.contains("leadership changed") && l.contains("\"leading\":false")),
        "leadership was lost:\n{}",
        host.log_tail()
    );
    assert_eq!(
        lease(&ns.name, "kubeplug-database").map(|l| l.0),
        Some(holder)
    );
}

#[test]
fn error_texts_and_shadow_examples_need_get_on_plugins_details() {
    install_crds();
    let ns = Namespace::new("fp-details");
    let dir = PluginDir::with(&["database"]);
    // A file that does not load (an error text), and a candidate in shadow
    // (examples, once a parent is decided differently).
    dir.put("broken", b"\0asm not really");
    std::fs::copy(
        repo().join("target/test-plugins/database-v2.wasm"),
        dir.path.join("database.next.wasm"),
    )
    .expect("place the candidate");
    let _api = ApiHost::start(&dir, &[]);
    database(&ns.name, "shop");

    // The roles as deploy/ ships them.
    let viewer = PluginReader::new("viewer", "kubeplug-plugin-viewer");
    let inspector = PluginReader::new("inspector", "kubeplug-plugin-details-viewer");

    // The one with the right sees the error text and the shadow examples.
    let broken = eventually("the inspector to see the load error", TIMEOUT, || {
        let p = inspector.plugin("broken")?;
        p["status"]["lastError"].is_string().then_some(p)
    });
    let error = broken["status"]["lastError"].as_str().unwrap().to_string();
    let db = eventually("shadow examples for the inspector", TIMEOUT, || {
        let p = inspector.plugin("database")?;
        p["status"]["shadow"]["examples"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
            .then_some(p)
    });
    assert!(db["status"].get("withheld").is_none(), "{db:#}");

    // The plain viewer: the same objects without them, by get, list and watch.
    let seen = viewer.plugin("broken").expect("the viewer may get plugins");
    assert_eq!(seen["status"]["state"], "failed", "{seen:#}");
    assert!(seen["status"].get("lastError").is_none(), "{seen:#}");
    assert!(seen["status"].get("reason").is_none(), "{seen:#}");
    assert!(seen["status"]["withheld"].is_string(), "{seen:#}");
    let seen = viewer.plugin("database").expect("database");
    assert!(seen["status"]["shadow"].is_object(), "{seen:#}");
    assert!(
        seen["status"]["shadow"].get("examples").is_none(),
        "{seen:#}"
    );
    let list = kubectl_ok(
        &["get", "plugins", "-o", "json", "--as", &viewer.name],
        None,
    );
    assert!(!list.contains(&error), "{list}");
    assert!(!list.contains("\"examples\""), "{list}");
    assert!(!list.contains(&dir.path.display().to_string()), "{list}");
    let wide = kubectl_ok(
        &["get", "plugins", "-o", "wide", "--as", &viewer.name],
        None,
    );
    assert!(!wide.contains(&error), "{wide}");
    let watched = Command::new(std::env::var("KUBECTL").expect("KUBECTL"))
        .args([
            "get",
            "plugins",
            "-w",
            "-o",
            "json",
            // Long enough for the first list through the aggregator on a
            // busy machine: the watch ends when it runs out.
            "--request-timeout",
            "30s",
            "--as",
            &viewer.name,
        ])
        .env(
            "KUBECONFIG",
            std::env::var("KUBECONFIG").expect("KUBECONFIG"),
        )
        .output()
        .expect("kubectl get -w");
    let watched = String::from_utf8_lossy(&watched.stdout);
    assert!(watched.contains("\"broken\""), "{watched}");
    assert!(!watched.contains(&error), "{watched}");
    assert!(!watched.contains("\"examples\""), "{watched}");
    // The details subresource itself is RBAC's call.
    let out = kubectl(
        &[
            "get",
            "--raw",
            "/apis/kubeplug.io/v1alpha1/plugins/broken/details",
            "--as",
            &viewer.name,
        ],
        None,
    );
    assert!(!out.status.success());
    let out = kubectl_ok(
        &[
            "get",
            "--raw",
            "/apis/kubeplug.io/v1alpha1/plugins/broken/details",
            "--as",
            &inspector.name,
        ],
        None,
    );
    assert!(out.contains("lastError"), "{out}");
}

#[test]
fn a_preview_takes_out_a_withheld_value_the_plugin_copied_into_its_status() {
    install_crds();
    let ns = Namespace::new("fp-copy");
    let n = ns.name.as_str();
    let dir = PluginDir::with(&[]);
    hostile_as(
        &dir,
        "copier",
        &format!("related: [secrets]\nnamespaces: [{n}]"),
    );
    let policy = with_policy(
        &dir,
        "plugins:
  copier:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
    related: [Secret]
",
    );
    let api = ApiHost::start(&dir, &["--policy", &policy]);
    running(&api.host, "copier");
    let token = format!("swordfish-{}", std::process::id());
    apply(
        n,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: vault\n  labels:\n    kubeplug-test/steal: \"yes\"\nstringData:\n  token: {token}\n"
        ),
    );
    apply(n, &hostile("h", "copy", ""));
    // The plugin copies the Secret's value into the parent's status.
    eventually("the copy in the status", TIMEOUT, || {
        let parent = get_json(n, "hostile/h")?;
        parent["status"]["copied"]
            .as_array()?
            .iter()
            .any(|v| v == token.as_str())
            .then_some(())
    });
    wait_for_previews();
    let mut parent = get_json(n, "hostile/h").expect("the parent");
    parent["status"] = json!({});
    let body = json!({
        "apiVersion": "kubeplug.io/v1alpha1",
        "kind": "Preview",
        "spec": {"plugin": "copier", "parent": parent},
    });

    // The admin, who may read the Secret, sees the copy in the desired status.
    let admin = preview(n, &body, None);
    assert!(admin.to_string().contains(&token), "{admin:#}");

    // A user who may preview and get Hostiles, not Secrets, sees that the
    // status would change, not the value the plugin copied into it.
    let user = format!("copy-reader-{}", std::process::id());
    role(
        n,
        &user,
        "- apiGroups: [kubeplug.io]\n  resources: [previews]\n  verbs: [create]\n- apiGroups: [test.kubeplug.io]\n  resources: [hostiles]\n  verbs: [get]\n",
    );
    let answer = user_preview(n, &body, &user);
    let text = answer.to_string();
    assert!(!text.contains(&token), "the Secret's value: {answer:#}");
    assert_eq!(answer["status"]["status"]["changes"], true, "{answer:#}");
    assert!(
        answer["status"]["withheld"]["redacted"]
            .as_u64()
            .is_some_and(|n| n >= 1),
        "{answer:#}"
    );
    assert!(
        answer["status"]["withheld"]["kinds"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "secrets")),
        "{answer:#}"
    );
}
