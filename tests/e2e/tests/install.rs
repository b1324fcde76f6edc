//! Installing kubeplug in a cluster: `deploy/` (kustomize) and its overlays,
//! and the Helm chart `deploy/chart`, against the real API server, and the
//! host run from its image as the kubelet would run it in that Deployment's
//! pod.
//!
//! The pod is simulated with real parts, not a container runtime (none runs
//! here): the image's root filesystem unpacked from the OCI archive `make
//! image` built, read-only, entered with `chroot` as the image's non-root
//! user in a private mount namespace; the Deployment's args, env and volume
//! mounts taken from the Deployment as the API server stored it (applied
//! with kustomize, or installed with Helm); configMap volumes laid out
//! and kept up to date by the kubelet's own code (`tests/cluster` `volume`);
//! a projected ServiceAccount token from the TokenRequest API at the
//! in-cluster path, with `KUBERNETES_SERVICE_HOST`/`PORT`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use kubeplug_e2e::chart::{kubeplug_pods, release_sizes, remove_deployment, wait_for_pods};
use kubeplug_e2e::pod::{Pod, UID, decode_base64};
use kubeplug_e2e::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);
const SYSTEM: &str = "kubeplug-system";

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `kubectl apply --server-side` of a kustomization (server-side: a plugin
/// ConfigMap is larger than client-side apply's 256 KiB annotation).
fn apply_kustomization(dir: &str, dry_run: bool) -> String {
    let path = repo().join(dir);
    let mut args = vec![
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
        path_str(&path),
    ];
    if dry_run {
        args.push("--dry-run=server");
    }
    kubectl_ok(&args, None)
}

/// The chart with its defaults (plugins as ConfigMaps) but no aggregated
/// API, as `deploy/` (its APIService would point at a Service nothing
/// serves here, and an unavailable group slows every later test's
/// discovery).
fn install_chart() -> String {
    helm_install(&["--set", "aggregatedApi.enabled=false"])
}

/// The three seeds, shipped by their teams.
fn ship_seed_plugins() {
    for name in ["database", "myapp", "pod-annotator"] {
        ship_plugin(name, &built(name));
    }
}

/// The namespace first: a server-side dry run cannot create objects in a
/// namespace that does not exist yet.
fn install_namespace() {
    install_crds();
}

#[test]
fn deploy_and_its_overlays_are_admitted_in_a_restricted_namespace() {
    install_namespace();
    let ns = get_json("", &format!("namespace/{SYSTEM}")).expect("namespace");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    // The namespace really enforces it: a privileged pod is refused.
    let privileged = kubectl(
        &["apply", "-n", SYSTEM, "-f", "-"],
        Some(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: privileged\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n    securityContext:\n      privileged: true\n",
        ),
    );
    assert!(!privileged.status.success());
    assert!(
        String::from_utf8_lossy(&privileged.stderr).contains("violates PodSecurity"),
        "{}",
        String::from_utf8_lossy(&privileged.stderr)
    );

    for dir in [
        "deploy",
        "deploy/overlays/image-volumes",
        "deploy/overlays/aggregated-api",
    ] {
        let out = apply_kustomization(dir, true);
        assert!(
            out.contains("deployment.apps/kubeplug serverside-applied (server dry run)"),
            "{dir}: {out}"
        );
        // The API server validates the NetworkPolicies (no network plugin
        // enforces them here): base's, and the aggregated API's own.
        let mut policies = vec!["kubeplug"];
        if dir.ends_with("aggregated-api") {
            policies.push("kubeplug-api");
        }
        for name in policies {
            assert!(
                out.contains(&format!(
                    "networkpolicy.networking.k8s.io/{name} serverside-applied (server dry run)"
                )),
                "{dir}: {out}"
            );
        }
    }

    // The webhooks' policy too (its component has no overlay of its own).
    let policy = repo().join("deploy/components/webhooks/networkpolicy.yaml");
    let out = kubectl_ok(
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "-f",
            path_str(&policy),
        ],
        None,
    );
    assert!(
        out.contains("networkpolicy.networking.k8s.io/kubeplug-webhooks serverside-applied"),
        "{out}"
    );

    // For real: the pods are admitted and scheduled, and kwok runs them.
    apply_kustomization("deploy", false);
    let has_projected = |p: &Value| {
        p["spec"]["volumes"].as_array().is_some_and(|v| {
            v.iter()
                .any(|v| v["name"] == "plugins" && v["projected"].is_object())
        })
    };
    wait_for_pods(
        "two pods with plugins from ConfigMaps",
        2,
        TIMEOUT,
        has_projected,
    );
    let pod = &kubeplug_pods()[0];
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(container[probe]["httpGet"]["port"], "http", "{probe}");
    }
    let pdb = get_json(SYSTEM, "pdb/kubeplug").expect("the PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    // The admin port admits monitoring only; egress is left open (the host
    // must reach the API server).
    let policy = get_json(SYSTEM, "networkpolicy/kubeplug").expect("the NetworkPolicy");
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_json::json!(["Ingress"])
    );
    let rule = &policy["spec"]["ingress"][0];
    assert_eq!(rule["ports"][0]["port"], 8080, "{policy}");
    assert_eq!(
        rule["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"], "prometheus",
        "{policy}"
    );

    // Image volumes: the Deployment rolls to pods with one image per plugin.
    apply_kustomization("deploy/overlays/image-volumes", false);
    let has_images = |p: &Value| {
        p["spec"]["volumes"].as_array().is_some_and(|v| {
            v.iter()
                .filter(|v| v["image"]["reference"].is_string())
                .count()
                == 3
        })
    };
    wait_for_pods(
        "two pods with plugins from image volumes",
        2,
        TIMEOUT,
        has_images,
    );

    // The host's role: Leases in its own namespace only.
    let can = |verb: &str, ns: &str| {
        let out = kubectl(
            &[
                "auth",
                "can-i",
                verb,
                "leases.coordination.k8s.io",
                "-n",
                ns,
                "--as",
                "system:serviceaccount:kubeplug-system:kubeplug",
            ],
            None,
        );
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    assert!(can("update", SYSTEM));
    assert!(
        !can("update", "default"),
        "no Lease rights outside kubeplug-system"
    );

    remove_deployment();
}

/// The Deployment's pod template as the API server stored it (defaults
/// filled in).
fn deployed_pod_spec() -> Value {
    get_json(SYSTEM, "deployment/kubeplug").expect("the Deployment")["spec"]["template"]["spec"]
        .clone()
}

#[test]
fn the_host_runs_from_its_image_as_in_its_pod() {
    install_namespace();
    host_runs_as_in_its_pod(|| {
        apply_kustomization("deploy", false);
    });
}

/// The same pod and scenario, installed by `helm install` of the chart: the
/// release is deployed, its objects (the namespace's `restricted` level, the
/// plugin ConfigMaps) are admitted and make the same pod.
#[test]
fn the_host_runs_from_its_image_as_the_helm_chart_installs_it() {
    install_namespace();
    host_runs_as_in_its_pod(|| {
        ship_seed_plugins();
        let out = install_chart();
        assert!(out.contains("STATUS: deployed"), "{out}");
        let deployment = get_json(SYSTEM, "deployment/kubeplug").expect("the Deployment");
        assert_eq!(
            deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm",
            "the release owns the Deployment"
        );
        let ns = get_json("", &format!("namespace/{SYSTEM}")).expect("namespace");
        assert_eq!(
            ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
            "restricted"
        );
        let policy = get_json(SYSTEM, "networkpolicy/kubeplug").expect("the chart's NetworkPolicy");
        assert_eq!(
            policy["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm",
            "the release owns the NetworkPolicy"
        );
        // The plugins are their teams' ConfigMaps, not the release's.
        for name in ["database", "myapp", "pod-annotator"] {
            let configmap = get_json(SYSTEM, &format!("configmap/kubeplug-plugin-{name}"))
                .unwrap_or_else(|| panic!("the team's ConfigMap of {name}"));
            assert!(
                configmap["binaryData"][format!("{name}.wasm")].is_string(),
                "{name}.wasm in binaryData"
            );
            assert_ne!(
                configmap["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm",
                "the release holds no plugin: {name}"
            );
        }
    });
}

/// Installs with `install`, runs the host from its image as the kubelet would
/// run the Deployment's pod, and plays the seed scenarios, a live upgrade of
/// one plugin through its ConfigMap, the JSON logs and a clean SIGTERM. Then
/// `install` again puts the seed plugin back, and the Deployment goes.
fn host_runs_as_in_its_pod(install: impl Fn()) {
    install();
    let spec = deployed_pod_spec();
    // kwok's simulated pods run nothing; remove them all the same, so that
    // the process below is the only kubeplug.
    remove_deployment();

    // Args as the Deployment has them, but a free port for the listener
    // (8080 may be taken on this machine); still on every address.
    let listen_port = free_port();
    let pod_name = "kubeplug-7d9f8b6c5-sim01";
    let simulated = Pod::prepare(SYSTEM, &spec, 0, pod_name, |a| {
        if a.starts_with("--listen=") {
            format!("--listen=0.0.0.0:{listen_port}")
        } else {
            a
        }
    });
    assert!(simulated.args().iter().any(|a| a == "--leader-elect"));
    assert_eq!(simulated.user(), format!("{UID}:{UID}"));
    let log = simulated.work.path().join("host.log");
    let child = simulated
        .command()
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start the host as in its pod");
    let host = Host::adopt(child, listen_port, log.clone());

    // The seed scenarios. pod-annotator stamps Pods in `team-a` (its
    // settings in deploy/base/settings/).
    let namespace = Namespace::new("in-pod");
    let ns = namespace.name.as_str();
    kubectl(&["create", "namespace", "team-a"], None);
    let pod = format!("in-pod-{}", std::process::id());
    apply(
        ns,
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: in-pod\nspec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n",
    );
    apply(
        ns,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: in-pod\nspec:\n  replicas: 1\n",
    );
    apply(
        "team-a",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n"
        ),
    );
    eventually("the database to run", TIMEOUT, || {
        (get_json(ns, "database/in-pod")?["status"]["phase"] == "Running").then_some(())
    });
    eventually("the app to run", TIMEOUT, || {
        (get_json(ns, "myapp/in-pod")?["status"]["phase"] == "Running").then_some(())
    });
    eventually("the pod to be stamped", TIMEOUT, || {
        let pod = get_json("team-a", &format!("pod/{pod}"))?;
        (pod["metadata"]["annotations"]["example.com/injected"] == "true").then_some(())
    });
    // This process leads, under the pod's name (`chroot` and `sh` exec, so
    // the child's pid is the host's).
    let identity = format!("{pod_name}-{}", host.pid());
    eventually("the pod to lead the database plugin", TIMEOUT, || {
        let lease = get_json(SYSTEM, "lease/kubeplug-database")?;
        (lease["spec"]["holderIdentity"] == identity.as_str()).then_some(())
    });

    // `/plugins`: details on loopback; from another address, no paths and
    // no error text.
    let (_, local) = host.get("/plugins").expect("/plugins");
    assert!(local.contains("\"/plugins/database.wasm\""), "{local}");
    {
        let ip = non_loopback_address().expect("this machine has a non-loopback address");
        let (code, remote) = host.get_at(&ip, "/plugins").expect("/plugins from outside");
        assert_eq!(code, 200);
        let rows: Value = serde_json::from_str(&remote).expect("JSON");
        let database = rows
            .as_array()
            .and_then(|r| r.iter().find(|p| p["name"] == "database"))
            .expect("the database row");
        assert_eq!(database["file"], "database.wasm", "{remote}");
        assert!(!remote.contains("/plugins/"), "{remote}");
        let (code, _) = host.get_at(&ip, "/readyz").expect("/readyz from outside");
        assert_eq!(code, 200, "probes reach the pod's address");
    }

    let before = host.plugin("database").expect("database row");
    // Upgrade one plugin by changing its ConfigMap: the kubelet's writer
    // swaps `..data`, the host swaps the plugin, without a restart.
    let v2 = repo().join("target/test-plugins/database-v2.wasm");
    ship_plugin("database", &v2);
    let after = eventually("the host to swap the database plugin", TIMEOUT, || {
        host.plugin("database")
            .filter(|row| row["version"] != before["version"])
    });
    assert_eq!(after["state"], "running", "{after}");
    eventually("the StatefulSet to carry v2's label", TIMEOUT, || {
        let sts = get_json(ns, "statefulset/in-pod")?;
        (sts["metadata"]["labels"]["example.com/plugin-revision"] == "v2").then_some(())
    });
    assert_eq!(
        host.get("/healthz").expect("healthz").0,
        200,
        "the same process serves on"
    );

    // Logs are JSON (the Deployment's --log-format), and every reconcile
    // line names the plugin, the kind and the object.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect();
    let reconciles: Vec<&Value> = lines
        .iter()
        .filter(|l| l["span"]["name"] == "reconcile")
        .collect();
    assert!(!reconciles.is_empty(), "some reconcile lines:\n{text}");
    for line in reconciles {
        for field in ["plugin", "kind", "namespace", "object"] {
            assert!(line["span"][field].is_string(), "{field} in {line}");
        }
    }

    // SIGTERM: a clean exit that hands the Leases back.
    assert!(host.terminate(), "the host exits cleanly on SIGTERM");
    let held = lease_holders(SYSTEM);
    assert!(held.is_empty(), "every Lease is released: {held:?}");
    drop(simulated);
    kubectl(
        &["delete", "pod", &pod, "-n", "team-a", "--wait=false"],
        None,
    );
    // Put the seed plugin back as the install has it.
    install();
    remove_deployment();
}

/// A team upgrades its plugin, then the platform runs a routine `helm
/// upgrade`: no conflict, and the team's version stays (the release holds
/// no plugin bytes, so it stays small too). `helm uninstall` leaves the
/// namespace and the teams' ConfigMaps.
#[test]
fn a_routine_helm_upgrade_keeps_a_teams_plugin_and_uninstall_leaves_the_namespace() {
    install_namespace();
    ship_seed_plugins();
    install_chart();
    let v2 = repo().join("target/test-plugins/database-v2.wasm");
    ship_plugin("database", &v2);

    let chart = repo().join("deploy/chart");
    let out = helm(&[
        "upgrade",
        "kubeplug",
        path_str(&chart),
        "--namespace",
        SYSTEM,
        "--reuse-values",
        "--set",
        "logLevel=debug",
    ]);
    assert!(out.contains("STATUS: deployed"), "{out}");
    let configmap = get_json(SYSTEM, "configmap/kubeplug-plugin-database").expect("database's");
    let shipped = decode_base64(configmap["binaryData"]["database.wasm"].as_str().unwrap());
    assert!(
        shipped == std::fs::read(&v2).unwrap(),
        "the team's v2 is still what the host reads"
    );
    for size in release_sizes() {
        eprintln!("release Secret: {size} bytes");
        assert!(
            size < 256 << 10,
            "a release without plugins stays small: {size} bytes"
        );
    }

    helm(&["uninstall", "kubeplug", "--namespace", SYSTEM]);
    assert!(
        get_json("", &format!("namespace/{SYSTEM}"))
            .is_some_and(|ns| ns["metadata"]["deletionTimestamp"].is_null()),
        "the namespace stays"
    );
    for name in ["database", "myapp", "pod-annotator"] {
        assert!(
            get_json(SYSTEM, &format!("configmap/kubeplug-plugin-{name}")).is_some(),
            "{name}'s ConfigMap stays"
        );
    }
    assert!(get_json(SYSTEM, "deployment/kubeplug").is_none());
    // What later tests expect: the seeds' identities and plugins as shipped.
    install_crds();
    ship_seed_plugins();
}
