//! The docs' commands as a newcomer types them: the code blocks of the
//! sections named here (the README's, or a page of the book in `docs/` the
//! README leads to) run as written (in bash, from the repository root, with
//! the `kubeplug` under test first on `PATH`), and each must succeed. A
//! command that changes there without working fails this test.
//!
//! Blocks that need a cluster or a running host are the acceptance tests'
//! (`tests/e2e`: `run`, `replay`, `whatif`, `migrate`, `doctor`, the chart);
//! `kubeplug new` is `tests/kit.rs`'.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// The sections whose first `sh` block runs as written: the file, from the
/// repository root, and the section's heading line.
const RUNNABLE: &[(&str, &str)] = &[(
    "docs/running-offline.md",
    "# Running a plugin without a cluster",
)];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The first fenced `sh` block after the heading line `section` of `doc`.
fn block(doc: &str, section: &str) -> String {
    let at = format!("\n{doc}")
        .find(&format!("\n{section}\n"))
        .unwrap_or_else(|| panic!("no section {section:?}"));
    let rest = &doc[at..];
    let start = rest.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let end = start + rest[start..].find("```").expect("the block ends");
    rest[start..end].to_string()
}

#[test]
fn the_commands_of_the_readme_run_as_written() {
    // The `kubeplug` that `make host` builds, as the reader's PATH would
    // find it, and the shipped plugins (`make plugins`).
    plugin_path("database");
    let bin = Path::new(env!("CARGO_BIN_EXE_kubeplug")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    for (file, section) in RUNNABLE {
        let doc = std::fs::read_to_string(repo().join(file)).unwrap();
        let script = format!("set -euo pipefail\n{}", block(&doc, section));
        let commands = script
            .lines()
            .filter(|l| l.starts_with("kubeplug "))
            .count();
        assert!(commands >= 3, "{section}: only {commands} commands");
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(repo())
            .env("PATH", &path)
            .env("KUBEPLUG_CACHE_DIR", shared_cache_dir())
            .env("NO_COLOR", "1")
            .env_remove("KUBEPLUG_POLICY")
            .env_remove("KUBEPLUG_LOG")
            .output()
            .expect("running bash");
        assert!(
            output.status.success(),
            "{section}: the block failed ({}):\n{script}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        // Every render printed its answer (the children it would apply),
        // the fixture run its summary, inspect the manifest.
        for needle in [
            "kind: StatefulSet",
            "\"kind\": \"StatefulSet\"",
            "test result: ok",
            "digest",
        ] {
            assert!(
                stdout.contains(needle),
                "{section}: {needle:?} not in\n{stdout}"
            );
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("warning: plugin database asks for more than it may"),
            "{section}: the render without a policy warns: {stderr}"
        );
    }
}
