//! `kubeplug doctor` against the real local control plane: a demo-like
//! install (CRDs, namespace, the seed plugins' identities, a host with the
//! seed plugins and the aggregated API registered) reads all `ok`; a
//! plugin's binding removed, a CRD a plugin needs deleted, and an APIService
//! whose CA has expired each `FAIL`, naming what to fix. Without `--plugins`
//! and `--policy` it reads the installation `deploy/` applies (the
//! Deployment, its policy and plugin ConfigMaps, the host's own RBAC), and a
//! right taken from the host's ClusterRole fails naming the rule.
//!
//! Each test puts back what it breaks (the tests share one cluster), or
//! breaks something of its own name.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kubeplug_e2e::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(90);

/// `kubeplug doctor ARGS`: whether it exited 0, and its stdout.
fn doctor(args: &[&str]) -> (bool, String) {
    let out = Command::new(host_binary())
        .arg("doctor")
        .args(args)
        .output()
        .expect("kubeplug doctor runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `kubeplug doctor --plugins DIR --policy deploy/base/policy.yaml ARGS`.
fn doctor_on(dir: &PluginDir, args: &[&str]) -> (bool, String) {
    let policy = repo().join("deploy/base/policy.yaml");
    let mut all = vec![
        "--plugins",
        dir.path.to_str().expect("utf-8 path"),
        "--policy",
        policy.to_str().expect("utf-8 path"),
    ];
    all.extend(args);
    doctor(&all)
}

/// The check named `name` of a `-o json` answer.
fn check(json: &str, name: &str) -> Value {
    let checks: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    checks
        .as_array()
        .expect("an array of checks")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {json}"))
        .clone()
}

/// Runs its closure when dropped: puts back what a test broke, also when it
/// fails.
struct Restore<F: FnMut()>(F);

impl<F: FnMut()> Drop for Restore<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

#[test]
fn a_healthy_install_reads_ok_on_every_line() {
    install_crds();
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    let _api = ApiHost::start(&dir, &[]);

    let (ok, text) = doctor_on(&dir, &[]);
    assert!(ok, "doctor failed:\n{text}");
    let lines: Vec<&str> = text.lines().collect();
    for name in [
        "kubeconfig",
        "API server",
        "namespace",
        "front-proxy CA",
        "APIService",
        "APIService CA bundle",
        "cache directory",
        "policy",
        "plugin directory",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.split("  ").map(str::trim).any(|w| w == name)),
            "no line for {name}:\n{text}"
        );
    }
    for plugin in ["database", "myapp", "pod-annotator"] {
        for check in ["plugin", "kinds", "service account", "permissions"] {
            let name = format!("{check} {plugin}");
            assert!(
                lines.iter().any(|l| l.contains(&name)),
                "no line for {name}:\n{text}"
            );
        }
    }
    let not_ok: Vec<&&str> = lines.iter().filter(|l| !l.starts_with("ok ")).collect();
    assert!(not_ok.is_empty(), "lines not ok: {not_ok:#?}\n{text}");
}

#[test]
fn a_plugin_whose_binding_is_gone_fails_naming_its_service_account_and_a_permission() {
    install_crds();
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    let _restore = Restore(|| {
        let rbac = repo().join("deploy/base/plugin-rbac.yaml");
        kubectl_ok(&["apply", "-f", rbac.to_str().unwrap()], None);
    });
    kubectl_ok(
        &["delete", "clusterrolebinding", "kubeplug-plugin-database"],
        None,
    );

    // RBAC reaches the authorizer through its informers: a moment.
    let (ok, json) = eventually("doctor to see the binding gone", TIMEOUT, || {
        let (ok, json) = doctor_on(&dir, &["-o", "json"]);
        (check(&json, "permissions database")["status"] == "fail").then_some((ok, json))
    });
    assert!(!ok, "doctor exits non-zero on a failure:\n{json}");
    let detail = check(&json, "permissions database")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        detail.starts_with("ServiceAccount kubeplug-system/kubeplug-plugin-database may not ")
            && detail.contains("create, patch, delete statefulsets.apps")
            && detail.contains("(its Role/ClusterRole binding is missing?)"),
        "{detail}"
    );
    // The account itself is still there, and the other plugins are fine.
    assert_eq!(check(&json, "service account database")["status"], "ok");
    assert_eq!(check(&json, "permissions myapp")["status"], "ok");
    assert_eq!(check(&json, "permissions pod-annotator")["status"], "ok");
}

#[test]
fn a_deleted_crd_fails_naming_the_kind_not_served() {
    install_crds();
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    let _restore = Restore(install_crds);
    kubectl_ok(
        &["delete", "crd", "myapps.example.com", "--timeout=60s"],
        None,
    );

    // Discovery drops the group a moment after the CRD goes.
    let json = eventually("doctor to see MyApps unserved", TIMEOUT, || {
        let (ok, json) = doctor_on(&dir, &["-o", "json"]);
        (!ok && check(&json, "kinds myapp")["status"] == "fail").then_some(json)
    });
    let detail = check(&json, "kinds myapp")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        detail.starts_with("kind MyApp.example.com/")
            && detail.contains(" is not served: apply its CustomResourceDefinition (crds/)"),
        "{detail}"
    );
    // The plugin itself still loads (its grant is judged), and the other
    // plugins' kinds are served.
    assert_eq!(check(&json, "plugin myapp")["status"], "ok", "{json}");
    assert_eq!(check(&json, "kinds database")["status"], "ok", "{json}");
}

/// The APIService of this test: a group of its own, so that the aggregated
/// API of other tests is untouched.
const EXPIRED_APISERVICE: &str = "v1alpha1.doctor-expired.kubeplug.io";

#[test]
fn an_apiservice_whose_ca_has_expired_fails_naming_the_expiry() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ca = expired_ca(dir.path());
    // As deploy/apiservice/register-loopback encodes it.
    let out = Command::new("base64")
        .arg("-w0")
        .arg(&ca)
        .output()
        .expect("base64 runs");
    assert!(out.status.success(), "base64 {}", ca.display());
    let bundle = String::from_utf8(out.stdout).expect("base64 is ASCII");
    let _restore = Restore(|| {
        kubectl(
            &[
                "delete",
                "apiservice",
                EXPIRED_APISERVICE,
                "--ignore-not-found",
            ],
            None,
        );
    });
    // No Service behind it: it is never Available, and it is deleted at the
    // end (an unavailable group degrades discovery for everyone).
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: {EXPIRED_APISERVICE}
spec:
  group: doctor-expired.kubeplug.io
  version: v1alpha1
  service: {{namespace: kubeplug-system, name: kubeplug-doctor-absent, port: 443}}
  caBundle: {bundle}
  groupPriorityMinimum: 1000
  versionPriority: 15
"
        )),
    );

    // A Deployment of no one's: the installation's checks stop at it.
    let (ok, json) = doctor(&[
        "--apiservice",
        EXPIRED_APISERVICE,
        "--deployment",
        "kubeplug-doctor-absent",
        "-o",
        "json",
    ]);
    assert!(!ok, "doctor exits non-zero on a failure:\n{json}");
    let bundle = check(&json, "APIService CA bundle");
    assert_eq!(bundle["status"], "fail", "{json}");
    let detail = bundle["detail"].as_str().unwrap();
    assert!(
        detail.contains("certificate CN=doctor-expired-ca expired on 2020-02-01")
            && detail.contains("caBundle"),
        "{detail}"
    );
    // Without a Deployment to read, the plugins' checks say why they did
    // not run.
    assert_eq!(check(&json, "deployment")["status"], "fail", "{json}");
    assert!(
        check(&json, "deployment")["detail"]
            .as_str()
            .unwrap()
            .contains("kubeplug-system/kubeplug-doctor-absent does not exist"),
        "{json}"
    );
    assert_eq!(check(&json, "plugin directory")["status"], "skipped");
}

/// A self-signed CA valid from 2020-01-01 to 2020-02-01, in `dir/ca.crt`.
/// `openssl req -x509` cannot date a certificate in the past (and
/// `-not_before`/`-not_after` came with OpenSSL 3.4); `openssl ca` with
/// `-startdate`/`-enddate` can, in every version.
fn expired_ca(dir: &Path) -> std::path::PathBuf {
    std::fs::write(
        dir.join("ca.cnf"),
        "[ca]
default_ca = expired
[expired]
database = ./index.txt
new_certs_dir = .
serial = ./serial
default_md = sha256
policy = any
unique_subject = no
[any]
commonName = supplied
[req]
distinguished_name = dn
[dn]
[v3]
basicConstraints = critical,CA:true
keyUsage = keyCertSign,cRLSign
",
    )
    .expect("write ca.cnf");
    std::fs::write(dir.join("index.txt"), "").expect("write index.txt");
    std::fs::write(dir.join("serial"), "01\n").expect("write serial");
    let openssl = |args: &[&str]| openssl(dir, args);
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=doctor-expired-ca",
        "-config",
        "ca.cnf",
        "-keyout",
        "ca.key",
        "-out",
        "ca.csr",
    ]);
    openssl(&[
        "ca",
        "-batch",
        "-config",
        "ca.cnf",
        "-selfsign",
        "-keyfile",
        "ca.key",
        "-in",
        "ca.csr",
        "-startdate",
        "20200101000000Z",
        "-enddate",
        "20200201000000Z",
        "-extensions",
        "v3",
        "-notext",
        "-out",
        "ca.crt",
    ]);
    dir.join("ca.crt")
}

/// Puts back what the installation test changed, also when it fails: the
/// host's RBAC as `deploy/base/rbac.yaml` has it (cluster-wide; later tests
/// need it), and no Deployment (its pods run nothing here).
struct RestoreInstallation;

impl Drop for RestoreInstallation {
    fn drop(&mut self) {
        let rbac = repo().join("deploy/base/rbac.yaml");
        let _ = kubectl(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                rbac.to_str().unwrap_or_default(),
            ],
            None,
        );
        let _ = kubectl(
            &[
                "delete",
                "deployment",
                "kubeplug",
                "-n",
                "kubeplug-system",
                "--ignore-not-found",
            ],
            None,
        );
    }
}

#[test]
fn the_installation_is_read_from_the_cluster_and_a_host_right_taken_fails_naming_it() {
    install_crds();
    let _restore = RestoreInstallation;
    // What `kubectl apply --server-side -k deploy/` installs: the Deployment,
    // the policy and settings ConfigMaps, one ConfigMap per plugin, RBAC.
    let deploy = repo().join("deploy");
    kubectl_ok(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-k",
            deploy.to_str().expect("utf-8 path"),
        ],
        None,
    );

    // No --plugins, no --policy: installation mode.
    let (_, text) = doctor(&[]);
    println!("{text}");
    let (_, json) = doctor(&["-o", "json"]);
    let ok_with = |name: &str, needles: &[&str]| {
        let found = check(&json, name);
        let detail = found["detail"].as_str().unwrap_or_default();
        assert_eq!(found["status"], "ok", "{name}: {json}");
        for needle in needles {
            assert!(detail.contains(needle), "{name}: no {needle:?} in {detail}");
        }
    };
    ok_with(
        "deployment",
        &[
            "Deployment kubeplug-system/kubeplug (installation mode",
            "ServiceAccount kubeplug",
            "--plugins /plugins",
            "--leader-elect (Leases in kubeplug-system)",
        ],
    );
    ok_with(
        "policy",
        &[
            "ConfigMap kubeplug-system/kubeplug-policy key policy.yaml",
            "--policy /etc/kubeplug/policy/policy.yaml",
            "strict",
        ],
    );
    ok_with("settings", &["ConfigMap(s) kubeplug-plugin-settings"]);
    ok_with(
        "plugin directory",
        &[
            "--plugins /plugins in the Deployment's pod",
            "kubeplug-plugin-database, kubeplug-plugin-myapp, kubeplug-plugin-pod-annotator",
            "3 plugin file(s)",
        ],
    );
    ok_with("cache volume", &["emptyDir, sizeLimit 1Gi", "768Mi"]);
    for plugin in ["database", "myapp", "pod-annotator"] {
        ok_with(&format!("plugin {plugin}"), &[&format!("{plugin}.wasm")]);
        ok_with(&format!("permissions {plugin}"), &[]);
        ok_with(
            &format!("host rights {plugin}"),
            &[&format!(
                "ServiceAccount kubeplug-system/kubeplug (the Deployment's) may impersonate kubeplug-plugin-{plugin}"
            )],
        );
    }
    // The local cache directory is local-files mode's.
    assert!(
        !json.contains("\"cache directory\""),
        "no local cache check: {json}"
    );

    // The host may no longer act as the database plugin.
    let role = kubectl_ok(&["get", "clusterrole", "kubeplug", "-o", "json"], None);
    let mut role: Value = serde_json::from_str(&role).expect("role JSON");
    for rule in role["rules"].as_array_mut().expect("rules") {
        if rule["verbs"] == serde_json::json!(["impersonate"]) {
            let names = rule["resourceNames"].as_array_mut().expect("resourceNames");
            names.retain(|n| n != "kubeplug-plugin-database");
        }
    }
    kubectl_ok(&["replace", "-f", "-"], Some(&role.to_string()));

    // RBAC reaches the authorizer through its informers: a moment.
    let (ok, json) = eventually("doctor to see the right gone", TIMEOUT, || {
        let (ok, json) = doctor(&["-o", "json"]);
        (check(&json, "host rights database")["status"] == "fail").then_some((ok, json))
    });
    assert!(!ok, "doctor exits non-zero on a failure:\n{json}");
    let detail = check(&json, "host rights database")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    for needle in [
        "ServiceAccount kubeplug-system/kubeplug (the Deployment's) may not impersonate serviceaccounts kubeplug-plugin-database in namespace kubeplug-system",
        "{apiGroups: [\"\"], resources: [serviceaccounts], verbs: [impersonate], resourceNames: [kubeplug-plugin-database]}",
        "deploy/base/rbac.yaml",
        "plugins.identities.database.impersonate: true",
        "kubeplug platform",
    ] {
        assert!(detail.contains(needle), "no {needle:?} in {detail}");
    }
    assert!(
        !detail.contains("statefulsets"),
        "only the right taken is named: {detail}"
    );
    // The other plugins keep theirs.
    assert_eq!(check(&json, "host rights myapp")["status"], "ok", "{json}");
    assert_eq!(
        check(&json, "host rights pod-annotator")["status"],
        "ok",
        "{json}"
    );
}
