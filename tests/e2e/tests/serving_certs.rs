//! The host's own serving certificate (`--serving-certs-secret`, the
//! chart's default `certificates.source=self`) against the real control
//! plane: the host, as its ServiceAccount with the RBAC deploy/ ships
//! (components/self-certs), makes the Secret, sets the APIService's
//! caBundle, and `kubectl get plugins` answers through the aggregator; a
//! second replica serves the same certificate without writing; a reset
//! bundle is put back; a certificate near its expiry is renewed from the
//! same CA while the APIService stays Available. And the hostile side: who
//! may read the Secret, and that the host's rights on it and on the
//! APIService are by name.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kubeplug_e2e::*;
use serde_json::{Value, json};

const SYSTEM: &str = "kubeplug-system";
const SECRET: &str = "kubeplug-serving-certs";
const APISERVICE_NAME: &str = "v1alpha1.kubeplug.io";
const TIMEOUT: Duration = Duration::from_secs(90);
/// The round the tests' hosts run at (`--serving-certs-check`).
const CHECK: &str = "2s";

/// The APIService pointing at a host on loopback (an ExternalName Service,
/// as deploy/apiservice/register-loopback makes), without a caBundle: the
/// host must set it. Removed, with the Secret, when dropped.
struct Unbundled;

impl Unbundled {
    fn at(port: u16) -> Self {
        kubectl_ok(
            &[
                "delete",
                "secret",
                SECRET,
                "-n",
                SYSTEM,
                "--ignore-not-found",
            ],
            None,
        );
        kubectl_ok(
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: kubeplug-api\n  namespace: {SYSTEM}\nspec:\n  type: ExternalName\n  externalName: localhost\n---\napiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: {APISERVICE_NAME}\nspec:\n  group: kubeplug.io\n  version: v1alpha1\n  service:\n    namespace: {SYSTEM}\n    name: kubeplug-api\n    port: {port}\n  groupPriorityMinimum: 1000\n  versionPriority: 15\n"
            )),
        );
        Unbundled
    }

    /// Point the APIService at another replica's port.
    fn point_at(&self, port: u16) {
        patch_apiservice(&json!({"spec": {"service": {"port": port}}}));
    }
}

impl Drop for Unbundled {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", APISERVICE, "--ignore-not-found"], None);
        let _ = kubectl(
            &[
                "delete",
                "secret",
                SECRET,
                "-n",
                SYSTEM,
                "--ignore-not-found",
            ],
            None,
        );
    }
}

fn patch_apiservice(patch: &Value) {
    kubectl_ok(
        &[
            "patch",
            APISERVICE,
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
}

fn apiservice() -> Value {
    get_json(SYSTEM, APISERVICE).expect("the APIService")
}

fn available(apiservice: &Value) -> bool {
    apiservice["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Available" && c["status"] == "True")
}

/// The Secret's data (base64 values, as stored), if it exists.
fn secret_data() -> Option<Value> {
    Some(get_json(SYSTEM, &format!("secret/{SECRET}"))?["data"].clone())
}

fn field(data: &Value, key: &str) -> String {
    data[key].as_str().unwrap_or_default().to_string()
}

/// The RBAC the host runs with here: deploy/base's (through
/// [`service_account_kubeconfig`]), the aggregated API's, and the self-made
/// certificate's.
fn apply_rbac() {
    for file in [
        "deploy/components/aggregated-api/rbac.yaml",
        "deploy/components/self-certs/rbac.yaml",
    ] {
        let path = repo().join(file);
        kubectl_ok(&["apply", "-f", path.to_str().expect("utf-8 path")], None);
    }
}

/// A replica serving the aggregated API on loopback `port` with its own
/// certificate, as the host's ServiceAccount.
fn replica(dir: &PluginDir, kubeconfig: &std::path::Path, port: u16, extra: &[&str]) -> Host {
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec![
        "--api-listen",
        &listen,
        "--lease-namespace",
        SYSTEM,
        "--serving-certs-secret",
        SECRET,
        "--inject-ca-apiservice",
        APISERVICE_NAME,
        "--serving-certs-check",
        CHECK,
    ];
    args.extend_from_slice(extra);
    Host::start_as(dir, &args, kubeconfig)
}

fn plugin_names() -> BTreeSet<String> {
    kubectl_ok(&["get", "plugins", "-o", "name"], None)
        .lines()
        .map(|l| l.trim_start_matches("plugin.kubeplug.io/").to_string())
        .collect()
}

/// Wait until the APIService is Available with the Secret's bundle.
fn served_with_the_secrets_bundle(what: &str) -> Value {
    eventually(what, TIMEOUT, || {
        let data = secret_data()?;
        let api = apiservice();
        (api["spec"]["caBundle"].as_str() == Some(field(&data, "ca.crt").as_str())
            && available(&api))
        .then_some(data)
    })
}

#[test]
fn the_host_makes_shares_renews_and_reinjects_its_own_serving_certificate() {
    install_crds();
    apply_rbac();
    let ns = Namespace::new("certs");
    let dir = PluginDir::with(&["pod-annotator"]);
    dir.settings(
        "pod-annotator",
        &format!("config:\n  namespaces: [{}]\n", ns.name),
    );
    let kubeconfig = service_account_kubeconfig(&dir);
    let port_a = free_port();
    let registration = Unbundled::at(port_a);
    assert_eq!(apiservice()["spec"]["caBundle"], Value::Null);

    // The first replica makes the Secret and sets the bundle; the
    // aggregator then trusts it, and kubectl lists the plugins.
    let a = replica(&dir, &kubeconfig, port_a, &[]);
    let data = served_with_the_secrets_bundle("the APIService Available with the host's CA");
    let secret = get_json(SYSTEM, &format!("secret/{SECRET}")).expect("the Secret");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    for key in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(!field(&data, key).is_empty(), "{key} in the Secret");
    }
    eventually("kubectl get plugins to list pod-annotator", TIMEOUT, || {
        plugin_names().contains("pod-annotator").then_some(())
    });

    // A second replica reads the same Secret: it writes nothing, and the
    // aggregator, pointed at it, trusts it by the same bundle.
    let version = secret["metadata"]["resourceVersion"].clone();
    let port_b = free_port();
    let b = replica(&dir, &kubeconfig, port_b, &[]);
    registration.point_at(port_b);
    std::thread::sleep(Duration::from_secs(6));
    let after = get_json(SYSTEM, &format!("secret/{SECRET}")).expect("the Secret");
    assert_eq!(after["metadata"]["resourceVersion"], version, "no churn");
    let made = kubectl_ok(
        &[
            "get",
            "secrets",
            "-n",
            SYSTEM,
            "-l",
            "app.kubernetes.io/component=serving-certs",
            "-o",
            "name",
        ],
        None,
    );
    assert_eq!(made.lines().count(), 1, "one Secret: {made}");
    served_with_the_secrets_bundle("the APIService Available through the second replica");
    assert!(plugin_names().contains("pod-annotator"));
    assert_eq!(b.logged("serving certificate renewed"), 0);
    assert_eq!(a.logged("serving certificate renewed"), 0);

    // Someone (a helm upgrade, say) resets the bundle: put back within a
    // round.
    patch_apiservice(&json!({"spec": {"caBundle": null}}));
    served_with_the_secrets_bundle("the reset caBundle injected again");

    // A certificate near its expiry. Only a replica making short-lived
    // certificates runs; the serving certificate in the Secret is spoilt,
    // so it makes one valid 90 s, renewed from the same CA once 30 s are
    // left, then again; the APIService stays Available throughout.
    drop(a);
    drop(b);
    let port_c = free_port();
    let c = replica(
        &dir,
        &kubeconfig,
        port_c,
        &["--serving-cert-validity", "90s"],
    );
    registration.point_at(port_c);
    let before =
        served_with_the_secrets_bundle("the APIService Available through the third replica");
    let mut spoilt = get_json(SYSTEM, &format!("secret/{SECRET}")).expect("the Secret");
    spoilt["data"]["tls.crt"] = json!("bm90IGEgY2VydGlmaWNhdGU="); // "not a certificate"
    kubectl_ok(&["replace", "-f", "-"], Some(&spoilt.to_string()));
    let started = Instant::now();
    let mut certificates = BTreeSet::new();
    let mut unavailable = 0;
    while started.elapsed() < Duration::from_secs(150) && certificates.len() < 3 {
        let data = secret_data().expect("the Secret");
        assert_eq!(
            field(&data, "ca.crt"),
            field(&before, "ca.crt"),
            "the CA stays"
        );
        certificates.insert(field(&data, "tls.crt"));
        if !available(&apiservice()) {
            unavailable += 1;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    certificates.remove("bm90IGEgY2VydGlmaWNhdGU=");
    assert!(
        certificates.len() >= 2,
        "the spoilt certificate replaced, then renewed before it expired: {} seen\n{}",
        certificates.len(),
        c.log_tail()
    );
    assert!(
        c.logged("serving certificate renewed") >= 2,
        "{}",
        c.log_tail()
    );
    // The availability controller's view lags by its resync; a second or
    // two of it is not an outage.
    assert!(
        unavailable <= 2,
        "the APIService was unavailable {unavailable} times"
    );
    served_with_the_secrets_bundle("the APIService Available after the renewals");
    assert!(plugin_names().contains("pod-annotator"));
    drop(c);
    drop(registration);
}

/// The chart's default render, as JSON objects.
fn chart_objects() -> Vec<Value> {
    let chart = repo().join("deploy/chart");
    let rendered = helm(&[
        "template",
        "kubeplug",
        chart.to_str().expect("utf-8 path"),
        "--namespace",
        SYSTEM,
        "--set",
        "webhooks.enabled=true",
        "--set",
        "networkPolicy.apiServer.anySource=true",
    ]);
    rendered
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|doc| doc.is_object())
        .collect()
}

fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} in the chart"))
}

fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

#[test]
fn the_hosts_certificate_rights_are_by_name_and_no_namespaced_user_reads_the_secret() {
    // What the chart grants, with the webhooks on too: every rule of the
    // injection role names its objects, get and patch only; the Secret's
    // role names the Secret, but for create.
    let objects = chart_objects();
    let injection = object(&objects, "ClusterRole", "kubeplug-ca-injection");
    let mut named = BTreeSet::new();
    for rule in injection["rules"].as_array().expect("rules") {
        assert_eq!(
            strings(&rule["verbs"]),
            ["get", "patch"].map(String::from).into()
        );
        let names = strings(&rule["resourceNames"]);
        assert!(!names.is_empty(), "a rule without resourceNames: {rule}");
        named.extend(names);
    }
    assert_eq!(
        named,
        [
            "v1alpha1.kubeplug.io",
            "kubeplug-validate",
            "kubeplug-mutate",
            "databases.example.com"
        ]
        .map(String::from)
        .into()
    );
    let role = object(&objects, "Role", "kubeplug-serving-certs");
    assert_eq!(role["metadata"]["namespace"], SYSTEM);
    for rule in role["rules"].as_array().expect("rules") {
        assert_eq!(strings(&rule["resources"]), ["secrets".to_string()].into());
        if rule["resourceNames"].is_null() {
            assert_eq!(
                strings(&rule["verbs"]),
                ["create".to_string()].into(),
                "{rule}"
            );
        } else {
            assert_eq!(strings(&rule["resourceNames"]), [SECRET.to_string()].into());
            assert_eq!(
                strings(&rule["verbs"]),
                ["get", "update"].map(String::from).into()
            );
        }
    }

    // The same rights as deploy/ applies them, asked of the API server.
    apply_rbac();
    let host = "system:serviceaccount:kubeplug-system:kubeplug";
    let can = |verb: &str, what: &str, ns: Option<&str>, user: &str| {
        let mut args = vec!["auth", "can-i", verb, what, "--as", user];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        kubectl(&args, None).status.success()
    };
    assert!(can(
        "update",
        &format!("secrets/{SECRET}"),
        Some(SYSTEM),
        host
    ));
    assert!(can("create", "secrets", Some(SYSTEM), host));
    assert!(!can("update", "secrets/another", Some(SYSTEM), host));
    assert!(!can("create", "secrets", Some("default"), host));
    assert!(can(
        "patch",
        &format!("apiservices/{APISERVICE_NAME}"),
        None,
        host
    ));
    assert!(!can("patch", "apiservices/v1.apps", None, host));
    assert!(!can(
        "patch",
        "validatingwebhookconfigurations/another",
        None,
        host
    ));

    // A namespace's admin (ClusterRole admin, bound in their namespace)
    // cannot read the Secret, nor can anyone without a grant.
    let ns = Namespace::new("certs-user");
    let user = format!("team-admin-{}", std::process::id());
    kubectl_ok(
        &[
            "create",
            "rolebinding",
            "team-admin",
            "--clusterrole",
            "admin",
            "--user",
            &user,
            "-n",
            &ns.name,
        ],
        None,
    );
    assert!(
        can("get", "secrets", Some(&ns.name), &user),
        "admin of their namespace"
    );
    for who in [user.as_str(), "nobody"] {
        assert!(
            !can("get", &format!("secrets/{SECRET}"), Some(SYSTEM), who),
            "{who}"
        );
        let out = kubectl(&["get", "secret", SECRET, "-n", SYSTEM, "--as", who], None);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("forbidden"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
