//! Command-line interface: argument parsing and wiring only.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::policy::{Effective, Policy};
use crate::render;
use crate::replay::{Call, Capture};
use crate::runtime::{CONTRACT, Compiler, LimitSettings, Limits, Plugin, PluginOptions, Runtime};

#[derive(Parser)]
#[command(
    name = "kubeplug",
    version,
    about = "A Kubernetes operator host for Wasm reconcile plugins"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format: `text` (colour only on a terminal) or `json` (one object
    /// per line). The level comes from `RUST_LOG` (or `KUBEPLUG_LOG`).
    #[arg(
        long,
        global = true,
        env = "KUBEPLUG_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: crate::logging::LogFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Run a plugin on a parent read from a file and print what the operator
    /// would apply. Needs no cluster.
    Render(RenderArgs),
    /// Print a plugin's manifest, contract version, digest and size.
    Inspect(InspectArgs),
    /// Run a plugin over its fixture files (docs/fixtures.md) and compare
    /// its answers with the expected ones. Needs no cluster.
    Test(TestArgs),
    /// Create a plugin project from a template: `NAME/` with the plugin,
    /// a fixture, a build script and a README.
    New(NewArgs),
    /// Run the operator: load every plugin in a directory and reconcile.
    Run(crate::run::RunArgs),
    /// Release a removed plugin's finalizers, so that its deleted parents
    /// stop hanging in Terminating.
    ReleaseFinalizers(crate::finalizers::ReleaseArgs),
    /// List a plugin's failed calls kept by a running host, or fetch one as
    /// a file for `render --request`.
    Replay(crate::replay::fetch::ReplayArgs),
    /// Internal: compile a component in a child process of the host, so
    /// that the host can bound its time and memory.
    #[command(name = "__compile", hide = true)]
    Compile { input: PathBuf, output: PathBuf },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
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
    #[arg(long)]
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
    /// Wall-clock deadline of one plugin call, in milliseconds (at most the
    /// policy's `callTimeoutMs`) [default: 2000; `render --request`: the
    /// capture's].
    // No clap default: `render --request` must tell a flag from a default.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Cap on a call's guest memory, in MiB (at most the policy's
    /// `memoryBytes`) [default: 128; `render --request`: the capture's].
    #[arg(long)]
    pub memory_mib: Option<u64>,
    /// Compiles at once. Loads from the compile cache never wait for one;
    /// a Python or JavaScript guest compiles for 10-30 s.
    #[arg(long, env = "KUBEPLUG_COMPILES", default_value_t = crate::runtime::DEFAULT_COMPILES)]
    pub compiles: usize,
}

/// The platform's policy (see [`crate::policy`]).
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
    pub fn watch(&self) -> anyhow::Result<crate::policy::PolicyFiles> {
        crate::policy::PolicyFiles::load(self.files.clone()).context("failed to load the policy")
    }
}

impl RuntimeArgs {
    pub fn runtime(&self) -> anyhow::Result<Runtime> {
        let dir = if self.no_cache {
            None
        } else {
            Some(self.cache_dir.clone().unwrap_or_else(default_cache_dir))
        };
        Runtime::new(dir)
            .map(|r| {
                r.with_compiles(self.compiles)
                    .with_cache_budget(self.compile_cache_bytes)
            })
            .map_err(anyhow::Error::from)
            .context("failed to start the Wasm runtime")
    }

    /// The same runtime compiling in a bounded child process of this
    /// executable (see [`crate::runtime::compile`]).
    pub fn bounded_runtime(&self) -> anyhow::Result<Runtime> {
        let exe = std::env::current_exe().context("cannot find the kubeplug executable")?;
        Ok(self.runtime()?.with_compiler(Compiler::Subprocess(exe)))
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
            timeout_ms: self.timeout_ms.or(base.timeout_ms),
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

fn parse_bytes_u64(text: &str) -> Result<u64, String> {
    parse_bytes(text).map(|b| b as u64)
}

fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("kubeplug").join("compiled")
}

#[derive(Args)]
struct RenderArgs {
    /// The plugin (`.wasm` component).
    #[arg(long)]
    plugin: PathBuf,
    /// The parent object (YAML or JSON).
    #[arg(
        short = 'f',
        long = "filename",
        required_unless_present = "request",
        conflicts_with = "request"
    )]
    parent: Option<PathBuf>,
    /// Observed children (YAML/JSON, multi-document allowed). Repeatable.
    #[arg(long, conflicts_with = "request")]
    observed: Vec<PathBuf>,
    /// Related objects (YAML/JSON, multi-document allowed). Repeatable.
    #[arg(long, conflicts_with = "request")]
    related: Vec<PathBuf>,
    /// Replay a failure the live host kept (`kubeplug replay -o FILE`): its
    /// request verbatim, with its configuration and limits unless
    /// `--config`, `--timeout-ms` or `--memory-mib` say otherwise.
    #[arg(long, value_name = "FILE")]
    request: Option<PathBuf>,
    /// CustomResourceDefinitions (YAML/JSON) that tell the scope of custom
    /// kinds, as the live host learns it from the API server. Repeatable.
    #[arg(long)]
    crd: Vec<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    common: OfflineArgs,
}

#[derive(Args)]
struct InspectArgs {
    /// The plugin (`.wasm` component).
    plugin: PathBuf,
    #[command(flatten)]
    common: OfflineArgs,
}

#[derive(Args)]
#[command(after_help = "\
Exit status: 0 when every case passes, 1 when one fails, 2 when a fixture \
cannot be read or the plugin cannot be loaded.

--update replaces the `expect` block of each failing case and keeps the rest \
of the file as written. A file where that cannot be done safely (a case in \
flow style, JSON) is written out whole: keys keep their order, comments are \
lost. Review the diff.")]
struct TestArgs {
    /// The plugin's directory: fixtures in DIR/fixtures/ (else DIR itself),
    /// the plugin in DIR/dist/.
    dir: PathBuf,
    /// The plugin (`.wasm` component) [default: the one `*.wasm` file in
    /// DIR/dist/].
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Rewrite the `expect` of each failing case with the plugin's answer.
    #[arg(long)]
    update: bool,
    /// Configuration document (YAML or JSON) of the cases that give no
    /// `config` [default: {}].
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Args)]
struct NewArgs {
    /// The plugin's name, a DNS label: it names the directory, the package
    /// and the plugin.
    name: String,
    #[arg(long, value_enum)]
    lang: crate::kit::scaffold::Lang,
    /// Where to create NAME/.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// The SDK the project depends on [default: the one in the source tree
    /// this kubeplug was built from].
    #[arg(long)]
    sdk: Option<PathBuf>,
}

/// What both offline commands take besides the plugin.
#[derive(Args)]
struct OfflineArgs {
    /// The plugin's configuration document (YAML or JSON), for plugins that
    /// need one.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(short, long, value_enum, default_value = "yaml")]
    output: Format,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::logging::init_tracing(cli.log_format);
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let done = match cli.command {
        Command::Test(args) => return Ok(test_cmd(args)),
        Command::New(args) => new_cmd(args),
        Command::Render(args) => render_cmd(args),
        Command::Inspect(args) => inspect_cmd(args),
        Command::Run(args) => crate::run::run(args),
        Command::ReleaseFinalizers(args) => crate::finalizers::release_cmd(args),
        Command::Replay(args) => crate::replay::fetch::replay_cmd(args),
        Command::Compile { input, output } => {
            crate::runtime::compile::compile_main(&input, &output)
        }
    };
    done.map(|()| ExitCode::SUCCESS)
}

/// `kubeplug test`: exit 0 (all passed), 1 (a case failed) or 2 (nothing
/// could be tested).
fn test_cmd(args: TestArgs) -> ExitCode {
    let tested = || -> anyhow::Result<crate::kit::Report> {
        let policy = args.policy.load()?;
        let config = args.config.as_deref().map(read_config).transpose()?;
        let stem = args
            .plugin
            .as_deref()
            .and_then(Path::file_stem)
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let limits = args
            .runtime
            .limits()
            .within(policy.quotas_for_file(stem).limits());
        let options = crate::kit::Options {
            plugin: args.plugin.clone(),
            update: args.update,
            config,
            limits,
            policy,
        };
        let runtime = args.runtime.bounded_runtime()?;
        Ok(crate::kit::run(&runtime, &args.dir, &options)?)
    };
    match tested() {
        Ok(report) => {
            print!("{}", report.render());
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn new_cmd(args: NewArgs) -> anyhow::Result<()> {
    let dir =
        crate::kit::scaffold::scaffold(args.lang, &args.name, &args.dir, args.sdk.as_deref())?;
    println!(
        "created {} ({} plugin {}); see its README.md to build and test it",
        dir.display(),
        args.lang.dir(),
        args.name
    );
    Ok(())
}

/// Read a configuration document (YAML or JSON) into JSON.
pub fn read_config(path: &Path) -> anyhow::Result<serde_json::Value> {
    let mut docs = render::read_objects(path)?;
    match docs.len() {
        0 => Ok(serde_json::json!({})),
        1 => Ok(docs.remove(0)),
        n => bail!(
            "{}: expected one configuration document, found {n}",
            path.display()
        ),
    }
}

/// Load one plugin file for an offline command with `config` and `limits`,
/// within `policy`'s quotas (compiled in a bounded child process, as the
/// host does).
fn load(
    path: &Path,
    config: Option<serde_json::Value>,
    limits: LimitSettings,
    args: &OfflineArgs,
    policy: &Policy,
) -> anyhow::Result<Plugin> {
    let runtime = &args.runtime;
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let quotas = policy.quotas_for_file(stem);
    runtime
        .bounded_runtime()?
        .load(
            &bytes,
            PluginOptions {
                config,
                limits: limits.within(quotas.limits()),
                compile: quotas.compile(),
                label: Some(path.display().to_string()),
            },
        )
        .with_context(|| format!("cannot load plugin {}", path.display()))
}

/// The grant the live host would give `plugin` under `policy`, and the
/// plugin as the host would admit it (scopes resolved offline: built-in
/// kinds and `crds`).
fn admit(
    plugin: Plugin,
    policy: &Policy,
    crds: &[serde_json::Value],
    limits: LimitSettings,
) -> anyhow::Result<(Plugin, Effective, Vec<String>)> {
    let name = plugin.name().to_string();
    let grant = policy.grant(&name).with_context(|| {
        format!(
            "the live host would refuse plugin {name}: the policy is strict and has no grant for it"
        )
    })?;
    let scopes = crate::discovery::Scopes::offline(crds);
    let notes = std::cell::RefCell::new(Vec::new());
    let resolved = plugin
        .manifest()
        .resolve(|r| {
            scopes.lookup(r).or_else(|| {
                notes.borrow_mut().push(format!(
                    "the scope of {r} is the plugin's own claim (the live host asks the API server; pass --crd to check it here)"
                ));
                Some((r.plural.clone(), r.namespaced))
            })
        })
        .map_err(|problems| anyhow::anyhow!("the live host would refuse plugin {name}: {}", problems.join("; ")))?;
    let admitted = grant
        .admit(&resolved, plugin.digest())
        .map_err(|refusal| anyhow::anyhow!("the live host would refuse this plugin: {refusal}"))?;
    let limits = limits.within(grant.quotas.limits());
    Ok((plugin.admitted(admitted, limits), grant, notes.into_inner()))
}

fn print<T: Serialize>(value: &T, format: Format) -> anyhow::Result<()> {
    let text = match format {
        Format::Yaml => serde_yaml::to_string(value)?,
        Format::Json => serde_json::to_string_pretty(value)? + "\n",
    };
    print!("{text}");
    Ok(())
}

fn render_cmd(args: RenderArgs) -> anyhow::Result<()> {
    let policy = args.policy.load()?;
    let mut crds = Vec::new();
    for path in &args.crd {
        crds.extend(render::read_objects(path)?);
    }
    if let Some(file) = &args.request {
        return replay_cmd(&args, file, &policy, &crds);
    }
    let config = args.common.config.as_deref().map(read_config).transpose()?;
    let limits = args.common.runtime.limits();
    let plugin = load(&args.plugin, config, limits, &args.common, &policy)?;
    let (plugin, grant, notes) = admit(plugin, &policy, &crds, limits)?;
    let parent = args
        .parent
        .as_deref()
        .expect("clap requires -f without --request");
    let mut parents = render::read_objects(parent)?;
    if parents.len() != 1 {
        return Err(render::RenderError::ParentCount {
            path: parent.display().to_string(),
            count: parents.len(),
        }
        .into());
    }
    let read_all = |paths: &[PathBuf]| -> anyhow::Result<Vec<serde_json::Value>> {
        let mut all = Vec::new();
        for p in paths {
            all.extend(render::read_objects(p)?);
        }
        Ok(all)
    };
    let mut rendered = render::render(
        &plugin,
        &grant,
        parents.remove(0),
        read_all(&args.observed)?,
        read_all(&args.related)?,
    )?;
    rendered.notes = notes;
    print(&rendered, args.common.output)
}

/// Read a capture file (`kind: Replay`, YAML or JSON).
fn read_capture(path: &Path) -> anyhow::Result<Capture> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let capture: Capture = serde_yaml::from_str(&text)
        .with_context(|| format!("{} is not a replay capture", path.display()))?;
    capture
        .check_kind()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(capture)
}

/// `render --request`: the captured call again, through the same path as
/// `render`. A failure prints as the host logged it (the capture's `error`).
fn replay_cmd(
    args: &RenderArgs,
    file: &Path,
    policy: &Policy,
    crds: &[serde_json::Value],
) -> anyhow::Result<()> {
    let capture = read_capture(file)?;
    let config = match &args.common.config {
        Some(path) => read_config(path)?,
        None => capture.config.clone(),
    };
    let limits = args.common.runtime.limits_over(LimitSettings {
        timeout_ms: Some(u64::try_from(capture.limits.timeout.as_millis()).unwrap_or(u64::MAX)),
        memory_bytes: Some(capture.limits.memory_bytes),
    });
    let plugin = load(&args.plugin, Some(config), limits, &args.common, policy)?;
    let (plugin, grant, mut notes) = admit(plugin, policy, crds, limits)?;
    if plugin.name() != capture.plugin {
        notes.push(format!(
            "the capture is of plugin {}, this is plugin {}",
            capture.plugin,
            plugin.name()
        ));
    }
    if plugin.digest() != capture.digest {
        notes.push(format!(
            "the failure happened on {}@{} (digest {}); this is {}@{} (digest {})",
            capture.plugin,
            capture.version,
            capture.digest,
            plugin.name(),
            plugin.manifest().version,
            plugin.digest()
        ));
    }
    let request = capture
        .request()
        .with_context(|| format!("{} cannot be replayed", file.display()))?;
    // On failure the notes go to stderr before the error, whose line stays
    // exactly the capture's.
    let failed = |error: render::RenderError, notes: &[String]| {
        for note in notes {
            eprintln!("note: {note}");
        }
        anyhow::Error::from(error)
    };
    match capture.call {
        Call::Reconcile => {
            let mut rendered =
                render::render_request(&plugin, &grant, &request).map_err(|e| failed(e, &notes))?;
            rendered.notes = notes;
            print(&rendered, args.common.output)
        }
        Call::Finalize => {
            let mut finalized = render::finalize_request(&plugin, &grant, &request)
                .map_err(|e| failed(e, &notes))?;
            finalized.notes = notes;
            print(&finalized, args.common.output)
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Inspection<'a> {
    contract: &'a str,
    digest: &'a str,
    size_bytes: usize,
    manifest: &'a crate::manifest::Manifest,
}

fn inspect_cmd(args: InspectArgs) -> anyhow::Result<()> {
    let config = args.common.config.as_deref().map(read_config).transpose()?;
    let limits = args.common.runtime.limits();
    let plugin = load(
        &args.plugin,
        config,
        limits,
        &args.common,
        &Policy::default(),
    )?;
    print(
        &Inspection {
            contract: CONTRACT,
            digest: plugin.digest(),
            size_bytes: plugin.size(),
            manifest: plugin.manifest(),
        },
        args.common.output,
    )
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
            Ok(crate::informers::DEFAULT_WATCH_BYTES)
        );
        assert_eq!(
            parse_bytes_u64("768Mi"),
            Ok(crate::runtime::DEFAULT_CACHE_BYTES)
        );
        for wrong in ["", "Mi", "1M", "1.5Mi", "-1", "1MiBB"] {
            assert!(parse_bytes(wrong).is_err(), "{wrong:?}");
        }
    }
}
