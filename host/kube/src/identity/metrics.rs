//! Read checks' metric: SubjectAccessReviews sent.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// `access_reviews`. Cheap to clone.
#[derive(Clone, Default)]
pub struct AccessMetrics {
    access_reviews: Counter,
}

impl AccessMetrics {
    /// The counter, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "access_reviews",
            "SubjectAccessReviews sent to check what a plugin may read (answers are cached)",
            metrics.access_reviews.clone(),
        );
        metrics
    }

    pub fn access_review(&self) {
        self.access_reviews.inc();
    }
}
