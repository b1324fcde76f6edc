//! Command-line arguments: the clap structs of every command, and what
//! they build (a runtime, a policy).
//!
//! Kept apart from [`crate::cli`] (which parses and dispatches) so that the
//! commands ([`crate::run`], [`crate::commands`]) take their arguments
//! without importing the parser.

pub mod duration;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use self::duration::GoDuration;

use kubeplug_api::limits::PreviewLimits;
use kubeplug_core::policy::Policy;
use kubeplug_kube::client::ClientSettings;
use kubeplug_operator::controller::Settings;
use kubeplug_runtime::{Allocation, Compiler, LimitSettings, Limits, Runtime, budget, pool};

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

/// How plugins are loaded: cache and limits.
#[derive(Args, Clone)]
pub struct RuntimeArgs {
    /// Directory for precompiled components (so restarts do not recompile).
    #[arg(long, env = "KUBEPLUG_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile in memory only; write no cache.
    #[arg(long, env = "KUBEPLUG_NO_CACHE")]
    pub no_cache: bool,
    /// Bytes of precompiled components the cache directory keeps at most
    /// (`768Mi`, `1Gi`, or bytes), least recently used pruned first; keep it
    /// below the size limit of the volume it is on.
    #[arg(
        long,
        env = "KUBEPLUG_COMPILE_CACHE_BYTES",
        value_parser = parse_bytes_u64,
        default_value = "768Mi"
    )]
    pub compile_cache_bytes: u64,
    /// Wall-clock deadline of one plugin call (`2s`, `500ms`; at most the
    /// policy's `callTimeoutMs`) [default: 2s; `render --request`: the
    /// capture's].
    // No clap default: `render --request` must tell a flag from a default.
    #[arg(
        long,
        env = "KUBEPLUG_CALL_TIMEOUT",
        value_name = "DURATION",
        value_parser = duration::seconds_or_duration,
        conflicts_with = "timeout_ms"
    )]
    pub timeout: Option<Duration>,
    /// `--timeout` in milliseconds (before flags took durations).
    #[arg(long, hide = true)]
    pub timeout_ms: Option<u64>,
    /// Cap on a call's guest memory, in MiB (at most the policy's
    /// `memoryBytes`) [default: 128; `render --request`: the capture's].
    #[arg(long, env = "KUBEPLUG_MEMORY_MIB")]
    pub memory_mib: Option<u64>,
    /// Compiles at once. Loads from the compile cache never wait for one;
    /// a Python or JavaScript guest compiles for 10-30 s.
    #[arg(long, env = "KUBEPLUG_COMPILES", default_value_t = kubeplug_runtime::DEFAULT_COMPILES)]
    pub compiles: usize,
    /// `run`: instance slots of the pool calls take their instances from
    /// (a call waits for a free one); `0` maps each instance on demand
    /// instead [default: one per 2 MiB of the memory budget for calls,
    /// 16 to 256].
    #[arg(long, env = "KUBEPLUG_INSTANCE_SLOTS")]
    pub instance_slots: Option<u32>,
}

/// The platform's policy (see [`kubeplug_core::policy`]).
#[derive(Args, Clone)]
pub struct PolicyArgs {
    /// Policy file granting each plugin what it may do (repeatable, or
    /// comma-separated). Without one, every plugin gets the default grant.
    #[arg(long = "policy", env = "KUBEPLUG_POLICY", value_delimiter = ',')]
    pub files: Vec<PathBuf>,
}

impl PolicyArgs {
    pub fn load(&self) -> anyhow::Result<Policy> {
        Policy::load(&self.files).context("failed to load the policy")
    }

    /// The policy files, to be re-read while the host runs.
    pub fn watch(&self) -> anyhow::Result<kubeplug_core::policy::PolicyFiles> {
        kubeplug_core::policy::PolicyFiles::load(self.files.clone())
            .context("failed to load the policy")
    }
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

/// The cluster a command talks to, chosen as kubectl chooses it: a
/// kubeconfig file (`--kubeconfig`, else `KUBECONFIG`, else
/// `~/.kube/config`) and its context, else the pod's service account.
#[derive(Args, Clone, Default)]
pub struct ClusterArgs {
    /// The kubeconfig file [default: `KUBECONFIG`, else `~/.kube/config`,
    /// else in-cluster].
    #[arg(long, env = "KUBEPLUG_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use [default: its current context].
    #[arg(long, env = "KUBEPLUG_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
}

impl ClusterArgs {
    /// The client configuration these flags choose.
    pub async fn config(&self) -> anyhow::Result<kube::Config> {
        use kube::config::{KubeConfigOptions, Kubeconfig};
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        match &self.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .with_context(|| format!("cannot use the kubeconfig {}", path.display()))
            }
            None if self.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .context("cannot use the kubeconfig (KUBECONFIG, else ~/.kube/config)"),
            None => kube::Config::infer()
                .await
                .context("failed to find Kubernetes credentials (kubeconfig or in-cluster)"),
        }
    }

    /// A client for that configuration.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        kube::Client::try_from(self.config().await?).context("failed to build a Kubernetes client")
    }
}

impl RuntimeArgs {
    pub fn runtime(&self) -> anyhow::Result<Runtime> {
        self.runtime_with(Allocation::OnDemand)
    }

    fn runtime_with(&self, allocation: Allocation) -> anyhow::Result<Runtime> {
        let dir = if self.no_cache {
            None
        } else {
            Some(self.cache_dir.clone().unwrap_or_else(default_cache_dir))
        };
        Runtime::with_allocation(dir, allocation)
            .map(|r| {
                r.with_compiles(self.compiles)
                    .with_cache_budget(self.compile_cache_bytes)
            })
            .map_err(anyhow::Error::from)
            .context("failed to start the Wasm runtime")
    }

    /// The same runtime compiling in a bounded child process of this
    /// executable (see [`kubeplug_runtime::compile`]), showing a compile's
    /// progress on a terminal.
    pub fn bounded_runtime(&self) -> anyhow::Result<Runtime> {
        let exe = std::env::current_exe().context("cannot find the kubeplug executable")?;
        let runtime = self.runtime()?.with_compiler(Compiler::Subprocess(exe));
        Ok(match crate::progress::Terminal::if_attended() {
            Some(terminal) => runtime.with_compile_watch(std::sync::Arc::new(terminal)),
            None => runtime,
        })
    }

    /// `run`'s runtime: bounded compiles, calls charged against `plan`,
    /// instances from a pool sized from it (see
    /// [`kubeplug_runtime::pool`]) unless `--instance-slots 0`.
    pub fn serving_runtime(&self, plan: budget::Plan) -> anyhow::Result<Runtime> {
        let allocation = match self.instance_slots {
            Some(0) => Allocation::OnDemand,
            Some(instances) => Allocation::Pooling { instances },
            None => Allocation::Pooling {
                instances: pool::slots_for(plan.calls),
            },
        };
        let exe = std::env::current_exe().context("cannot find the kubeplug executable")?;
        Ok(self
            .runtime_with(allocation)?
            .with_compiler(Compiler::Subprocess(exe))
            .with_compile_watch(std::sync::Arc::new(crate::progress::LogLines))
            .with_memory_plan(plan))
    }

    /// The limits asked for on the command line (the policy caps them).
    pub fn limits(&self) -> LimitSettings {
        let defaults = Limits::default();
        self.limits_over(LimitSettings {
            timeout_ms: Some(defaults.timeout.as_millis() as u64),
            memory_bytes: Some(defaults.memory_bytes),
        })
    }

    /// `base` where the command line does not say otherwise.
    pub fn limits_over(&self, base: LimitSettings) -> LimitSettings {
        LimitSettings {
            timeout_ms: self
                .timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
                .or(self.timeout_ms)
                .or(base.timeout_ms),
            memory_bytes: self
                .memory_mib
                .map(|mib| (mib as usize) << 20)
                .or(base.memory_bytes),
        }
    }
}

/// A size in bytes: a number, optionally with a binary suffix as Kubernetes
/// quantities have them (`512Ki`, `64Mi`, `1Gi`; a trailing `B` is allowed).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let digits = text.trim_end_matches(|c: char| !c.is_ascii_digit());
    let suffix = &text[digits.len()..];
    let shift = match suffix.strip_suffix('B').unwrap_or(suffix) {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => {
            return Err(format!(
                "{text:?}: give bytes, or a number with Ki, Mi or Gi"
            ));
        }
    };
    let number: usize = digits
        .parse()
        .map_err(|_| format!("{text:?}: give bytes, or a number with Ki, Mi or Gi"))?;
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

pub fn parse_bytes_u64(text: &str) -> Result<u64, String> {
    parse_bytes(text).map(|b| b as u64)
}

pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("kubeplug").join("compiled")
}

#[derive(Args)]
pub struct RenderArgs {
    /// The plugin (`.wasm` component).
    #[arg(long)]
    pub plugin: PathBuf,
    /// The parent object (YAML or JSON). With --admission, the object
    /// written (on delete, the object deleted); with --convert-to, the
    /// objects to convert (several allowed).
    #[arg(
        short = 'f',
        long = "filename",
        required_unless_present_any = ["request", "old"],
        conflicts_with = "request"
    )]
    pub parent: Option<PathBuf>,
    /// Print what the live host's admission webhooks would answer for this
    /// write: mutate's JSON patch (or its refusal), then validate's verdict
    /// on the mutated object.
    #[arg(
        long,
        value_name = "OPERATION",
        value_parser = ["create", "update", "delete"],
        conflicts_with_all = ["request", "observed", "related"]
    )]
    pub admission: Option<String>,
    /// With --admission update or delete: the stored object before the
    /// write (YAML or JSON).
    #[arg(long, value_name = "FILE", requires = "admission")]
    pub old: Option<PathBuf>,
    /// Print the objects of -f converted to API_VERSION (e.g.
    /// example.com/v2) as the live host's conversion webhook would answer,
    /// and what converting each back to its own version loses.
    #[arg(
        long,
        value_name = "API_VERSION",
        conflicts_with_all = ["request", "observed", "related", "admission"]
    )]
    pub convert_to: Option<String>,
    /// Observed children (YAML/JSON, multi-document allowed). Repeatable.
    #[arg(long, conflicts_with = "request")]
    pub observed: Vec<PathBuf>,
    /// Related objects (YAML/JSON, multi-document allowed). Repeatable.
    #[arg(long, conflicts_with = "request")]
    pub related: Vec<PathBuf>,
    /// Replay a failure the live host kept (`kubeplug replay -o FILE`): its
    /// request verbatim, with its configuration and limits unless
    /// `--config`, `--timeout` or `--memory-mib` say otherwise.
    #[arg(long, value_name = "FILE")]
    pub request: Option<PathBuf>,
    /// CustomResourceDefinitions (YAML/JSON) that tell the scope of custom
    /// kinds, as the live host learns it from the API server. Repeatable.
    #[arg(long)]
    pub crd: Vec<PathBuf>,
    /// Fail when the policy (without `--policy`, the default grant) would
    /// refuse the plugin. Without `--policy` and without this flag, the
    /// default grant's refusals are warnings and the plugin renders under
    /// the grant it asks for.
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub common: OfflineArgs,
}

/// The plugin `package` and `push` read, loaded as `inspect` loads it.
#[derive(Args)]
pub struct PackageSource {
    /// The plugin (`.wasm` component).
    pub plugin: PathBuf,
    /// The plugin's configuration document (YAML or JSON), for plugins that
    /// need one to load (the manifest is read from the loaded plugin).
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// `kubeplug package`.
#[derive(Args)]
#[command(after_help = "\
Writes an OCI image layout with two tags: `<version>`, the Wasm OCI artifact \
(config application/vnd.wasm.config.v0+json, one application/wasm layer) that \
wkg, Spin, Kubewarden and CRI-O image volumes read; and `<version>-volume`, an \
image index of one tar-layer image per Linux architecture holding \
`/<name>.wasm`, which containerd image volumes mount. `created` is \
SOURCE_DATE_EPOCH when set, so a build can be reproduced.")]
pub struct PackageArgs {
    #[command(flatten)]
    pub source: PackageSource,
    /// Where to write: a directory (the layout), or `FILE.tar` (the layout
    /// as an OCI archive, as `skopeo copy oci-archive:` takes it).
    #[arg(short, long)]
    pub output: PathBuf,
}

/// The registry `push` and `verify` talk to, and how they log in.
#[derive(Args)]
pub struct RegistryArgs {
    /// Plain HTTP to a registry that is not on loopback.
    #[arg(long)]
    pub insecure: bool,
    /// With --password, instead of the credentials `docker login` or
    /// `podman login` saved.
    #[arg(long, env = "KUBEPLUG_REGISTRY_USERNAME")]
    pub username: Option<String>,
    #[arg(long, env = "KUBEPLUG_REGISTRY_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
}

impl RegistryArgs {
    /// As the OCI client takes them.
    pub fn access(&self) -> kubeplug_oci::client::Access {
        kubeplug_oci::client::Access {
            insecure: self.insecure,
            username: self.username.clone(),
            password: self.password.clone(),
        }
    }
}

/// `kubeplug push`.
#[derive(Args)]
#[command(after_help = "\
Pushes the content `kubeplug package` writes: the Wasm artifact as REF's tag, \
the image-volume index as `<tag>-volume`. Plain HTTP for localhost, \
127.0.0.1 and ::1 (or with --insecure), HTTPS otherwise (the system's roots).

Credentials (Basic, or a Bearer token from the registry's token service): \
--username/--password, else the first auth file with an entry for the \
registry among $REGISTRY_AUTH_FILE (else $XDG_RUNTIME_DIR/containers/auth.json) \
and $DOCKER_CONFIG/config.json (else ~/.docker/config.json), its credHelpers \
or credsStore helper (docker-credential-NAME) asked first; anonymous otherwise.

--sign-key signs both tags' digests as `cosign sign --key` does: a \
`sha256-<hex>.sig` manifest beside them, which `kubeplug verify` and \
`cosign verify --key KEY.pub --insecure-ignore-tlog=true` check (cosign \
also needs --allow-http-registry for plain HTTP). The key is \
ECDSA P-256, unencrypted PEM (`openssl genpkey -algorithm EC -pkeyopt \
ec_paramgen_curve:P-256 -out key.pem`; `openssl pkey -in key.pem -pubout` \
for the public key; `cosign import-key-pair --key key.pem` to use it in cosign).")]
pub struct PushArgs {
    #[command(flatten)]
    pub source: PackageSource,
    /// `HOST[:PORT]/REPOSITORY[:TAG]`; the tag defaults to the plugin's
    /// version.
    pub reference: String,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Sign what is pushed with this private key (PEM: `PRIVATE KEY` or
    /// `EC PRIVATE KEY`, ECDSA P-256), in cosign's format.
    #[arg(long, value_name = "KEY.pem", env = "KUBEPLUG_SIGN_KEY")]
    pub sign_key: Option<PathBuf>,
}

/// `kubeplug verify`.
#[derive(Args)]
#[command(after_help = "\
Checks a cosign key-based signature, as `cosign verify --key KEY \
--insecure-ignore-tlog=true` does: the manifest's digest, its \
`sha256-<hex>.sig` manifest, and a signature there that the key verifies \
over a payload naming that digest. Exit status 1, with the reason, when the \
manifest is unsigned, signed only by other keys, or signed for another \
digest. Verify both `TAG` and `TAG-volume`: either may be what a node pulls. \
Credentials as for `push`.")]
pub struct VerifyArgs {
    /// `HOST[:PORT]/REPOSITORY:TAG` or `HOST[:PORT]/REPOSITORY@sha256:…`.
    pub reference: String,
    /// The public key (PEM `PUBLIC KEY`, as `cosign.pub` or `openssl pkey
    /// -pubout` writes it).
    #[arg(long, value_name = "PUB.pem")]
    pub key: PathBuf,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Args)]
pub struct InspectArgs {
    /// The plugin (`.wasm` component).
    pub plugin: PathBuf,
    #[command(flatten)]
    pub common: OfflineArgs,
}

#[derive(Args)]
#[command(after_help = "\
Exit status: 0 when every case passes, 1 when one fails, 2 when a fixture \
cannot be read or the plugin cannot be loaded (or the live host would refuse \
it under --policy).

--update replaces the `expect` block of each failing case and keeps the rest \
of the file as written. A file where that cannot be done safely (a case in \
flow style, JSON) is written out whole: keys keep their order, comments are \
lost. Review the diff.")]
pub struct TestArgs {
    /// The plugin's directory: fixtures in DIR/fixtures/ (else DIR itself),
    /// the plugin in DIR/dist/.
    pub dir: PathBuf,
    /// The plugin (`.wasm` component) [default: the one `*.wasm` file in
    /// DIR/dist/].
    #[arg(long)]
    pub plugin: Option<PathBuf>,
    /// Rewrite the `expect` of each failing case with the plugin's answer.
    #[arg(long)]
    pub update: bool,
    /// Configuration document (YAML or JSON) of the cases that give no
    /// `config` [default: {}].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// CustomResourceDefinitions (YAML/JSON) that tell the scope of custom
    /// kinds, as the live host learns it from the API server. Repeatable.
    #[arg(long)]
    pub crd: Vec<PathBuf>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

#[derive(Args)]
pub struct NewArgs {
    /// The plugin's name, a DNS label: it names the directory, the package
    /// and the plugin.
    pub name: String,
    #[arg(long, value_enum)]
    pub lang: kubeplug_kit::kit::scaffold::Lang,
    /// Where to create NAME/.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// The SDK the project depends on [default: the one in the source tree
    /// this kubeplug was built from].
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

/// What both offline commands take besides the plugin.
#[derive(Args)]
pub struct OfflineArgs {
    /// The plugin's configuration document (YAML or JSON), for plugins that
    /// need one.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[arg(short, long, value_enum, default_value = "yaml")]
    pub output: Format,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

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

#[cfg(test)]
mod tests {
    use super::{parse_bytes, parse_bytes_u64};

    #[test]
    fn sizes_are_bytes_or_binary_multiples() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("512Ki"), Ok(512 << 10));
        assert_eq!(parse_bytes("64Mi"), Ok(64 << 20));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
        // The flags' defaults, as text, are the constants.
        assert_eq!(
            parse_bytes("64Mi"),
            Ok(kubeplug_kube::informers::DEFAULT_WATCH_BYTES)
        );
        assert_eq!(
            parse_bytes_u64("768Mi"),
            Ok(kubeplug_runtime::DEFAULT_CACHE_BYTES)
        );
        for wrong in ["", "Mi", "1M", "1.5Mi", "-1", "1MiBB"] {
            assert!(parse_bytes(wrong).is_err(), "{wrong:?}");
        }
    }
}
