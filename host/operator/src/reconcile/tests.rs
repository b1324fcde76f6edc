//! The write loop ([`write`]) against a mocked API server, as kube-rs tests
//! its clients: `tower_test::mock::pair` stands in for the API server, and
//! each test plays its side, checking every request the loop sends (method,
//! path, body) and answering with a status and JSON. No cluster, no Wasm
//! engine: the plan is built as `decide` would build it.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use prometheus_client::registry::Registry;
use tower_test::mock::{self, Handle};

use super::*;
use crate::fence::{budget, echoes, references, unchanged};
use crate::metrics::OperatorMetrics;
use kubeplug_core::manifest::{ApiResource, Mode};
use kubeplug_core::policy::Policy;
use kubeplug_kube::apply::metrics::ApplyMetrics;
use kubeplug_kube::identity::Access;
use kubeplug_kube::informers::View;
use kubeplug_kube::leader::Leadership;
use kubeplug_runtime::Request as PluginRequest;

/// The API server's side of the mock.
type ApiServer = Handle<Request<Body>, Response<Body>>;

const PARENT_UID: &str = "5f0c2d54-parent";

fn database() -> ApiResource {
    ApiResource::new("example.com", "v1", "Database", "databases", true)
}

fn services() -> ApiResource {
    ApiResource::new("", "v1", "Service", "services", true)
}

/// A composite plugin like `database`, whose children are Services.
fn manifest() -> Manifest {
    Manifest {
        children: vec![services()],
        ..Manifest::new("database", "0.1.0", database(), Mode::Composite)
    }
}

fn parent() -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {
            "name": "orders",
            "namespace": "shop",
            "uid": PARENT_UID,
            "resourceVersion": "41",
        },
        "spec": {"engine": "postgresql"},
    })
}

fn service() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "orders"},
        "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]},
    })
}

/// The Service `orders` as the API server holds it: `uid`, controlled by
/// the Database `(name, uid)`.
fn stored_service(uid: &str, (owner, owner_uid): (&str, &str)) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "orders", "namespace": "shop", "uid": uid, "resourceVersion": "9",
            "ownerReferences": [{
                "apiVersion": "example.com/v1", "kind": "Database", "name": owner,
                "uid": owner_uid, "controller": true,
            }],
        },
    })
}

/// The next request is the GET of the Service `orders`: answer `stored`.
async fn answer_get(server: &mut ApiServer, stored: Value) {
    let (sent, answer) = next(server).await;
    assert_eq!(
        (sent.method, sent.path.as_str()),
        (Method::GET, SERVICE_PATH)
    );
    reply(answer, StatusCode::OK, stored);
}

/// A plan creating the Service `orders`, as `decide` makes it for a parent
/// that controls no child yet, with `status` to write.
fn plan(status: Option<Value>) -> Plan {
    let prepared = plan::children(&manifest(), &parent(), &[service()]).expect("declared kind");
    Plan {
        answer: Default::default(),
        children: prepared
            .into_iter()
            .map(|child| plan::Step::new(services(), child, Action::Create))
            .collect(),
        prune: Vec::new(),
        status,
        parent_patch: None,
        requeue_after: Some(Duration::from_secs(30)),
    }
}

/// What the write loop writes with: a writer whose client is the mock, the
/// plugin's caches (empty) and its fence, and the registry its metrics are
/// counted in.
struct Loop {
    writer: Writer,
    sources: Sources,
    fence: Fence,
    registry: Registry,
}

impl Loop {
    fn new() -> (Loop, ApiServer) {
        Self::leading(Leadership::always())
    }

    /// The loop of a replica whose leadership of the plugin is `leadership`.
    fn leading(leadership: Leadership) -> (Loop, ApiServer) {
        let (service, server) = mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let manifest = manifest();
        let writer = Writer::new(
            client.clone(),
            &manifest.name,
            manifest.field_manager(),
            ApplyMetrics::default(),
            leadership,
        );
        let grant = Policy::default()
            .grant(&manifest.name)
            .expect("default grant");
        let (mut registry, mut standard) = (Registry::default(), Registry::default());
        let fence = Fence {
            events: budget::EventBudget::new(grant.quotas.events_per_parent_per_minute),
            last_calls: unchanged::LastCalls::new(&grant),
            echoes: echoes::Echoes::default(),
            references: references::Referrers::default(),
            grant: Arc::new(grant),
            access: Arc::new(Access::new(client, Default::default())),
            metrics: OperatorMetrics::register(&mut registry, &mut standard),
        };
        let sources = Sources {
            parent: View::new(database(), Vec::new()),
            children: vec![View::new(services(), Vec::new())],
            related: Vec::new(),
            referenced: Vec::new(),
        };
        let parts = Loop {
            writer,
            sources,
            fence,
            registry,
        };
        (parts, server)
    }

    /// Write `plan` for [`parent`], as the worker does after `decide`.
    async fn write(&self, plan: Plan) -> Result<Outcome, ReconcileError> {
        let object: DynamicObject = serde_json::from_value(parent()).unwrap();
        let parent_obj = Arc::new(Object::new(object));
        let request = PluginRequest::new(parent_obj.json().clone(), Vec::new(), Vec::new());
        let live = Live {
            inputs: Inputs {
                parent: parent(),
                observed: Vec::new(),
                request: Arc::new(request.clone()),
            },
            parent_obj,
            fingerprint: Fingerprint::of_request(&request),
            decided: Ok(plan),
        };
        let key = ObjectKey::new("shop", "orders");
        let (sources, fence) = (&self.sources, &self.fence);
        write(&manifest(), live, sources, &self.writer, fence, &key).await
    }

    /// The value of `kubeplug_child_clashes_total` for the plugin.
    fn clashes(&self) -> u64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text.lines()
            .find_map(|line| {
                let rest = line.strip_prefix("child_clashes_total{plugin=\"database\"} ")?;
                rest.parse().ok()
            })
            .unwrap_or(0)
    }
}

/// A request the loop sent.
struct Sent {
    method: Method,
    path: String,
    /// The query string, `""` if none.
    query: String,
    /// The JSON body, `Null` if none.
    body: Value,
}

type Answer = mock::SendResponse<Response<Body>>;

/// The next request the loop sends, with the handle to answer it.
async fn next(server: &mut ApiServer) -> (Sent, Answer) {
    let (request, answer) = tokio::time::timeout(Duration::from_secs(10), server.next_request())
        .await
        .expect("a request within 10 s")
        .expect("the client is alive");
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    let sent = Sent {
        method,
        path,
        query,
        body,
    };
    (sent, answer)
}

/// True if the loop sends nothing more within a moment.
async fn quiet(server: &mut ApiServer) -> bool {
    tokio::time::timeout(Duration::from_millis(300), server.next_request())
        .await
        .is_err()
}

fn reply(answer: Answer, status: StatusCode, body: Value) {
    let response = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    answer.send_response(response);
}

/// A `Status` the API server answers a refused request with.
fn refusal(code: u16, reason: &str, message: &str, details: Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    })
}

const SERVICE_PATH: &str = "/api/v1/namespaces/shop/services/orders";

/// Take the create of the Service: an apply that can only create, not
/// forced, under the plugin's field manager.
async fn expect_create(server: &mut ApiServer) -> Answer {
    let (sent, answer) = next(server).await;
    assert_eq!(
        (sent.method, sent.path.as_str()),
        (Method::PATCH, SERVICE_PATH)
    );
    let query = &sent.query;
    assert!(
        query.contains("fieldManager=kubeplug%2Fdatabase"),
        "{query}"
    );
    assert!(
        !query.contains("force=true"),
        "a create never forces: {query}"
    );
    let body = &sent.body;
    let meta = &body["metadata"];
    assert_eq!(meta["resourceVersion"], plan::NO_STORED_VERSION);
    assert_eq!(meta["namespace"], "shop");
    assert_eq!(meta["ownerReferences"][0]["uid"], PARENT_UID);
    assert_eq!(body["spec"], service()["spec"]);
    answer
}

#[tokio::test]
async fn a_child_whose_name_another_controller_holds_is_left_untouched_and_reported() {
    let (parts, mut server) = Loop::new();
    let writing = parts.write(plan(None));
    let api = async {
        let answer = expect_create(&mut server).await;
        let exists = refusal(
            409,
            "Conflict",
            "Operation cannot be fulfilled on services \"orders\": the object has been modified",
            json!({"name": "orders", "kind": "services"}),
        );
        reply(answer, StatusCode::CONFLICT, exists);

        let theirs = stored_service("theirs", ("billing", "another-parent"));
        answer_get(&mut server, theirs).await;
    };
    let (outcome, ()) = tokio::join!(writing, api);
    let outcome = outcome.expect("a clash does not fail the reconcile");
    assert_eq!(outcome.requeue_after, Some(Duration::from_secs(30)));

    // Reported: a Warning event on the parent (posted off the loop's path)
    // and the metric; nothing else is sent, so nothing is applied over it.
    let (sent, answer) = next(&mut server).await;
    let path = "/apis/events.k8s.io/v1/namespaces/shop/events";
    assert_eq!((sent.method, sent.path.as_str()), (Method::POST, path));
    let event = sent.body;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "ChildClash");
    assert_eq!(
        event["note"],
        "Service orders exists and is not controlled by this Database \
         (controller Database billing); kubeplug leaves it untouched"
    );
    assert_eq!(event["regarding"]["uid"], PARENT_UID);
    reply(answer, StatusCode::CREATED, event);
    assert!(
        quiet(&mut server).await,
        "nothing is written over the clash"
    );
    assert_eq!(parts.clashes(), 1);
}

#[tokio::test]
async fn a_child_this_parent_controls_but_the_cache_lacks_is_updated_guarded_by_its_uid() {
    let (parts, mut server) = Loop::new();
    let writing = parts.write(plan(None));
    let api = async {
        let answer = expect_create(&mut server).await;
        let exists = refusal(409, "Conflict", "the object has been modified", json!({}));
        reply(answer, StatusCode::CONFLICT, exists);

        let ours = stored_service("ours", ("orders", PARENT_UID));
        answer_get(&mut server, ours.clone()).await;

        let (sent, answer) = next(&mut server).await;
        assert_eq!(
            (sent.method, sent.path.as_str()),
            (Method::PATCH, SERVICE_PATH)
        );
        assert!(sent.query.contains("force=true"), "{}", sent.query);
        assert_eq!(sent.body["metadata"]["uid"], "ours");
        assert!(sent.body["metadata"].get("resourceVersion").is_none());
        reply(answer, StatusCode::OK, ours);
    };
    let (outcome, ()) = tokio::join!(writing, api);
    outcome.expect("written");
    assert!(quiet(&mut server).await);
    assert_eq!(parts.clashes(), 0);
}

/// Write a plan with a child and a status while the API server refuses the
/// child's create with `code` and `status`: the loop's result, and whether
/// it sent anything after the refusal.
async fn write_into_a_gone_namespace(code: StatusCode, status: Value) -> (Outcome, bool) {
    let (parts, mut server) = Loop::new();
    let writing = parts.write(plan(Some(json!({"phase": "Creating"}))));
    let api = async {
        let answer = expect_create(&mut server).await;
        reply(answer, code, status);
    };
    let (outcome, ()) = tokio::join!(writing, api);
    let outcome = outcome.expect("a gone namespace is no failure");
    let quiet = quiet(&mut server).await;
    assert_eq!(parts.clashes(), 0);
    (outcome, quiet)
}

#[tokio::test]
async fn a_child_refused_because_its_namespace_is_terminating_ends_the_reconcile_quietly() {
    let terminating = refusal(
        403,
        "Forbidden",
        "services \"orders\" is forbidden: unable to create new content in namespace shop \
         because it is being terminated",
        json!({
            "name": "orders",
            "kind": "services",
            "causes": [{
                "reason": "NamespaceTerminating",
                "message": "namespace shop is being terminated",
                "field": "metadata.namespace",
            }],
        }),
    );
    let (outcome, quiet) = write_into_a_gone_namespace(StatusCode::FORBIDDEN, terminating).await;
    // Nothing left to converge: no status written, no requeue, no error.
    assert!(quiet, "nothing is written after the refusal");
    assert_eq!(outcome.requeue_after, None);
    assert!(!outcome.skipped);
}

#[tokio::test]
async fn a_child_refused_because_its_namespace_is_gone_ends_the_reconcile_quietly() {
    let gone = refusal(
        404,
        "NotFound",
        "namespaces \"shop\" not found",
        json!({"name": "shop", "kind": "namespaces"}),
    );
    let (outcome, quiet) = write_into_a_gone_namespace(StatusCode::NOT_FOUND, gone).await;
    assert!(quiet, "nothing is written after the refusal");
    assert_eq!(outcome.requeue_after, None);
    assert!(!outcome.skipped);
}

#[tokio::test]
async fn a_child_refused_for_another_reason_fails_the_reconcile() {
    let forbidden = refusal(
        403,
        "Forbidden",
        "services \"orders\" is forbidden: User \"system:serviceaccount:kubeplug:database\" \
         cannot patch resource \"services\"",
        json!({"name": "orders", "kind": "services"}),
    );
    let (parts, mut server) = Loop::new();
    let writing = parts.write(plan(Some(json!({"phase": "Creating"}))));
    let api = async {
        let answer = expect_create(&mut server).await;
        reply(answer, StatusCode::FORBIDDEN, forbidden);
    };
    let (result, ()) = tokio::join!(writing, api);
    let error = result.expect_err("RBAC's refusal is an error, retried");
    assert!(matches!(&error, ReconcileError::Write(e) if !e.namespace_gone()));
    assert_eq!(error.to_string(), "failed to apply Service shop/orders");
    assert!(
        quiet(&mut server).await,
        "nothing is written after the refusal"
    );
}

#[tokio::test]
async fn a_status_write_refused_with_a_conflict_fails_the_reconcile_to_be_retried() {
    let (parts, mut server) = Loop::new();
    let mut plan = plan(Some(json!({"phase": "Ready"})));
    // The child is there already: only the status is written.
    plan.children.clear();
    let writing = parts.write(plan);
    let api = async {
        let (sent, answer) = next(&mut server).await;
        let path = "/apis/example.com/v1/namespaces/shop/databases/orders/status";
        assert_eq!((sent.method, sent.path.as_str()), (Method::PATCH, path));
        let query = &sent.query;
        assert!(
            query.contains("force=true"),
            "the status is the plugin's: {query}"
        );
        assert_eq!(
            sent.body,
            json!({
                "apiVersion": "example.com/v1",
                "kind": "Database",
                "metadata": {"name": "orders", "namespace": "shop"},
                "status": {"phase": "Ready"},
            })
        );
        let conflict = refusal(
            409,
            "Conflict",
            "Operation cannot be fulfilled on databases.example.com \"orders\": \
             the object has been modified; please apply your changes to the latest version",
            json!({"name": "orders", "group": "example.com", "kind": "databases"}),
        );
        reply(answer, StatusCode::CONFLICT, conflict);
    };
    let (result, ()) = tokio::join!(writing, api);
    let error = result.expect_err("a conflict on the status is retried");
    let ReconcileError::Write(write) = &error else {
        panic!("not a write error: {error:?}");
    };
    assert!(write.conflict());
    assert!(!write.not_leader() && !write.namespace_gone());
    assert_eq!(
        error.to_string(),
        "failed to write status of Database shop/orders"
    );
    assert_eq!((error.label(), error.reason()), ("write", "WriteFailed"));
    assert!(!error.plugin_fault(), "the API server's, not the plugin's");
    assert!(
        quiet(&mut server).await,
        "the parent is not patched after it"
    );
}

#[tokio::test]
async fn a_parent_patch_refused_with_a_conflict_waits_for_the_newer_version() {
    let (parts, mut server) = Loop::new();
    let mut plan = plan(None);
    plan.children.clear();
    plan.parent_patch = Some(json!({"metadata": {"labels": {"tier": "gold"}}}));
    let writing = parts.write(plan);
    let api = async {
        let (sent, answer) = next(&mut server).await;
        let path = "/apis/example.com/v1/namespaces/shop/databases/orders";
        assert_eq!((sent.method, sent.path.as_str()), (Method::PATCH, path));
        // A merge patch, guarded by the version the plugin saw.
        assert_eq!(
            sent.body,
            json!({"metadata": {"labels": {"tier": "gold"}, "resourceVersion": "41"}})
        );
        let conflict = refusal(
            409,
            "Conflict",
            "Operation cannot be fulfilled on databases.example.com \"orders\": \
             the object has been modified; please apply your changes to the latest version",
            json!({"name": "orders", "group": "example.com", "kind": "databases"}),
        );
        reply(answer, StatusCode::CONFLICT, conflict);
    };
    let (outcome, ()) = tokio::join!(writing, api);
    let outcome = outcome.expect("the newer version reconciles again");
    assert_eq!(outcome.requeue_after, None);
    assert!(quiet(&mut server).await);
}

#[tokio::test]
async fn a_create_only_child_that_exists_and_is_ours_is_never_applied_again() {
    let (parts, mut server) = Loop::new();
    let mut plan = plan(None);
    let step = &mut plan.children[0];
    step.child["metadata"]["annotations"][plan::CREATE_ONLY] = "true".into();
    *step = plan::Step::new(services(), step.child.clone(), Action::CreateOnce);
    let writing = parts.write(plan);
    let api = async {
        let (sent, answer) = next(&mut server).await;
        let collection = "/api/v1/namespaces/shop/services";
        assert_eq!(
            (sent.method, sent.path.as_str()),
            (Method::POST, collection)
        );
        assert!(sent.body["metadata"].get("resourceVersion").is_none());
        let exists = refusal(
            409,
            "AlreadyExists",
            "services \"orders\" already exists",
            json!({"name": "orders", "kind": "services"}),
        );
        reply(answer, StatusCode::CONFLICT, exists);

        let ours = stored_service("ours", ("orders", PARENT_UID));
        answer_get(&mut server, ours).await;
    };
    let (outcome, ()) = tokio::join!(writing, api);
    outcome.expect("already there is success");
    assert!(
        quiet(&mut server).await,
        "created once, never applied again"
    );
    assert_eq!(parts.clashes(), 0);
}

#[tokio::test]
async fn a_replica_that_does_not_lead_the_plugin_sends_nothing() {
    let (parts, mut server) = Loop::leading(Leadership::never());
    let error = parts
        .write(plan(Some(json!({"phase": "Creating"}))))
        .await
        .expect_err("not written");
    assert!(error.not_leader(), "{error:?}");
    assert!(quiet(&mut server).await);
}
