//! Command-line arguments: the clap structs of every command, and what
//! they build (a runtime, a policy).
//!
//! Kept apart from [`crate::cli`] (which parses and dispatches) so that the
//! commands ([`crate::run`], [`crate::commands`]) take their arguments
//! without importing the parser.

pub mod duration;
mod run;

pub use run::RunArgs;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use kubeplug_core::policy::Policy;
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
pub fn parse_bytes(text: &str) -> Result<usize, BytesError> {
    let text = text.trim();
    let digits = text.trim_end_matches(|c: char| !c.is_ascii_digit());
    let suffix = &text[digits.len()..];
    let shift = match suffix.strip_suffix('B').unwrap_or(suffix) {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => return Err(BytesError::NotBytes(text.into())),
    };
    let number: usize = digits
        .parse()
        .map_err(|_| BytesError::NotBytes(text.into()))?;
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| BytesError::TooLarge(text.into()))
}

/// A flag's size that is not one ([`parse_bytes`]); the text as given,
/// trimmed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BytesError {
    #[error("{0:?}: give bytes, or a number with Ki, Mi or Gi")]
    NotBytes(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

pub fn parse_bytes_u64(text: &str) -> Result<u64, BytesError> {
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
