//! The fence's second wall at run time, tried with hostile guests on the
//! real control plane: the host-wide memory budget (a host in a 512 MiB
//! memory cgroup, as in its pod, with two plugins holding ~120 MiB per
//! call, and strangers posting 30 MiB reviews to its webhook port), one
//! team's flood of heavy reviews beside another team's parents and
//! webhooks (issue 42: their latencies from the API server's audit log,
//! every review's and call's time from the host's spans), and deadlines
//! that hold inside host calls (guests sleeping for an hour in
//! `reconcile`, `finalize` and `manifest()`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kubeplug_e2e::*;

const TIMEOUT: Duration = Duration::from_secs(180);

/// Grants of the hostile variants of this file.
const POLICY: &str = "apiVersion: kubeplug.io/v1alpha1
kind: PluginPolicy
strict: true
plugins:
  hog-a:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
  hog-b:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
  sleeper:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
    finalizers: [test.kubeplug.io/hold]
  napper:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
";

fn reconciles(host: &Host, plugin: &str, result: &str) -> f64 {
    host.metric(
        "kubeplug_reconciles_total",
        &format!("plugin=\"{plugin}\",result=\"{result}\""),
    )
}

/// The value of a metric without labels.
fn unlabelled(host: &Host, name: &str) -> f64 {
    let (_, body) = host.get("/metrics").expect("metrics endpoint");
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A memory cgroup of its own with a hard limit (cgroup v2 where the
/// memory controller is delegated, else v1), removed when dropped.
struct MemoryCgroup {
    path: PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    fn new(limit: u64) -> Self {
        let name = format!("kubeplug-e2e-{:08x}", rand::random::<u32>());
        let v2_root = PathBuf::from("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(v2_root.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
        let path = if v2 {
            v2_root.join(&name)
        } else {
            v2_root.join("memory").join(&name)
        };
        std::fs::create_dir(&path).unwrap_or_else(|e| {
            panic!(
                "these tests run the host in a memory cgroup of its own: cannot create {} ({e}); \
                 they need root and a cgroup v1 memory hierarchy or a delegated v2 one",
                path.display()
            )
        });
        let cgroup = MemoryCgroup { path, v2 };
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(cgroup.path.join(file), limit.to_string()).expect("set the memory limit");
        if !v2 {
            // No swap to hide in: the limit is the limit.
            let _ = std::fs::write(
                cgroup.path.join("memory.memsw.limit_in_bytes"),
                limit.to_string(),
            );
        }
        cgroup
    }

    fn procs(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path.join(file)).unwrap_or_default()
    }

    /// The most memory the cgroup's processes held at once.
    fn peak(&self) -> u64 {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        self.read(file).trim().parse().unwrap_or(0)
    }

    /// Processes the kernel killed for lack of memory.
    fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        self.read(file)
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl MemoryCgroup {
    /// The host in this cgroup is alive, nothing in the cgroup was
    /// OOM-killed, and its peak stayed below 85 % of `limit`.
    fn assert_held(&self, host: &mut Host, limit: u64) {
        assert!(host.running(), "the host is alive:\n{}", host.log_tail());
        assert_eq!(
            self.oom_kills(),
            0,
            "nothing in the host's cgroup was OOM-killed"
        );
        let peak = self.peak();
        assert!(
            peak < limit * 85 / 100,
            "peak {} MiB stays below the limit with margin",
            peak >> 20
        );
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn two_plugins_holding_120_mib_per_call_never_take_a_512_mib_host_down() {
    install_crds();
    let ns = Namespace::new("budget");
    let n = ns.name.as_str();
    let limit: u64 = 512 << 20;
    let cgroup = MemoryCgroup::new(limit);
    let dir = PluginDir::with(&["database"]);
    for hog in ["hog-a", "hog-b"] {
        hostile_with(
            &dir,
            hog,
            &format!("mode: decorator\nbehave: hold\nnamespaces: [{n}]"),
            "",
        );
    }
    let mut host = Host::start_in_cgroup(
        &dir,
        &["--policy", &with_policy(&dir, POLICY)],
        &cgroup.procs(),
    );
    running(&host, "hog-a");
    running(&host, "hog-b");
    // The host sized its budget from the cgroup's limit: 512 MiB less the
    // host's own 128 MiB, half of it for calls.
    let budget = host.metric("kubeplug_call_memory_bytes", "amount=\"budget\"");
    assert_eq!(
        budget,
        (192u64 << 20) as f64,
        "the budget read from the cgroup"
    );

    let parents = 16;
    for i in 0..parents {
        apply(
            n,
            &hostile(&format!("h{i}"), "hold", "  mib: 120\n  ms: 500\n"),
        );
    }
    let started = Instant::now();
    apply(n, &database("steady"));
    // A harmless parent is reconciled while the hogs queue for memory.
    database_runs(n, "steady");
    let steady_after = started.elapsed();
    eventually(
        "every hog parent answered once by each hog",
        TIMEOUT,
        || {
            (reconciles(&host, "hog-a", "ok") >= parents as f64
                && reconciles(&host, "hog-b", "ok") >= parents as f64)
                .then_some(())
        },
    );
    let took = started.elapsed();
    let peak = cgroup.peak();
    let reserved_peak = host.metric("kubeplug_call_memory_bytes", "amount=\"peak\"");
    let waits = unlabelled(&host, "kubeplug_call_memory_waits_total");
    let refused: f64 = host
        .series("kubeplug_call_memory_refusals_total")
        .iter()
        .map(|(_, v)| v)
        .sum();
    println!(
        "figures: limit {} MiB, peak RSS of the host's cgroup {} MiB, reserved by calls at most {} MiB \
         of {} MiB, {waits} calls queued for memory, {refused} refused (retried), \
         harmless Database Running after {steady_after:.1?}, {parents} parents × 2 hogs answered in {took:.1?}",
        limit >> 20,
        peak >> 20,
        reserved_peak as u64 >> 20,
        budget as u64 >> 20,
    );
    cgroup.assert_held(&mut host, limit);
    assert!(
        reserved_peak <= budget,
        "calls never held more than the budget"
    );
    assert!(
        waits > 0.0,
        "calls queued for memory (the hogs could not all run at once)"
    );
    assert!(host.get("/healthz").is_ok_and(|(code, _)| code == 200));
}

#[test]
fn guests_sleeping_for_an_hour_are_stopped_at_their_deadline_and_stall_only_themselves() {
    install_crds();
    let ns = Namespace::new("sleep");
    let n = ns.name.as_str();
    let dir = PluginDir::with(&["database"]);
    hostile_with(
        &dir,
        "sleeper",
        &format!("finalizer: true\nnamespaces: [{n}]"),
        "limits:\n  timeoutMs: 1000\n",
    );
    hostile_with(
        &dir,
        "napper",
        &format!("manifest: sleep\nnamespaces: [{n}]"),
        "limits:\n  timeoutMs: 1000\n",
    );
    let host = Host::start_with(&dir, &["--policy", &with_policy(&dir, POLICY)]);
    running(&host, "sleeper");

    // manifest(): stopped at the deadline, the file refused with the reason
    // (it used to stay `loading` for ever).
    let napper = eventually("napper.wasm to be refused", TIMEOUT, || {
        host.plugin_file("napper.wasm")
            .filter(|p| p["state"] == "failed")
    });
    let reason = napper["lastError"].as_str().unwrap_or_default();
    assert!(
        reason.contains("napper") && reason.contains("deadline"),
        "manifest() past its deadline names the plugin: {reason}"
    );

    // Six parents sleep in reconcile for an hour; each call is stopped at
    // its 1 s deadline.
    for i in 0..6 {
        apply(n, &hostile(&format!("s{i}"), "sleep", ""));
    }
    apply(n, &database("steady"));
    let started = Instant::now();
    eventually("deadline warnings naming the plugin", TIMEOUT, || {
        events_for(n, "Hostile", "s0")
            .into_iter()
            .find(|(t, r, note)| {
                t == "Warning"
                    && r == "PluginFailed"
                    && note.contains("plugin sleeper exceeded its deadline of 1s")
            })
    });
    eventually("every sleeper stopped at its deadline", TIMEOUT, || {
        (reconciles(&host, "sleeper", "deadline") >= 6.0).then_some(())
    });
    // Each would sleep for an hour: minutes at most, however busy the
    // machine, prove the deadlines held.
    let stopped = started.elapsed();
    println!("figures: six calls sleeping for an hour were all stopped after {stopped:.1?}");
    assert!(stopped < Duration::from_secs(120), "{stopped:?}");
    // Shown as degraded while its calls keep timing out.
    let row = eventually("sleeper to show degraded", TIMEOUT, || {
        host.plugin("sleeper").filter(|p| p["state"] == "degraded")
    });
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("ran past their deadline of 1s"), "{reason}");

    // Another parent of the same plugin, sleeping at first, then harmless:
    // reconciled within seconds of the change.
    apply(n, &hostile("turn", "sleep", ""));
    std::thread::sleep(Duration::from_secs(2));
    apply(n, &hostile("turn", "ok", ""));
    let changed = Instant::now();
    eventually("turn-ok", TIMEOUT, || get_json(n, "configmap/turn-ok"));
    let turned = changed.elapsed();
    println!(
        "figures: a parent turned harmless among 6 sleepers was reconciled after {turned:.1?}"
    );
    // Seconds, a minute at most on a busy machine; stalled behind the
    // sleepers' calls, it would wait for their hour.
    assert!(turned < Duration::from_secs(60), "{turned:?}");
    // Other plugins never notice.
    database_runs(n, "steady");

    // One log call with 1.5 million empty fields: 32 are read, the rest
    // counted, and the host's log grows by a line.
    let before = std::fs::metadata(&host.log).map(|m| m.len()).unwrap_or(0);
    apply(n, &hostile("chatty", "log-fields", ""));
    eventually("chatty-ok", TIMEOUT, || get_json(n, "configmap/chatty-ok"));
    let grown = std::fs::metadata(&host.log).map(|m| m.len()).unwrap_or(0) - before;
    let log = std::fs::read_to_string(&host.log).unwrap_or_default();
    assert!(
        log.contains("(1499968 more fields dropped)"),
        "{}",
        host.log_tail()
    );
    println!("figures: one log call of 1.5 M empty fields grew the host's log by {grown} bytes");
    assert!(grown < 64 << 10, "{grown} bytes of log");

    // finalize: a parent being deleted whose finalize sleeps.
    apply(n, &hostile("gone", "ok", "  finalize: sleep\n"));
    eventually("gone-ok", TIMEOUT, || get_json(n, "configmap/gone-ok"));
    kubectl_ok(&["delete", "-n", n, "hostile/gone", "--wait=false"], None);
    eventually("a finalize deadline", TIMEOUT, || {
        events_for(n, "Hostile", "gone")
            .into_iter()
            .find(|(t, _, note)| t == "Warning" && note.contains("exceeded its deadline"))
    });
    // Once it stops sleeping and is released, the parent goes.
    kubectl_ok(
        &[
            "patch",
            "-n",
            n,
            "hostile/gone",
            "--type=merge",
            "-p",
            r#"{"metadata":{"annotations":{"test.kubeplug.io/release":"true"}},"spec":{"finalize":"none"}}"#,
        ],
        None,
    );
    eventually("gone to be deleted", TIMEOUT, || {
        get_json(n, "hostile/gone").is_none().then_some(())
    });
    // Leave nothing behind: every parent carries the plugin's finalizer, so
    // release and delete them all while the host still runs.
    for i in 0..6 {
        kubectl_ok(
            &[
                "patch",
                "-n",
                n,
                &format!("hostile/s{i}"),
                "--type=merge",
                "-p",
                r#"{"spec":{"behave":"ok"}}"#,
            ],
            None,
        );
    }
    kubectl_ok(
        &[
            "annotate",
            "-n",
            n,
            "hostile",
            "--all",
            "--overwrite",
            "test.kubeplug.io/release=true",
        ],
        None,
    );
    kubectl_ok(
        &["delete", "-n", n, "hostile", "--all", "--wait=false"],
        None,
    );
    eventually("every parent to be gone", TIMEOUT, || {
        let left = kubectl_ok(&["get", "-n", n, "hostile", "-o", "name"], None);
        left.trim().is_empty().then_some(())
    });
    assert!(host.get("/healthz").is_ok_and(|(code, _)| code == 200));
}

/// A ConversionReview of Databases in `ns`: `objects` of them, each with a
/// `pad` of that many bytes, as a string (`dense: false`) or as numbers.
fn conversion_review(ns: &str, objects: usize, pad: usize, dense: bool) -> Vec<u8> {
    let filler = if dense {
        format!("[{}0]", "0,".repeat(pad / 2))
    } else {
        format!("\"{}\"", "x".repeat(pad))
    };
    let object = |i: usize| {
        format!(
            r#"{{"apiVersion":"example.com/v1","kind":"Database","metadata":{{"name":"db-{i}","namespace":"{ns}","uid":"u-{i}","resourceVersion":"1"}},"spec":{{"engine":"postgres","version":"16","replicas":1,"pad":{filler}}}}}"#
        )
    };
    let objects: Vec<String> = (0..objects).map(object).collect();
    format!(
        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"flood","desiredAPIVersion":"example.com/v2","objects":[{}]}}}}"#,
        objects.join(",")
    )
    .into_bytes()
}

/// POST the file `body` to the webhook port at `path` as a stranger (no
/// client certificate, no token): (HTTP status, seconds it took, answer).
fn post_file(port: u16, certs: &Path, path: &str, body: &Path) -> (u16, f64, String) {
    let out = std::process::Command::new("curl")
        // Wait for the host's 100 Continue (or its early answer) however
        // busy the machine: a body sent unasked to a review refused
        // unread would end in a reset instead of the answer.
        .args([
            "-s",
            "--max-time",
            "60",
            "--expect100-timeout",
            "60",
            "--cacert",
        ])
        .arg(certs.join("ca.crt"))
        .args(["-H", "Content-Type: application/json", "--data-binary"])
        .arg(format!("@{}", body.display()))
        .args(["-w", "\n%{http_code} %{time_total}"])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (answer, last) = text.rsplit_once('\n').unwrap_or(("", &text));
    let mut figures = last.split_whitespace();
    let code = figures.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    let took = figures
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or(f64::NAN);
    (code, took, answer.to_string())
}

#[test]
fn a_512_mib_host_survives_strangers_posting_30_mib_reviews_8_at_a_time() {
    install_crds();
    let ns = Namespace::new("flood");
    let n = ns.name.as_str();
    let limit: u64 = 512 << 20;
    let cgroup = MemoryCgroup::new(limit);
    let dir = PluginDir::with(&["database"]);
    let certs = certificates(&dir.path);
    let port = free_port();
    let flags = webhook_flags(&certs, port);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut host = Host::start_in_cgroup(&dir, &flags, &cgroup.procs());
    running(&host, "database");

    // 30 MiB each: thirty 1 MiB objects (text, cheap to parse), and one
    // object of 15 million numbers (about 60 times its size once parsed).
    let wide = dir.path.join("review-wide.json");
    std::fs::write(&wide, conversion_review(n, 30, 1 << 20, false)).unwrap();
    let dense = dir.path.join("review-dense.json");
    std::fs::write(&dense, conversion_review(n, 1, 30 << 20, true)).unwrap();
    let small = dir.path.join("review-small.json");
    std::fs::write(&small, conversion_review(n, 2, 10, false)).unwrap();

    let rounds = 3;
    let started = Instant::now();
    let mut answers: Vec<(&str, u16, f64)> = Vec::new();
    for _ in 0..rounds {
        let posts: Vec<_> = (0..8)
            .map(|i| {
                let (what, path, body) = match i % 3 {
                    0 => ("dense", "/convert/database?timeout=10s", dense.clone()),
                    1 => ("wide", "/convert/database?timeout=10s", wide.clone()),
                    _ => ("nobody", "/convert/nobody?timeout=10s", wide.clone()),
                };
                let certs = certs.clone();
                std::thread::spawn(move || {
                    let (code, took, _) = post_file(port, &certs, path, &body);
                    (what, code, took)
                })
            })
            .collect();
        answers.extend(posts.into_iter().map(|p| p.join().expect("a poster")));
    }
    let flood = started.elapsed();
    let peak = cgroup.peak();
    let slowest = answers.iter().map(|a| a.2).fold(0.0, f64::max);
    let count = |what: &str, code: u16| {
        answers
            .iter()
            .filter(|a| a.0 == what && a.1 == code)
            .count()
    };
    println!(
        "figures: {} reviews of 30 MiB, 8 at a time, in {flood:.1?}; peak of the host's cgroup \
         {} MiB of {} MiB; slowest answer {slowest:.1} s; dense: {} refused 413, {} waited out \
         429; wide: {} \
         answered 200, {} waited out 429, {} refused 413; nobody: {} answered 503",
        answers.len(),
        peak >> 20,
        limit >> 20,
        count("dense", 413),
        count("dense", 429),
        count("wide", 200),
        count("wide", 429),
        count("wide", 413),
        count("nobody", 503),
    );
    cgroup.assert_held(&mut host, limit);
    for (what, code, took) in &answers {
        let expected: &[u16] = match *what {
            // Weighed before it is parsed, and refused (or, behind a wide
            // review's memory, waited out before it was read).
            "dense" => &[413, 429],
            // Served, or waited for its place until its deadline.
            "wide" => &[200, 429],
            // No plugin of that name: answered from the path, body unread.
            _ => &[503],
        };
        assert!(
            expected.contains(code),
            "a {what} review answered {code}, not one of {expected:?}"
        );
        // The review's deadline is 9.5 s (its 10 s timeout less the
        // margin); the bound leaves a busy machine time to upload 30 MiB.
        assert!(*took < 30.0, "a {what} review took {took} s");
    }
    // Strangers' names are not metric labels.
    assert_eq!(
        host.metric(
            "kubeplug_webhook_requests_total",
            r#"plugin="nobody",webhook="convert",result="not_serving""#
        ),
        0.0
    );

    // Alone (the flood's may each have waited out their place behind the
    // others on a busy machine): a dense review is weighed and refused
    // before it is parsed, a wide one served.
    let (code, _, answer) = post_file(port, &certs, "/convert/database?timeout=10s", &dense);
    assert_eq!(code, 413, "{answer}");
    let (code, _, answer) = post_file(port, &certs, "/convert/database?timeout=10s", &wide);
    assert_eq!(code, 200, "{answer}");
    assert!(host.running(), "the host is alive:\n{}", host.log_tail());

    // After the flood, a review of an ordinary size is served at once.
    let (code, took, answer) = post_file(port, &certs, "/convert/database?timeout=10s", &small);
    let answer: serde_json::Value = serde_json::from_str(&answer).expect("a ConversionReview");
    assert_eq!(code, 200);
    assert_eq!(
        answer["response"]["result"]["status"], "Success",
        "{answer}"
    );
    assert_eq!(
        answer["response"]["convertedObjects"][0]["apiVersion"],
        "example.com/v2"
    );
    println!("figures: a small review after the flood answered in {took:.2} s");
}

/// The API server's timeout of team A's (hostile's) validation: its
/// review's deadline is 2.5 s (the host keeps 0.5 s for the answer's way
/// back), its call's too (its `callTimeoutMs` below is no shorter).
const FLOOD_TIMEOUT_SECONDS: u64 = 3;
/// Team A's call deadline: the review's.
const FLOOD_CALL_MS: u64 = 2500;
/// The API server's timeout of team B's (database's) validation, as
/// `deploy/webhooks/register-loopback` registers it: a review's deadline of
/// 4.5 s, its call's 2 s (`callTimeoutMs` below).
const DATABASE_TIMEOUT_SECONDS: u64 = 5;
const DATABASE_CALL_MS: u64 = 2000;
/// Creates of team A's kind in flight at once, each held by its webhook.
const FLOOD_WORKERS: usize = 160;
/// What each of them asks team A's validation to hold: 100 MiB for 1.8 s,
/// inside its 128 MiB cap and its 2.5 s deadline, so that one review alone
/// is served and a few at once fill the plugin's share of the budget.
const FLOOD_HOSTILE: &str = r#"{"apiVersion":"test.kubeplug.io/v1","kind":"Hostile","metadata":{"generateName":"flood-"},"spec":{"behave":"ok","admit":"hold","mib":100,"ms":1800}}"#;
/// Team B's Databases created during the flood, one every 1.5 s.
const FLOOD_DATABASES: usize = 8;
/// The issue's bounds: a parent reconciled within 2 s of its creation,
/// every call ended within its deadline and 100 ms.
const RECONCILED_WITHIN: Duration = Duration::from_secs(2);
const OVERRUN: Duration = Duration::from_millis(100);

/// Two teams: hostile in namespace `a`, database in `b`, each granted its
/// validation there, with the deadlines this test relies on.
fn teams_policy(a: &str, b: &str) -> String {
    format!(
        "apiVersion: kubeplug.io/v1alpha1
kind: PluginPolicy
strict: true
identityNamespace: kubeplug-system
plugins:
  hostile:
    serviceAccount: kubeplug-plugin-hostile
    parent: [Hostile.test.kubeplug.io]
    children: [ConfigMap]
    admission: [validate, mutate]
    namespaces: [{a}]
    quotas: {{callTimeoutMs: {FLOOD_CALL_MS}}}
  database:
    parent: [Database.example.com]
    children: [StatefulSet.apps, Service, Secret]
    related: [Pod]
    admission: [validate]
    conversion: true
    namespaces: [{b}]
    quotas: {{callTimeoutMs: {DATABASE_CALL_MS}}}
"
    )
}

/// Both teams' validating webhooks, each for its kind in its namespace,
/// registered through the API server for a test and removed when dropped.
struct TeamValidations;

impl TeamValidations {
    const NAME: &str = "kubeplug-test-teams";

    fn register(port: u16, ca: &Path, a: &str, b: &str) -> Self {
        let ca = ca_bundle(ca);
        let webhook = |plugin: &str, group: &str, resource: &str, ns: &str, timeout: u64| {
            format!(
                "  - name: {plugin}.validate.kubeplug.io\n    clientConfig:\n      url: https://127.0.0.1:{port}/validate/{plugin}\n      caBundle: {ca}\n    rules:\n      - apiGroups: [{group}]\n        apiVersions: [v1]\n        resources: [{resource}]\n        operations: [CREATE, UPDATE]\n    namespaceSelector:\n      matchLabels:\n        kubernetes.io/metadata.name: {ns}\n    matchPolicy: Equivalent\n    failurePolicy: Fail\n    sideEffects: None\n    timeoutSeconds: {timeout}\n    admissionReviewVersions: [v1]\n"
            )
        };
        let yaml = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: {}\nwebhooks:\n{}{}",
            Self::NAME,
            webhook(
                "hostile",
                "test.kubeplug.io",
                "hostiles",
                a,
                FLOOD_TIMEOUT_SECONDS
            ),
            webhook(
                "database",
                "example.com",
                "databases",
                b,
                DATABASE_TIMEOUT_SECONDS
            ),
        );
        kubectl_ok(&["apply", "-f", "-"], Some(&yaml));
        TeamValidations
    }
}

impl Drop for TeamValidations {
    fn drop(&mut self) {
        kubectl(
            &[
                "delete",
                "validatingwebhookconfiguration",
                Self::NAME,
                "--ignore-not-found",
            ],
            None,
        );
    }
}

/// A Database of `name` as JSON, at `version` (16.4.0 is in database's
/// table; 12.1.0 is refused by its validation).
fn database_json(name: &str, version: &str) -> String {
    format!(
        r#"{{"apiVersion":"example.com/v1","kind":"Database","metadata":{{"name":"{name}"}},"spec":{{"engine":"postgresql","version":"{version}","replicas":1}}}}"#
    )
}

/// How one create of the flood ended, from the API server's answer.
fn flood_outcome(code: u16, body: &str) -> &'static str {
    if code == 201 {
        "admitted"
    } else if body.contains("context deadline exceeded") || body.contains("Timeout:") {
        // The API server gave up on the webhook: the host did not answer
        // within the timeout.
        "api-server-timeout"
    } else if body.contains("429") || body.contains("at their bound") {
        "refused-429"
    } else if body.contains("kubeplug: plugin hostile failed") {
        // The grant's failurePolicy (Fail) answered: the call was not run
        // (the host busy, or its memory taken), or ran out of time.
        if body.contains("exceeded its deadline") {
            "failed-deadline"
        } else if body.contains("was not run") && body.contains("memory budget") {
            "failed-host-memory"
        } else if body.contains("was not run") {
            "failed-host-busy"
        } else {
            "failed-other"
        }
    } else {
        "other"
    }
}

/// The first write the API server completed (2xx) of `resource` `name` in
/// `ns` (`subresource`: "" or "status"): when it completed, in Unix
/// nanoseconds.
fn first_write(
    writes: &[AuditedWrite],
    ns: &str,
    resource: &str,
    subresource: &str,
    name: &str,
) -> Option<u128> {
    writes
        .iter()
        .filter(|w| {
            w.namespace == ns
                && w.resource == resource
                && w.subresource == subresource
                && w.name == name
                && (200..300).contains(&w.code)
        })
        .filter_map(|w| audit_nanos(&w.completed))
        .min()
}

#[test]
fn one_teams_flood_of_heavy_reviews_leaves_another_teams_parents_and_webhooks_on_time() {
    install_crds();
    let team_a = Namespace::new("flood-a");
    let team_b = Namespace::new("flood-b");
    let (a, b) = (team_a.name.as_str(), team_b.name.as_str());
    let limit: u64 = 512 << 20;
    let cgroup = MemoryCgroup::new(limit);
    let dir = PluginDir::with(&["database"]);
    hostile_with(
        &dir,
        "hostile",
        &format!("admission: true\nbehave: nothing\nnamespaces: [{a}]"),
        "",
    );
    let policy = dir.path.with_extension("teams-policy.yaml");
    std::fs::write(&policy, teams_policy(a, b)).expect("write policy");
    let certs = certificates(&dir.path);
    let port = free_port();
    let mut args = webhook_flags(&certs, port);
    args.extend(["--policy".into(), policy.to_str().expect("utf-8").into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Every review and every call is a span: their times, to the
    // nanosecond, are the evidence of the deadlines.
    let receiver = spans::Receiver::start();
    let env = receiver.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut host = Host::start_in_cgroup_with_env(&dir, &args, &cgroup.procs(), &env);
    running(&host, "hostile");
    running(&host, "database");
    let _validations = TeamValidations::register(port, &certs.join("ca.crt"), a, b);
    let api = ApiProxy::start();
    let hostiles = format!("/apis/test.kubeplug.io/v1/namespaces/{a}/hostiles");
    let databases = format!("/apis/example.com/v1/namespaces/{b}/databases");

    // Both validations answer (the API server has read the configuration),
    // and each plugin has served once before anything is timed.
    eventually("database's validation to refuse 12.1.0", TIMEOUT, || {
        let (code, body) = api.post(&databases, &database_json("old", "12.1.0"));
        (code != 201 && body.contains("database.validate.kubeplug.io")).then_some(())
    });
    eventually("hostile's validation to deny on request", TIMEOUT, || {
        let (code, body) = api.post(
            &hostiles,
            r#"{"apiVersion":"test.kubeplug.io/v1","kind":"Hostile","metadata":{"generateName":"deny-"},"spec":{"behave":"ok","admit":"deny"}}"#,
        );
        (code != 201 && body.contains("spec.admit")).then_some(())
    });
    let (code, body) = api.post(&databases, &database_json("warm", "16.4.0"));
    assert_eq!(code, 201, "{body}");
    eventually("the warm-up Database's status", TIMEOUT, || {
        get_json(b, "database/warm").filter(|d| d["status"]["phase"].is_string())
    });

    // Team A's flood: creates of its kind, each held by its validation,
    // FLOOD_WORKERS at once, again as soon as each is answered. They start
    // spread over one review's deadline, as a steady flood arrives: started
    // together, they would run in lockstep, every review of a wave ending
    // in the same millisecond and the next wave's connections all opening
    // at once.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let api = std::sync::Arc::new(api);
    let flood_started = Instant::now();
    let spread = Duration::from_millis(FLOOD_CALL_MS) / FLOOD_WORKERS as u32;
    let workers: Vec<_> = (0..FLOOD_WORKERS)
        .map(|i| {
            let (api, stop, hostiles) = (api.clone(), stop.clone(), hostiles.clone());
            std::thread::spawn(move || {
                std::thread::sleep(spread * i as u32);
                let mut answers = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let started = Instant::now();
                    let (code, body) = api.post(&hostiles, FLOOD_HOSTILE);
                    answers.push((flood_outcome(code, &body), started.elapsed(), body));
                }
                answers
            })
        })
        .collect();
    // Under way: more of its reviews at the host than it may serve at once.
    eventually("the flood to fill hostile's review places", TIMEOUT, || {
        (host.metric(
            "kubeplug_webhook_requests_total",
            r#"plugin="hostile",webhook="validate""#,
        ) >= 32.0)
            .then_some(())
    });

    // Team B's Databases, created during the flood.
    let names: Vec<String> = (0..FLOOD_DATABASES).map(|i| format!("db-{i}")).collect();
    let mut creates = Vec::new();
    for name in &names {
        let started = Instant::now();
        let (code, body) = api.post(&databases, &database_json(name, "16.4.0"));
        creates.push((name.clone(), code, started.elapsed(), body));
        std::thread::sleep(Duration::from_millis(1500));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answers: Vec<(&str, Duration, String)> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("a flood worker"))
        .collect();
    let flood_took = flood_started.elapsed();
    // (b) Every create of team B went through its validation, none timed out.
    for (name, code, took, body) in &creates {
        assert_eq!(
            *code, 201,
            "Database {name} not created in {took:?}: {body}"
        );
    }
    for name in &names {
        eventually(&format!("Database {name}'s status"), TIMEOUT, || {
            get_json(b, &format!("database/{name}")).filter(|d| d["status"]["phase"].is_string())
        });
    }

    // (a) From the API server's audit log: each Database stored, then its
    // children and status written, to the microsecond.
    let writes = audited_writes();
    let mut latencies = Vec::new();
    for name in &names {
        let created = first_write(&writes, b, "databases", "", name).expect("audited create");
        let secret = format!("{name}-credentials");
        let written = [
            first_write(&writes, b, "statefulsets", "", name),
            first_write(&writes, b, "services", "", name),
            first_write(&writes, b, "secrets", "", &secret),
            first_write(&writes, b, "databases", "status", name),
        ];
        let done = written
            .iter()
            .map(|w| w.unwrap_or_else(|| panic!("{name}: a child or status not written")))
            .max()
            .expect("four writes");
        let latency = Duration::from_nanos(u64::try_from(done - created).expect("ns"));
        latencies.push((name.as_str(), created, latency));
    }

    // (c) Every review and every plugin call, from the host's spans, once
    // the host has sent them all: as many reviews and reconciles as its
    // metrics count.
    let webhook_total = |plugin: &str| {
        host.series("kubeplug_webhook_requests_total")
            .iter()
            .filter(|(l, _)| l.contains(&format!("plugin=\"{plugin}\"")))
            .map(|(_, v)| v)
            .sum::<f64>() as usize
    };
    let reconcile_total = |plugin: &str| {
        host.metric("kubeplug_reconciles_total", &format!("plugin=\"{plugin}\"")) as usize
    };
    let spans = eventually("every review's and reconcile's span", TIMEOUT, || {
        let expected = [
            ("webhook", "hostile", webhook_total("hostile")),
            ("webhook", "database", webhook_total("database")),
            ("reconcile", "hostile", reconcile_total("hostile")),
            ("reconcile", "database", reconcile_total("database")),
        ];
        let spans = receiver.spans();
        let received = |name: &str, plugin: &str| {
            spans
                .iter()
                .filter(|s| s.name == name && s.attr("plugin") == Some(plugin))
                .filter(|s| s.attr("result") != Some("skipped"))
                .count()
        };
        expected
            .iter()
            .all(|(name, plugin, n)| received(name, plugin) >= *n)
            .then_some(spans)
    });
    let deadline_of = |plugin: &str| match plugin {
        "hostile" => Duration::from_millis(FLOOD_CALL_MS),
        _ => Duration::from_millis(DATABASE_CALL_MS),
    };
    // A review's deadline: its webhook's timeout less the host's 0.5 s.
    let review_deadline = |plugin: &str| {
        match plugin {
            "hostile" => Duration::from_secs(FLOOD_TIMEOUT_SECONDS),
            _ => Duration::from_secs(DATABASE_TIMEOUT_SECONDS),
        }
        .saturating_sub(Duration::from_millis(500))
    };
    let reviews: Vec<&spans::Span> = spans.iter().filter(|s| s.name == "webhook").collect();
    let reconciles: std::collections::HashMap<&str, &str> = spans
        .iter()
        .filter(|s| s.name == "reconcile")
        .map(|s| (s.span_id.as_str(), s.attr("plugin").unwrap_or_default()))
        .collect();
    // Calls in reconciles (reconcile, finalize, references), by plugin.
    let calls: Vec<(&str, &spans::Span)> = spans
        .iter()
        .filter(|s| s.name == "call")
        .filter_map(|s| Some((*reconciles.get(s.parent_span_id.as_str())?, s)))
        .collect();
    let slowest_review = |plugin: &str| {
        reviews
            .iter()
            .filter(|s| s.attr("plugin") == Some(plugin))
            .map(|s| s.duration())
            .max()
            .unwrap_or_default()
    };
    let slowest_call = |plugin: &str| {
        calls
            .iter()
            .filter(|(p, _)| *p == plugin)
            .map(|(_, s)| s.duration())
            .max()
            .unwrap_or_default()
    };
    // The flood at each Database's creation: hostile's reviews in flight.
    let in_flight = |at: u128| {
        reviews
            .iter()
            .filter(|s| s.attr("plugin") == Some("hostile") && s.start <= at && at <= s.end)
            .count()
    };

    let count = |outcome: &str| answers.iter().filter(|a| a.0 == outcome).count();
    let hostile_results: Vec<String> = host
        .series("kubeplug_webhook_requests_total")
        .into_iter()
        .filter(|(l, _)| l.contains("plugin=\"hostile\""))
        .filter_map(|(l, v)| Some(format!("{} {v}", l.split_once("result=")?.1)))
        .collect();
    let peak = cgroup.peak();
    let reserved_peak = host.metric("kubeplug_call_memory_bytes", "amount=\"peak\"");
    println!(
        "figures: flood of {FLOOD_WORKERS} creates at once for {flood_took:.1?}: {} creates, \
         {} admitted (held 100 MiB for 1.8 s), {} refused 429, failed by the grant's \
         failurePolicy: {} not run (host busy), {} not run (memory), {} past their deadline, \
         {} otherwise; {} timed out at the API server, {} other; slowest create {:.2?}",
        answers.len(),
        count("admitted"),
        count("refused-429"),
        count("failed-host-busy"),
        count("failed-host-memory"),
        count("failed-deadline"),
        count("failed-other"),
        count("api-server-timeout"),
        count("other"),
        answers.iter().map(|a| a.1).max().unwrap_or_default(),
    );
    println!(
        "figures: hostile's reviews by result: {}",
        hostile_results.join(", ")
    );
    // How far past its deadline each of hostile's reviews ended: those whose
    // plugin call failed (its warning is an event of the span) and the rest
    // (answered 429 without a call, or allowed).
    let past = |failed_call: bool| {
        let mut past: Vec<Duration> = reviews
            .iter()
            .filter(|s| s.attr("plugin") == Some("hostile"))
            .filter(|s| s.events.iter().any(|e| e == "the plugin failed a review") == failed_call)
            .map(|s| s.duration().saturating_sub(review_deadline("hostile")))
            .collect();
        past.sort();
        let over_50ms = past
            .iter()
            .filter(|p| **p > Duration::from_millis(50))
            .count();
        (
            past.len(),
            over_50ms,
            past.last().copied().unwrap_or_default(),
        )
    };
    println!(
        "figures: hostile's reviews past their deadline (count, over 50 ms, most): with a \
         failed call {:?}, without {:?}",
        past(true),
        past(false)
    );
    println!(
        "figures: {} reviews, slowest hostile review {:.3?} (deadline {:?}), slowest database \
         review {:.3?} (deadline {:?}, its call's {:?}); {} reconcile calls, slowest database \
         call {:.3?}, slowest hostile call {:.3?}",
        reviews.len(),
        slowest_review("hostile"),
        review_deadline("hostile"),
        slowest_review("database"),
        review_deadline("database"),
        deadline_of("database"),
        calls.len(),
        slowest_call("database"),
        slowest_call("hostile"),
    );
    for (name, created, latency) in &latencies {
        let create = creates.iter().find(|c| c.0 == *name).map(|c| c.2);
        // Where the time went: to its first reconcile's start (the watch,
        // the queue's 500 ms debounce), in that reconcile (call, writes).
        let object = format!("{b}/{name}");
        let first = spans
            .iter()
            .filter(|s| s.name == "reconcile" && s.attr("object") == Some(object.as_str()))
            .min_by_key(|s| s.start);
        let (queued, took) = first.map_or((None, None), |s| {
            let queued = s.start.saturating_sub(*created);
            let queued = Duration::from_nanos(u64::try_from(queued).unwrap_or(u64::MAX));
            (Some(queued), Some(s.duration()))
        });
        println!(
            "figures: {name}: created in {create:.2?} (its validation included), reconciled \
             {latency:.3?} after it was stored (its first reconcile started after {queued:.3?}, \
             took {took:.3?}), {} of hostile's reviews in flight then",
            in_flight(*created)
        );
    }
    println!(
        "figures: memory reserved by calls and reviews at most {} MiB of {} MiB; the host's \
         cgroup peaked at {} MiB of {} MiB",
        reserved_peak as u64 >> 20,
        host.metric("kubeplug_call_memory_bytes", "amount=\"budget\"") as u64 >> 20,
        peak >> 20,
        limit >> 20,
    );

    // The flood was heavy and on at every creation: hostile's calls held
    // their 100 MiB, and it had more reviews in flight than its 16 places.
    assert!(
        reserved_peak >= (100u64 << 20) as f64,
        "no call held its 100 MiB"
    );
    for (name, created, _) in &latencies {
        let n = in_flight(*created);
        assert!(
            n > 16,
            "only {n} of hostile's reviews in flight when {name} was created"
        );
    }
    // (a) Team B's parents reconciled within 2 s of their creation.
    for (name, _, latency) in &latencies {
        assert!(
            *latency <= RECONCILED_WITHIN,
            "{name} reconciled {latency:?} after its creation"
        );
    }
    // (b) Its validation answered within its timeout, every create admitted
    // (asserted above).
    let timeout = Duration::from_secs(DATABASE_TIMEOUT_SECONDS);
    assert!(slowest_review("database") < timeout);
    // (c) Every review ended within its deadline and 100 ms (hostile's
    // call has the review's deadline; database's call a shorter one, inside
    // the review), every reconcile's call within its plugin's.
    for review in &reviews {
        let plugin = review.attr("plugin").unwrap_or_default();
        let bound = review_deadline(plugin) + OVERRUN;
        assert!(
            review.duration() <= bound,
            "a review of {plugin} took {:?} (bound {bound:?})",
            review.duration()
        );
    }
    for (plugin, call) in &calls {
        let bound = deadline_of(plugin) + OVERRUN;
        assert!(
            call.duration() <= bound,
            "a {} call of {plugin} took {:?} (bound {bound:?})",
            call.attr("function").unwrap_or_default(),
            call.duration()
        );
    }
    // The host stayed up, within its memory.
    cgroup.assert_held(&mut host, limit);
    assert!(host.get("/healthz").is_ok_and(|(code, _)| code == 200));
}
