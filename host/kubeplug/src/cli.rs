//! Command-line interface: argument parsing and dispatch only. The
//! arguments are in [`crate::args`], the commands in [`crate::commands`]
//! and [`crate::run`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

use crate::args::{
    InspectArgs, NewArgs, PackageArgs, PushArgs, RenderArgs, RunArgs, TestArgs, VerifyArgs,
};
use crate::commands;

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
    /// Write a plugin as OCI content (an image layout or OCI archive): a
    /// Wasm OCI artifact, and an image for image volumes.
    Package(PackageArgs),
    /// Push a plugin's OCI content (as `package` writes it) to a registry,
    /// optionally signed (cosign's key-based format).
    Push(PushArgs),
    /// Check that a pushed plugin (or any image) is signed by a key, as
    /// `cosign verify --key` checks it.
    Verify(VerifyArgs),
    /// Run a plugin over its fixture files (docs/fixtures.md) and compare
    /// its answers with the expected ones. Needs no cluster.
    Test(TestArgs),
    /// Create a plugin project from a template: `NAME/` with the plugin,
    /// fixtures, a build script, a README, CI and `kubeplug.toml` (which
    /// pins the SDK this kubeplug carries).
    New(NewArgs),
    /// Build a plugin project (`kubeplug new`'s) of any language: unpack
    /// the SDK its kubeplug.toml pins, run its build, leave
    /// `dist/<name>.wasm` for `kubeplug test .`.
    Build(crate::commands::build::BuildArgs),
    /// Run the operator: load every plugin in a directory and reconcile.
    Run(Box<RunArgs>),
    /// Round-trip every stored object of a CRD through a plugin's
    /// conversion, then move its storage to a new version (`--check`: only
    /// report).
    Migrate(crate::commands::migrate::MigrateArgs),
    /// Release a removed plugin's finalizers, so that its deleted parents
    /// stop hanging in Terminating.
    ReleaseFinalizers(crate::commands::release_finalizers::ReleaseArgs),
    /// List a plugin's failed calls kept by a running host, or fetch one as
    /// a file for `render --request`.
    Replay(crate::commands::replay::ReplayArgs),
    /// Summarise what a plugin's candidate would do to every parent (the
    /// what-if a running host made of `<name>.next.wasm`, or of a new
    /// version its promotion gate judged).
    Whatif(crate::commands::whatif::WhatIfArgs),
    /// Check an installation: the cluster, the aggregated API, the plugins,
    /// their kinds and their identities; one line per check.
    Doctor(crate::commands::doctor::DoctorArgs),
    /// Write the platform side of a plugin from its manifest: its
    /// ServiceAccount and role, the host's read and impersonation rules
    /// for it, and its grant (a kustomization, or Helm values). Needs no
    /// cluster.
    Platform(crate::commands::platform::PlatformArgs),
    /// Print a shell completion script: `source <(kubeplug completion
    /// bash)`, `kubeplug completion zsh > "${fpath[1]}/_kubeplug"`,
    /// `kubeplug completion fish | source`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Internal: compile a component in a child process of the host, so
    /// that the host can bound its time and memory.
    #[command(name = "__compile", hide = true)]
    Compile { input: PathBuf, output: PathBuf },
    /// Internal: make a Go plugin's core module (`go build
    /// -buildmode=c-shared` with the Go SDK) a component with kubeplug's
    /// preview1 shim; the Go SDK's `build` runs it.
    #[command(name = "__componentize-go", hide = true)]
    ComponentizeGo(crate::commands::build::ComponentizeGoArgs),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Only a running host exports traces: the other commands are over in
    // seconds, and `__compile` is a child of the host.
    let export = matches!(cli.command, Command::Run(_));
    let traces = match crate::logging::init_tracing(cli.log_format, export) {
        Ok(traces) => traces,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    let code = match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    };
    // After `run` returns (SIGTERM included): the last spans are sent.
    traces.shutdown();
    code
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let done = match cli.command {
        Command::Test(args) => return Ok(commands::test::run(args)),
        Command::New(args) => commands::new::run(args),
        Command::Build(args) => commands::build::run(args),
        Command::Render(args) => commands::render::run(args),
        Command::Inspect(args) => commands::inspect::run(args),
        Command::Package(args) => commands::package::run(args),
        Command::Push(args) => commands::push::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Run(args) => crate::run::run(*args),
        Command::Migrate(args) => return crate::commands::migrate::migrate_cmd(args),
        Command::ReleaseFinalizers(args) => crate::commands::release_finalizers::release_cmd(args),
        Command::Replay(args) => crate::commands::replay::replay_cmd(args),
        Command::Whatif(args) => crate::commands::whatif::whatif_cmd(args),
        Command::Doctor(args) => return crate::commands::doctor::doctor_cmd(args),
        Command::Platform(args) => return Ok(crate::commands::platform::run(args)),
        Command::Completion { shell } => {
            completion(shell, &mut std::io::stdout());
            Ok(())
        }
        Command::Compile { input, output } => {
            kubeplug_runtime::compile::compile_main(&input, &output)
        }
        Command::ComponentizeGo(args) => commands::build::componentize_go(args),
    };
    done.map(|()| ExitCode::SUCCESS)
}

/// The completion script of `shell`, for the name this binary was invoked
/// by (`kubeplug`, or `kubectl-kubeplug` as a kubectl plugin).
fn completion(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    let mut command = Cli::command();
    let name = command.get_name().to_string();
    clap_complete::generate(shell, &mut command, name, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn completions_name_every_command_and_their_flags() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut script = Vec::new();
            completion(shell, &mut script);
            let script = String::from_utf8(script).unwrap();
            for word in [
                "render",
                "release-finalizers",
                "whatif",
                "kubeconfig",
                "debounce",
            ] {
                assert!(script.contains(word), "{shell}: {word} missing");
            }
        }
    }

    /// A container is configured through its environment: every flag of
    /// `run` has a variable (`--help` shows it), the hidden older spellings
    /// aside.
    #[test]
    fn every_flag_of_run_has_an_environment_variable() {
        let command = Cli::command();
        let run = command.find_subcommand("run").unwrap();
        let without: Vec<_> = run
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_long().is_some())
            .filter(|a| a.get_long() != Some("help"))
            .filter(|a| a.get_env().is_none())
            .map(|a| a.get_long().unwrap().to_string())
            .collect();
        assert!(
            without.is_empty(),
            "flags of run without a variable: {without:?}"
        );
    }
}
