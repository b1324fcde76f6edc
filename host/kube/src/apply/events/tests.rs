//! The event queue against a fake API server (a tower service that counts
//! the events it is sent, how many at once, and answers after a delay).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::Client;
use kube::api::DynamicObject;
use kube::client::Body;

use crate::apply::Writer;
use crate::apply::metrics::ApplyMetrics;
use crate::informers::Object;
use crate::leader::Leadership;
use kubeplug_core::contract::Event;

/// Answers every event POST after `delay`, counting posts and the most in
/// flight at once.
#[derive(Clone, Default)]
struct Server {
    posted: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
    delay: Duration,
}

impl Server {
    /// Answer one request: only event POSTs are expected.
    async fn answer(self, request: Request<Body>) -> Result<Response<Body>, Infallible> {
        assert_eq!(request.method(), http::Method::POST);
        assert_eq!(
            request.uri().path(),
            "/apis/events.k8s.io/v1/namespaces/ns/events"
        );
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.posted.fetch_add(1, Ordering::SeqCst);
        let body = serde_json::json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"},
            "eventTime": "2026-12-01T00:00:00.000000Z",
        });
        Ok(Response::builder()
            .status(StatusCode::CREATED)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap())
    }
}

fn writer(server: &Server, leadership: Leadership) -> Writer {
    let server = server.clone();
    let client = Client::new(
        tower::service_fn(move |request| server.clone().answer(request)),
        "default",
    );
    Writer::new(
        client,
        "database",
        "kubeplug/database".into(),
        ApplyMetrics::default(),
        leadership,
    )
}

fn parent() -> Object {
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Database",
        "metadata": {"name": "db", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
    }))
    .unwrap();
    Object::new(object)
}

fn event(i: usize) -> Event {
    Event {
        warning: false,
        // Distinct, so that the recorder posts each instead of counting a series.
        reason: format!("Reason{i}"),
        message: format!("event {i}"),
    }
}

/// Wait (in paused time) until `posted` reaches `want`.
async fn until_posted(server: &Server, want: usize) {
    for _ in 0..1000 {
        if server.posted.load(Ordering::SeqCst) >= want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{} of {want} events posted",
        server.posted.load(Ordering::SeqCst)
    );
}

#[tokio::test(start_paused = true)]
async fn events_are_queued_at_once_and_posted_a_few_at_a_time() {
    let server = Server {
        delay: Duration::from_millis(200),
        ..Server::default()
    };
    let writer = writer(&server, Leadership::always());
    let parent = parent();
    let started = tokio::time::Instant::now();
    for i in 0..10 {
        assert!(writer.event(&parent, &event(i), "Reconcile"));
    }
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "queueing waits for nothing"
    );
    assert_eq!(server.posted.load(Ordering::SeqCst), 0);
    until_posted(&server, 10).await;
    let most = server.most_in_flight.load(Ordering::SeqCst);
    assert!(
        most > 1 && most <= super::IN_FLIGHT,
        "{most} posted at once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_drops_new_events_and_says_so() {
    let server = Server {
        delay: Duration::from_secs(3600),
        ..Server::default()
    };
    let writer = writer(&server, Leadership::always());
    let parent = parent();
    let offered = super::QUEUED + super::IN_FLIGHT + 10;
    let queued = (0..offered)
        .filter(|&i| writer.event(&parent, &event(i), "Reconcile"))
        .count();
    assert!(
        (super::QUEUED..=super::QUEUED + super::IN_FLIGHT).contains(&queued),
        "{queued} of {offered} queued"
    );
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_does_not_lead_posts_none_of_its_queued_events() {
    let server = Server::default();
    let writer = writer(&server, Leadership::never());
    let parent = parent();
    for i in 0..5 {
        assert!(writer.event(&parent, &event(i), "Reconcile"));
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(server.posted.load(Ordering::SeqCst), 0);
    assert_eq!(server.most_in_flight.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn an_event_is_fenced_by_the_writer_that_queued_it() {
    let server = Server::default();
    let plugin = writer(&server, Leadership::always());
    // A shard this replica does not own: its events share the plugin's
    // queue but not its leadership.
    let shard = plugin.fenced_by(Leadership::never());
    let parent = parent();
    assert!(shard.event(&parent, &event(0), "Reconcile"));
    assert!(plugin.event(&parent, &event(1), "Reconcile"));
    until_posted(&server, 1).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(server.posted.load(Ordering::SeqCst), 1, "only the plugin's");
}
