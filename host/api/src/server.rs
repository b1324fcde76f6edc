//! The listener and what it does with a request: who asks (the front
//! proxy's headers), what for ([`crate::route`]), whether they may
//! (limits, a SubjectAccessReview), and the answer from the tracker or a
//! preview run (`server/preview.rs`).

mod preview;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use parking_lot::RwLock;
use tracing::Instrument as _;

use crate::authorize::{Attributes, Authorizer};
use crate::der;
use crate::group::{DETAILS, GROUP};
use crate::limits;
use crate::openapi;
use crate::plugin;
use crate::previews;
use crate::requestheader::{RequestHeader, UserInfo};
use crate::resources;
use crate::responses::{Body, failure, failure_about, forbidden, json_response, too_many};
use crate::route::{Discovery, Route, query_param, route};
use crate::selectors::Selector;
use crate::table;
use crate::tracker::Tracker;

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

/// Why the aggregated API could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// kube-system's `extension-apiserver-authentication` is unreadable.
    #[error("the aggregated API needs the front proxy's settings: {0}")]
    FrontProxy(crate::requestheader::FrontProxyError),
    /// The serving certificate or the front proxy's CA is unusable.
    #[error(transparent)]
    Tls(#[from] AcceptorError),
    /// The listen address is taken or not ours.
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Why the listener's TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AcceptorError {
    /// The serving certificate or key could not be read.
    #[error(transparent)]
    Cert(#[from] crate::tls::TlsError),
    /// A CA of the front proxy's that rustls refuses.
    #[error("invalid requestheader client CA")]
    ClientCa(#[source] rustls::Error),
    /// No verifier of client certificates could be made of those CAs.
    #[error("cannot verify front-proxy client certificates")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    /// The provider offers none of the protocol versions asked for.
    #[error("TLS versions")]
    Versions(#[source] rustls::Error),
    /// The certificate and the key are not a pair.
    #[error("the API certificate and key do not match")]
    KeyMismatch(#[source] rustls::Error),
}

/// Serve until the task is dropped. Fails at once if the certificate or the
/// front proxy's settings cannot be read.
pub async fn serve(
    settings: ApiSettings,
    client: kube::Client,
    tracker: Arc<Tracker>,
    registry: Arc<kubeplug_operator::registry::Registry>,
) -> Result<(), ServeError> {
    let front_proxy = RequestHeader::load(&client)
        .await
        .map_err(ServeError::FrontProxy)?;
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
        .map_err(|source| ServeError::Listen {
            addr: settings.listen,
            source,
        })?;
    tracing::info!(addr = %settings.listen, group = GROUP, "serving the aggregated API");
    loop {
        let (stream, peer) = crate::tls::accept(&listener).await;
        let server = server.clone();
        tokio::spawn(async move {
            let tls = server.tls.read().clone();
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
) -> Result<tokio_rustls::TlsAcceptor, AcceptorError> {
    let provider = crate::tls::provider();
    let (certs, key) = settings.cert.load("API")?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in &front_proxy.client_ca {
        roots.add(ca.clone()).map_err(AcceptorError::ClientCa)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(AcceptorError::Verifier)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(AcceptorError::Versions)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(AcceptorError::KeyMismatch)?;
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
                *server.tls.write() = Arc::new(tls);
                *server.front_proxy.write() = Arc::new(front_proxy);
            }
            Err(error) => {
                let error = kubeplug_core::report::format_chain(&error);
                tracing::warn!(%error, "API certificate unreadable; keeping the previous one")
            }
        }
    }
}

impl Server {
    async fn handle(
        &self,
        proxy_name: Option<&str>,
        req: Request<hyper::body::Incoming>,
    ) -> Response<Body> {
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let front_proxy = self.front_proxy.read().clone();
        let user = match front_proxy.user(proxy_name, req.headers()) {
            Ok(user) => user,
            Err(why) => return failure(StatusCode::UNAUTHORIZED, "Unauthorized", why.to_string()),
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
        // Held until the answer is sent.
        let _preview_permit = match self.admit(&user, &route, req.headers()).await {
            Ok(permit) => permit,
            Err(refused) => return refused,
        };
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
            Route::Discovery(which) => discovery(which),
            Route::Get(name) => self.get(&user, &name, false, wants_table(&req)).await,
            Route::Details(name) => self.get(&user, &name, true, wants_table(&req)).await,
            Route::List { watch } => self.list(&user, watch, &query, wants_table(&req)).await,
        }
    }

    /// What comes before a request is read: the caller's preview limits,
    /// the size of what it sends, and a SubjectAccessReview. `Ok` holds the
    /// preview's permit, if it is one; `Err` the refusal.
    async fn admit(
        &self,
        user: &UserInfo,
        route: &Route,
        headers: &http::HeaderMap,
    ) -> Result<Option<limits::Permit>, Response<Body>> {
        // A preview costs reviews, perhaps a compile and a plugin call: the
        // caller's limits come first, then the size of what it sends, before
        // any of it is paid for.
        let permit = match route {
            Route::Preview { .. } => match self.previews.admit(&user.name) {
                Ok(permit) => Some(permit),
                Err(refused) => return Err(too_many(&refused)),
            },
            _ => None,
        };
        if matches!(route, Route::Preview { .. })
            && headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
                .is_some_and(|n| n > MAX_BODY)
        {
            return Err(failure(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                format!("a preview is at most {MAX_BODY} bytes"),
            ));
        }
        if let Some(attributes) = attributes(route) {
            match self.authorizer.allowed(user, &attributes).await {
                Ok(true) => {}
                Ok(false) => return Err(forbidden(user, &attributes)),
                Err(error) => {
                    tracing::warn!(%error, "cannot authorize an API request");
                    return Err(failure(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "InternalError",
                        error.to_string(),
                    ));
                }
            }
        }
        Ok(permit)
    }

    /// Whether error texts and shadow examples are withheld from `user`
    /// (of the plugin `name`, or of all): they are shown only to who may
    /// `get` `plugins/details`.
    async fn redact(&self, user: &UserInfo, name: Option<&str>) -> Result<bool, Response<Body>> {
        match self
            .authorizer
            .allowed(user, &details_attributes(name))
            .await
        {
            Ok(allowed) => Ok(!allowed),
            Err(error) => {
                tracing::warn!(%error, "cannot authorize an API request");
                Err(failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    error.to_string(),
                ))
            }
        }
    }

    /// `get` of one plugin; `details` when the caller asked for (and may
    /// see) the whole object, so nothing is withheld.
    async fn get(&self, user: &UserInfo, name: &str, details: bool, table: bool) -> Response<Body> {
        let redact = if details {
            false
        } else {
            match self.redact(user, Some(name)).await {
                Ok(redact) => redact,
                Err(refused) => return refused,
            }
        };
        match self
            .tracker
            .get(name)
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
                resources::about(GROUP, plugin::RESOURCE, Some(name)),
            ),
        }
    }

    /// `list` or `watch` of `plugins`, as the query selects.
    async fn list(&self, user: &UserInfo, watch: bool, query: &str, table: bool) -> Response<Body> {
        // What a list or watch selects, once the caller may list at all (as
        // kube-apiserver, which authorizes before it reads the request).
        let selector = match Selector::from_query(Some(query)) {
            Ok(selector) => selector,
            Err(invalid) => {
                return failure(StatusCode::BAD_REQUEST, "BadRequest", invalid.to_string());
            }
        };
        let redact = match self.redact(user, None).await {
            Ok(redact) => redact,
            Err(refused) => return refused,
        };
        if watch {
            let since = query_param(query, "resourceVersion")
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|v| *v > 0);
            let timeout = query_param(query, "timeoutSeconds")
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(Duration::from_secs(1800));
            return self.tracker.watch(since, timeout, table, redact, selector);
        }
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
}

/// Whether the caller asked for a Table (`kubectl get`).
fn wants_table<B>(req: &Request<B>) -> bool {
    req.headers()
        .get_all("accept")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=Table"))
}

/// Discovery and the OpenAPI documents, public to every caller.
fn discovery(which: Discovery) -> Response<Body> {
    match which {
        Discovery::Groups => json_response(StatusCode::OK, &resources::group_list()),
        Discovery::Group => json_response(StatusCode::OK, &resources::group()),
        Discovery::Resources => json_response(StatusCode::OK, &resources::resource_list()),
        Discovery::OpenApiIndex => json_response(StatusCode::OK, &openapi::index()),
        Discovery::OpenApi => json_response(StatusCode::OK, openapi::v3()),
        Discovery::OpenApiV2 => json_response(StatusCode::OK, openapi::v2()),
    }
}

/// What a route asks RBAC for; `None` for what every caller may read.
fn attributes(route: &Route) -> Option<Attributes> {
    match route {
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
