//! The writer's metrics: API writes and the reads made inside reconciles.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    plugin: String,
    verb: String,
}

/// Writes and reads by plugin and verb. Cheap to clone.
#[derive(Clone, Default)]
pub struct ApplyMetrics {
    writes: Family<VerbLabels, Counter>,
    reads: Family<VerbLabels, Counter>,
}

impl ApplyMetrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "api_writes",
            "API writes by plugin and verb",
            metrics.writes.clone(),
        );
        registry.register(
            "api_reads",
            "API reads made inside reconciles (watches and caches aside), by plugin and verb",
            metrics.reads.clone(),
        );
        metrics
    }

    pub fn write(&self, plugin: &str, verb: &str) {
        self.writes.get_or_create(&labels(plugin, verb)).inc();
    }

    pub fn read(&self, plugin: &str, verb: &str) {
        self.reads.get_or_create(&labels(plugin, verb)).inc();
    }
}

fn labels(plugin: &str, verb: &str) -> VerbLabels {
    VerbLabels {
        plugin: plugin.into(),
        verb: verb.into(),
    }
}
