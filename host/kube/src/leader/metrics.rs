//! Leader election's metric: which plugins this replica leads.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

/// `leading` per plugin. Cheap to clone.
#[derive(Clone, Default)]
pub struct LeaderMetrics {
    leading: Family<PluginLabels, Gauge>,
}

impl LeaderMetrics {
    /// The family, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "leading",
            "1 while this replica holds the plugin's Lease and may write",
            metrics.leading.clone(),
        );
        metrics
    }

    pub fn leading(&self, plugin: &str, leading: bool) {
        self.leading
            .get_or_create(&PluginLabels {
                plugin: plugin.into(),
            })
            .set(i64::from(leading));
    }
}
