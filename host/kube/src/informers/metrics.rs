//! The shared informers' metrics: failed watches and what each cache holds.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

/// Watch errors and cache gauges, by watch label. Cheap to clone.
#[derive(Clone, Default)]
pub struct InformerMetrics {
    watch_errors: Family<ResourceLabels, Counter>,
    cached_objects: Family<ResourceLabels, Gauge>,
    cached_bytes: Family<ResourceLabels, Gauge>,
    cache_left_out: Family<ResourceLabels, Gauge>,
}

impl InformerMetrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "watch_errors",
            "Failed lists and watches by resource (each is retried)",
            metrics.watch_errors.clone(),
        );
        registry.register(
            "cached_objects",
            "Objects in the shared cache by resource",
            metrics.cached_objects.clone(),
        );
        registry.register(
            "cached_bytes",
            "Bytes of the objects in the shared cache by resource (their JSON text and a fixed overhead each)",
            metrics.cached_bytes.clone(),
        );
        registry.register(
            "cache_left_out_objects",
            "Objects a watch delivered but its cache left out, over its byte budget (--watch-cache-bytes); the plugins reading it are degraded",
            metrics.cache_left_out.clone(),
        );
        metrics
    }

    pub fn watch_error(&self, resource: &str) {
        self.watch_errors
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .inc();
    }

    pub fn cached_objects(&self, resource: &str, count: usize, bytes: usize, left_out: usize) {
        let labels = ResourceLabels {
            resource: resource.into(),
        };
        self.cached_objects.get_or_create(&labels).set(count as i64);
        self.cached_bytes.get_or_create(&labels).set(bytes as i64);
        self.cache_left_out
            .get_or_create(&labels)
            .set(left_out as i64);
    }

    /// Forget the cache gauge of an informer that stopped.
    pub fn informer_stopped(&self, resource: &str) {
        let labels = ResourceLabels {
            resource: resource.into(),
        };
        self.cached_objects.remove(&labels);
        self.cached_bytes.remove(&labels);
        self.cache_left_out.remove(&labels);
    }
}
