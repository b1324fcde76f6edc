//! On-disk cache of precompiled components, so a restart does not recompile.
//!
//! Guarantees: an artefact is only loaded if this host produced it for the same
//! component bytes (SHA-256 digest), the same wasmtime version and the same
//! engine configuration; all three are in the file name. Writes go to a
//! temporary file renamed into place, so a crash never leaves a torn artefact.
//!
//! Caveat: deserializing runs native code that wasmtime compiled. The cache
//! directory must be writable by the host only.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::LoadError;
use super::compile::{CompileLimits, Compiler, compile_in_child};
use super::share::Slots;

/// The wasmtime release the host is built with: equal to the `=` pin in
/// `host/Cargo.toml`. Part of every artefact's name; the engine's
/// compatibility hash covers it too, this makes it visible on disk.
const WASMTIME_VERSION: &str = "48.0.8";

/// Where precompiled artefacts live; `None` compiles in memory every time.
#[derive(Debug, Clone, Default)]
pub struct CompileCache {
    dir: Option<PathBuf>,
}

/// How a component was obtained, for metrics and `inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Compiled from the `.wasm` bytes now.
    Compiled,
    /// Loaded from a precompiled artefact.
    Cached,
    /// Already loaded by this runtime (another plugin, version or settings
    /// with the same bytes): its compiled code is shared.
    Shared,
}

impl CompileCache {
    pub fn new(dir: Option<PathBuf>) -> Self {
        CompileCache { dir }
    }

    fn artefact(&self, engine: &Engine, digest: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hasher.finish();
        Some(dir.join(format!(
            "{digest}-wasmtime{WASMTIME_VERSION}-{engine_key:016x}.cwasm"
        )))
    }

    /// The component for `bytes` (whose SHA-256 is `digest`), compiled by
    /// `compiler` within `limits`, in one of `slots`, unless a precompiled
    /// artefact exists.
    pub fn component(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest: &str,
        compiler: &Compiler,
        limits: CompileLimits,
        slots: &Slots,
    ) -> Result<(Component, Origin), LoadError> {
        let refused = |e: wasmtime::Error| LoadError::NotAComponent(super::error::boxed(e));
        if let Compiler::Subprocess(exe) = compiler {
            return self.compile_in_child(engine, bytes, digest, exe, limits, slots);
        }
        let Some(path) = self.artefact(engine, digest) else {
            let _slot = slots.take();
            return Ok((
                Component::new(engine, bytes).map_err(refused)?,
                Origin::Compiled,
            ));
        };
        if let Some(component) = Self::cached(engine, &path) {
            return Ok((component, Origin::Cached));
        }
        let artefact = {
            let _slot = slots.take();
            engine.precompile_component(bytes).map_err(refused)?
        };
        if let Err(error) = write_atomically(&path, &artefact) {
            tracing::warn!(path = %path.display(), %error, "cannot write precompiled component; continuing without cache");
        }
        // SAFETY: `artefact` was produced by this engine just now.
        let component = unsafe { Component::deserialize(engine, &artefact) }.map_err(refused)?;
        Ok((component, Origin::Compiled))
    }

    /// A precompiled artefact, if `path` holds a readable one.
    fn cached(engine: &Engine, path: &Path) -> Option<Component> {
        if !path.exists() {
            return None;
        }
        // SAFETY: the file name binds the artefact to these exact bytes,
        // this wasmtime version and this engine configuration, and only
        // this host writes into the cache directory (see module docs).
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "discarding unreadable precompiled component");
                let _ = std::fs::remove_file(path);
                None
            }
        }
    }

    /// Compile in a child process (see [`super::compile`]) into the cache,
    /// or into a temporary file when there is no cache.
    fn compile_in_child(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest: &str,
        exe: &Path,
        limits: CompileLimits,
        slots: &Slots,
    ) -> Result<(Component, Origin), LoadError> {
        let cached = self.artefact(engine, digest);
        if let Some(component) = cached.as_deref().and_then(|p| Self::cached(engine, p)) {
            return Ok((component, Origin::Cached));
        }
        let scratch = tempfile::tempdir()
            .map_err(|e| LoadError::Compile(format!("no scratch directory: {e}")))?;
        let input = scratch.path().join("plugin.wasm");
        std::fs::write(&input, bytes)
            .map_err(|e| LoadError::Compile(format!("cannot stage the component: {e}")))?;
        let output = cached.unwrap_or_else(|| scratch.path().join("plugin.cwasm"));
        // The deadline counts from the start of the compile, not the wait.
        let slot = slots.take();
        compile_in_child(exe, &input, &output, limits)?;
        drop(slot);
        // SAFETY: the child is this executable with the same engine
        // configuration, and wrote the file for these exact bytes.
        let component = unsafe { Component::deserialize_file(engine, &output) }
            .map_err(|e| LoadError::Compile(format!("unreadable compiled component: {e}")))?;
        Ok((component, Origin::Compiled))
    }
}

pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("artefact"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
