//! Turning `.wasm` bytes into a compiled component, within bounds.
//!
//! Compiling is the one step a plugin controls before the host has checked
//! anything: a 19 MiB component of 100,000 functions takes Cranelift 10–20 s
//! and ~600 MiB. So, in order:
//!
//! 1. [`precheck`] reads only the component's top-level imports and exports
//!    (milliseconds) and refuses a core module, a component for another
//!    contract, or one importing what the host does not provide;
//! 2. the compile itself runs in a child process (`kubeplug __compile`) with
//!    a wall-clock deadline and a resident-memory cap; the child is killed
//!    when it crosses either, and the host never waits on it with a lock
//!    held, so other plugins load meanwhile.
//!
//! In-process compilation ([`Compiler::InProcess`]) is for tests and library
//! use: it cannot be interrupted, so its limits are not enforced.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasmparser::{Encoding, Parser, Payload};

use super::LoadError;
use super::bindings::{RECONCILER_EXPORT, RECONCILER_INTERFACE};
use kubeplug_core::contract::CompileLimits;

/// Where compiles run.
#[derive(Debug, Clone, Default)]
pub enum Compiler {
    /// In this process: fast to start, but [`CompileLimits`] are not enforced.
    #[default]
    InProcess,
    /// In a child process of this executable (`<exe> __compile IN OUT`).
    Subprocess(PathBuf),
}

/// What the linker provides, interface by interface: `(package, minor
/// version, interfaces)`. wasmtime links an import to any provided version of
/// the same minor (0.x) or major, so `wasi:cli/environment@0.2.3` is served
/// by the host's 0.2 WASI whatever the patch; another minor, another package
/// or an unknown interface is not. Kept exact so that [`precheck`] refuses in
/// milliseconds what linking would refuse after a compile of many seconds.
/// The Rust, Python and TypeScript plugins, linked in `host/kubeplug/tests`, use
/// most of these.
const PROVIDED: &[(&str, &str, &[&str])] = &[
    (
        "wasi:cli",
        "0.2",
        &[
            "environment",
            "exit",
            "stdin",
            "stdout",
            "stderr",
            "terminal-input",
            "terminal-output",
            "terminal-stdin",
            "terminal-stdout",
            "terminal-stderr",
        ],
    ),
    ("wasi:io", "0.2", &["error", "poll", "streams"]),
    ("wasi:clocks", "0.2", &["monotonic-clock", "wall-clock"]),
    (
        "wasi:random",
        "0.2",
        &["random", "insecure", "insecure-seed"],
    ),
    ("wasi:filesystem", "0.2", &["types", "preopens"]),
    (
        "wasi:sockets",
        "0.2",
        &[
            "network",
            "instance-network",
            "udp",
            "udp-create-socket",
            "tcp",
            "tcp-create-socket",
            "ip-name-lookup",
        ],
    ),
    // Linked so that default builds load; every request fails (`network`).
    ("wasi:http", "0.2", &["types", "outgoing-handler"]),
    ("kubeplug:plugin", "0.1", &["types", "log"]),
];

/// Whether the linker provides the import `name` (`pkg:name/iface@x.y.z`).
fn provided(name: &str) -> bool {
    let Some((path, version)) = name.split_once('@') else {
        return false;
    };
    let Some((package, interface)) = path.split_once('/') else {
        return false;
    };
    PROVIDED.iter().any(|(p, minor, interfaces)| {
        *p == package
            && interfaces.contains(&interface)
            && version
                .strip_prefix(minor)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

/// Check the top-level imports and exports of a component without compiling
/// it: a wrong file fails in milliseconds with a precise reason.
pub fn precheck(bytes: &[u8]) -> Result<(), LoadError> {
    let not_component = |reason: String| LoadError::NotAComponent(reason.into());
    let mut depth = 0usize;
    let mut exports = Vec::new();
    let mut unprovided = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| not_component(format!("unreadable: {e}")))?;
        match payload {
            Payload::Version { encoding, .. } if depth == 0 && encoding != Encoding::Component => {
                return Err(not_component(
                    "this is a core module; build a component (e.g. for wasm32-wasip2)".into(),
                ));
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if depth == 0 => {
                for import in reader {
                    let name = import
                        .map_err(|e| not_component(format!("unreadable import: {e}")))?
                        .name
                        .name;
                    if !provided(name) {
                        unprovided.push(name.to_string());
                    }
                }
            }
            Payload::ComponentExportSection(reader) if depth == 0 => {
                for export in reader {
                    let export =
                        export.map_err(|e| not_component(format!("unreadable export: {e}")))?;
                    exports.push(export.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    if !exports.iter().any(|e| e == RECONCILER_EXPORT) {
        return Err(LoadError::WrongContract {
            found: exports
                .iter()
                .find(|e| e.starts_with(RECONCILER_INTERFACE))
                .cloned()
                .unwrap_or_else(|| "no kubeplug:plugin/reconciler export".into()),
            expected: RECONCILER_EXPORT.into(),
        });
    }
    if !unprovided.is_empty() {
        return Err(LoadError::Unprovided(unprovided));
    }
    Ok(())
}

/// Resident set size of process `pid`, in bytes (Linux; `None` elsewhere or
/// once it exited).
fn rss_bytes(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// How often the compiler child is checked against its limits.
const POLL: Duration = Duration::from_millis(20);

/// Compile `input` into the precompiled artefact `output` in a child process
/// of `exe`, killing it past `limits`.
pub fn compile_in_child(
    exe: &Path,
    input: &Path,
    output: &Path,
    limits: CompileLimits,
) -> Result<(), LoadError> {
    let started = Instant::now();
    let mut child = Command::new(exe)
        .arg("__compile")
        .arg(input)
        .arg(output)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LoadError::Compile(format!("cannot start the compiler process: {e}")))?;
    let mut peak = 0;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| LoadError::Compile(format!("lost the compiler process: {e}")))?
        {
            if status.success() {
                return Ok(());
            }
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                use std::io::Read as _;
                let _ = pipe.read_to_string(&mut stderr);
            }
            return Err(LoadError::Compile(format!(
                "the compiler failed ({status}): {}",
                stderr.trim()
            )));
        }
        peak = peak.max(rss_bytes(child.id()).unwrap_or(0));
        let over = if started.elapsed() > limits.timeout {
            Some(LoadError::CompileTimeout {
                limit: limits.timeout,
            })
        } else if peak > limits.memory_bytes {
            Some(LoadError::CompileMemory {
                limit_bytes: limits.memory_bytes,
            })
        } else {
            None
        };
        if let Some(error) = over {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(output);
            return Err(error);
        }
        std::thread::sleep(POLL);
    }
}

/// The child's side: `kubeplug __compile IN OUT` precompiles IN with the
/// host's engine configuration and writes OUT atomically.
pub fn compile_main(input: &Path, output: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let bytes = std::fs::read(input).with_context(|| format!("cannot read {}", input.display()))?;
    let engine = wasmtime::Engine::new(&super::engine_config())?;
    let artefact = engine.precompile_component(&bytes)?;
    super::atomic_write::write_atomically(output, &artefact)
        .with_context(|| format!("cannot write {}", output.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_module_is_refused_before_compiling() {
        // `(module)`: the magic number and version 1.
        let module = b"\0asm\x01\0\0\0";
        let error = precheck(module).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("not a valid WebAssembly component")
        );
        assert!(format!("{:?}", error).contains("core module"));
    }

    #[test]
    fn imports_are_provided_interface_by_interface_at_the_hosts_minor_version() {
        for name in [
            "wasi:cli/environment@0.2.0",
            "wasi:cli/terminal-stdout@0.2.6",
            "wasi:http/outgoing-handler@0.2.3",
            "kubeplug:plugin/log@0.1.0",
        ] {
            assert!(provided(name), "{name}");
        }
        for name in [
            "wasi:cli/environment@0.3.0-rc-2025-09-16",
            "wasi:cli/environment@0.20.0",
            "wasi:cli/run@0.2.0",
            "wasi:keyvalue/store@0.2.0-draft",
            "wasi:http/incoming-handler@0.2.0",
            "kubeplug:plugin/log@0.2.0",
            "wasi:cli/environment",
            "env",
        ] {
            assert!(!provided(name), "{name}");
        }
    }

    #[test]
    fn garbage_is_refused_before_compiling() {
        assert!(matches!(
            precheck(b"not wasm at all"),
            Err(LoadError::NotAComponent(_))
        ));
    }

    #[test]
    fn an_empty_component_lacks_the_contract_export() {
        // `(component)`: magic, version 0xd, layer 1.
        let component = b"\0asm\x0d\0\x01\0";
        assert!(matches!(
            precheck(component),
            Err(LoadError::WrongContract { .. })
        ));
    }
}
