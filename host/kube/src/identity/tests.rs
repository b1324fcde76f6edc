//! The review cache against a fake API server (a tower service that counts
//! the SubjectAccessReviews it is sent and answers after a delay).

use super::*;
use http::{Request, Response, StatusCode};
use kube::client::Body;
use kubeplug_core::policy::Policy;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

/// Answers every review with `allowed`, or a 500 when `allowed` is `None`,
/// after `delay`.
#[derive(Clone)]
struct Reviewer {
    sent: Arc<AtomicUsize>,
    allowed: Option<bool>,
    delay: Duration,
}

impl tower::Service<Request<Body>> for Reviewer {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        assert!(
            request.uri().path().ends_with("/subjectaccessreviews"),
            "{}",
            request.uri()
        );
        self.sent.fetch_add(1, Ordering::SeqCst);
        let (allowed, delay) = (self.allowed, self.delay);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            let (status, body) = match allowed {
                Some(allowed) => (
                    StatusCode::CREATED,
                    serde_json::json!({
                        "apiVersion": "authorization.k8s.io/v1",
                        "kind": "SubjectAccessReview",
                        "spec": {},
                        "status": {"allowed": allowed},
                    }),
                ),
                None => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    serde_json::json!({
                        "apiVersion": "v1", "kind": "Status", "status": "Failure",
                        "message": "etcd is gone", "reason": "InternalError", "code": 500,
                    }),
                ),
            };
            Ok(Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap())
        })
    }
}

fn access(allowed: Option<bool>) -> (Arc<Access>, Arc<AtomicUsize>) {
    let sent = Arc::new(AtomicUsize::new(0));
    let reviewer = Reviewer {
        sent: sent.clone(),
        allowed,
        delay: Duration::from_millis(200),
    };
    let client = Client::new(reviewer, "default");
    (
        Arc::new(Access::new(client, metrics::AccessMetrics::default())),
        sent,
    )
}

fn grant() -> Effective {
    Policy::default().grant("database").unwrap()
}

fn pods() -> ApiResource {
    ApiResource::new("", "v1", "Pod", "pods", true)
}

/// `count` checks of one read, all started before any review is answered.
async fn together(
    access: &Arc<Access>,
    count: usize,
    namespace: &str,
) -> Vec<Result<(), AccessError>> {
    let checks = (0..count).map(|_| {
        let access = access.clone();
        let namespace = namespace.to_string();
        tokio::spawn(async move { access.check(&grant(), "list", &pods(), &namespace).await })
    });
    let mut results = Vec::new();
    for check in checks.collect::<Vec<_>>() {
        results.push(check.await.unwrap());
    }
    results
}

#[tokio::test(start_paused = true)]
async fn checks_of_one_read_that_arrive_together_share_one_review() {
    let (access, sent) = access(Some(true));
    let results = together(&access, 20, "team-a").await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(sent.load(Ordering::SeqCst), 1);

    // Cached from then on, for another namespace a review of its own.
    together(&access, 5, "team-a").await;
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    together(&access, 5, "team-b").await;
    assert_eq!(sent.load(Ordering::SeqCst), 2);

    // Asked again once the answer is older than its TTL.
    tokio::time::advance(ALLOWED_TTL).await;
    together(&access, 5, "team-a").await;
    assert_eq!(sent.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_shared_and_kept_for_a_short_while() {
    let (access, sent) = access(Some(false));
    let results = together(&access, 10, "team-a").await;
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    for result in results {
        let error = result.unwrap_err();
        assert!(matches!(error, AccessError::Denied { .. }), "{error}");
        assert!(
            error
                .to_string()
                .contains("may not list pods in namespace team-a"),
            "{error}"
        );
    }
    tokio::time::advance(DENIED_TTL).await;
    together(&access, 3, "team-a").await;
    assert_eq!(sent.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn checks_waiting_for_a_review_that_fails_get_its_error_and_the_next_one_asks_again() {
    let (access, sent) = access(None);
    let results = together(&access, 10, "team-a").await;
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "one review for the whole burst"
    );
    for result in results {
        let error = result.unwrap_err();
        assert!(matches!(error, AccessError::Review { .. }), "{error}");
    }
    // A failure is not an answer: a later check sends a review again.
    together(&access, 1, "team-a").await;
    assert_eq!(sent.load(Ordering::SeqCst), 2);
}
