//! Whether the API server answers, for `/readyz`, from what the host already
//! sends: no polling.
//!
//! A host that cannot reach the API server cannot serve: its caches go stale
//! and nothing it decides can be written. Kubernetes should then stop routing
//! to it and a rolling update should wait. Every client of the host reports
//! here (see [`crate::client`]): any answer, and any data on an open watch
//! (events and the bookmarks the watches ask for, which the API server sends
//! about once a minute), counts as an answer; a request that got none (a
//! connection error, a timeout, a broken stream) or a 502/503/504 counts as a
//! failure. [`FAILURES`] failures with no answer since make the host not
//! ready; the next answer makes it ready again. A per-plugin problem (a
//! missing CRD, RBAC) does not count: that plugin is `degraded`, the host
//! serves.
//!
//! Caveats: a dead API server breaks every watch at once, and the watchers'
//! retries fail, so the host is not ready within a second or two. A frozen
//! one (stopped, or a network that drops packets) answers nothing and breaks
//! nothing: the watches only stop receiving bookmarks. So when nothing has
//! answered for [`SILENCE`] (or the last request failed) and `/readyz` is
//! asked, one `GET /version` probe is sent, bounded by [`PROBE_TIMEOUT`];
//! readiness then follows its outcome. A frozen server is noticed within
//! `SILENCE` + 2 × `PROBE_TIMEOUT` + two readiness periods of the last data
//! it sent (about two minutes with the kubelet's 10 s period). An idle host
//! whose watches receive bookmarks sends no probe at all; one with no
//! watches sends at most one per `SILENCE`, and only while someone asks.

pub mod metrics;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use self::metrics::HealthMetrics;

/// Failed requests in a row, with no answer since, before the host reports
/// not ready: one failure can be a connection the server closed, two with
/// no answer between them are an outage.
pub const FAILURES: u32 = 2;

/// How long the API server may be silent before `/readyz` probes it:
/// longer than the API server's bookmark period (one minute), so that an
/// idle host with watches never probes.
pub const SILENCE: Duration = Duration::from_secs(90);

/// Longest wait for the probe's answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the API server answers: the host cannot serve without it, so
/// `/readyz` follows it (a per-plugin problem such as a missing CRD does
/// not; see `/plugins`). Shared by every client of the host.
#[derive(Debug)]
pub struct ApiHealth {
    /// What times are counted from.
    started: Instant,
    /// Milliseconds since `started` of the last answer.
    answered: AtomicU64,
    /// Failed requests since the last answer.
    failures: AtomicU32,
    /// The last failure.
    error: Mutex<String>,
    /// A probe is in flight.
    probing: AtomicBool,
    /// Milliseconds since `started` of the last probe (`u64::MAX`: none).
    probed: AtomicU64,
    metrics: HealthMetrics,
}

impl Default for ApiHealth {
    fn default() -> Self {
        Self::new(HealthMetrics::default())
    }
}

impl ApiHealth {
    pub fn new(metrics: HealthMetrics) -> Self {
        ApiHealth {
            started: Instant::now(),
            answered: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            error: Mutex::new(String::new()),
            probing: AtomicBool::new(false),
            probed: AtomicU64::new(u64::MAX),
            metrics,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The API server answered (a response, or data on a watch). Cheap: it
    /// is called for every watch event.
    pub fn answered(&self) {
        self.answered.store(self.now_ms(), Ordering::Relaxed);
        if self.failures.swap(0, Ordering::Relaxed) >= FAILURES {
            tracing::info!("the API server is reachable again");
        }
        self.metrics.api_reachable(true);
    }

    /// A request got no answer (or a 502/503/504), because of `error`.
    pub fn failed(&self, error: &dyn std::fmt::Display) {
        *self.error.lock() = error.to_string();
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures == FAILURES {
            tracing::warn!(%error, "the API server is unreachable; not ready");
        }
        if failures >= FAILURES {
            self.metrics.api_reachable(false);
        }
    }

    /// Ready unless the API server has failed [`FAILURES`] requests with no
    /// answer since. Sends a probe on `client` when the server has been
    /// silent for [`SILENCE`] or the last request failed (one at a time,
    /// at most one per [`PROBE_TIMEOUT`]); its outcome counts from the next
    /// call on.
    pub fn ready(self: &Arc<Self>, client: &kube::Client) -> Result<(), String> {
        let now = self.now_ms();
        let failures = self.failures.load(Ordering::Relaxed);
        let silent = now.saturating_sub(self.answered.load(Ordering::Relaxed)) >= millis(SILENCE);
        let probed = self.probed.load(Ordering::Relaxed);
        let spaced = probed == u64::MAX || now.saturating_sub(probed) >= millis(PROBE_TIMEOUT);
        if (silent || failures > 0)
            && spaced
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
            && !self.probing.swap(true, Ordering::Relaxed)
        {
            self.probed.store(now, Ordering::Relaxed);
            runtime.spawn(self.clone().probe(client.clone()));
        }
        if failures >= FAILURES {
            let error = self.error.lock();
            return Err(format!("the API server is unreachable: {error}"));
        }
        Ok(())
    }

    /// Failed requests since the last answer.
    #[cfg(test)]
    pub(crate) fn failures(&self) -> u32 {
        self.failures.load(Ordering::Relaxed)
    }

    /// One `GET /version`. Its answer or error reaches [`Self::answered`] or
    /// [`Self::failed`] through the client; only its timeout is ours.
    async fn probe(self: Arc<Self>, client: kube::Client) {
        let answered = tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await;
        if answered.is_err() {
            self.failed(&format_args!(
                "no answer to a probe within {PROBE_TIMEOUT:?}"
            ));
        }
        self.probing.store(false, Ordering::Relaxed);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ClientSettings, RateLimit};

    /// A health and a client that reports to it, of a server that refuses
    /// every connection.
    fn unreachable() -> (Arc<ApiHealth>, kube::Client) {
        let health = Arc::new(ApiHealth::default());
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let settings = ClientSettings {
            limit: RateLimit::Unlimited,
            health: Some(health.clone()),
            ..ClientSettings::default()
        };
        (health, crate::client::build(&config, &settings).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn two_failures_with_no_answer_between_make_the_host_not_ready_until_the_next_answer() {
        let (health, client) = unreachable();
        health.failed(&"connection reset");
        assert_eq!(
            health.ready(&client),
            Ok(()),
            "one failure is not an outage"
        );
        health.answered();
        health.failed(&"connection reset");
        assert_eq!(health.ready(&client), Ok(()), "an answer came between");
        health.failed(&"connection refused");
        let error = health.ready(&client).unwrap_err();
        assert!(error.contains("connection refused"), "{error}");
        health.answered();
        assert_eq!(health.ready(&client), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_whose_server_keeps_answering_never_probes() {
        let (health, client) = unreachable();
        // Bookmarks once a minute, `/readyz` every 10 s, for an hour.
        for second in (0..3600).step_by(10) {
            if second % 60 == 0 {
                health.answered();
            }
            assert_eq!(health.ready(&client), Ok(()));
            assert!(
                !health.probing.load(Ordering::Relaxed),
                "probed at {second} s"
            );
            tokio::time::advance(Duration::from_secs(10)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_server_is_probed_when_asked_one_probe_at_a_time() {
        let (health, client) = unreachable();
        tokio::time::advance(SILENCE).await;
        assert_eq!(health.ready(&client), Ok(()));
        assert!(health.probing.load(Ordering::Relaxed), "silent: probed");
        let probed = health.probed.load(Ordering::Relaxed);
        assert_eq!(health.ready(&client), Ok(()));
        assert_eq!(
            health.probed.load(Ordering::Relaxed),
            probed,
            "one probe at a time"
        );
        // The probe fails (refused, or no answer in time): one failure.
        while health.probing.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(health.failures(), 1);
        assert_eq!(
            health.ready(&client),
            Ok(()),
            "one failure is not an outage"
        );
        // Asked again once the probe timeout has passed: a second probe,
        // whose failure makes the host not ready.
        tokio::time::sleep(PROBE_TIMEOUT).await;
        let _ = health.ready(&client);
        while health.probing.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(health.ready(&client).is_err());
    }
}
