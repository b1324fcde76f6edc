//! `kubeplug test`: a plugin run over its fixture files.

use std::path::Path;
use std::process::ExitCode;

use super::offline::{read_config, read_crds};
use crate::args::TestArgs;

/// `kubeplug test`: exit 0 (all passed), 1 (a case failed) or 2 (nothing
/// could be tested).
pub fn run(args: TestArgs) -> ExitCode {
    let tested = || -> anyhow::Result<kubeplug_kit::kit::Report> {
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
        let options = kubeplug_kit::kit::Options {
            plugin: args.plugin.clone(),
            update: args.update,
            config,
            limits,
            policy,
            crds: read_crds(&args.crd)?,
        };
        // Off a terminal (CI), a compile is said in plain lines.
        let runtime =
            crate::progress::unattended(args.runtime.bounded_runtime()?, !args.runtime.no_cache);
        Ok(kubeplug_kit::kit::run(&runtime, &args.dir, &options)?)
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
