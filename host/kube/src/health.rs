//! Whether the API server answers, for `/readyz`.
//!
//! A host that cannot reach the API server cannot serve: its caches go stale
//! and nothing it decides can be written. Kubernetes should then stop routing
//! to it and a rolling update should wait, so readiness follows a periodic
//! check (`GET /version`, bounded in time). A per-plugin problem (a missing
//! CRD, RBAC) does not count: that plugin is `degraded`, the host serves.

pub mod metrics;

use std::sync::Arc;
use std::time::Duration;

use self::metrics::HealthMetrics;

/// How often the API server's health is checked, and how many checks in a
/// row must fail before the host reports not ready.
const API_CHECK_PERIOD: Duration = Duration::from_secs(2);
const API_CHECK_FAILURES: u32 = 2;

/// Whether the API server answers: the host cannot serve without it, so
/// `/readyz` follows it (a per-plugin problem such as a missing CRD does
/// not; see `/plugins`).
#[derive(Default)]
pub struct ApiHealth {
    /// Consecutive failed checks and the last error.
    failing: std::sync::Mutex<(u32, String)>,
}

impl ApiHealth {
    pub fn ready(&self) -> Result<(), String> {
        let failing = self.failing.lock().expect("health lock");
        if failing.0 >= API_CHECK_FAILURES {
            return Err(format!("the API server is unreachable: {}", failing.1));
        }
        Ok(())
    }

    /// Check every few seconds until the task is dropped.
    pub async fn watch(self: Arc<Self>, client: kube::Client, metrics: HealthMetrics) {
        loop {
            let checked = tokio::time::timeout(API_CHECK_PERIOD, client.apiserver_version()).await;
            let error = match checked {
                Ok(Ok(_)) => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some(format!("no answer within {API_CHECK_PERIOD:?}")),
            };
            {
                let mut failing = self.failing.lock().expect("health lock");
                match error {
                    None => {
                        if failing.0 >= API_CHECK_FAILURES {
                            tracing::info!("the API server is reachable again");
                        }
                        *failing = (0, String::new());
                    }
                    Some(error) => {
                        failing.0 += 1;
                        if failing.0 == API_CHECK_FAILURES {
                            tracing::warn!(%error, "the API server is unreachable; not ready");
                        }
                        failing.1 = error;
                    }
                }
                metrics.api_reachable(failing.0 < API_CHECK_FAILURES);
            }
            tokio::time::sleep(API_CHECK_PERIOD).await;
        }
    }
}
