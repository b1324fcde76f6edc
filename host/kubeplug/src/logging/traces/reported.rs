//! Export failures, said once per outage.
//!
//! The SDK logs every failed batch at error level: a collector down for an
//! hour would fill the host's log with the same line every few seconds.
//! Here the first failure is a warning, the spans lost meanwhile are
//! counted, and the recovery says how many. The batch processor is told
//! every export went well, so it does not log them too; what it does
//! itself is bounded: a full queue drops new spans (the SDK warns once)
//! and never blocks the code that ended them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// An exporter whose failures are logged once per outage.
#[derive(Debug)]
pub struct Reported<E> {
    inner: E,
    failing: AtomicBool,
    /// Spans in batches that failed since the outage began.
    lost: AtomicU64,
}

impl<E> Reported<E> {
    pub fn new(inner: E) -> Self {
        Reported {
            inner,
            failing: AtomicBool::new(false),
            lost: AtomicU64::new(0),
        }
    }

    /// Note how the export of a batch of `spans` went.
    fn note(&self, spans: usize, result: OTelSdkResult) {
        match result {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    let lost = self.lost.swap(0, Ordering::Relaxed);
                    tracing::info!(lost, "trace export works again");
                }
            }
            Err(error) => {
                self.lost.fetch_add(spans as u64, Ordering::Relaxed);
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        %error,
                        "trace export failed; spans are dropped until the collector answers"
                    );
                }
            }
        }
    }
}

impl<E: SpanExporter> SpanExporter for Reported<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        self.note(spans, result);
        Ok(())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::error::OTelSdkError;

    fn failed() -> OTelSdkResult {
        Err(OTelSdkError::InternalFailure("connection refused".into()))
    }

    #[test]
    fn an_outage_counts_its_lost_spans_until_an_export_works_again() {
        let reported = Reported::new(());
        reported.note(3, failed());
        reported.note(2, failed());
        assert!(reported.failing.load(Ordering::Relaxed));
        assert_eq!(reported.lost.load(Ordering::Relaxed), 5);
        reported.note(1, Ok(()));
        assert!(!reported.failing.load(Ordering::Relaxed));
        assert_eq!(reported.lost.load(Ordering::Relaxed), 0);
    }
}
