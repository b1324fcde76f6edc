//! `kubeplug build`: build a plugin project of any supported language.
//! Reads its `kubeplug.toml`, unpacks the SDK it pins into `.kubeplug/`
//! (idempotently), runs the project's `build` script and checks that it
//! left `dist/<name>.wasm`, where `kubeplug test .` looks.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use kubeplug_kit::kit::go_shim;
use kubeplug_kit::kit::scaffold::{PROJECT_FILE, Project};

/// `kubeplug build`.
#[derive(clap::Args)]
pub struct BuildArgs {
    /// The plugin project (the directory of its kubeplug.toml, as `kubeplug
    /// new` made it).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
}

/// `kubeplug build [DIR]`: progress on stderr, the component's path on
/// stdout.
pub fn run(args: BuildArgs) -> anyhow::Result<()> {
    let project = Project::load(&args.dir)
        .with_context(|| format!("reading the project in {}", args.dir.display()))?;
    eprintln!(
        "kubeplug build: {} ({} plugin, SDK {})",
        project.name,
        project.lang.dir(),
        project.sdk
    );
    let unpacked = project.unpack().with_context(|| {
        format!(
            "unpacking the SDK {} pins into {}",
            PROJECT_FILE,
            project.sdk_root().display()
        )
    })?;
    if unpacked.written == 0 {
        eprintln!(
            "kubeplug build: SDK {} up to date in {}",
            project.sdk,
            unpacked.root.display()
        );
    } else {
        eprintln!(
            "kubeplug build: unpacked SDK {} into {} ({} of {} files written)",
            project.sdk,
            unpacked.root.display(),
            unpacked.written,
            unpacked.files
        );
    }

    let script = project.dir.join("build");
    if !script.is_file() {
        bail!(
            "{} not found: the project's build script (kubeplug new writes one; restore it from a new project of the same language)",
            script.display()
        );
    }
    let wasm = project.wasm();
    // A stale component must not pass for this build's.
    match std::fs::remove_file(&wasm) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing the old {}", wasm.display())),
    }
    eprintln!("kubeplug build: running {}", script.display());
    // The script's output is progress too: all of it on stderr.
    let stderr = std::io::stderr();
    let as_stdout = std::os::fd::AsFd::as_fd(&stderr)
        .try_clone_to_owned()
        .context("duplicating stderr")?;
    // The Go SDK's build composes its component with this very binary.
    let me = std::env::current_exe().context("finding this kubeplug's path")?;
    let status = Command::new(&script)
        .env("KUBEPLUG", me)
        .current_dir(&project.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(as_stdout))
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!(
            "{} failed ({status}); its output is above",
            script.display()
        );
    }
    let size = std::fs::metadata(&wasm)
        .with_context(|| {
            format!(
                "{} succeeded but left no {}",
                script.display(),
                wasm.display()
            )
        })?
        .len();
    eprintln!("kubeplug build: built {} ({size} bytes)", wasm.display());
    println!("{}", wasm.display());
    Ok(())
}

/// `kubeplug __componentize-go`.
#[derive(clap::Args)]
pub struct ComponentizeGoArgs {
    /// The core module `go build` made.
    pub core: PathBuf,
    /// Where to write the component.
    pub output: PathBuf,
    /// The WIT directory (the SDK's `wit/`).
    #[arg(long)]
    pub wit: PathBuf,
    /// The world the component targets.
    #[arg(long, default_value = "plugin-with-admission")]
    pub world: String,
}

/// Write the component of a Go plugin's core module: the preview1 imports
/// replaced by kubeplug's shim, typed by the WIT (`go_shim`).
pub fn componentize_go(args: ComponentizeGoArgs) -> anyhow::Result<()> {
    let core =
        std::fs::read(&args.core).with_context(|| format!("reading {}", args.core.display()))?;
    let component = go_shim::componentize(&core, &args.wit, &args.world)
        .with_context(|| format!("composing {}", args.core.display()))?;
    let tmp = args.output.with_extension("wasm.tmp");
    std::fs::write(&tmp, &component).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    Ok(())
}
