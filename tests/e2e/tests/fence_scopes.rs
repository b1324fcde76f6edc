//! The fence's namespaces hold for a cluster-scoped parent too: a plugin of
//! Namespaces, granted one namespace, that reads Pods is never handed
//! another namespace's, and the host does not even watch them there (the
//! hostile guest logs every object it is handed: `behave: inventory`).

use std::time::Duration;

use kubeplug_e2e::*;

const TIMEOUT: Duration = Duration::from_secs(90);

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: hostile\n\
         spec:\n  containers:\n    - name: main\n      image: busybox:1.36\n"
    )
}

#[test]
fn a_cluster_scoped_parents_plugin_is_handed_nothing_from_outside_its_namespaces() {
    install_crds();
    let mine = Namespace::new("scope-mine");
    let theirs = Namespace::new("scope-theirs");
    for ns in [&mine.name, &theirs.name] {
        // A Pod needs its namespace's default ServiceAccount, which the
        // controller-manager makes just after the namespace.
        eventually("the namespace's default ServiceAccount", TIMEOUT, || {
            get_json(ns, "serviceaccount/default")
        });
    }
    apply(&mine.name, &pod("in-mine"));
    apply(&theirs.name, &pod("in-theirs"));
    let dir = PluginDir::with(&[]);
    dir.install("hostile", "hostile");
    dir.settings(
        "hostile",
        "config:\n  claim: namespaces\n  mode: decorator\n  related: [pods]\n  behave: inventory\n",
    );
    let policy = format!(
        "plugins:\n  hostile:\n    parent: [Namespace]\n    clusterScoped: [Namespace]\n    related: [Pod]\n    namespaces: [{}]\n",
        mine.name
    );
    let host = Host::start_with(&dir, &["--policy", &with_policy(&dir, &policy)]);

    // Every Namespace is a parent: wait until the plugin has reconciled
    // several, each handed whatever it may see.
    let reconciled = || -> f64 {
        host.series("kubeplug_reconciles_total")
            .into_iter()
            .filter(|(labels, _)| labels.contains("plugin=\"hostile\""))
            .map(|(_, value)| value)
            .sum()
    };
    let started = std::time::Instant::now();
    while reconciled() < 3.0 {
        assert!(
            started.elapsed() < TIMEOUT,
            "the plugin reconciled {} Namespaces in {TIMEOUT:?}; its row: {:?}",
            reconciled(),
            host.plugin("hostile")
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let log = std::fs::read_to_string(&host.log).expect("read host log");
    assert!(
        !log.contains("name=in-theirs"),
        "a Pod of {} was handed to a plugin granted {} only:\n{}",
        theirs.name,
        mine.name,
        host.log_tail()
    );
    // The host watches Pods for it in its namespace only.
    let watches: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("starting watch") && l.contains("resource=Pod.v1"))
        .collect();
    assert!(
        !watches.is_empty() && watches.iter().all(|l| l.contains(&mine.name)),
        "Pod watches: {watches:#?}"
    );
}
