//! `kubeplug migrate`: verified CRD evolution against a live cluster (see
//! [`kubeplug_operator::migrate`]). With `--check`, only the round trip of
//! every stored object through the plugin's conversion; without it, the
//! storage migration too, which never starts while any object loses a
//! field.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use super::offline::read_config;
use crate::args::OfflineArgs;
use kubeplug_kit::kit;
use kubeplug_operator::migrate::{self, Outcome, Report};

/// `kubeplug migrate`.
#[derive(Args)]
pub struct MigrateArgs {
    /// The plugin `.wasm` that converts the kind: the one the CRD's
    /// conversion webhook is served by.
    #[arg(long)]
    pub plugin: PathBuf,
    /// The CRD, by name (e.g. `databases.example.com`).
    #[arg(long)]
    pub crd: String,
    /// The version to check, then to move storage to (e.g. `v2`).
    #[arg(long)]
    pub to: String,
    /// Only round-trip every stored object and report; change nothing.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub common: OfflineArgs,
    #[command(flatten)]
    pub cluster: crate::args::ClusterArgs,
}

pub fn migrate_cmd(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let config = args.common.config.as_deref().map(read_config).transpose()?;
    let runtime = args.common.runtime.bounded_runtime()?;
    let policy = kubeplug_core::policy::Policy::default();
    let plugin = kit::load::compile(
        &runtime,
        &args.plugin,
        config,
        args.common.runtime.limits(),
        &policy,
    )?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("failed to start the async runtime")?
        .block_on(async {
            let client = args.cluster.client().await?;
            if args.check {
                let report = migrate::check(&client, &plugin, &args.crd, &args.to).await?;
                print_report(&args.crd, &report);
                return Ok(exit(report.clean()));
            }
            match migrate::migrate(&client, &plugin, &args.crd, &args.to).await? {
                Outcome::AlreadyDone => {
                    println!(
                        "{}: already stored at {} only; nothing to migrate",
                        args.crd, args.to
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Outcome::Refused(report) => {
                    print_report(&args.crd, &report);
                    println!("{}: not migrated: fix the conversion first", args.crd);
                    Ok(exit(false))
                }
                Outcome::Migrated { report, rewritten } => {
                    print_report(&args.crd, &report);
                    println!(
                        "{}: storage version {}; {rewritten} objects rewritten; storedVersions [{}]",
                        args.crd, args.to, args.to
                    );
                    Ok(ExitCode::SUCCESS)
                }
            }
        })
}

fn exit(clean: bool) -> ExitCode {
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One line per object that loses something, one per lost field under it.
fn print_report(crd: &str, report: &Report) {
    println!(
        "{crd}: {} objects round-tripped {} -> {} -> {}: {} lose fields, {} conversions failed",
        report.objects,
        report.from,
        report.to,
        report.from,
        report.lossy.len(),
        report.failed.len()
    );
    for lossy in &report.lossy {
        println!("  {}:", lossy.object);
        for change in &lossy.losses {
            println!("    {}: {} -> {}", change.path, change.before, change.after);
        }
    }
    for failed in &report.failed {
        println!("  failed: {failed}");
    }
}
