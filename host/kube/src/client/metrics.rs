//! The clients' request counter: every request the host sends, so that its
//! cost (requests per parent, requests per minute when idle) is read from
//! the host itself.
//!
//! `api_requests_total{client,method,code}`: `client` is the client's name
//! (`host`, `leader-election`, `aggregated-api`, or the plugin's), `method`
//! the HTTP method or `WATCH` for a watch (counted once, when it starts),
//! `code` the answer's status or `error` when none came (connection
//! error, timeout). The labels map one to one onto client-go's
//! `rest_client_requests_total{host,method,code}` (`WATCH` is its `GET`).
//!
//! That family is counted too, under client-go's name and labels, for the
//! dashboards that query it: `host` the API server's authority (the client
//! config's `cluster_url`), `method` the HTTP verb (a watch is a `GET`),
//! `code` the status or `<error>` when no answer came.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    client: String,
    method: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestClientLabels {
    code: String,
    method: String,
    host: String,
}

/// `api_requests_total` and client-go's `rest_client_requests_total`.
/// Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct RequestMetrics {
    requests: Family<RequestLabels, Counter>,
    rest_client: Family<RestClientLabels, Counter>,
}

impl RequestMetrics {
    /// The families: kubeplug's in `own`, client-go's in `standard` (a
    /// registry without prefix).
    pub fn register(own: &mut Registry, standard: &mut Registry) -> Self {
        let metrics = Self::default();
        own.register(
            "api_requests",
            "Requests sent to the API server by client, method (WATCH: a watch, counted when it starts) and status code (error: no answer)",
            metrics.requests.clone(),
        );
        standard.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            metrics.rest_client.clone(),
        );
        metrics
    }

    /// One request of `client` to the API server at `host`, answered with
    /// `code` (`None`: no answer). `method` is the HTTP method, or `WATCH`.
    pub fn request(&self, client: &str, host: &str, method: &str, code: Option<u16>) {
        self.requests
            .get_or_create(&RequestLabels {
                client: client.into(),
                method: method.into(),
                code: code.map_or_else(|| "error".into(), |c| c.to_string()),
            })
            .inc();
        self.rest_client
            .get_or_create(&RestClientLabels {
                code: code.map_or_else(|| "<error>".into(), |c| c.to_string()),
                method: if method == "WATCH" { "GET" } else { method }.into(),
                host: host.into(),
            })
            .inc();
    }

    /// Requests counted so far with these labels.
    #[cfg(test)]
    pub(crate) fn count(&self, client: &str, method: &str, code: &str) -> u64 {
        self.requests
            .get_or_create(&RequestLabels {
                client: client.into(),
                method: method.into(),
                code: code.into(),
            })
            .get()
    }

    /// client-go's count so far with these labels.
    #[cfg(test)]
    pub(crate) fn rest_client_count(&self, host: &str, method: &str, code: &str) -> u64 {
        self.rest_client
            .get_or_create(&RestClientLabels {
                code: code.into(),
                method: method.into(),
                host: host.into(),
            })
            .get()
    }
}
