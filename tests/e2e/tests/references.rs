//! What a parent names and what a decorator attaches, against the real
//! control plane: `myapp`'s `spec.configRef` (a ConfigMap whose content
//! hash rolls the Deployment), the fence around references (one namespace,
//! granted kinds only), and `disruption-budget`'s PodDisruptionBudgets
//! attached to Deployments.

use std::time::{Duration, Instant};

use kubeplug_e2e::*;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(90);
/// The pod template annotation myapp writes (plugins/myapp/src/config.rs).
const HASH: &str = "example.com/config-hash";

fn configmap(name: &str, log_level: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  greeting: hello\n  LOG_LEVEL: {log_level}\nbinaryData:\n  logo.png: iVBORw0KGgo=\n"
    )
}

fn myapp(name: &str, config: &str) -> String {
    format!(
        "apiVersion: example.com/v1alpha1\nkind: MyApp\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  configRef:\n    name: {config}\n"
    )
}

/// The Deployment of MyApp `app`, once it exists.
fn deployment(ns: &str, app: &str) -> Option<Value> {
    get_json(ns, &format!("deployment/{app}-deploy"))
}

/// The config hash in the pod template of MyApp `app`'s Deployment.
fn template_hash(ns: &str, app: &str) -> Option<Option<String>> {
    let d = deployment(ns, app)?;
    Some(
        d["spec"]["template"]["metadata"]["annotations"][HASH]
            .as_str()
            .map(String::from),
    )
}

/// MyApp `app`'s `ConfigReady` condition: (status, reason).
fn config_ready(ns: &str, app: &str) -> Option<(String, String)> {
    let app = get_json(ns, &format!("myapp/{app}"))?;
    let c = app["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "ConfigReady")?
        .clone();
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str()?.to_string(),
    ))
}

/// ReplicaSets of MyApp `app`'s Deployment (`None`: kubectl failed this
/// time; callers ask again).
fn replica_sets(ns: &str, app: &str) -> Option<usize> {
    let selector = format!("app.kubernetes.io/instance={app}");
    let out = kubectl(
        &[
            "get",
            "replicasets",
            "-n",
            ns,
            "-l",
            &selector,
            "-o",
            "json",
        ],
        None,
    );
    let list: Value = serde_json::from_slice(&out.stdout).ok()?;
    out.status.success().then_some(())?;
    list["items"].as_array().map(Vec::len)
}

#[test]
fn a_configmap_a_myapp_names_rolls_its_deployment_and_only_its_own_namespace_counts() {
    install_crds();
    let (ns, other) = (Namespace::new("refs"), Namespace::new("refs-other"));
    let dir = PluginDir::with(&["myapp"]);
    let host = Host::start(&dir);
    running(&host, "myapp");

    apply(&ns.name, &configmap("settings", "debug"));
    apply(&ns.name, &myapp("web", "settings"));
    // The hash of the fixtures' ConfigMap (plugins/myapp/fixtures/config.yaml).
    eventually("the hash in the pod template", TIMEOUT, || {
        (template_hash(&ns.name, "web")? == Some("fbf2cb315d7bcbdf".into())).then_some(())
    });
    eventually("ConfigReady True", TIMEOUT, || {
        (config_ready(&ns.name, "web")? == ("True".into(), "Found".into())).then_some(())
    });
    eventually("the first ReplicaSet", TIMEOUT, || {
        (replica_sets(&ns.name, "web")? == 1).then_some(())
    });

    // An edit of the ConfigMap alone reconciles the MyApp and rolls the
    // Deployment: a new pod template, a new ReplicaSet.
    let edited = Instant::now();
    apply(&ns.name, &configmap("settings", "info"));
    eventually("the new hash", TIMEOUT, || {
        (template_hash(&ns.name, "web")? == Some("20a651e2c4af4014".into())).then_some(())
    });
    let rolled_in = edited.elapsed();
    eventually("a second ReplicaSet", TIMEOUT, || {
        (replica_sets(&ns.name, "web")? == 2).then_some(())
    });
    eprintln!("ConfigMap edit to new pod template: {rolled_in:.1?}");
    // Seconds when idle; a minute at most on a busy machine, still far
    // from the 10-minute resync that would roll it without the reference.
    assert!(
        rolled_in < Duration::from_secs(60),
        "the edit rolled the Deployment after {rolled_in:?}"
    );

    // Deleted: absent, not an error. No hash, ConfigReady False.
    kubectl_ok(&["delete", "configmap", "settings", "-n", &ns.name], None);
    eventually("the hash to go", TIMEOUT, || {
        template_hash(&ns.name, "web")?.is_none().then_some(())
    });
    eventually("ConfigReady False", TIMEOUT, || {
        (config_ready(&ns.name, "web")? == ("False".into(), "NotFound".into())).then_some(())
    });

    // A MyApp in another namespace naming a ConfigMap that exists only in
    // the first gets nothing from it, even once it exists there again.
    apply(&ns.name, &configmap("settings", "debug"));
    apply(&other.name, &myapp("web", "settings"));
    eventually("the other namespace's Deployment", TIMEOUT, || {
        deployment(&other.name, "web")
    });
    eventually("ConfigReady False in the other namespace", TIMEOUT, || {
        (config_ready(&other.name, "web")? == ("False".into(), "NotFound".into())).then_some(())
    });
    eventually("the first namespace's hash again", TIMEOUT, || {
        (template_hash(&ns.name, "web")? == Some("fbf2cb315d7bcbdf".into())).then_some(())
    });
    assert_eq!(template_hash(&other.name, "web"), Some(None));

    // An unrelated ConfigMap changing queues no MyApp (neither a call nor
    // a skipped one).
    let calls = |host: &Host| {
        host.metric("kubeplug_reconciles_total", r#"plugin="myapp""#)
            + host.metric("kubeplug_reconciles_skipped_total", r#"plugin="myapp""#)
    };
    // First let the rollouts above settle: their Deployment status updates
    // reconcile the MyApps, as they should.
    let mut before = calls(&host);
    let settle = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(3));
        let now = calls(&host);
        if now == before {
            break;
        }
        assert!(settle.elapsed() < TIMEOUT, "the MyApps never settled");
        before = now;
    }
    apply(&ns.name, &configmap("unrelated", "debug"));
    apply(&ns.name, &configmap("unrelated", "info"));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(calls(&host), before, "an unreferenced ConfigMap reconciled");
}

#[test]
fn a_plugin_referencing_a_kind_its_grant_does_not_allow_is_refused_at_load() {
    install_crds();
    let dir = PluginDir::with(&["myapp"]);
    // myapp's grant without `references: [ConfigMap]`.
    let policy = "apiVersion: kubeplug.io/v1alpha1\nkind: PluginPolicy\nstrict: true\nidentityNamespace: kubeplug-system\nplugins:\n  myapp:\n    parent: [MyApp.example.com]\n    children: [Deployment.apps]\n    admission: [mutate]\n";
    let policy_file = dir.path.with_extension("refs-policy.yaml");
    std::fs::write(&policy_file, policy).unwrap();
    let host = Host::start_with(&dir, &["--policy", policy_file.to_str().unwrap()]);
    let row = eventually("myapp to be refused", TIMEOUT, || {
        host.plugin_file("myapp.wasm")
            .filter(|p| p["state"] == "failed")
    });
    let reason = row["lastError"].as_str().unwrap_or_default();
    assert!(
        reason.contains("referenced kind ConfigMap"),
        "refused for another reason: {reason}"
    );
}

/// The PodDisruptionBudget attached to Deployment `name`, if any.
fn budget(ns: &str, name: &str) -> Option<Value> {
    get_json(ns, &format!("poddisruptionbudget/{name}-pdb"))
}

fn deployment_yaml(name: &str, annotation: Option<&str>) -> String {
    let annotations = annotation
        .map(|a| format!("  annotations:\n    example.com/min-available: \"{a}\"\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n{annotations}spec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: c\n        image: nginx:1.27\n"
    )
}

#[test]
fn a_decorator_attaches_a_budget_to_each_annotated_deployment_prunes_it_and_gc_takes_it() {
    install_crds();
    let ns = Namespace::new("attach");
    let dir = PluginDir::with(&[]);
    dir.settings(
        "disruption-budget",
        &format!("config:\n  namespaces: [{}]\n", ns.name),
    );
    dir.install("disruption-budget", "disruption-budget");
    let host = Host::start(&dir);
    running(&host, "disruption-budget");

    apply(&ns.name, &deployment_yaml("web", Some("1")));
    apply(&ns.name, &deployment_yaml("plain", None));
    let pdb = eventually("web's budget", TIMEOUT, || budget(&ns.name, "web"));
    let web = eventually("web", TIMEOUT, || get_json(&ns.name, "deployment/web"));
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"], web["spec"]["selector"]);
    let owner = &pdb["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Deployment");
    assert_eq!(owner["uid"], web["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    assert_eq!(
        pdb["metadata"]["labels"]["kubeplug.io/plugin"],
        "disruption-budget"
    );

    // An updated ask updates the attachment.
    apply(&ns.name, &deployment_yaml("web", Some("50%")));
    eventually("the budget updated", TIMEOUT, || {
        (budget(&ns.name, "web")?["spec"]["minAvailable"] == "50%").then_some(())
    });

    // No longer asked: pruned.
    kubectl_ok(
        &[
            "annotate",
            "deployment/web",
            "-n",
            &ns.name,
            "example.com/min-available-",
        ],
        None,
    );
    eventually("the budget pruned", TIMEOUT, || {
        budget(&ns.name, "web").is_none().then_some(())
    });
    assert!(budget(&ns.name, "plain").is_none(), "plain was never asked");

    // Asked again, then the Deployment deleted: garbage collection takes
    // the attachment with it.
    apply(&ns.name, &deployment_yaml("web", Some("1")));
    eventually("the budget back", TIMEOUT, || budget(&ns.name, "web"));
    kubectl_ok(&["delete", "deployment/web", "-n", &ns.name], None);
    eventually("the budget collected with its Deployment", TIMEOUT, || {
        budget(&ns.name, "web").is_none().then_some(())
    });
}
