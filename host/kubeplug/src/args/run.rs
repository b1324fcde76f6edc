//! `kubeplug run`'s arguments: the host's listeners, leadership, caches,
//! rates and budgets.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::duration::GoDuration;
use super::{ClusterArgs, PolicyArgs, RuntimeArgs, parse_bytes};
use kubeplug_api::limits::PreviewLimits;
use kubeplug_kube::client::ClientSettings;
use kubeplug_operator::controller::Settings;

/// `kubeplug run`.
#[derive(Args)]
pub struct RunArgs {
    /// Directory of plugin `.wasm` files (and optional `<name>.yaml`
    /// settings). Plugin `N` serves only from the location its grant binds
    /// (`path:`), by default `DIR/N.wasm` or `DIR/N/N.wasm` (one image
    /// volume per plugin), and only if its manifest declares `N`.
    #[arg(long, env = "KUBEPLUG_PLUGINS")]
    pub plugins: PathBuf,
    /// Directory of the plugins' `<name>.yaml` settings, instead of beside
    /// each `.wasm` (plugins from read-only images, settings from a
    /// ConfigMap). Links out of it are refused.
    #[arg(long, env = "KUBEPLUG_SETTINGS")]
    pub settings: Option<PathBuf>,
    /// A YAML map of plugin name to OCI artifact by digest
    /// (`REPOSITORY@sha256:<hex>`, as `kubeplug push` prints it), re-read
    /// every 10 s: the host pulls each, checks its digest, size and (when
    /// its grant has `signedBy`) its cosign signature, and writes it at the
    /// plugin's location in `--plugins`, which must be writable (an
    /// emptyDir). See docs/install.md, "Plugins as OCI artifacts".
    #[arg(long, env = "KUBEPLUG_PLUGIN_ARTIFACTS")]
    pub plugin_artifacts: Option<PathBuf>,
    /// Address for /metrics, /healthz, /readyz and /plugins. In a pod, give
    /// one the kubelet reaches (`0.0.0.0:8080`); `/plugins` shows file
    /// paths and error text, and `/plugins/<plugin>/replays` failure
    /// captures, only to loopback clients.
    #[arg(long, env = "KUBEPLUG_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Serve the aggregated API (`kubeplug.io/v1alpha1`, see
    /// [`crate::api`]) over TLS on this address; needs `--api-cert` and
    /// `--api-key`, or `--serving-certs-secret`.
    #[arg(long, env = "KUBEPLUG_API_LISTEN")]
    pub api_listen: Option<SocketAddr>,
    /// PEM serving certificate (chain) of the aggregated API; its CA goes
    /// into the APIService's `caBundle`. Re-read every minute.
    #[arg(long, env = "KUBEPLUG_API_CERT", requires = "api_key")]
    pub api_cert: Option<PathBuf>,
    /// PEM private key of that certificate.
    #[arg(long, env = "KUBEPLUG_API_KEY", requires = "api_cert")]
    pub api_key: Option<PathBuf>,
    /// Serve the admission and conversion webhooks the platform grants
    /// plugins (`admission:`, `conversion:` in their grants) over TLS on
    /// this address; needs `--webhook-cert` and `--webhook-key`, or
    /// `--serving-certs-secret`. See docs/webhooks.md.
    #[arg(long, env = "KUBEPLUG_WEBHOOK_LISTEN")]
    pub webhook_listen: Option<SocketAddr>,
    /// PEM serving certificate (chain) of the webhooks; its CA goes into
    /// the webhook configurations' and the CRDs' `caBundle`. Re-read every
    /// minute.
    #[arg(long, env = "KUBEPLUG_WEBHOOK_CERT", requires = "webhook_key")]
    pub webhook_cert: Option<PathBuf>,
    /// PEM private key of that certificate.
    #[arg(long, env = "KUBEPLUG_WEBHOOK_KEY", requires = "webhook_cert")]
    pub webhook_key: Option<PathBuf>,
    /// PEM CA certificate(s) of the client certificate the API server
    /// presents to admission webhooks (its AdmissionConfiguration's
    /// `kubeConfigFile`): with it, an AdmissionReview from a client without
    /// a certificate of that CA is refused before its body is read. The API
    /// server presents none to conversion webhooks, so ConversionReviews
    /// are not asked for one. Re-read every minute.
    #[arg(long, env = "KUBEPLUG_WEBHOOK_CLIENT_CA", requires = "webhook_listen")]
    pub webhook_client_ca: Option<PathBuf>,
    /// The common names that certificate may have (repeat, or separate
    /// with commas); without any, every certificate of the CA is taken,
    /// so give the API server a CA of its own for this.
    #[arg(
        long,
        env = "KUBEPLUG_WEBHOOK_CLIENT_NAMES",
        value_delimiter = ',',
        requires = "webhook_client_ca"
    )]
    pub webhook_client_name: Vec<String>,
    /// Make the serving certificate of `--api-listen` and
    /// `--webhook-listen` itself, instead of `--api-cert` and
    /// `--webhook-cert`, and keep it in this Secret of the host's namespace
    /// (`--lease-namespace`), which every replica serves from: a CA and a
    /// certificate for `--serving-cert-services`, created if absent,
    /// renewed when a third of its lifetime is left (a renewed CA stays in
    /// the bundle beside the old one until that expires). Needs `get`,
    /// `create` and `update` on that Secret.
    #[arg(
        long,
        env = "KUBEPLUG_SERVING_CERTS_SECRET",
        value_name = "NAME",
        conflicts_with_all = ["api_cert", "webhook_cert"]
    )]
    pub serving_certs_secret: Option<String>,
    /// The Services of the host's namespace that certificate is for
    /// (`NAME.NAMESPACE.svc` and `.svc.cluster.local`; `localhost` and
    /// `127.0.0.1` too). A `caBundle` is set only where an object calls one
    /// of them.
    #[arg(
        long,
        env = "KUBEPLUG_SERVING_CERT_SERVICES",
        value_name = "NAMES",
        value_delimiter = ',',
        default_value = "kubeplug-api,kubeplug-webhooks"
    )]
    pub serving_cert_services: Vec<String>,
    /// How long a serving certificate the host makes is valid; its CA, five
    /// times as long.
    #[arg(
        long,
        env = "KUBEPLUG_SERVING_CERT_VALIDITY",
        value_name = "DURATION",
        default_value = "8760h"
    )]
    pub serving_cert_validity: GoDuration,
    /// How often the Secret is re-read (a renewal by another replica is
    /// served within this) and the `caBundle`s re-checked (one reset, by a
    /// `helm upgrade` say, is put back within this).
    #[arg(
        long,
        env = "KUBEPLUG_SERVING_CERTS_CHECK",
        value_name = "DURATION",
        default_value = "1m"
    )]
    pub serving_certs_check: GoDuration,
    /// APIServices whose `spec.caBundle` the host keeps set to its CA
    /// bundle (repeat, or separate with commas), when their service is one
    /// of `--serving-cert-services`.
    #[arg(
        long,
        env = "KUBEPLUG_INJECT_CA_APISERVICES",
        value_name = "NAMES",
        value_delimiter = ',',
        requires = "serving_certs_secret"
    )]
    pub inject_ca_apiservice: Vec<String>,
    /// ValidatingWebhookConfigurations whose webhooks calling one of those
    /// Services get the bundle.
    #[arg(
        long,
        env = "KUBEPLUG_INJECT_CA_VALIDATING",
        value_name = "NAMES",
        value_delimiter = ',',
        requires = "serving_certs_secret"
    )]
    pub inject_ca_validating_webhook: Vec<String>,
    /// MutatingWebhookConfigurations, likewise.
    #[arg(
        long,
        env = "KUBEPLUG_INJECT_CA_MUTATING",
        value_name = "NAMES",
        value_delimiter = ',',
        requires = "serving_certs_secret"
    )]
    pub inject_ca_mutating_webhook: Vec<String>,
    /// CustomResourceDefinitions whose conversion webhook calls one of
    /// those Services.
    #[arg(
        long,
        env = "KUBEPLUG_INJECT_CA_CRDS",
        value_name = "NAMES",
        value_delimiter = ',',
        requires = "serving_certs_secret"
    )]
    pub inject_ca_crd: Vec<String>,
    /// Previews a user may start per second (sustained) through the
    /// aggregated API; more get 429 before they cost anything.
    #[arg(long, env = "KUBEPLUG_PREVIEW_RATE", default_value_t = PreviewLimits::default().per_user_rate)]
    pub preview_rate: f64,
    /// Previews a user may start at once above that rate.
    #[arg(long, env = "KUBEPLUG_PREVIEW_BURST", default_value_t = PreviewLimits::default().per_user_burst)]
    pub preview_burst: u32,
    /// Previews of one user running at once.
    #[arg(long, env = "KUBEPLUG_PREVIEW_CONCURRENCY", default_value_t = PreviewLimits::default().per_user_in_flight)]
    pub preview_concurrency: usize,
    /// Previews running at once, all users together.
    #[arg(long, env = "KUBEPLUG_PREVIEWS_IN_FLIGHT", default_value_t = PreviewLimits::default().in_flight)]
    pub previews_in_flight: usize,
    /// Serve only these namespaces (comma-separated): every plugin's
    /// parents, children and related objects are watched, cached and
    /// written there and nowhere else, so the host needs no cluster-wide
    /// read access. Plugins of cluster-scoped kinds are refused. Default:
    /// every namespace each plugin's grant allows.
    #[arg(long, env = "KUBEPLUG_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Parents reconciled at once, per plugin.
    #[arg(long, env = "KUBEPLUG_CONCURRENCY", default_value_t = Settings::default().concurrency)]
    pub concurrency: usize,
    /// The memory the host may use, in MiB, split between plugin calls and
    /// compiles (see docs/limits.md) [default: the container's memory
    /// limit (cgroup v2 `memory.max` or v1 `memory.limit_in_bytes`), else
    /// the machine's memory].
    #[arg(long, env = "KUBEPLUG_MEMORY_LIMIT_MIB")]
    pub memory_limit_mib: Option<u64>,
    /// Resync period for plugins whose manifest sets none (`10m`; a bare
    /// number is seconds).
    #[arg(
        long,
        alias = "resync-seconds",
        env = "KUBEPLUG_RESYNC",
        value_name = "DURATION",
        default_value_t = GoDuration(Settings::default().resync)
    )]
    pub resync: GoDuration,
    /// Coalesce a parent's changes: reconcile it once they have been quiet
    /// this long (`500ms`; 0: at once).
    #[arg(
        long,
        env = "KUBEPLUG_DEBOUNCE",
        value_name = "DURATION",
        default_value_t = GoDuration(Settings::default().debounce.quiet),
        conflicts_with = "debounce_ms"
    )]
    pub debounce: GoDuration,
    /// `--debounce` in milliseconds (before flags took durations).
    #[arg(long, env = "KUBEPLUG_DEBOUNCE_MS", hide = true)]
    pub debounce_ms: Option<u64>,
    /// ... and no later than this after the first of them.
    #[arg(
        long,
        env = "KUBEPLUG_DEBOUNCE_MAX",
        value_name = "DURATION",
        default_value_t = GoDuration(Settings::default().debounce.max),
        conflicts_with = "debounce_max_ms"
    )]
    pub debounce_max: GoDuration,
    /// `--debounce-max` in milliseconds (before flags took durations).
    #[arg(long, env = "KUBEPLUG_DEBOUNCE_MAX_MS", hide = true)]
    pub debounce_max_ms: Option<u64>,
    /// Elect a leader per plugin through a Lease, so that several replicas
    /// can run with one writer per plugin.
    #[arg(long, env = "KUBEPLUG_LEADER_ELECT")]
    pub leader_elect: bool,
    /// The host's own namespace (default: the pod's namespace, else
    /// `default`): its Leases and the record of versions promoted under a
    /// gate (the ConfigMap `kubeplug-promotions`) live there.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// How long a plugin's Lease lasts without renewal.
    #[arg(
        long,
        env = "KUBEPLUG_LEASE_DURATION",
        value_name = "DURATION",
        default_value = "15s"
    )]
    pub lease_duration: GoDuration,
    /// How long a leader keeps writing without a successful renewal;
    /// shorter than the lease duration.
    #[arg(
        long,
        env = "KUBEPLUG_RENEW_DEADLINE",
        value_name = "DURATION",
        default_value = "10s"
    )]
    pub renew_deadline: GoDuration,
    /// Time between leader-election rounds (renewals and attempts).
    #[arg(
        long,
        env = "KUBEPLUG_RETRY_PERIOD",
        value_name = "DURATION",
        default_value = "2s"
    )]
    pub retry_period: GoDuration,
    /// Requests per second to the API server, per client (the host's own
    /// and each plugin's), a fixed ceiling a platform can set; 0: unlimited.
    /// Unset: adaptive, no pacing until the API server throttles (429, or
    /// 503 with Retry-After), then half the rate the client sent, growing
    /// back by 10/s and lifted after 30 s without throttling.
    #[arg(long, env = "KUBEPLUG_API_QPS")]
    pub api_qps: Option<f64>,
    /// Requests above the sustained rate, per client (with --api-qps N).
    #[arg(long, env = "KUBEPLUG_API_BURST", default_value_t = 200)]
    pub api_burst: u32,
    /// Longest wait for an answer to one API request (watches excepted).
    #[arg(
        long,
        env = "KUBEPLUG_API_TIMEOUT",
        value_name = "DURATION",
        default_value_t = GoDuration(ClientSettings::default().timeout)
    )]
    pub api_timeout: GoDuration,
    /// Bytes each watch's cache holds at most (`1048576`, `512Ki`, `64Mi`,
    /// `1Gi`). Objects beyond it are not cached, and the plugins reading
    /// that watch are degraded until they fit again: anyone who may create
    /// objects carrying a watch's labels decides how much it would hold.
    #[arg(
        long,
        env = "KUBEPLUG_WATCH_CACHE_BYTES",
        value_parser = parse_bytes,
        default_value = "64Mi"
    )]
    pub watch_cache_bytes: usize,
    /// Largest plugin file read, in bytes; a larger one is refused before
    /// it is read. The default (64 MiB) is over three times the largest
    /// guest shipped (Python, ~18 MB).
    #[arg(long, env = "KUBEPLUG_MAX_PLUGIN_BYTES", default_value_t = kubeplug_operator::registry::MAX_PLUGIN_BYTES)]
    pub max_plugin_bytes: u64,
    /// Rescan the plugin directory at least this often, even without change
    /// notifications.
    #[arg(
        long,
        alias = "rescan-seconds",
        env = "KUBEPLUG_RESCAN",
        value_name = "DURATION",
        default_value = "30s"
    )]
    pub rescan: GoDuration,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

impl RunArgs {
    /// `--debounce` and `--debounce-max`, or their millisecond forms.
    pub fn debounce(&self) -> (Duration, Duration) {
        (
            self.debounce_ms
                .map_or(self.debounce.0, Duration::from_millis),
            self.debounce_max_ms
                .map_or(self.debounce_max.0, Duration::from_millis),
        )
    }
}
