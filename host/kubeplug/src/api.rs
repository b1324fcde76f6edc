//! The host's aggregated API, `kubeplug.io/v1alpha1`, registered with an
//! `APIService` so that users reach it with `kubectl` and the cluster's own
//! authentication and RBAC: `kubectl get plugins [-w]`, `kubectl get plugin
//! NAME -o yaml`, `kubectl explain plugins`.
//!
//! Served over TLS on its own listener (`--api-listen`). Every connection
//! must present a client certificate from the front proxy (kube-apiserver's
//! aggregation layer), so a direct request is refused in the handshake; the
//! proxy's headers name the user ([`requestheader`]), and a
//! SubjectAccessReview decides what they may do ([`authorize`]).
//!
//! No generic Rust API-server library fits: kube-rs is a client, and the
//! crates that serve Kubernetes-style APIs target CRD-like storage, not a
//! read-only view of process state. hyper and rustls (both already in the
//! tree through kube) carry it. What is served is typed: discovery, Status
//! errors and watch events are k8s-openapi's types; `Plugin` and `Preview`
//! are ours ([`plugin`]), and the OpenAPI documents are generated from them
//! ([`openapi`]). The Table, watch framing and delegated auth are small and
//! here.

mod authorize;
pub(crate) mod der;
#[cfg(test)]
mod fixtures;
pub mod limits;
mod openapi;
mod plugin;
mod previews;
pub(crate) mod requestheader;
mod resources;
mod selectors;
mod table;
pub mod tracker;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusDetails;
use serde::Serialize;
use tracing::Instrument as _;

use authorize::{Attributes, Authorizer};
use requestheader::{RequestHeader, UserInfo};
use selectors::Selector;
pub use tracker::Tracker;

pub const GROUP: &str = "kubeplug.io";
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, as the group's objects carry it.
pub const API_VERSION: &str = "kubeplug.io/v1alpha1";

/// How the API is served.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    pub listen: SocketAddr,
    /// The serving certificate (chain) and key; reloaded on change.
    pub cert: crate::tls::CertSource,
    /// What one user, and everyone, may ask of previews.
    pub previews: limits::PreviewLimits,
}

/// How often the serving certificate and the front proxy's settings are
/// re-read (both rotate).
const RELOAD: Duration = Duration::from_secs(60);

/// What a request needs: the TLS settings of the moment, who may ask, and
/// the plugins' objects.
struct Server {
    tls: RwLock<Arc<tokio_rustls::TlsAcceptor>>,
    front_proxy: RwLock<Arc<RequestHeader>>,
    authorizer: Authorizer,
    tracker: Arc<Tracker>,
    registry: Arc<kubeplug_operator::registry::Registry>,
    previews: Arc<limits::Limiter>,
}

/// Largest preview body read: a parent object (etcd's default request
/// limit, and so the largest object, is 1.5 MiB) and a little more. A
/// longer `Content-Length` is refused before anything is read.
const MAX_BODY: usize = 2 << 20;

/// The subresource of `plugins` whose `get` shows a plugin's error texts and
/// shadow examples (which may quote cluster data a plugin was handed).
pub const DETAILS: &str = "details";

type Body = BoxBody<Bytes, std::convert::Infallible>;

/// Serve until the task is dropped. Fails at once if the certificate or the
/// front proxy's settings cannot be read.
pub async fn serve(
    settings: ApiSettings,
    client: kube::Client,
    tracker: Arc<Tracker>,
    registry: Arc<kubeplug_operator::registry::Registry>,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let front_proxy = RequestHeader::load(&client)
        .await
        .map_err(anyhow::Error::msg)
        .context("the aggregated API needs the front proxy's settings")?;
    let tls = acceptor(&settings, &front_proxy)?;
    let server = Arc::new(Server {
        tls: RwLock::new(Arc::new(tls)),
        front_proxy: RwLock::new(Arc::new(front_proxy)),
        authorizer: Authorizer::new(client.clone()),
        tracker,
        registry,
        previews: limits::Limiter::new(settings.previews.clone()),
    });
    tokio::spawn(reload(server.clone(), settings.clone(), client));
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    tracing::info!(addr = %settings.listen, group = GROUP, "serving the aggregated API");
    loop {
        let (stream, peer) = crate::admin::accept(&listener).await;
        let server = server.clone();
        tokio::spawn(async move {
            let tls = server.tls.read().expect("tls lock").clone();
            // Refused most often for want of the front proxy's client
            // certificate.
            let Some(stream) = crate::tls::handshake(&tls, stream, peer, "API").await else {
                return;
            };
            // The leaf's one subject CN, as kube-apiserver judges it.
            let proxy_name: Option<String> = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| der::subject_common_name(c));
            let service = hyper::service::service_fn(move |req| {
                let (server, proxy_name) = (server.clone(), proxy_name.clone());
                // A trace of its own (until the answer's head is sent); at
                // debug level, as the log has no use for it.
                let span = tracing::debug_span!(
                    "api",
                    method = %req.method(),
                    path = req.uri().path(),
                );
                async move {
                    Ok::<_, std::convert::Infallible>(
                        server.handle(proxy_name.as_deref(), req).await,
                    )
                }
                .instrument(span)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// TLS that requires a client certificate signed by the front proxy's CA.
fn acceptor(
    settings: &ApiSettings,
    front_proxy: &RequestHeader,
) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use anyhow::Context as _;
    let provider = crate::tls::provider();
    let (certs, key) = settings.cert.load("API")?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in &front_proxy.client_ca {
        roots
            .add(ca.clone())
            .context("invalid requestheader client CA")?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .context("cannot verify front-proxy client certificates")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .context("the API certificate and key do not match")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Re-read the certificate and the front proxy's settings now and then; a
/// failed read keeps the previous ones.
async fn reload(server: Arc<Server>, settings: ApiSettings, client: kube::Client) {
    let mut cert = settings.cert.clone();
    loop {
        cert.reload_due(RELOAD).await;
        let front_proxy = match RequestHeader::load(&client).await {
            Ok(front_proxy) => front_proxy,
            Err(error) => {
                tracing::warn!(%error, "front proxy settings unreadable; keeping the previous ones");
                continue;
            }
        };
        match acceptor(&settings, &front_proxy) {
            Ok(tls) => {
                *server.tls.write().expect("tls lock") = Arc::new(tls);
                *server.front_proxy.write().expect("front proxy lock") = Arc::new(front_proxy);
            }
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "API certificate unreadable; keeping the previous one")
            }
        }
    }
}

fn json_response(code: StatusCode, body: &impl Serialize) -> Response<Body> {
    let (code, body) = match serde_json::to_vec(body) {
        Ok(body) => (code, Bytes::from(body)),
        Err(error) => {
            // Only a bug gets here: every type served serializes.
            tracing::error!(%error, "cannot serialize an API response");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Bytes::from_static(UNSERIALIZABLE),
            )
        }
    };
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(body).boxed())
        .expect("static response parts are valid")
}

/// The answer when an answer cannot be serialized.
const UNSERIALIZABLE: &[u8] = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the response could not be serialized","reason":"InternalError","code":500}"#;

fn failure(code: StatusCode, reason: &str, message: String) -> Response<Body> {
    json_response(code, &resources::failure(code, reason, message, None))
}

/// A failure about one object (or collection), named in `details`.
fn failure_about(
    code: StatusCode,
    reason: &str,
    message: String,
    details: StatusDetails,
) -> Response<Body> {
    json_response(
        code,
        &resources::failure(code, reason, message, Some(details)),
    )
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Health,
    Discovery(Discovery),
    List {
        watch: bool,
    },
    Get(String),
    /// `GET .../plugins/<name>/details`: the whole object, for callers who
    /// may `get` `plugins/details`.
    Details(String),
    /// `POST .../namespaces/<ns>/previews`.
    Preview {
        namespace: String,
    },
}

#[derive(Debug, PartialEq, Eq)]
enum Discovery {
    Groups,
    Group,
    Resources,
    OpenApiIndex,
    OpenApi,
    OpenApiV2,
}

fn route(path: &str, query: &str) -> Option<Route> {
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let base = format!("/apis/{GROUP}/{VERSION}");
    Some(match path.trim_end_matches('/') {
        "/healthz" | "/livez" | "/readyz" => Route::Health,
        "/apis" => Route::Discovery(Discovery::Groups),
        "/openapi/v3" => Route::Discovery(Discovery::OpenApiIndex),
        "/openapi/v2" => Route::Discovery(Discovery::OpenApiV2),
        p if p == format!("/apis/{GROUP}") => Route::Discovery(Discovery::Group),
        p if p == base => Route::Discovery(Discovery::Resources),
        p if p == format!("/openapi/v3/apis/{GROUP}/{VERSION}") => {
            Route::Discovery(Discovery::OpenApi)
        }
        p if p.starts_with(&format!("{base}/namespaces/")) => {
            let rest = p.strip_prefix(&format!("{base}/namespaces/"))?;
            let (namespace, resource) = rest.split_once('/')?;
            (resource == "previews" && !namespace.is_empty()).then_some(())?;
            Route::Preview {
                namespace: namespace.into(),
            }
        }
        p => {
            let rest = p.strip_prefix(&base)?.strip_prefix("/plugins")?;
            match rest.strip_prefix('/') {
                None if rest.is_empty() => Route::List { watch },
                Some(name) if !name.is_empty() && !name.contains('/') => Route::Get(name.into()),
                Some(path) => match path.split_once('/') {
                    Some((name, DETAILS)) if !name.is_empty() => Route::Details(name.into()),
                    _ => return None,
                },
                _ => return None,
            }
        }
    })
}

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

impl Server {
    async fn handle(
        &self,
        proxy_name: Option<&str>,
        req: Request<hyper::body::Incoming>,
    ) -> Response<Body> {
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let front_proxy = self.front_proxy.read().expect("front proxy lock").clone();
        let user = match front_proxy.user(proxy_name, req.headers()) {
            Ok(user) => user,
            Err(why) => return failure(StatusCode::UNAUTHORIZED, "Unauthorized", why),
        };
        let Some(route) = route(&path, &query) else {
            return failure(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("the server could not find the requested resource ({path})"),
            );
        };
        let method_ok = match route {
            Route::Preview { .. } => req.method() == Method::POST,
            _ => req.method() == Method::GET,
        };
        if !method_ok {
            return failure(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                format!(
                    "{} is not supported here: plugins are read-only (ship a file to change one), previews are only created",
                    req.method()
                ),
            );
        }
        let attributes = match &route {
            // Discovery is public in every cluster (RBAC's system:discovery
            // and system:public-info-viewer), and the aggregator asks for it
            // as `system:kube-aggregator` with no groups, which a
            // SubjectAccessReview would refuse.
            Route::Health | Route::Discovery(_) => None,
            Route::Preview { namespace } => Some(Attributes {
                group: GROUP.into(),
                verb: "create".into(),
                resource: previews::RESOURCE.into(),
                subresource: None,
                namespace: Some(namespace.clone()),
                name: None,
            }),
            Route::List { watch } => Some(Attributes {
                group: GROUP.into(),
                verb: if *watch { "watch" } else { "list" }.into(),
                resource: plugin::RESOURCE.into(),
                subresource: None,
                namespace: None,
                name: None,
            }),
            Route::Get(name) => Some(Attributes {
                group: GROUP.into(),
                verb: "get".into(),
                resource: plugin::RESOURCE.into(),
                subresource: None,
                namespace: None,
                name: Some(name.clone()),
            }),
            Route::Details(name) => Some(details_attributes(Some(name.as_str()))),
        };
        // A preview costs reviews, perhaps a compile and a plugin call: the
        // caller's limits come first, then the size of what it sends, before
        // any of it is paid for.
        let _preview_permit = match &route {
            Route::Preview { .. } => match self.previews.admit(&user.name) {
                Ok(permit) => Some(permit),
                Err(refused) => return too_many(&refused),
            },
            _ => None,
        };
        if matches!(route, Route::Preview { .. })
            && req
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
                .is_some_and(|n| n > MAX_BODY)
        {
            return failure(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                format!("a preview is at most {MAX_BODY} bytes"),
            );
        }
        if let Some(attributes) = attributes {
            match self.authorizer.allowed(&user, &attributes).await {
                Ok(true) => {}
                Ok(false) => return forbidden(&user, &attributes),
                Err(error) => {
                    tracing::warn!(%error, "cannot authorize an API request");
                    return failure(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", error);
                }
            }
        }
        // What a list or watch selects, once the caller may list at all (as
        // kube-apiserver, which authorizes before it reads the request).
        let selector = match &route {
            Route::List { .. } => match Selector::from_query(Some(&query)) {
                Ok(selector) => selector,
                Err(invalid) => {
                    return failure(StatusCode::BAD_REQUEST, "BadRequest", invalid.to_string());
                }
            },
            _ => Selector::default(),
        };
        // Error texts and shadow examples only for who may see them.
        let details = match &route {
            Route::Get(name) => Some(Some(name.as_str())),
            Route::List { .. } => Some(None),
            _ => None,
        };
        let redact = match details {
            None => false,
            Some(name) => match self
                .authorizer
                .allowed(&user, &details_attributes(name))
                .await
            {
                Ok(allowed) => !allowed,
                Err(error) => {
                    tracing::warn!(%error, "cannot authorize an API request");
                    return failure(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", error);
                }
            },
        };
        let table = req
            .headers()
            .get_all("accept")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains("as=Table"));
        match route {
            Route::Preview { namespace } => {
                let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY)
                    .collect()
                    .await
                {
                    Ok(body) => body.to_bytes(),
                    Err(error) => {
                        return failure(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "RequestEntityTooLarge",
                            format!("the preview could not be read: {error}"),
                        );
                    }
                };
                self.preview(&user, &namespace, &body).await
            }
            Route::Health => json_response(StatusCode::OK, &"ok"),
            Route::Discovery(which) => match which {
                Discovery::Groups => json_response(StatusCode::OK, &resources::group_list()),
                Discovery::Group => json_response(StatusCode::OK, &resources::group()),
                Discovery::Resources => json_response(StatusCode::OK, &resources::resource_list()),
                Discovery::OpenApiIndex => json_response(StatusCode::OK, &openapi::index()),
                Discovery::OpenApi => json_response(StatusCode::OK, openapi::v3()),
                Discovery::OpenApiV2 => json_response(StatusCode::OK, openapi::v2()),
            },
            Route::Get(name) | Route::Details(name) => match self
                .tracker
                .get(&name)
                .map(|o| if redact { o.redacted() } else { o })
            {
                Some(object) if table => json_response(
                    StatusCode::OK,
                    &table::table(std::slice::from_ref(&object), self.tracker.version()),
                ),
                Some(object) => json_response(StatusCode::OK, &object),
                None => failure_about(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!("plugins.{GROUP} \"{name}\" not found"),
                    resources::about(GROUP, plugin::RESOURCE, Some(&name)),
                ),
            },
            Route::List { watch: false } => {
                let (mut objects, version) = self.tracker.list();
                objects.retain(|o| selector.matches(&o.metadata));
                if redact {
                    objects = objects.into_iter().map(plugin::Plugin::redacted).collect();
                }
                if table {
                    json_response(StatusCode::OK, &table::table(&objects, version))
                } else {
                    json_response(StatusCode::OK, &plugin::PluginList::new(objects, version))
                }
            }
            Route::List { watch: true } => {
                let since = query_param(&query, "resourceVersion")
                    .and_then(|v| v.parse::<u64>().ok())
                    .filter(|v| *v > 0);
                let timeout = query_param(&query, "timeoutSeconds")
                    .and_then(|v| v.parse::<u64>().ok())
                    .map(Duration::from_secs)
                    .unwrap_or(Duration::from_secs(1800));
                self.tracker.watch(since, timeout, table, redact, selector)
            }
        }
    }
}

/// `get` on `plugins/details` (of one plugin, or of all).
fn details_attributes(name: Option<&str>) -> Attributes {
    Attributes {
        group: GROUP.into(),
        verb: "get".into(),
        resource: plugin::RESOURCE.into(),
        subresource: Some(DETAILS.into()),
        namespace: None,
        name: name.map(String::from),
    }
}

/// 429 with `Retry-After`, as kube-apiserver's flow control answers.
fn too_many(refused: &limits::Refused) -> Response<Body> {
    let seconds = refused.retry_after.as_secs().max(1);
    let mut response = failure_about(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        format!("too many previews: {}", refused.why),
        StatusDetails {
            retry_after_seconds: Some(i32::try_from(seconds).unwrap_or(i32::MAX)),
            ..StatusDetails::default()
        },
    );
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
    response
}

/// The 403 kube-apiserver would give, naming the user and what they lack.
fn forbidden(user: &UserInfo, attributes: &Attributes) -> Response<Body> {
    let Attributes {
        group,
        verb,
        resource,
        subresource,
        namespace,
        name,
    } = attributes;
    // kube-apiserver names the resource in the details, the subresource in
    // the message.
    let details = resources::about(group, resource, name.as_deref());
    let resource = match subresource {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.clone(),
    };
    let what = if group.is_empty() {
        resource.clone()
    } else {
        format!("{resource}.{group}")
    };
    let scope = match namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".into(),
    };
    let message = format!(
        "{what}{} is forbidden: User \"{}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}",
        name.as_deref()
            .map(|n| format!(" \"{n}\""))
            .unwrap_or_default(),
        user.name,
    );
    failure_about(StatusCode::FORBIDDEN, "Forbidden", message, details)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_version_is_the_group_and_version() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }

    #[test]
    fn routes() {
        let base = "/apis/kubeplug.io/v1alpha1";
        assert_eq!(
            route(base, ""),
            Some(Route::Discovery(Discovery::Resources))
        );
        assert_eq!(
            route(&format!("{base}/plugins"), ""),
            Some(Route::List { watch: false })
        );
        assert_eq!(
            route(&format!("{base}/plugins"), "watch=true&resourceVersion=3"),
            Some(Route::List { watch: true })
        );
        assert_eq!(
            route(&format!("{base}/plugins/database"), ""),
            Some(Route::Get("database".into()))
        );
        assert_eq!(route(&format!("{base}/plugins/a/b"), ""), None);
        assert_eq!(
            route(&format!("{base}/plugins/a/details"), ""),
            Some(Route::Details("a".into()))
        );
        assert_eq!(route(&format!("{base}/plugins//details"), ""), None);
        assert_eq!(route(&format!("{base}/other"), ""), None);
        assert_eq!(
            route(&format!("{base}/namespaces/team-a/previews"), ""),
            Some(Route::Preview {
                namespace: "team-a".into()
            })
        );
        assert_eq!(
            route(&format!("{base}/namespaces/team-a/plugins"), ""),
            None
        );
        assert_eq!(route(&format!("{base}/namespaces//previews"), ""), None);
        assert_eq!(route("/apis/other.io/v1", ""), None);
        assert_eq!(
            route("/apis", ""),
            Some(Route::Discovery(Discovery::Groups))
        );
        assert_eq!(
            query_param("a=1&resourceVersion=12", "resourceVersion"),
            Some("12")
        );
    }
}
