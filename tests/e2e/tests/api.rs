//! The host's aggregated API (`kubeplug.io/v1alpha1`) through the real
//! kube-apiserver's aggregation layer: registration, discovery, `kubectl get
//! plugins [-w]`, label and field selectors, `kubectl explain`, RBAC through
//! SubjectAccessReview, and connections that do not come from the front
//! proxy.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubeplug_e2e::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(90);

fn plugins_table() -> String {
    kubectl_ok(&["get", "plugins"], None)
}

/// The first column of each row of a `kubectl get` table (its header left
/// out).
fn names(table: &str) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

/// A `kubectl ... -w` running in the background, killed when dropped.
struct KubectlWatch {
    child: Child,
    output: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Start `kubectl <args>` (a watch); what it prints collects as it comes.
fn kubectl_watch(args: &[&str]) -> KubectlWatch {
    let mut child = Command::new(std::env::var("KUBECTL").expect("KUBECTL"))
        .args(args)
        .env(
            "KUBECONFIG",
            std::env::var("KUBECONFIG").expect("KUBECONFIG"),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl watches");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let output = Arc::new(Mutex::new(String::new()));
    let collected = output.clone();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            collected
                .lock()
                .expect("output lock")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    KubectlWatch {
        child,
        output,
        reader: Some(reader),
    }
}

impl KubectlWatch {
    /// What it printed so far.
    fn output(&self) -> String {
        self.output.lock().expect("output lock").clone()
    }

    /// Stop it; everything it printed.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.output()
    }
}

impl Drop for KubectlWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `curl` straight at the host's API port, bypassing kube-apiserver:
/// (exit code, HTTP status or "000").
fn direct(port: u16, ca: &Path, client: Option<(&Path, &Path)>, user: &str) -> (i32, String) {
    let mut args = vec![
        "-s".to_string(),
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        "%{http_code}".into(),
        "--max-time".into(),
        "10".into(),
        "--cacert".into(),
        ca.display().to_string(),
        "-H".into(),
        format!("X-Remote-User: {user}"),
        "-H".into(),
        "X-Remote-Group: system:masters".into(),
    ];
    if let Some((cert, key)) = client {
        args.extend([
            "--cert".into(),
            cert.display().to_string(),
            "--key".into(),
            key.display().to_string(),
        ]);
    }
    args.push(format!(
        "https://127.0.0.1:{port}/apis/kubeplug.io/v1alpha1/plugins"
    ));
    let out = Command::new("curl")
        .args(&args)
        .output()
        .expect("curl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A client certificate signed by the front proxy's CA (the control plane's
/// `pki/front-proxy-ca`), with common name `cn`.
fn front_proxy_signed(dir: &Path, cn: &str) -> (PathBuf, PathBuf) {
    let pki = cluster_dir().join("pki");
    let (key, csr, cert) = (
        dir.join(format!("{cn}.key")),
        dir.join(format!("{cn}.csr")),
        dir.join(format!("{cn}.crt")),
    );
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let s = |p: &Path| p.to_str().unwrap().to_string();
    run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        &format!("/CN={cn}"),
        "-keyout",
        &s(&key),
        "-out",
        &s(&csr),
    ]);
    // v3 with clientAuth, as a real proxy certificate (webpki refuses v1).
    let ext = dir.join("client.ext");
    std::fs::write(&ext, "extendedKeyUsage=clientAuth\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        &s(&csr),
        "-extfile",
        &s(&ext),
        "-CA",
        &s(&pki.join("front-proxy-ca.crt")),
        "-CAkey",
        &s(&pki.join("front-proxy-ca.key")),
        "-CAcreateserial",
        "-CAserial",
        &s(&dir.join("front-proxy.srl")),
        "-days",
        "1",
        "-out",
        &s(&cert),
    ]);
    (cert, key)
}

#[test]
fn kubectl_gets_explains_and_watches_plugins_through_the_aggregator() {
    install_crds();
    let ns = Namespace::new("api");
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    dir.settings(
        "pod-annotator",
        &format!("config:\n  namespaces: [{}]\n", ns.name),
    );
    let api = ApiHost::start(&dir, &[]);
    let host = &api.host;

    // Discovery: the group and its resource.
    eventually("kubectl to discover plugins", TIMEOUT, || {
        let out = kubectl(&["api-resources", "--api-group=kubeplug.io"], None);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| {
                l.starts_with("plugins ")
                    && l.contains("kubeplug.io/v1alpha1")
                    && l.contains("Plugin")
            })
            .then_some(())
    });

    // `kubectl get plugins`: the three plugins, running, with columns.
    let table = eventually("kubectl get plugins", TIMEOUT, || {
        let out = kubectl(&["get", "plugins"], None);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        ["database", "myapp", "pod-annotator"]
            .iter()
            .all(|p| {
                text.lines()
                    .any(|l| l.starts_with(p) && l.contains("running"))
            })
            .then_some(text)
    });
    let header = table.lines().next().unwrap_or_default();
    for column in [
        "NAME",
        "VERSION",
        "STATE",
        "LEADER",
        "RECONCILES",
        "ERRORS",
        "QUEUE",
    ] {
        assert!(header.contains(column), "{column} in {header}");
    }

    // The details of one plugin.
    let plugin: Value = serde_json::from_str(&kubectl_ok(
        &["get", "plugin", "database", "-o", "json"],
        None,
    ))
    .expect("Plugin JSON");
    assert_eq!(plugin["kind"], "Plugin");
    assert_eq!(plugin["spec"]["manifest"]["parent"], "Database.example.com");
    assert_eq!(
        plugin["spec"]["manifest"]["children"],
        serde_json::json!(["StatefulSet.apps", "Service", "Secret"])
    );
    assert_eq!(plugin["status"]["state"], "running");
    assert_eq!(plugin["status"]["version"], "0.1.0");
    assert_eq!(
        plugin["status"]["digest"],
        host.plugin("database").expect("row")["digest"]
    );
    assert!(
        plugin["status"]["leader"]
            .as_str()
            .is_some_and(|l| !l.is_empty())
    );
    assert!(plugin["status"]["reconciles"].is_u64());

    // Reconciles show up in the counters.
    apply(
        &ns.name,
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: counted\nspec:\n  replicas: 1\n",
    );
    eventually("myapp's reconciles to be counted", TIMEOUT, || {
        let plugin: Value =
            serde_json::from_str(&kubectl_ok(&["get", "plugin", "myapp", "-o", "json"], None))
                .ok()?;
        (plugin["status"]["reconciles"].as_u64()? >= 1).then_some(())
    });

    // `kubectl explain` reads the schema through the aggregated OpenAPI.
    let explained = eventually("kubectl explain plugins.status", TIMEOUT, || {
        let out = kubectl(&["explain", "plugins.status"], None);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    });
    assert!(explained.contains("KIND:       Plugin"), "{explained}");
    assert!(explained.contains("leader"), "{explained}");
    // Through the schemas it refers to: ObjectMeta's (k8s-openapi's) and
    // the manifest's; and from the Swagger 2.0 document older clients read.
    let labels = kubectl_ok(&["explain", "plugins.metadata.labels"], None);
    assert!(labels.contains("map[string]string"), "{labels}");
    let manifest = kubectl_ok(&["explain", "plugins.spec.manifest"], None);
    assert!(manifest.contains("resyncSeconds"), "{manifest}");
    let v2 = eventually("kubectl explain from OpenAPI v2", TIMEOUT, || {
        let out = kubectl(
            &["explain", "--output=plaintext-openapiv2", "plugins.status"],
            None,
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && text.contains("leader")).then_some(text)
    });
    assert!(v2.contains("KIND:     Plugin"), "{v2}");
    // Errors are a Status naming what they are about.
    let missing = kubectl(&["get", "plugin", "nothing", "-o", "json"], None);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("NotFound") && stderr.contains("plugins.kubeplug.io \"nothing\" not found"),
        "{stderr}"
    );

    // A watch from a version this host did not issue (an earlier process's,
    // another replica's) is told to relist, through the aggregator.
    let expired = kubectl_ok(
        &[
            "get",
            "--raw",
            "/apis/kubeplug.io/v1alpha1/plugins?watch=1&resourceVersion=5&timeoutSeconds=5",
        ],
        None,
    );
    let event: Value = serde_json::from_str(expired.trim()).expect("one JSON event");
    assert_eq!(event["type"], "ERROR", "{expired}");
    assert_eq!(event["object"]["code"], 410, "{expired}");
    assert_eq!(event["object"]["reason"], "Expired", "{expired}");
    // One from the version of a list sees what changed after it.
    let list: Value = serde_json::from_str(&kubectl_ok(
        &["get", "--raw", "/apis/kubeplug.io/v1alpha1/plugins"],
        None,
    ))
    .expect("a list");
    let version = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("version");
    let resumed = kubectl_ok(
        &[
            "get",
            "--raw",
            &format!(
                "/apis/kubeplug.io/v1alpha1/plugins?watch=1&resourceVersion={version}&timeoutSeconds=3"
            ),
        ],
        None,
    );
    assert!(!resumed.contains("\"ERROR\""), "{resumed}");

    // `kubectl get plugins -w` streams a swap.
    let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let mut watch = Command::new(std::env::var("KUBECTL").expect("KUBECTL"))
        .args([
            "get",
            "plugins",
            "-w",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let stdout = watch.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut all = String::new();
        let mut buf = [0u8; 4096];
        let mut stdout = stdout;
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.push_str(&String::from_utf8_lossy(&buf[..n]));
            let _ = tx.send(all.clone());
        }
    });
    // The initial state first, then the swap.
    let mut seen = String::new();
    eventually("the watch to list the plugins", TIMEOUT, || {
        while let Ok(text) = rx.try_recv() {
            seen = text;
        }
        seen.contains("\"pod-annotator\"").then_some(())
    });
    std::fs::copy(
        repo().join("target/test-plugins/database-v2.wasm"),
        dir.path.join("database.wasm"),
    )
    .expect("swap the database plugin");
    eventually("the watch to stream the swap", TIMEOUT, || {
        while let Ok(text) = rx.try_recv() {
            seen = text;
        }
        let compact: String = seen.split_whitespace().collect();
        (compact.contains("\"MODIFIED\"") && compact.contains("\"version\":\"0.2.0\""))
            .then_some(())
    });
    let _ = watch.kill();
    let _ = watch.wait();

    drop(api);
}

#[test]
fn label_and_field_selectors_pick_plugins_and_a_named_watch_sees_only_its_plugin() {
    install_crds();
    let ns = Namespace::new("select");
    let dir = PluginDir::with(&["database", "myapp", "pod-annotator"]);
    dir.settings(
        "pod-annotator",
        &format!("config:\n  namespaces: [{}]\n", ns.name),
    );
    let _api = ApiHost::start(&dir, &[]);
    eventually("the three plugins running", TIMEOUT, || {
        let out = kubectl(&["get", "plugins", "-l", "kubeplug.io/state=running"], None);
        let mut running = names(&String::from_utf8_lossy(&out.stdout));
        running.sort();
        (running == ["database", "myapp", "pod-annotator"]).then_some(())
    });

    // By the manifest's mode: the decorator, not the composites.
    let decorators = kubectl_ok(
        &["get", "plugins", "-l", "kubeplug.io/mode=decorator"],
        None,
    );
    assert_eq!(names(&decorators), ["pod-annotator"], "{decorators}");
    let composites = kubectl_ok(
        &["get", "plugins", "-l", "kubeplug.io/mode in (composite)"],
        None,
    );
    assert!(
        names(&composites).contains(&"database".to_string()),
        "{composites}"
    );
    assert!(!composites.contains("pod-annotator"), "{composites}");

    // A label no plugin has: an empty list, not an error.
    let out = kubectl(&["get", "plugins", "-l", "x=y"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No resources found"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // A field plugins cannot be selected on: 400, in kube-apiserver's words.
    let out = kubectl(&["get", "plugins", "--field-selector", "spec.file=x"], None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("BadRequest") && stderr.contains("field label not supported: spec.file"),
        "{stderr}"
    );
    let by_name = kubectl_ok(
        &["get", "plugins", "--field-selector", "metadata.name=myapp"],
        None,
    );
    assert_eq!(names(&by_name), ["myapp"], "{by_name}");

    // `kubectl get plugin database -w` watches with
    // fieldSelector=metadata.name=database: it sees database's swap and
    // nothing of myapp's removal, which a watch of every plugin sees.
    let named = kubectl_watch(&["get", "plugin", "database", "-w", "--output-watch-events"]);
    let all = kubectl_watch(&["get", "plugins", "-w", "--output-watch-events"]);
    eventually("both watches to show their plugins", TIMEOUT, || {
        (named.output().contains("database") && all.output().contains("pod-annotator"))
            .then_some(())
    });
    std::fs::copy(
        repo().join("target/test-plugins/database-v2.wasm"),
        dir.path.join("database.wasm"),
    )
    .expect("swap the database plugin");
    dir.remove("myapp");
    eventually("the watch of every plugin to see myapp go", TIMEOUT, || {
        all.output()
            .lines()
            .any(|l| l.starts_with("DELETED") && l.contains("myapp"))
            .then_some(())
    });
    eventually("the named watch to see the swap", TIMEOUT, || {
        named
            .output()
            .lines()
            .any(|l| l.starts_with("MODIFIED") && l.contains("database") && l.contains("0.2.0"))
            .then_some(())
    });
    // Time for anything it should not be sent to arrive.
    std::thread::sleep(Duration::from_secs(3));
    all.stop();
    let seen = named.stop();
    for line in seen
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("EVENT"))
    {
        assert_eq!(
            line.split_whitespace().nth(1),
            Some("database"),
            "the named watch printed another plugin:\n{seen}"
        );
    }
}

#[test]
fn rbac_decides_and_only_the_front_proxy_gets_in() {
    install_crds();
    let dir = PluginDir::with(&["myapp"]);
    let api = ApiHost::start(&dir, &[]);
    let (certs, port) = (&api.certs, api.port);
    eventually("kubectl get plugins as admin", TIMEOUT, || {
        plugins_table().contains("myapp").then_some(())
    });

    // A user without a role: 403 through the aggregator, naming what lacks.
    let out = kubectl(&["get", "plugins", "--as", "bob"], None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Forbidden")
            && stderr.contains(
                "User \"bob\" cannot list resource \"plugins\" in API group \"kubeplug.io\""
            ),
        "{stderr}"
    );
    // Given `get`, `list` and `watch` on plugins, the same user gets in.
    let user = format!("viewer-{}", std::process::id());
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: kubeplug-plugin-viewer\nrules:\n- apiGroups: [kubeplug.io]\n  resources: [plugins]\n  verbs: [get, list, watch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {user}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: kubeplug-plugin-viewer\nsubjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: {user}\n"
        )),
    );
    eventually("the viewer to list plugins", TIMEOUT, || {
        let out = kubectl(&["get", "plugins", "--as", &user], None);
        String::from_utf8_lossy(&out.stdout)
            .contains("myapp")
            .then_some(())
    });
    kubectl(&["delete", "clusterrolebinding", &user], None);

    // Straight at the port: no client certificate, a certificate of another
    // CA, and the front proxy's CA but another name are all refused; only
    // the front proxy's own certificate passes.
    let ca = certs.join("ca.crt");
    let (code, status) = direct(port, &ca, None, "kubeplug-admin");
    assert!(
        code != 0 && status == "000",
        "no client certificate: curl {code}, HTTP {status}"
    );
    let (code, status) = direct(
        port,
        &ca,
        Some((&certs.join("tls.crt"), &certs.join("tls.key"))),
        "kubeplug-admin",
    );
    assert!(
        code != 0 && status == "000",
        "another CA: curl {code}, HTTP {status}"
    );
    let (cert, key) = front_proxy_signed(&dir.path, "mallory");
    let (_, status) = direct(port, &ca, Some((&cert, &key)), "kubeplug-admin");
    assert_eq!(status, "401", "the front proxy's CA but not its name");
    let pki = cluster_dir().join("pki");
    let (_, status) = direct(
        port,
        &ca,
        Some((
            &pki.join("front-proxy-client.crt"),
            &pki.join("front-proxy-client.key"),
        )),
        "kubeplug-admin",
    );
    assert_eq!(
        status, "200",
        "the front proxy's own certificate, for system:masters"
    );
}

/// Every resourceVersion in `ns` of what the database plugin writes: the
/// parent (status) and its children. (Pods and Events belong to others.)
fn resource_versions(ns: &str) -> Vec<(String, String)> {
    let out = kubectl_ok(
        &[
            "get",
            "databases,statefulsets,services,secrets",
            "-n",
            ns,
            "-o",
            "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{\"\\n\"}{end}",
        ],
        None,
    );
    let mut versions: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    versions.sort();
    versions
}

/// `kubectl create` of a Preview in `ns`, as `user` if given (without
/// kubectl's own validation then: it would list CRDs, which a plain user may
/// not).
fn create_preview(ns: &str, preview: &Value, user: Option<&str>) -> std::process::Output {
    let mut args = vec!["create", "-n", ns, "-f", "-", "-o", "json"];
    if let Some(user) = user {
        args.extend(["--as", user, "--validate=false"]);
    }
    kubectl(&args, Some(&preview.to_string()))
}

/// The answer to a Preview created as admin.
fn preview_ok(ns: &str, preview: Value) -> Value {
    let out = create_preview(ns, &preview, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the preview as JSON")
}

#[test]
fn a_preview_shows_what_a_change_would_do_and_writes_nothing() {
    install_crds();
    let ns = Namespace::new("preview");
    let dir = PluginDir::with(&["database"]);
    let _api = ApiHost::start(&dir, &[]);
    apply(
        &ns.name,
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: shop\nspec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n",
    );
    eventually("the database to run", TIMEOUT, || {
        (get_json(&ns.name, "database/shop")?["status"]["phase"] == "Running").then_some(())
    });
    eventually("kubectl to discover previews", TIMEOUT, || {
        let out = kubectl(&["api-resources", "--api-group=kubeplug.io"], None);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with("previews ") && l.contains("true"))
            .then_some(())
    });
    // Let the host finish what it writes (status, events), then freeze:
    // settled once nothing it writes changes for 3 s, however long that
    // takes on a busy machine.
    let before = eventually("the host's writes to settle", TIMEOUT, || {
        let before = resource_versions(&ns.name);
        std::thread::sleep(Duration::from_secs(3));
        (resource_versions(&ns.name) == before).then_some(before)
    });

    // The live Database with 3 replicas instead of 1, previewed.
    let mut parent = get_json(&ns.name, "database/shop").expect("the database");
    parent["spec"]["replicas"] = serde_json::json!(3);
    let preview = serde_json::json!({
        "apiVersion": "kubeplug.io/v1alpha1",
        "kind": "Preview",
        "metadata": {"name": "three-replicas"},
        "spec": {"plugin": "database", "parent": parent},
    });
    let answer = preview_ok(&ns.name, preview.clone());
    let children = answer["status"]["children"].as_array().expect("children");
    let sts = children
        .iter()
        .find(|c| c["kind"] == "StatefulSet")
        .expect("the StatefulSet");
    assert_eq!(sts["action"], "update", "{answer:#}");
    assert!(
        sts["diff"].as_array().is_some_and(|d| d
            .iter()
            .any(|c| c["path"] == "/spec/replicas" && c["live"] == 1 && c["desired"] == 3)),
        "{answer:#}"
    );
    for kind in ["Service", "Secret"] {
        let child = children.iter().find(|c| c["kind"] == kind).expect(kind);
        assert_eq!(child["action"], "unchanged", "{kind}: {answer:#}");
    }
    assert_eq!(answer["status"]["status"]["changes"], true, "{answer:#}");
    // The live parent as it is: nothing to do.
    let unchanged = preview_ok(
        &ns.name,
        serde_json::json!({
            "apiVersion": "kubeplug.io/v1alpha1",
            "kind": "Preview",
            "spec": {"plugin": "database", "parentName": "shop"},
        }),
    );
    assert!(
        unchanged["status"]["children"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["action"] == "unchanged")),
        "{unchanged:#}"
    );

    // A candidate version beside the serving file: what the upgrade would
    // change, while the serving version stays (the file is not loaded).
    std::fs::copy(
        repo().join("target/test-plugins/database-v2.wasm"),
        dir.path.join("database.next.wasm"),
    )
    .expect("place the candidate");
    let upgrade = preview_ok(
        &ns.name,
        serde_json::json!({
            "apiVersion": "kubeplug.io/v1alpha1",
            "kind": "Preview",
            "spec": {"plugin": "database", "parentName": "shop", "candidate": true},
        }),
    );
    let sts = upgrade["status"]["children"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["kind"] == "StatefulSet"))
        .expect("the StatefulSet");
    assert_eq!(sts["action"], "update", "{upgrade:#}");
    assert!(
        sts["diff"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("plugin-revision"))
                && c["desired"] == "v2")),
        "{upgrade:#}"
    );
    let serving: Value =
        serde_json::from_str(&kubectl_ok(&["get", "plugins", "-o", "json"], None)).expect("JSON");
    let items = serving["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "the candidate is not a plugin: {serving:#}");
    assert_eq!(items[0]["status"]["version"], "0.1.0");

    // Nothing was written.
    assert_eq!(resource_versions(&ns.name), before);
    assert_eq!(
        get_json(&ns.name, "statefulset/shop").expect("sts")["spec"]["replicas"],
        1
    );

    // Creating previews, and reading the parent, are both RBAC's call.
    let out = create_preview(&ns.name, &preview, Some("bob"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot create resource \"previews\""),
        "{stderr}"
    );
    let user = format!("previewer-{}", std::process::id());
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: previewer\n  namespace: {ns}\nrules:\n- apiGroups: [kubeplug.io]\n  resources: [previews]\n  verbs: [create]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: previewer\n  namespace: {ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: previewer\nsubjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: {user}\n",
            ns = ns.name
        )),
    );
    let refused = eventually("the parent read to be refused", TIMEOUT, || {
        let out = create_preview(&ns.name, &preview, Some(&user));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        stderr
            .contains("cannot get resource \"databases\"")
            .then_some(stderr)
    });
    assert!(refused.contains("example.com"), "{refused}");
}
