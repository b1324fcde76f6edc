//! A view whose informers come and go (a sharded plugin's shards), with a
//! client whose API server answers nothing: the objects are put in the
//! caches by hand ([`Informer::remember`]).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http::{Response, StatusCode};
use kube::Client;
use kube::api::DynamicObject;
use kube::client::Body;
use prometheus_client::registry::Registry;

use crate::informers::metrics::InformerMetrics;
use crate::informers::{Informers, Scope, View};
use kubeplug_core::manifest::ApiResource;

fn informers() -> Informers {
    let client = Client::new(
        tower::service_fn(|_| async {
            Ok::<_, Infallible>(
                Response::builder()
                    .status(StatusCode::SERVICE_UNAVAILABLE)
                    .body(Body::empty())
                    .unwrap(),
            )
        }),
        "default",
    );
    Informers::new(client, InformerMetrics::register(&mut Registry::default()))
}

fn resource() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        kind: "Database".into(),
        plural: "databases".into(),
        namespaced: true,
    }
}

fn shard(i: u16) -> Scope {
    Scope {
        labels: vec![("kubeplug.io/shard".into(), i.to_string())],
        ..Scope::default()
    }
}

fn object(name: &str, shard: u16) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Database",
        "metadata": {"name": name, "namespace": "ns", "labels": {"kubeplug.io/shard": shard.to_string()}},
    }))
    .unwrap()
}

#[tokio::test]
async fn informers_join_and_leave_a_view_and_its_handlers_follow() {
    let informers = informers();
    let (zero, one) = (
        informers.informer(&resource(), &shard(0)),
        informers.informer(&resource(), &shard(1)),
    );
    zero.remember(object("a", 0));
    one.remember(object("b", 1));

    let view = View::new(resource(), Vec::new());
    assert!(view.is_synced(), "an empty view holds back nothing");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let subscription = view.subscribe(Arc::new(move |o| {
        s.lock().unwrap().push(o.metadata.name.clone().unwrap())
    }));

    view.add(vec![zero.clone()]);
    assert_eq!(
        *seen.lock().unwrap(),
        ["a"],
        "an informer that joins is replayed"
    );
    assert!(view.get("ns", "a").is_some() && view.get("ns", "b").is_none());

    view.add(vec![one.clone()]);
    assert_eq!(*seen.lock().unwrap(), ["a", "b"]);

    // What the host writes goes into the informer whose labels it carries.
    view.remember(object("c", 1));
    assert!(one.get("ns", "c").is_some() && zero.get("ns", "c").is_none());

    let leaving = |i: &crate::informers::Informer| *i.scope() == shard(1);
    assert_eq!(view.remove(leaving), 1);
    assert!(view.get("ns", "b").is_none(), "its objects leave with it");
    assert_eq!(view.list(None).len(), 1);

    // A handler dropped hears nothing more, even from informers added later.
    drop(subscription);
    view.add(vec![one]);
    assert_eq!(*seen.lock().unwrap(), ["a", "b"]);
}

#[tokio::test]
async fn an_index_asked_of_a_view_is_built_on_informers_that_join_later() {
    let informers = informers();
    let view = View::new(resource(), Vec::new());
    view.index_label("kubeplug.io/shard");
    let zero = informers.informer(&resource(), &shard(0));
    zero.remember(object("a", 0));
    view.add(vec![zero]);
    assert_eq!(view.labelled("ns", "kubeplug.io/shard", "0").len(), 1);
}
