//! Command-line interface: argument parsing and wiring only.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::render;
use crate::runtime::{CONTRACT, Limits, Plugin, PluginOptions, Runtime};

#[derive(Parser)]
#[command(
    name = "kubeplug",
    version,
    about = "A Kubernetes operator host for Wasm reconcile plugins"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a plugin on a parent read from a file and print what the operator
    /// would apply. Needs no cluster.
    Render(RenderArgs),
    /// Print a plugin's manifest, contract version, digest and size.
    Inspect(InspectArgs),
    /// Run the operator: load every plugin in a directory and reconcile.
    Run(crate::run::RunArgs),
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
    /// Wall-clock deadline of one plugin call, in milliseconds.
    #[arg(long, default_value_t = Limits::default().timeout.as_millis() as u64)]
    pub timeout_ms: u64,
    /// Cap on a plugin's linear memory, in MiB.
    #[arg(long, default_value_t = (Limits::default().memory_bytes >> 20) as u64)]
    pub memory_mib: u64,
}

impl RuntimeArgs {
    pub fn runtime(&self) -> anyhow::Result<Runtime> {
        let dir = if self.no_cache {
            None
        } else {
            Some(self.cache_dir.clone().unwrap_or_else(default_cache_dir))
        };
        Runtime::new(dir)
            .map_err(anyhow::Error::from)
            .context("failed to start the Wasm runtime")
    }

    pub fn limits(&self) -> Limits {
        Limits {
            timeout: Duration::from_millis(self.timeout_ms),
            memory_bytes: (self.memory_mib as usize) << 20,
            ..Limits::default()
        }
    }
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
    #[arg(short = 'f', long = "filename")]
    parent: PathBuf,
    /// Observed children (YAML/JSON, multi-document allowed). Repeatable.
    #[arg(long)]
    observed: Vec<PathBuf>,
    /// Related objects (YAML/JSON, multi-document allowed). Repeatable.
    #[arg(long)]
    related: Vec<PathBuf>,
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
    crate::telemetry::init_tracing();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Render(args) => render_cmd(args),
        Command::Inspect(args) => inspect_cmd(args),
        Command::Run(args) => crate::run::run(args),
    }
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

/// Load one plugin file for an offline command.
fn load(path: &Path, args: &OfflineArgs) -> anyhow::Result<Plugin> {
    let runtime = &args.runtime;
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let config = args.config.as_deref().map(read_config).transpose()?;
    runtime
        .runtime()?
        .load(
            &bytes,
            PluginOptions {
                config,
                limits: runtime.limits(),
                label: Some(path.display().to_string()),
            },
        )
        .with_context(|| format!("cannot load plugin {}", path.display()))
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
    let plugin = load(&args.plugin, &args.common)?;
    let mut parents = render::read_objects(&args.parent)?;
    if parents.len() != 1 {
        return Err(render::RenderError::ParentCount {
            path: args.parent.display().to_string(),
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
    let rendered = render::render(
        &plugin,
        parents.remove(0),
        read_all(&args.observed)?,
        read_all(&args.related)?,
    )?;
    print(&rendered, args.common.output)
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
    let plugin = load(&args.plugin, &args.common)?;
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
