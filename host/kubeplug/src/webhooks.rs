//! The webhooks' HTTPS listener (`--webhook-listen`): the API server posts
//! AdmissionReviews to `/validate/<plugin>` and `/mutate/<plugin>` and
//! ConversionReviews to `/convert/<plugin>`, as the platform's webhook
//! configurations and CRD name them; [`kubeplug_operator::webhooks`]
//! answers. Like controller-runtime's webhook server: TLS with a serving
//! certificate the API server trusts (the configurations' `caBundle`),
//! every replica serving (leadership is about writes; a review writes
//! nothing). With `--webhook-client-ca`, an AdmissionReview must come with
//! a client certificate of that CA (the one the platform gives the API
//! server for admission webhooks) or is refused unread; the API server
//! sends no certificate to conversion webhooks (kubernetes#131810), so a
//! ConversionReview is not asked for one. Whoever else reaches the port may
//! post conversions (and, without a client CA, admissions): a review's body
//! is read only for a plugin serving that webhook, within
//! [`webhooks::ReviewLimits`] (how many at once, the memory they hold).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use parking_lot::{Mutex, RwLock};

use kubeplug_core::webhook::Webhook;
use kubeplug_operator::metrics::OperatorMetrics;
use kubeplug_operator::registry::Registry;
use kubeplug_operator::webhooks::{self, ReviewLimits, Reviews};
use kubeplug_runtime::MemoryBudget;

/// How the webhooks are served.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    pub listen: SocketAddr,
    /// The serving certificate (chain) and key; reloaded on change.
    pub cert: kubeplug_api::tls::CertSource,
    /// PEM CA of the API server's admission client certificate; re-read
    /// with the serving certificate.
    pub client_ca: Option<PathBuf>,
    /// The common names that certificate may have (empty: any).
    pub client_names: Vec<String>,
}

/// How often the serving certificate is re-read.
const RELOAD: Duration = Duration::from_secs(60);

/// A connection's first review that comes later than this after its
/// handshake was parked by the client: its time runs from its arrival.
const PARKED: Duration = Duration::from_secs(1);

struct Server {
    tls: RwLock<Arc<tokio_rustls::TlsAcceptor>>,
    reviews: Arc<Reviews>,
    /// `--webhook-client-ca` is set: admission reviews need a certificate.
    admission_needs_cert: bool,
    /// `--webhook-client-name`: the names that certificate may have.
    client_names: Vec<String>,
}

/// Who is on the other end of a connection, as its handshake showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// Presented a certificate of the client CA (only asked with one) with
    /// one of the allowed names.
    Certified,
    Anonymous,
}

impl Client {
    /// The holder of `leaf` (verified against the client CA), if its
    /// common name is one of `names` (or `names` is empty).
    fn of(leaf: &[u8], names: &[String]) -> Client {
        let named = names.is_empty()
            || kubeplug_api::der::subject_common_name(leaf).is_some_and(|cn| names.contains(&cn));
        if named {
            Client::Certified
        } else {
            Client::Anonymous
        }
    }
}

fn acceptor(settings: &WebhookSettings) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    let (certs, key) = settings.cert.load("webhook")?;
    let builder = rustls::ServerConfig::builder_with_provider(kubeplug_api::tls::provider())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        // Asked, verified when given, not required at the handshake: a
        // conversion comes without one (see `Server::handle`).
        Some(ca) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(kubeplug_api::tls::roots(ca, "webhook client CA")?),
                kubeplug_api::tls::provider(),
            )
            .allow_unauthenticated()
            .build()
            .context("the webhook client CA")?,
        ),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .context("the webhook certificate and key do not match")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serve until the task is dropped. Fails at once if the certificate cannot
/// be read or the address taken.
pub async fn serve(
    settings: WebhookSettings,
    registry: Arc<Registry>,
    metrics: OperatorMetrics,
    budget: Arc<MemoryBudget>,
) -> anyhow::Result<()> {
    let server = Arc::new(Server {
        tls: RwLock::new(Arc::new(acceptor(&settings)?)),
        admission_needs_cert: settings.client_ca.is_some(),
        client_names: settings.client_names.clone(),
        reviews: Arc::new(Reviews {
            registry,
            metrics,
            limits: ReviewLimits::new(budget),
        }),
    });
    tokio::spawn(reload(server.clone(), settings.clone()));
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    tracing::info!(addr = %settings.listen, admission_client_ca = ?settings.client_ca, "serving admission and conversion webhooks");
    loop {
        let (stream, peer) = kubeplug_api::tls::accept(&listener).await;
        let accepted = std::time::Instant::now();
        let server = server.clone();
        tokio::spawn(async move {
            let tls = server.tls.read().clone();
            let Some(stream) = kubeplug_api::tls::handshake(&tls, stream, peer, "webhook").await
            else {
                return;
            };
            // Verified by the handshake when present; named as allowed?
            let client = match stream.get_ref().1.peer_certificates() {
                Some([leaf, ..]) => Client::of(leaf, &server.client_names),
                _ => Client::Anonymous,
            };
            // The first review's time runs from the accept (the API server's
            // from its dial, so a slow handshake counts), unless it came
            // long after (a connection the client dialled and parked idle);
            // a later one's on this connection from its own arrival.
            let handshaken = std::time::Instant::now();
            let first = Arc::new(Mutex::new(Some(accepted)));
            let service = hyper::service::service_fn(move |req| {
                let server = server.clone();
                let arrived = first
                    .lock()
                    .take()
                    .filter(|_| handshaken.elapsed() < PARKED)
                    .unwrap_or_else(std::time::Instant::now);
                async move {
                    Ok::<_, std::convert::Infallible>(server.handle(req, client, arrived).await)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn reload(server: Arc<Server>, settings: WebhookSettings) {
    let mut cert = settings.cert.clone();
    loop {
        cert.reload_due(RELOAD).await;
        match acceptor(&settings) {
            Ok(tls) => *server.tls.write() = Arc::new(tls),
            Err(error) => tracing::warn!(
                error = %format!("{error:#}"),
                "webhook certificate unreadable; keeping the previous one"
            ),
        }
    }
}

fn json(status: u16, body: &serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())).into())
        .expect("a valid response")
}

fn refuse(status: u16, message: String) -> Response<Body> {
    json(
        status,
        &serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": status, "message": message}),
    )
}

/// An admission review from a client without the API server's certificate,
/// when the host knows its CA (`needs_cert`): refused before anything else
/// (the body is never read). Conversions are not asked: the API server
/// sends them no certificate.
fn unauthenticated(needs_cert: bool, webhook: Webhook, client: Client) -> Option<Response<Body>> {
    let asked = needs_cert && webhook != Webhook::Convert;
    (asked && client == Client::Anonymous).then(|| {
        refuse(
            401,
            format!(
                "{} reviews are answered only for the API server: present its webhook client certificate (--webhook-client-ca, --webhook-client-name)",
                webhook.as_str()
            ),
        )
    })
}

/// `/<webhook>/<plugin>`.
fn route(path: &str) -> Option<(Webhook, &str)> {
    let (webhook, plugin) = path.strip_prefix('/')?.split_once('/')?;
    let valid_name = !plugin.is_empty()
        && plugin
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    Some((Webhook::parse(webhook)?, plugin)).filter(|_| valid_name)
}

/// The API server's `timeout` query parameter (`10s`; Go durations in
/// whole seconds, as it writes them).
fn timeout(query: &str) -> Option<Duration> {
    let value = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("timeout="))?;
    parse_go_duration(value)
}

fn parse_go_duration(text: &str) -> Option<Duration> {
    let (number, unit) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic())?);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        _ => return None,
    };
    // Whoever reaches the port writes the URL: no value may overflow.
    (seconds.is_finite() && seconds > 0.0)
        .then(|| Duration::from_secs_f64(seconds.min(webhooks::MAX_TIMEOUT.as_secs_f64())))
}

impl Server {
    async fn handle(
        &self,
        req: Request<hyper::body::Incoming>,
        client: Client,
        arrived: std::time::Instant,
    ) -> Response<Body> {
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or_default().to_string();
        if path == "/healthz" && req.method() == Method::GET {
            return json(200, &serde_json::json!({"status": "ok"}));
        }
        let Some((webhook, plugin)) = route(&path) else {
            return refuse(
                404,
                format!(
                    "{path} is not a webhook: /validate/<plugin>, /mutate/<plugin> or /convert/<plugin>"
                ),
            );
        };
        if req.method() != Method::POST {
            return refuse(405, format!("{} {path}: reviews are POSTed", req.method()));
        }
        if let Some(refusal) = unauthenticated(self.admission_needs_cert, webhook, client) {
            return refusal;
        }
        let declared = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let body = req.into_body();
        // Read only once the path has found a plugin that serves this
        // webhook and the review has its place: a stranger's body is never
        // read for a plugin that is not there, nor beyond the bounds.
        let read = async move {
            Limited::new(body, webhook.max_body())
                .collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| e.to_string())
        };
        let reply = webhooks::answer(
            &self.reviews,
            plugin,
            webhook,
            declared,
            read,
            (arrived, webhooks::deadline(timeout(&query))),
        )
        .await;
        Response::builder()
            .status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body {
                bytes: Full::new(Bytes::from(reply.body)),
                _hold: reply.hold,
            })
            .expect("a valid response")
    }
}

/// A response body that keeps what the review holds (its place and memory)
/// until hyper has taken the last of it.
struct Body {
    bytes: Full<Bytes>,
    _hold: Option<webhooks::Hold>,
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().bytes).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.bytes.size_hint()
    }
}

impl From<Full<Bytes>> for Body {
    fn from(bytes: Full<Bytes>) -> Self {
        Body { bytes, _hold: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_a_client_ca_admissions_need_a_certificate_and_conversions_do_not() {
        use Client::{Anonymous, Certified};
        for webhook in Webhook::ALL {
            for client in [Anonymous, Certified] {
                assert!(unauthenticated(false, webhook, client).is_none());
            }
            assert!(unauthenticated(true, webhook, Certified).is_none());
        }
        for webhook in [Webhook::Validate, Webhook::Mutate] {
            let refused = unauthenticated(true, webhook, Anonymous).expect("refused");
            assert_eq!(refused.status(), 401);
        }
        assert!(unauthenticated(true, Webhook::Convert, Anonymous).is_none());
    }

    #[test]
    fn a_client_certificate_counts_only_with_an_allowed_name() {
        use base64::Engine as _;
        /// kubeplug-api's `der` test certificate: `O=system:masters,
        /// CN=front-proxy-client`, issued by `CN=front-proxy-ca`.
        const CERT: &str = "MIIBSDCB8AIUGb4qxqhdNum6POz9FWWvhs5/SbgwCgYIKoZIzj0EAwIwGTEXMBUGA1UEAwwOZnJvbnQtcHJveHktY2EwHhcNMjYxMTMwMDY1NTEyWhcNMzYxMTI3MDY1NTEyWjA2MRcwFQYDVQQKDA5zeXN0ZW06bWFzdGVyczEbMBkGA1UEAwwSZnJvbnQtcHJveHktY2xpZW50MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEviosvu35TtoJc9Vb2e7TXMSdHDyY1F1YB+6f6pS8LbwVHpxdnZT5ZM1eGfXdi9kZ5XN99THZrzojQSv7IHvOETAKBggqhkjOPQQDAgNHADBEAiAhkOnqhWQJz8kDXsUlq+z2Uv3mEAVTcky968SaQXTUZwIgWheYw4pjcws4x+yG8zlnKbqM5GemhrXJUOwWy9dn5tE=";
        let leaf = base64::engine::general_purpose::STANDARD
            .decode(CERT)
            .expect("base64");
        assert_eq!(Client::of(&leaf, &[]), Client::Certified);
        let named = ["front-proxy-client".to_string()];
        assert_eq!(Client::of(&leaf, &named), Client::Certified);
        let other = ["kube-apiserver-webhook-client".to_string()];
        assert_eq!(Client::of(&leaf, &other), Client::Anonymous);
    }

    #[test]
    fn a_path_names_the_webhook_and_the_plugin() {
        assert_eq!(
            route("/validate/database"),
            Some((Webhook::Validate, "database"))
        );
        assert_eq!(
            route("/convert/pod-annotator"),
            Some((Webhook::Convert, "pod-annotator"))
        );
        assert_eq!(route("/validate/"), None);
        assert_eq!(route("/validate/a/b"), None);
        assert_eq!(route("/reconcile/database"), None);
        assert_eq!(route("/mutate/../x"), None);
    }

    #[test]
    fn the_api_servers_timeout_is_read_from_the_query() {
        assert_eq!(timeout("timeout=10s"), Some(Duration::from_secs(10)));
        assert_eq!(timeout("x=1&timeout=2s"), Some(Duration::from_secs(2)));
        assert_eq!(timeout("timeout=1500ms"), Some(Duration::from_millis(1500)));
        assert_eq!(timeout("timeout=1m"), Some(webhooks::MAX_TIMEOUT));
        assert_eq!(timeout("timeout=soon"), None);
        assert_eq!(
            timeout("timeout=100000000000000000000000s"),
            Some(webhooks::MAX_TIMEOUT)
        );
        assert_eq!(timeout(""), None);
    }
}
