//! The admin HTTP server: `/metrics`, health endpoints and plugin status.
//!
//! `/metrics` (Prometheus text), `/healthz` (the process is up), `/readyz`
//! (every watch has listed once, kubert's `initialized` habit), `/plugins`
//! (what is loaded: versions, digests, states, last errors, as JSON),
//! `/plugins/<plugin>/replays[/<namespace>/<name>]` (failed calls kept for
//! replay, see [`kubeplug_operator::replay`]; loopback clients only).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;

/// What the HTTP endpoints read from the rest of the host.
pub struct Probes {
    /// Every subsystem's metrics, served on `/metrics`: kubeplug's own
    /// (prefixed `kubeplug_`) and the families named as client-go,
    /// controller-runtime and the Prometheus client libraries name them.
    pub metrics: Vec<Registry>,
    /// Run before each `/metrics` scrape to refresh gauges derived from
    /// live state (a plugin's state in `plugin_info`), so a scrape never
    /// disagrees with `/plugins` read a moment before.
    pub refresh: Box<dyn Fn() + Send + Sync>,
    /// Ok when the host can serve; else why not.
    pub ready: Box<dyn Fn() -> Result<(), String> + Send + Sync>,
    /// `/plugins`: with `detail`, everything (file paths, error text a
    /// plugin may have written); without, what is safe to show anyone who
    /// can reach the port.
    pub plugins: Box<dyn Fn(Detail) -> serde_json::Value + Send + Sync>,
    /// `/plugins/<plugin>/replays`: `(plugin, None)` lists its failure
    /// captures, `(plugin, Some("ns/name"))` is one of them; `None`: the
    /// plugin keeps none (or not that one).
    pub replays: Replays,
    /// Set once the host is stopping: `/readyz` answers 503.
    pub stopping: std::sync::atomic::AtomicBool,
}

/// See [`Probes::replays`].
pub type Replays = Box<dyn Fn(&str, Option<&str>) -> Option<serde_json::Value> + Send + Sync>;

/// Why only loopback clients get captures: they hold cluster data.
pub const REPLAYS_LOOPBACK_ONLY: &str =
    "replays are served to loopback clients only (kubectl port-forward)";

/// How much of `/plugins` a client sees.
///
/// Only a connection from loopback gets [`Detail::Full`]: in a pod that is
/// the pod itself or `kubectl port-forward`, which RBAC guards
/// (`pods/portforward`); kubelet probes, Prometheus and every other pod get
/// [`Detail::Summary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    Summary,
    Full,
}

/// The OpenMetrics text exposition of `registries`, one after the other,
/// ended by a single `# EOF`.
pub fn encode(registries: &[Registry]) -> String {
    use prometheus_client::encoding::text::{encode_eof, encode_registry};
    let mut out = String::new();
    for registry in registries {
        encode_registry(&mut out, registry).expect("writing to a String cannot fail");
    }
    encode_eof(&mut out).expect("writing to a String cannot fail");
    out
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}

fn route(probes: &Probes, path: &str, detail: Detail) -> Response<Full<Bytes>> {
    match path {
        "/metrics" => {
            (probes.refresh)();
            respond(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                encode(&probes.metrics),
            )
        }
        "/healthz" | "/livez" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if probes.stopping.load(std::sync::atomic::Ordering::Relaxed) => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "shutting down\n".into(),
        ),
        "/readyz" => match (probes.ready)() {
            Ok(()) => respond(StatusCode::OK, "text/plain", "ok\n".into()),
            Err(why) => respond(StatusCode::SERVICE_UNAVAILABLE, "text/plain", why + "\n"),
        },
        "/plugins" => respond(
            StatusCode::OK,
            "application/json",
            serde_json::to_string_pretty(&(probes.plugins)(detail)).unwrap_or_default() + "\n",
        ),
        _ => match replay_path(path) {
            Some(_) if detail != Detail::Full => respond(
                StatusCode::FORBIDDEN,
                "text/plain",
                format!("{REPLAYS_LOOPBACK_ONLY}\n"),
            ),
            Some((plugin, parent)) => match (probes.replays)(plugin, parent) {
                Some(body) => respond(
                    StatusCode::OK,
                    "application/json",
                    serde_json::to_string_pretty(&body).unwrap_or_default() + "\n",
                ),
                None => respond(
                    StatusCode::NOT_FOUND,
                    "text/plain",
                    match parent {
                        None => format!("plugin {plugin} is not served here\n"),
                        Some(parent) => format!(
                            "no failure of {parent} is kept for plugin {plugin} (or the plugin is not served here)\n"
                        ),
                    },
                ),
            },
            None => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        },
    }
}

/// `/plugins/<plugin>/replays[/<namespace>/<name> | /<name>]` as the plugin
/// and the parent (`namespace/name` or `name`).
fn replay_path(path: &str) -> Option<(&str, Option<&str>)> {
    let rest = path.strip_prefix("/plugins/")?;
    let (plugin, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("replays")?;
    if plugin.is_empty() {
        return None;
    }
    match rest {
        "" | "/" => Some((plugin, None)),
        _ => {
            let parent = rest.strip_prefix('/')?;
            let parts: Vec<&str> = parent.split('/').collect();
            (parts.len() <= 2 && parts.iter().all(|p| !p.is_empty()))
                .then_some((plugin, Some(parent)))
        }
    }
}

/// Bounds on one HTTP connection: a client that sends nothing, or keeps a
/// connection open forever, must not pile up tasks and sockets.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Longest wait for a request's headers.
    pub header_read: Duration,
    /// Longest life of one connection (keep-alive included).
    pub connection: Duration,
    /// At shutdown, how long answers in flight may take to finish.
    pub drain: Duration,
}

impl HttpLimits {
    /// The default [`HttpLimits::drain`], for callers that bound a shutdown.
    pub const fn default_drain() -> Duration {
        Duration::from_secs(2)
    }
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_read: Duration::from_secs(10),
            connection: Duration::from_secs(120),
            drain: Self::default_drain(),
        }
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

fn detail_for(peer: SocketAddr) -> Detail {
    if peer.ip().to_canonical().is_loopback() {
        Detail::Full
    } else {
        Detail::Summary
    }
}

/// Serve the endpoints on `addr` until `drain` is signalled, then finish
/// the answers in flight (see [`serve_on`]).
pub async fn serve(
    addr: SocketAddr,
    probes: Arc<Probes>,
    drain: crate::drain::Watch,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz, /plugins (and replays to loopback clients)");
    serve_on(
        listener,
        probes,
        HttpLimits::default(),
        drain.into_receiver(),
    )
    .await;
    Ok(())
}

/// Serve on a bound listener until `stop` turns true. An `accept` error
/// (e.g. out of file descriptors) is logged and retried: it never ends the
/// host. At stop, the listener closes, idle keep-alive connections are
/// closed, and answers in flight get [`HttpLimits::drain`] to finish.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    probes: Arc<Probes>,
    limits: HttpLimits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = kubeplug_api::tls::accept(&listener) => accepted,
            _ = stopped(&mut stop) => break,
        };
        // Reap finished connections so the set stays small.
        while connections.try_join_next().is_some() {}
        let detail = detail_for(peer);
        let (probes, mut stop) = (probes.clone(), stop.clone());
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let response = route(&probes, req.uri().path(), detail);
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            let served = async {
                tokio::select! {
                    _ = connection.as_mut() => {}
                    _ = stopped(&mut stop) => {
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.as_mut().await;
                    }
                }
            };
            let _ = tokio::time::timeout(limits.connection, served).await;
        });
    }
    drop(listener);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.drain, drained).await.is_err() {
        tracing::info!("HTTP answers still in flight at shutdown were cut");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn server(limits: HttpLimits) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let probes = Arc::new(Probes {
            metrics: Vec::new(),
            refresh: Box::new(|| {}),
            ready: Box::new(|| Err("not yet".into())),
            plugins: Box::new(|detail| serde_json::json!({ "full": detail == Detail::Full })),
            replays: Box::new(|plugin, parent| {
                (plugin == "database").then(|| match parent {
                    None => serde_json::json!([]),
                    Some(parent) => serde_json::json!({ "parent": parent }),
                })
            }),
            stopping: Default::default(),
        });
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(serve_on(listener, probes, limits, stopped));
        // Keep the server up for the test's life.
        std::mem::forget(stop);
        addr
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn a_silent_client_is_dropped_and_others_are_served() {
        let addr = server(HttpLimits {
            header_read: Duration::from_millis(300),
            connection: Duration::from_secs(5),
            ..HttpLimits::default()
        })
        .await;
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(3), silent.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "the silent connection was closed");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn readyz_says_why_the_host_is_not_ready() {
        let addr = server(HttpLimits::default()).await;
        let response = get(addr, "/readyz").await;
        assert!(response.starts_with("HTTP/1.1 503"), "{response}");
        assert!(response.ends_with("not yet\n"), "{response}");
    }

    #[tokio::test]
    async fn loopback_clients_get_details_and_no_one_else() {
        let addr = server(HttpLimits::default()).await;
        assert!(get(addr, "/plugins").await.contains("\"full\": true"));
        assert_eq!(Detail::Full, detail_for("127.0.0.1:1".parse().unwrap()));
        assert_eq!(
            Detail::Full,
            detail_for("[::ffff:127.0.0.1]:1".parse().unwrap())
        );
        assert_eq!(Detail::Full, detail_for("[::1]:1".parse().unwrap()));
        assert_eq!(Detail::Summary, detail_for("10.1.2.3:1".parse().unwrap()));
    }

    #[tokio::test]
    async fn replays_are_served_to_loopback_clients() {
        let addr = server(HttpLimits::default()).await;
        let list = get(addr, "/plugins/database/replays").await;
        assert!(list.starts_with("HTTP/1.1 200"), "{list}");
        assert!(list.ends_with("[]\n"), "{list}");
        let one = get(addr, "/plugins/database/replays/default/db").await;
        assert!(one.contains("\"parent\": \"default/db\""), "{one}");
        let cluster = get(addr, "/plugins/database/replays/node-1").await;
        assert!(cluster.contains("\"parent\": \"node-1\""), "{cluster}");
        let missing = get(addr, "/plugins/other/replays/default/db").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        assert!(missing.contains("no failure of default/db"), "{missing}");
        for path in [
            "/plugins/database/replays/a/b/c",
            "/plugins/database/replays//b",
            "/plugins//replays",
            "/plugins/database/replayss",
        ] {
            assert!(get(addr, path).await.starts_with("HTTP/1.1 404"), "{path}");
        }
    }

    #[test]
    fn replays_are_refused_to_everyone_else() {
        let probes = Probes {
            metrics: Vec::new(),
            refresh: Box::new(|| {}),
            ready: Box::new(|| Ok(())),
            plugins: Box::new(|_| serde_json::json!([])),
            replays: Box::new(|_, _| Some(serde_json::json!({ "secret": "cluster data" }))),
            stopping: Default::default(),
        };
        for path in [
            "/plugins/database/replays",
            "/plugins/database/replays/default/db",
        ] {
            let response = route(&probes, path, Detail::Summary);
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path}");
            assert_eq!(route(&probes, path, Detail::Full).status(), StatusCode::OK);
        }
    }

    #[tokio::test]
    async fn kubeplug_replay_reads_what_the_listener_serves() {
        let addr = server(HttpLimits::default()).await;
        let base = format!("http://{addr}");
        assert!(
            crate::commands::replay::list(&base, "database")
                .await
                .unwrap()
                .is_empty()
        );
        let error = crate::commands::replay::list(&base, "other")
            .await
            .unwrap_err();
        assert!(
            error
                .to_string()
                .ends_with("404: plugin other is not served here"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_capture_fetched_is_the_capture_kept() {
        use crate::commands::replay as fetch;
        use kubeplug_operator::replay::Ring;
        let ring = Arc::new(Ring::default());
        let kept: kubeplug_operator::replay::Capture = serde_json::from_value(serde_json::json!({
            "apiVersion": kubeplug_operator::replay::API_VERSION,
            "kind": kubeplug_operator::replay::KIND,
            "plugin": "database",
            "version": "1.0.0",
            "digest": "ab".repeat(32),
            "call": "reconcile",
            "parent": "default/db",
            "at": "2026-11-29T18:00:00.000Z",
            "error": "plugin database trapped: x",
            "reason": "guest_error",
            "config": { "replicas": 3 },
            "limits": kubeplug_runtime::Limits::default(),
            "request": {
                "parent": "{\"kind\":\"Database\"}",
                "observed": [],
                "related": [],
                "now": "2026-11-29T18:00:00Z",
                "entropy": "00".repeat(32),
            },
        }))
        .unwrap();
        ring.record(kept.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let probes = Arc::new(Probes {
            metrics: Vec::new(),
            refresh: Box::new(|| {}),
            ready: Box::new(|| Ok(())),
            plugins: Box::new(|_| serde_json::json!([])),
            replays: Box::new(move |_, parent| match parent {
                None => serde_json::to_value(ring.list()).ok(),
                Some(parent) => serde_json::to_value(ring.get(parent)?).ok(),
            }),
            stopping: Default::default(),
        });
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(serve_on(listener, probes, HttpLimits::default(), stopped));
        let listed = fetch::list(&base, "database").await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].error, kept.error);
        let fetched = fetch::capture(&base, "database", "default/db")
            .await
            .unwrap();
        assert_eq!(fetched, kept);
    }

    #[tokio::test]
    async fn stop_closes_the_listener_and_lets_an_answer_finish() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let probes = Arc::new(Probes {
            metrics: Vec::new(),
            refresh: Box::new(|| {}),
            ready: Box::new(|| Ok(())),
            plugins: Box::new(|_| serde_json::json!([])),
            replays: Box::new(|_, _| None),
            stopping: Default::default(),
        });
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(serve_on(
            listener,
            probes.clone(),
            HttpLimits::default(),
            stopped,
        ));
        // An idle keep-alive connection must not hold the shutdown up.
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = idle.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        probes
            .stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(get(addr, "/readyz").await.contains("shutting down"));
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(1), server)
            .await
            .expect("the server stops at once with only idle connections")
            .unwrap();
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "listener closed"
        );
    }

    #[test]
    fn several_registries_are_one_exposition_with_one_eof() {
        use prometheus_client::metrics::counter::Counter;
        let (mut own, mut standard) = (Registry::with_prefix("kubeplug"), Registry::default());
        own.register("reconciles", "Reconciles", Counter::<u64>::default());
        standard.register("workqueue_adds", "Adds", Counter::<u64>::default());
        let text = encode(&[own, standard]);
        assert!(text.contains("\nkubeplug_reconciles_total 0\n"), "{text}");
        assert!(text.contains("\nworkqueue_adds_total 0\n"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        assert!(text.ends_with("\n# EOF\n"), "{text}");
    }
}
