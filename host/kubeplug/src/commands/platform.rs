//! `kubeplug platform`: the platform side of a plugin (its identity, the
//! host's rules for it, its grant), derived from its manifest by
//! [`kubeplug_kit::platform`] and written as a kustomization or a Helm
//! values fragment.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use super::offline::read_config;
use crate::args::RuntimeArgs;
use kubeplug_core::policy::{DEFAULT_IDENTITY_NAMESPACE, Policy};
use kubeplug_kit::platform::{Options, Platform, Rule, write_files};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlatformFormat {
    /// A directory for `kubectl apply -k`, and the grant as a policy file.
    Kustomize,
    /// A values fragment for `helm upgrade -f` with deploy/chart.
    Helm,
}

#[derive(Args)]
#[command(after_help = "\
Exit status: 0 when done (with --check: when every file is current), 1 with \
--check when a file would change (each is named), 2 on an error.

The manifest does not name the label and annotation keys a decorator sets: \
give them with --decorator-key, or the grant allows any key outside the \
reserved ones.")]
pub struct PlatformArgs {
    /// The plugin (`.wasm` component).
    pub plugin: PathBuf,
    /// The plugin's configuration document (YAML or JSON): its manifest
    /// (namespaces, kinds) may depend on it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Namespace of the plugins' ServiceAccounts and of the host's own
    /// (`identityNamespace` of the policy).
    #[arg(long, default_value = DEFAULT_IDENTITY_NAMESPACE)]
    pub identity_namespace: String,
    #[arg(long, value_enum, default_value = "kustomize")]
    pub format: PlatformFormat,
    /// Write into this directory (kustomize: kustomization.yaml and one
    /// file per concern; helm: values-<name>.yaml). Default: print.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Write nothing; exit 1 naming each file that would change.
    #[arg(long, requires = "out")]
    pub check: bool,
    /// A label or annotation key (or `prefix*`) the plugin may set
    /// (`decoratorKeys` of its grant); repeatable.
    #[arg(long = "decorator-key", value_name = "KEY")]
    pub decorator_keys: Vec<String>,
    /// Shards its parents are split into (`shards` of its grant).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub shards: u16,
    /// Pin the grant to this file's digest (`sha256` of its grant).
    #[arg(long)]
    pub pin: bool,
    /// Helm: the release's values files, whose `rbac.hostReadRules` the
    /// fragment keeps beside this plugin's (Helm replaces lists).
    #[arg(long = "helm-values", value_name = "FILE")]
    pub helm_values: Vec<PathBuf>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// `rbac.hostReadRules` of each values file, together.
fn host_reads(files: &[PathBuf]) -> anyhow::Result<Vec<Rule>> {
    let mut rules = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let values: serde_json::Value = kubeplug_core::yaml::from_str(&text)
            .with_context(|| format!("{} is not a values file", file.display()))?;
        let reads = &values["rbac"]["hostReadRules"];
        if !reads.is_null() {
            rules.extend(
                serde_json::from_value::<Vec<Rule>>(reads.clone()).with_context(|| {
                    format!(
                        "{}: rbac.hostReadRules is not a list of rules",
                        file.display()
                    )
                })?,
            );
        }
    }
    Ok(rules)
}

/// The files `args` asks for, by name.
pub fn files(platform: &Platform, args: &PlatformArgs) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(match args.format {
        PlatformFormat::Kustomize => platform.kustomize(),
        PlatformFormat::Helm => {
            let kept = (!args.helm_values.is_empty())
                .then(|| host_reads(&args.helm_values))
                .transpose()?;
            [(
                format!("values-{}.yaml", platform.plugin),
                platform.helm(kept.as_deref()),
            )]
            .into()
        }
    })
}

/// `kubeplug platform`: 0 done or current, 1 a file would change
/// (`--check`), 2 an error.
pub fn run(args: PlatformArgs) -> ExitCode {
    match generate(args) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn generate(args: PlatformArgs) -> anyhow::Result<ExitCode> {
    let config = args.config.as_deref().map(read_config).transpose()?;
    let runtime = args.runtime.bounded_runtime()?;
    // The manifest as the plugin declares it, admitted by no policy.
    let plugin = kubeplug_kit::kit::load::compile(
        &runtime,
        &args.plugin,
        config,
        args.runtime.limits(),
        &Policy::default(),
    )?;
    let options = Options {
        identity_namespace: args.identity_namespace.clone(),
        decorator_keys: args.decorator_keys.clone(),
        shards: args.shards,
        pin: args.pin,
    };
    let platform = Platform::derive(plugin.manifest(), plugin.digest(), &options);
    let files = files(&platform, &args)?;
    let Some(dir) = &args.out else {
        // Several files: one YAML stream, each introduced by its name.
        let many = files.len() > 1;
        for (i, (name, content)) in files.iter().enumerate() {
            if i > 0 {
                println!("---");
            }
            if many {
                println!("# ==> {name} <==");
            }
            print!("{content}");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let changed = write_files(dir, &files, args.check)
        .with_context(|| format!("cannot write {}", dir.display()))?;
    if args.check {
        for path in &changed {
            eprintln!("would change: {}", path.display());
        }
        if !changed.is_empty() {
            return Ok(ExitCode::from(1));
        }
    } else {
        for path in &changed {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests;
