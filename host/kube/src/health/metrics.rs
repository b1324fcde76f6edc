//! The API health's metric: whether the API server answers (its help text
//! still says "health checks": dashboards know it so).

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `api_reachable`. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct HealthMetrics {
    api_reachable: Gauge,
}

impl HealthMetrics {
    /// The gauge, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "api_reachable",
            "1 while the API server answers the host's health checks",
            metrics.api_reachable.clone(),
        );
        metrics
    }

    pub fn api_reachable(&self, reachable: bool) {
        self.api_reachable.set(i64::from(reachable));
    }
}
