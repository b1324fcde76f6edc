//! Admission and conversion served by plugins, through the real
//! kube-apiserver: `database` validates Databases (the engine is immutable,
//! a version its image does not ship is refused) and converts them between
//! `example.com/v1` and `v2`; `myapp` defaults MyApps. The webhook
//! configurations and the CRD's conversion are registered on the loopback by
//! `deploy/webhooks/register-loopback`, as `make demo` does.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kubeplug_e2e::*;

const TIMEOUT: Duration = Duration::from_secs(90);

/// The seed plugins' webhooks and Database v2, registered for a test and
/// removed at the end: a webhook whose server is gone fails every write of
/// its kind (`failurePolicy: Fail`), and v2 needs its conversion.
struct Webhooks;

impl Webhooks {
    fn register(port: u16, ca: &Path) -> Self {
        deploy_script(
            "deploy/webhooks/register-loopback",
            &[&port.to_string(), ca.to_str().expect("utf-8 path")],
        );
        Webhooks
    }
}

impl Drop for Webhooks {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("deploy/webhooks/register-loopback"))
            .arg("--remove")
            .output();
        // kubectl caches discovery: once the API server no longer serves
        // Database v2, refresh that cache, or a later `kubectl get
        // database/x` (any test's) may still ask for v2 and find nothing.
        // (A drop cannot fail a test: the wait is bounded, 30 s.)
        for _ in 0..120 {
            let group = kubectl(&["get", "--raw", "/apis/example.com"], None);
            if group.status.success() && !String::from_utf8_lossy(&group.stdout).contains("\"v2\"")
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let _ = kubectl(&["api-resources", "--cached=false", "-o", "name"], None);
    }
}

fn host_with_webhooks(dir: &PluginDir, certs: &Path, port: u16) -> Host {
    host_with_webhooks_and(dir, certs, port, &[])
}

/// A host serving the webhooks on loopback `port` with `certs`, and `more`
/// arguments.
fn host_with_webhooks_and(dir: &PluginDir, certs: &Path, port: u16, more: &[&str]) -> Host {
    let flags = webhook_flags(certs, port);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend_from_slice(more);
    Host::start_with(dir, &args)
}

/// Reviews answered by `plugin`'s `webhook` with `result`, by the host's
/// metrics.
fn reviews(host: &Host, plugin: &str, webhook: &str, result: &str) -> f64 {
    host.metric(
        "kubeplug_webhook_requests_total",
        &format!(r#"plugin="{plugin}",webhook="{webhook}",result="{result}""#),
    )
}

/// `kubectl patch` (merge) of Database `name` at v1.
fn patch_v1(ns: &str, name: &str, patch: &str) -> std::process::Output {
    let target = format!("databases.v1.example.com/{name}");
    kubectl(
        &["patch", "-n", ns, &target, "--type=merge", "-p", patch],
        None,
    )
}

/// POST `body` to the host's webhook listener at `path` (as the API server
/// would): the answer's body.
fn post(port: u16, certs: &Path, path: &str, body: &str) -> String {
    post_as(port, certs, path, body, None).1
}

/// [`post`] presenting `client` (certificate and key files) if given: the
/// answer's status (0 when the TLS handshake failed) and body.
fn post_as(
    port: u16,
    certs: &Path,
    path: &str,
    body: &str,
    client: Option<(&Path, &Path)>,
) -> (u16, String) {
    let mut curl = Command::new("curl");
    curl.args(["-s", "--max-time", "10", "--cacert"])
        .arg(certs.join("ca.crt"))
        .args(["-w", "\n%{http_code}"]);
    if let Some((cert, key)) = client {
        curl.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    let out = curl
        .args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The API server's client certificate for admission webhooks, its key and
/// its CA, as the local control plane made them (tests/cluster/pki.go) and
/// presents them (tests/cluster/apiserver.go, `admission.yaml`).
fn api_server_client() -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let pki = cluster_dir().join("pki");
    (
        pki.join("webhook-client.crt"),
        pki.join("webhook-client.key"),
        pki.join("webhook-client-ca.crt"),
    )
}

/// `kubectl create` of `yaml` in `ns`: (succeeded, stderr).
fn create(ns: &str, yaml: &str) -> (bool, String) {
    let out = kubectl(&["create", "-n", ns, "-f", "-"], Some(yaml));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn database_at(name: &str, engine: &str, version: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  engine: {engine}\n  version: {version}\n  replicas: 1\n"
    )
}

#[test]
fn plugins_validate_default_and_convert_through_the_api_server() {
    install_crds();
    let ns = Namespace::new("webhooks");
    let dir = PluginDir::with(&["database", "myapp"]);
    let certs = certificates(&dir.path);
    let port = free_port();
    // Admission reviews only from the API server, by its client
    // certificate (conversions come without one: kubernetes#131810).
    let (client_cert, client_key, client_ca) = api_server_client();
    let host = host_with_webhooks_and(
        &dir,
        &certs,
        port,
        &[
            "--webhook-client-ca",
            client_ca.to_str().unwrap(),
            "--webhook-client-name",
            "kube-apiserver-webhook-client",
        ],
    );
    running(&host, "database");
    running(&host, "myapp");
    // Stored before the validation exists: a version the table refuses.
    let (ok, error) = create(&ns.name, &database_at("legacy", "postgresql", "12.1.0"));
    assert!(ok, "{error}");
    let _webhooks = Webhooks::register(port, &certs.join("ca.crt"));

    // An update that leaves it as it is passes, with a warning kubectl
    // prints as one.
    let out = kubectl(
        &[
            "label",
            "-n",
            &ns.name,
            "databases.v1.example.com/legacy",
            "team=a",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning:") && stderr.contains("12.1.0"),
        "the warning reaches kubectl: {stderr}"
    );

    // Validation beyond the schema: a version the image does not ship.
    let (ok, error) = create(&ns.name, &database_at("old", "postgresql", "12.1.0"));
    assert!(!ok, "an unsupported version must be refused");
    assert!(
        error.contains("database.validate.kubeplug.io") && error.contains("12.1.0"),
        "the refusal names the webhook and the version: {error}"
    );
    assert!(get_json(&ns.name, "database/old").is_none());

    // A valid one is admitted and reconciled; its engine cannot change.
    let (ok, error) = create(&ns.name, &database("db"));
    assert!(ok, "{error}");
    database_runs(&ns.name, "db");
    let out = patch_v1(
        &ns.name,
        "db",
        r#"{"spec":{"engine":"mysql","version":"8.0.26"}}"#,
    );
    assert!(!out.status.success(), "changing the engine must be refused");
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(error.contains("spec.engine"), "{error}");
    let out = patch_v1(&ns.name, "db", r#"{"spec":{"replicas":2}}"#);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Conversion: the v1 object read as v2. (No `storage` yet: a read
    // applies the storage version's defaults, v1's; v2's apply on a write
    // through v2.)
    let v2 = eventually("database/db at v2", TIMEOUT, || {
        get_json(&ns.name, "databases.v2.example.com/db")
    });
    assert_eq!(v2["apiVersion"], "example.com/v2");
    assert_eq!(v2["spec"]["engine"]["name"], "postgresql");
    assert_eq!(v2["spec"]["engine"]["version"], "16.4.0");
    assert_eq!(v2["spec"]["replicas"], 2);
    assert!(v2["spec"].get("storage").is_none(), "{v2}");
    assert_eq!(v2["status"]["phase"], "Running");

    // A v2 object read back as v1 keeps what v1 cannot hold, and as v2
    // again unchanged; the plugin (reading v1) reconciles it.
    let (ok, error) = create(
        &ns.name,
        "apiVersion: example.com/v2\nkind: Database\nmetadata:\n  name: big\nspec:\n  engine:\n    name: mysql\n    version: 8.0.26\n  storage:\n    size: 5Gi\n",
    );
    assert!(ok, "{error}");
    let v1 = get_json(&ns.name, "databases.v1.example.com/big").expect("big at v1");
    assert_eq!(v1["spec"]["engine"], "mysql");
    assert_eq!(v1["spec"]["version"], "8.0.26");
    assert!(
        v1["metadata"]["annotations"]["databases.example.com/storage"]
            .as_str()
            .is_some_and(|a| a.contains("5Gi")),
        "{v1}"
    );
    let v2 = get_json(&ns.name, "databases.v2.example.com/big").expect("big at v2");
    assert_eq!(v2["spec"]["storage"]["size"], "5Gi");
    assert!(
        v2["metadata"]["annotations"]
            .get("databases.example.com/storage")
            .is_none(),
        "{v2}"
    );
    database_runs(&ns.name, "big");
    // A v2 write is validated too (converted to v1 for the plugin).
    let (ok, error) = create(
        &ns.name,
        "apiVersion: example.com/v2\nkind: Database\nmetadata:\n  name: bad2\nspec:\n  engine:\n    name: mongodb\n    version: 3.6.0\n",
    );
    assert!(!ok && error.contains("3.6.0"), "{error}");

    // Defaults by myapp's mutation: stored with them, not only reconciled.
    let (ok, error) = create(
        &ns.name,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: web\nspec: {}\n",
    );
    assert!(ok, "{error}");
    let app = get_json(&ns.name, "myapp/web").expect("myapp/web");
    assert_eq!(app["spec"]["image"], "nginx:1.27");
    assert_eq!(app["spec"]["replicas"], 1);

    // Each review is counted by plugin, webhook and result.
    assert!(reviews(&host, "database", "validate", "denied") >= 3.0);
    assert!(reviews(&host, "database", "convert", "converted") >= 1.0);
    assert!(reviews(&host, "myapp", "mutate", "patched") >= 1.0);

    // Everything above came through the API server, with its client
    // certificate. A stranger on the port without one is refused before
    // its review is read; with a certificate of another CA (the serving
    // certificate's), not even the handshake completes; the API server's
    // own certificate is answered.
    let review = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"s1","kind":{{"group":"example.com","version":"v1","kind":"Database"}},"resource":{{"group":"example.com","version":"v1","resource":"databases"}},"operation":"CREATE","namespace":"{ns}","name":"stranger","userInfo":{{}},"object":{}}}}}"#,
        serde_json::to_string(&serde_yaml_value(&database("stranger"), &ns.name)).unwrap(),
        ns = ns.name
    );
    let before = reviews(&host, "database", "validate", "allowed");
    for path in ["/validate/database", "/mutate/myapp"] {
        let (code, body) = post_as(port, &certs, path, &review, None);
        assert_eq!(code, 401, "{path} without a client certificate: {body}");
        assert!(body.contains("--webhook-client-ca"), "{body}");
        let (code, body) = post_as(
            port,
            &certs,
            path,
            &review,
            Some((&certs.join("tls.crt"), &certs.join("tls.key"))),
        );
        assert_eq!(code, 0, "{path} with another CA's certificate: {body}");
    }
    let (code, body) = post_as(
        port,
        &certs,
        "/validate/database",
        &review,
        Some((&client_cert, &client_key)),
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""allowed":true"#), "{body}");
    assert_eq!(
        reviews(&host, "database", "validate", "allowed"),
        before + 1.0,
        "the strangers' reviews never reached the plugin"
    );
}

/// The Database `yaml` as JSON, in namespace `ns`.
fn serde_yaml_value(yaml: &str, ns: &str) -> serde_json::Value {
    let out = kubectl(
        &[
            "create",
            "--dry-run=client",
            "-n",
            ns,
            "-o",
            "json",
            "-f",
            "-",
        ],
        Some(yaml),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("kubectl prints JSON")
}

/// The `/plugins` row of `<file>.wasm` once it failed to load.
fn refused(host: &Host, file: &str) -> String {
    let row = eventually(&format!("{file} to be refused"), TIMEOUT, || {
        host.plugin_file(&format!("{file}.wasm"))
            .filter(|p| p["state"] == "failed")
    });
    row["lastError"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_webhook_the_grant_does_not_cover_is_refused_and_a_dead_host_fails_closed() {
    install_crds();
    let ns = Namespace::new("webhooks-fence");
    let dir = PluginDir::with(&["database", "myapp"]);
    let certs = certificates(&dir.path);
    let port = free_port();
    // myapp's grant without admission: myapp offers its mutate webhook.
    let policy = "apiVersion: kubeplug.io/v1alpha1\nkind: PluginPolicy\nstrict: true\nidentityNamespace: kubeplug-system\nplugins:\n  myapp:\n    parent: [MyApp.example.com]\n    children: [Deployment.apps]\n  database:\n    parent: [Database.example.com]\n    children: [StatefulSet.apps, Service, Secret]\n    related: [Pod]\n    admission: [validate]\n    conversion: true\n";
    let policy_file = dir.path.with_extension("webhook-policy.yaml");
    std::fs::write(&policy_file, policy).unwrap();
    let host = host_with_webhooks_and(
        &dir,
        &certs,
        port,
        &["--policy", policy_file.to_str().unwrap()],
    );
    running(&host, "database");

    // Refused at load, like any request its grant does not cover.
    let reason = refused(&host, "myapp");
    assert!(
        reason
            .contains("the mutate webhook of its parent kind (grant it under admission: [mutate])"),
        "{reason}"
    );
    let webhooks = Webhooks::register(port, &certs.join("ca.crt"));

    // Its webhook, configured anyway, has no plugin to answer: the
    // configuration's failurePolicy (Fail) refuses the write.
    let (ok, error) = create(
        &ns.name,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: web\nspec: {}\n",
    );
    assert!(
        !ok,
        "a write through a webhook with no plugin must not pass"
    );
    assert!(error.contains("myapp.mutate.kubeplug.io"), "{error}");

    // A MyApp review routed to database's path (a misconfiguration) is
    // refused by the kind check, not handed to database.
    let answer = post(
        port,
        &certs,
        "/validate/database",
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"example.com","version":"v1alpha1","kind":"MyApp"},"operation":"CREATE","namespace":"x","object":{}}}"#,
    );
    assert!(
        answer.contains("serves admission for Database.example.com only, not MyApp.example.com"),
        "{answer}"
    );
    assert!(reviews(&host, "database", "validate", "not_granted") >= 1.0);

    // The host gone: the writes its webhooks guard fail closed, others pass.
    host.stop();
    let (ok, error) = create(&ns.name, &database("after"));
    assert!(!ok, "failurePolicy Fail: no write without the validation");
    assert!(error.contains("database.validate.kubeplug.io"), "{error}");
    let out = kubectl(&["create", "configmap", "-n", &ns.name, "unrelated"], None);
    assert!(out.status.success(), "other kinds are not affected");
    drop(webhooks);
    let (ok, error) = create(&ns.name, &database("after"));
    assert!(ok, "removed webhooks stop guarding: {error}");
}

/// Puts the v1-only CRD back however a test left it: a CRD whose storage
/// moved to v2 cannot drop v2, so it is deleted (with its objects) and
/// installed again. Its conversion webhook goes first: with the test's host
/// gone, every read or write of a Database stored at the other version
/// fails on it, deletes included, so the CRD could never go. Databases that
/// earlier tests left behind may still carry a finalizer that no running
/// host will remove (their namespace's deletion waits on it too), which
/// would hold the CRD's deletion for ever: those finalizers are cleared
/// until the CRD is gone (within two minutes).
struct RestoreCrd;

impl RestoreCrd {
    /// Clear the finalizers of every Database that has some.
    fn release_finalizers() {
        let names = kubectl(
            &[
                "get",
                "databases.v1.example.com",
                "-A",
                "-o",
                r#"jsonpath={range .items[?(@.metadata.finalizers)]}{.metadata.namespace} {.metadata.name}{"\n"}{end}"#,
            ],
            None,
        );
        for line in String::from_utf8_lossy(&names.stdout).lines() {
            if let Some((ns, name)) = line.split_once(' ') {
                kubectl(
                    &[
                        "patch",
                        "-n",
                        ns,
                        &format!("databases.v1.example.com/{name}"),
                        "--type=merge",
                        "-p",
                        r#"{"metadata":{"finalizers":null}}"#,
                    ],
                    None,
                );
            }
        }
    }
}

impl Drop for RestoreCrd {
    fn drop(&mut self) {
        // Versions convert by apiVersion alone from here on: no webhook.
        kubectl(
            &[
                "patch",
                "crd",
                "databases.example.com",
                "--type=merge",
                "-p",
                r#"{"spec":{"conversion":{"strategy":"None","webhook":null}}}"#,
            ],
            None,
        );
        Self::release_finalizers();
        kubectl(
            &["delete", "crd", "databases.example.com", "--wait=false"],
            None,
        );
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(120) {
            let gone = kubectl(&["get", "crd", "databases.example.com"], None);
            if String::from_utf8_lossy(&gone.stderr).contains("NotFound") {
                break;
            }
            Self::release_finalizers();
            std::thread::sleep(Duration::from_millis(500));
        }
        install_crds();
    }
}

/// `kubeplug migrate ARGS`: (succeeded, stdout and stderr).
fn migrate(args: &[&str]) -> (bool, String) {
    let out = Command::new(host_binary())
        .arg("migrate")
        .args(args)
        .args(["--crd", "databases.example.com", "--to", "v2", "--no-cache"])
        .output()
        .expect("kubeplug migrate runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn crd_storage() -> (String, serde_json::Value) {
    let crd = get_json("default", "crd/databases.example.com").expect("the CRD");
    let storage = crd["spec"]["versions"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["storage"] == true))
        .map(|v| v["name"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    (storage, crd["status"]["storedVersions"].clone())
}

#[test]
fn a_migration_round_trips_every_object_first_then_moves_storage_to_v2() {
    install_crds();
    let _restore = RestoreCrd;
    let ns = Namespace::new("migrate");
    let dir = PluginDir::with(&["database", "myapp"]);
    let certs = certificates(&dir.path);
    let port = free_port();
    let host = host_with_webhooks(&dir, &certs, port);
    running(&host, "database");
    let _webhooks = Webhooks::register(port, &certs.join("ca.crt"));
    let (ok, error) = create(&ns.name, &database("one"));
    assert!(ok, "{error}");
    let (ok, error) = create(
        &ns.name,
        "apiVersion: example.com/v2\nkind: Database\nmetadata:\n  name: two\nspec:\n  engine:\n    name: mysql\n    version: 8.0.26\n  replicas: 2\n  storage:\n    size: 5Gi\n",
    );
    assert!(ok, "{error}");
    let database_wasm = built("database");
    let database_wasm = database_wasm.to_str().unwrap();

    // The round trip through database's conversion loses nothing.
    let (ok, report) = migrate(&["--plugin", database_wasm, "--check"]);
    assert!(ok, "{report}");
    assert!(
        report.contains("round-tripped v1 -> v2 -> v1: 0 lose fields, 0 conversions failed"),
        "{report}"
    );

    // A lossy conversion is named, object by object and field by field,
    // and nothing is migrated.
    let lossy = dir.path.with_extension("lossy.yaml");
    std::fs::write(&lossy, "claim: databases\nconvert: lossy\n").unwrap();
    let hostile_wasm = built("hostile");
    let hostile_args = [
        "--plugin",
        hostile_wasm.to_str().unwrap(),
        "--config",
        lossy.to_str().unwrap(),
    ];
    let (ok, report) = migrate(&[&hostile_args[..], &["--check"]].concat());
    assert!(!ok, "a lossy conversion must fail the check: {report}");
    // (Other tests' Databases may still be there: the check covers every
    // stored object of the kind.)
    for needle in [
        &format!("{}/one:", ns.name),
        &format!("{}/two:", ns.name),
        "/spec/replicas: 1 -> null",
        "/spec/replicas: 2 -> null",
    ] {
        assert!(
            report.contains(needle),
            "{needle:?} missing from:\n{report}"
        );
    }
    let (ok, report) = migrate(&hostile_args);
    assert!(!ok && report.contains("not migrated"), "{report}");
    assert_eq!(crd_storage().0, "v1", "a refused migration changes nothing");

    // The migration: storage at v2, every object rewritten, storedVersions
    // only v2; both versions still read the same objects.
    let (ok, report) = migrate(&["--plugin", database_wasm]);
    assert!(ok, "{report}");
    assert!(report.contains("objects rewritten"), "{report}");
    let (storage, stored) = crd_storage();
    assert_eq!(storage, "v2");
    assert_eq!(stored, serde_json::json!(["v2"]));
    let two = get_json(&ns.name, "databases.v1.example.com/two").expect("two at v1");
    assert_eq!(two["spec"]["replicas"], 2);
    let one = get_json(&ns.name, "databases.v2.example.com/one").expect("one at v2");
    assert_eq!(one["spec"]["engine"]["name"], "postgresql");
    // Rewritten through v2, the v1 object got v2's default.
    assert_eq!(one["spec"]["storage"]["size"], "1Gi");

    // A second run is a no-op.
    let (ok, report) = migrate(&["--plugin", database_wasm]);
    assert!(ok && report.contains("nothing to migrate"), "{report}");
}

/// The API server's timeout of the hostile plugin's webhooks: well beyond
/// the plugin's deadline (2 s) and the time its answer takes back on a busy
/// machine, so that a write is failed by the host's reason, never by the
/// API server giving up first.
const WEBHOOK_TIMEOUT_SECONDS: u64 = 10;

/// The hostile plugin's admission webhooks, registered for a test and
/// removed at the end.
struct HostileWebhooks;

impl HostileWebhooks {
    fn register(port: u16, ca: &Path) -> Self {
        let ca = ca_bundle(ca);
        let webhook = |kind: &str, path: &str| {
            format!(
                "apiVersion: admissionregistration.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: kubeplug-test-hostile\nwebhooks:\n  - name: hostile.{path}.kubeplug.io\n    clientConfig:\n      url: https://127.0.0.1:{port}/{path}/hostile\n      caBundle: {ca}\n    rules:\n      - apiGroups: [test.kubeplug.io]\n        apiVersions: [v1]\n        resources: [hostiles]\n        operations: [CREATE, UPDATE]\n    matchPolicy: Equivalent\n    failurePolicy: Fail\n    sideEffects: None\n    timeoutSeconds: {WEBHOOK_TIMEOUT_SECONDS}\n    admissionReviewVersions: [v1]\n"
            )
        };
        let yaml = format!(
            "{}---\n{}",
            webhook("ValidatingWebhookConfiguration", "validate"),
            webhook("MutatingWebhookConfiguration", "mutate")
        );
        kubectl_ok(&["apply", "-f", "-"], Some(&yaml));
        HostileWebhooks
    }
}

impl Drop for HostileWebhooks {
    fn drop(&mut self) {
        for kind in [
            "validatingwebhookconfiguration",
            "mutatingwebhookconfiguration",
        ] {
            kubectl(
                &[
                    "delete",
                    kind,
                    "kubeplug-test-hostile",
                    "--ignore-not-found",
                ],
                None,
            );
        }
    }
}

#[test]
fn a_hostile_plugin_in_the_admission_path_is_stopped_within_the_webhooks_timeout() {
    install_crds();
    let ns = Namespace::new("webhooks-hostile");
    let dir = PluginDir::with(&["database"]);
    dir.settings(
        "hostile",
        "config:\n  name: hostile\n  admission: true\n  convert: ok\n",
    );
    dir.install("hostile", "hostile");
    let certs = certificates(&dir.path);
    let port = free_port();
    let policy = "plugins:\n  hostile:\n    parent: [Hostile.test.kubeplug.io]\n    children: [ConfigMap]\n    admission: [validate, mutate]\n    conversion: true\n";
    let mut host = host_with_webhooks_and(
        &dir,
        &certs,
        port,
        &["--policy", &with_policy(&dir, policy)],
    );
    running(&host, "hostile");
    running(&host, "database");
    let _webhooks = HostileWebhooks::register(port, &certs.join("ca.crt"));

    // Each misbehaviour fails the write (failurePolicy Fail) with the
    // host's reason, within the webhook's timeout: the API server is never
    // held for longer than the plugin's deadline.
    for (admit, reason) in [
        ("loop", "exceeded its deadline"),
        ("sleep", "exceeded its deadline"),
        ("alloc", "memory cap"),
        ("panic", "trapped"),
        ("warnings", "100 warnings (at most 16)"),
        ("escape", "refused by its fence"),
        ("deny", "spec.admit"),
    ] {
        let started = std::time::Instant::now();
        let (ok, error) = create(
            &ns.name,
            &format!(
                "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: h-{admit}\nspec:\n  behave: ok\n  admit: {admit}\n"
            ),
        );
        let took = started.elapsed();
        assert!(!ok, "admit: {admit} must not be admitted");
        assert!(
            error.contains(reason),
            "admit: {admit}: {reason:?} missing from {error}"
        );
        assert!(
            took < Duration::from_secs(WEBHOOK_TIMEOUT_SECONDS),
            "admit: {admit} held the write for {took:?}"
        );
        assert!(host.running(), "the host survives admit: {admit}");
    }

    // A mutation inside its fence is applied.
    let (ok, error) = create(
        &ns.name,
        "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: h-defaults\nspec:\n  behave: ok\n  admit: defaults\n",
    );
    assert!(ok, "{error}");
    let stored = get_json(&ns.name, "hostile/h-defaults").expect("h-defaults");
    assert_eq!(stored["spec"]["defaulted"], true);

    // Other kinds, and the other plugins' parents, are not affected.
    let (ok, error) = create(&ns.name, &database("unaffected"));
    assert!(ok, "{error}");
    database_runs(&ns.name, "unaffected");
    // Its conversions, as the API server would send them: an answer that
    // renames, drops or never comes is refused with the reason, in time.
    for (convert, reason) in [
        ("rename", "changed metadata.name"),
        ("drop", "0 objects answered for 1"),
        ("loop", "exceeded its deadline"),
    ] {
        let review = format!(
            r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"c-{convert}","desiredAPIVersion":"test.kubeplug.io/v2","objects":[{{"apiVersion":"test.kubeplug.io/v1","kind":"Hostile","metadata":{{"name":"h","namespace":"x","uid":"1"}},"spec":{{"convert":"{convert}"}}}}]}}}}"#
        );
        let started = std::time::Instant::now();
        let answer = post(port, &certs, "/convert/hostile?timeout=3s", &review);
        // The plugin's deadline is 2 s; curl gives up after 10 s (`post`).
        assert!(
            started.elapsed() < Duration::from_secs(9),
            "convert: {convert} held the review"
        );
        assert!(
            answer.contains(r#""status":"Failure""#) && answer.contains(reason),
            "convert: {convert}: {reason:?} missing from {answer}"
        );
    }
    // A Database sent to hostile's conversion is not handed to it.
    let answer = post(
        port,
        &certs,
        "/convert/hostile",
        r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"c-db","desiredAPIVersion":"example.com/v2","objects":[]}}"#,
    );
    assert!(
        answer.contains("converts Hostile.test.kubeplug.io only"),
        "{answer}"
    );

    // Mutations run first: loop, sleep, alloc and panic fail there.
    assert!(reviews(&host, "hostile", "mutate", "failed") >= 5.0);
    assert!(reviews(&host, "hostile", "validate", "failed") >= 1.0);
    // The grant's failure policy Ignore: a failing plugin lets the write
    // through, and kubectl shows why as a warning.
    host.stop();
    let lenient = policy.replace(
        "    admission:",
        "    failurePolicy: Ignore\n    admission:",
    );
    let host = host_with_webhooks_and(
        &dir,
        &certs,
        port,
        &["--policy", &with_policy(&dir, &lenient)],
    );
    running(&host, "hostile");
    let out = kubectl(
        &["create", "-n", &ns.name, "-f", "-"],
        Some(
            "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: h-ignored\nspec:\n  behave: ok\n  admit: panic\n",
        ),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "failurePolicy Ignore admits: {stderr}"
    );
    assert!(
        stderr.contains("Warning:") && stderr.contains("failurePolicy Ignore"),
        "{stderr}"
    );
}

/// A CRD has one conversion webhook for every namespace. `database`,
/// granted conversion in one namespace only, converts its own Databases;
/// another namespace's are refused without reaching it (a read at v2 fails
/// with the reason, a write at v2 stores nothing) and stay as they were at
/// rest.
#[test]
fn a_conversion_scoped_to_one_namespace_changes_nothing_stored_in_another() {
    install_crds();
    let mine = Namespace::new("convert-mine");
    let theirs = Namespace::new("convert-theirs");
    // Theirs is stored before the webhooks exist, at v1.
    let (ok, error) = create(&theirs.name, &database("theirs"));
    assert!(ok, "{error}");
    let stored = |ns: &str, name: &str| get_json(ns, &format!("databases.v1.example.com/{name}"));
    let before = stored(&theirs.name, "theirs").expect("theirs at v1");
    let dir = PluginDir::with(&["database"]);
    let certs = certificates(&dir.path);
    let port = free_port();
    // Its own policy file only: the shipped one grants database too.
    let policy = format!(
        "apiVersion: kubeplug.io/v1alpha1\nkind: PluginPolicy\nstrict: true\nidentityNamespace: kubeplug-system\nplugins:\n  database:\n    parent: [Database.example.com]\n    children: [StatefulSet.apps, Service, Secret]\n    related: [Pod]\n    admission: [validate]\n    conversion: true\n    namespaces: [{}]\n",
        mine.name
    );
    let policy_file = dir.path.with_extension("convert-policy.yaml");
    std::fs::write(&policy_file, policy).expect("write policy");
    let host = host_with_webhooks_and(
        &dir,
        &certs,
        port,
        &["--policy", policy_file.to_str().expect("utf-8 path")],
    );
    running(&host, "database");
    let _webhooks = Webhooks::register(port, &certs.join("ca.crt"));

    // Its own namespace converts.
    let (ok, error) = create(&mine.name, &database("mine"));
    assert!(ok, "{error}");
    let v2 = eventually("mine at v2", TIMEOUT, || {
        get_json(&mine.name, "databases.v2.example.com/mine")
    });
    assert_eq!(v2["spec"]["engine"]["name"], "postgresql");

    // Another's: refused whole with the reason, the plugin never asked.
    let out = kubectl(
        &[
            "get",
            "-n",
            &theirs.name,
            "databases.v2.example.com/theirs",
            "-o",
            "json",
        ],
        None,
    );
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "theirs was converted: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        error.contains("converts objects in its own namespaces only"),
        "{error}"
    );
    let (ok, error) = create(
        &theirs.name,
        "apiVersion: example.com/v2\nkind: Database\nmetadata:\n  name: theirs-v2\nspec:\n  engine:\n    name: mysql\n    version: 8.0.26\n",
    );
    assert!(!ok, "a v2 write in another namespace went through");
    assert!(
        error.contains("converts objects in its own namespaces only"),
        "{error}"
    );
    assert!(stored(&theirs.name, "theirs-v2").is_none());
    let after = stored(&theirs.name, "theirs").expect("theirs at v1");
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "theirs changed at rest: {after}"
    );
    assert_eq!(after["spec"], before["spec"]);
    assert!(reviews(&host, "database", "convert", "out_of_scope") >= 2.0);
    assert!(reviews(&host, "database", "convert", "converted") >= 1.0);
}

/// The hostile plugin's mutating webhook for Pods in `ns` (a decorator of
/// others' objects), removed at the end.
struct PodMutation;

impl PodMutation {
    fn register(port: u16, ca: &Path, ns: &str) -> Self {
        let ca = ca_bundle(ca);
        let yaml = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: kubeplug-test-pod-mutation\nwebhooks:\n  - name: hostile.mutate.kubeplug.io\n    clientConfig:\n      url: https://127.0.0.1:{port}/mutate/hostile\n      caBundle: {ca}\n    rules:\n      - apiGroups: [\"\"]\n        apiVersions: [v1]\n        resources: [pods]\n        operations: [CREATE]\n    namespaceSelector:\n      matchLabels:\n        kubernetes.io/metadata.name: {ns}\n    matchPolicy: Equivalent\n    failurePolicy: Fail\n    sideEffects: None\n    timeoutSeconds: {WEBHOOK_TIMEOUT_SECONDS}\n    admissionReviewVersions: [v1]\n"
        );
        kubectl_ok(&["apply", "-f", "-"], Some(&yaml));
        PodMutation
    }
}

impl Drop for PodMutation {
    fn drop(&mut self) {
        kubectl(
            &[
                "delete",
                "mutatingwebhookconfiguration",
                "kubeplug-test-pod-mutation",
                "--ignore-not-found",
            ],
            None,
        );
    }
}

/// A Pod decorator granted `mutate` and the keys `example.com/*`: its
/// mutation may stamp those keys and nothing else: a rewritten image or a
/// label outside its keys fails the write with the fence's reason, and no
/// Pod is stored with them.
#[test]
fn a_mutating_pod_decorator_changes_no_spec_and_only_its_granted_keys() {
    install_crds();
    let ns = Namespace::new("mutate-pods");
    let dir = PluginDir::with(&[]);
    dir.install("hostile", "hostile");
    dir.settings(
        "hostile",
        &format!(
            "config:\n  claim: pods\n  mode: decorator\n  admission: true\n  behave: nothing\n  namespaces: [{}]\n",
            ns.name
        ),
    );
    let certs = certificates(&dir.path);
    let port = free_port();
    let policy = format!(
        "plugins:\n  hostile:\n    parent: [Pod]\n    admission: [validate, mutate]\n    decoratorKeys: [\"example.com/*\"]\n    namespaces: [{}]\n",
        ns.name
    );
    let host = host_with_webhooks_and(
        &dir,
        &certs,
        port,
        &["--policy", &with_policy(&dir, &policy)],
    );
    running(&host, "hostile");
    let _webhook = PodMutation::register(port, &certs.join("ca.crt"), &ns.name);
    // A Pod needs its namespace's default ServiceAccount.
    eventually("the namespace's default ServiceAccount", TIMEOUT, || {
        get_json(&ns.name, "serviceaccount/default")
    });
    let pod = |name: &str, admit: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: web\n  annotations:\n    test.kubeplug.io/admit: {admit}\n\
             spec:\n  containers:\n    - name: main\n      image: nginx:1.27\n"
        )
    };
    for (admit, reason) in [
        (
            "image",
            "/spec/containers is outside metadata.labels and metadata.annotations",
        ),
        (
            "relabel",
            "labels key \"app\" is not among the keys its grant allows (decoratorKeys)",
        ),
    ] {
        let (ok, error) = create(&ns.name, &pod(&format!("p-{admit}"), admit));
        assert!(!ok, "admit: {admit} was admitted");
        assert!(
            error.contains("refused by its fence") && error.contains(reason),
            "admit: {admit}: {reason:?} missing from {error}"
        );
        assert!(get_json(&ns.name, &format!("pod/p-{admit}")).is_none());
    }
    let (ok, error) = create(&ns.name, &pod("p-stamp", "stamp"));
    assert!(ok, "{error}");
    let stored = get_json(&ns.name, "pod/p-stamp").expect("p-stamp");
    assert_eq!(
        stored["metadata"]["annotations"]["example.com/stamped"],
        "yes"
    );
    assert_eq!(stored["metadata"]["labels"]["app"], "web");
    assert_eq!(stored["spec"]["containers"][0]["image"], "nginx:1.27");
    assert!(reviews(&host, "hostile", "mutate", "failed") >= 2.0);
    assert!(reviews(&host, "hostile", "mutate", "patched") >= 1.0);
}
