//! The fence's second wall at run time, tried with hostile guests on the
//! real control plane: the host-wide memory budget (a host in a 512 MiB
//! memory cgroup, as in its pod, with two plugins holding ~120 MiB per
//! call, and strangers posting 30 MiB reviews to its webhook port), and
//! deadlines that hold inside host calls (guests sleeping for an hour in
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
