//! On-disk cache of precompiled components, so a restart does not recompile.
//!
//! Guarantees: an artefact is only loaded if this host produced it for the same
//! component bytes (SHA-256 digest), the same wasmtime version and the same
//! engine configuration; all three are in the file name. Writes go to a
//! temporary file renamed into place, so a crash never leaves a torn artefact.
//!
//! Caveat: deserializing runs native code that wasmtime compiled. The cache
//! directory must be writable by the host only.
//!
//! # The byte budget
//!
//! Every distinct component ever loaded leaves an artefact (a Python guest's
//! is ~60 MiB), and in a pod the cache is an emptyDir with a `sizeLimit`: a
//! cache that only grows gets the pod evicted. So after each compile the
//! cache is pruned to its budget ([`DEFAULT_CACHE_BYTES`], `--compile-cache-bytes`),
//! least recently used first: loading an artefact touches its modification
//! time. Artefacts of components a loaded plugin uses now are never pruned
//! (the caller says which, see [`CompileCache::prune`]); if they alone exceed
//! the budget the cache stays over it until they are unloaded. Temporary
//! files a crashed write left behind are removed once [`STALE_TEMPORARY`] old.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::LoadError;
use super::atomic_write::write_atomically;
use super::compile::{Compiler, compile_in_child};
use super::share::Slots;
use kubeplug_core::contract::CompileLimits;

/// The wasmtime release the host is built with: equal to the `=` pin in
/// the workspace `Cargo.toml`. Part of every artefact's name; the engine's
/// compatibility hash covers it too, this makes it visible on disk.
const WASMTIME_VERSION: &str = "48.0.8";

/// Bytes of artefacts the cache keeps at most, by default: 768 MiB, below the
/// 1 GiB `sizeLimit` of its emptyDir in `deploy/base/deployment.yaml`, with
/// room for two compiles (`--compiles`) writing ~60 MiB each before the
/// prune that follows them.
pub const DEFAULT_CACHE_BYTES: u64 = 768 << 20;

/// A temporary file older than this is left over from a crashed write (a
/// write takes milliseconds, at the end of a compile) and is removed.
pub const STALE_TEMPORARY: Duration = Duration::from_secs(300);

/// Where precompiled artefacts live; `None` compiles in memory every time.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: Option<PathBuf>,
    /// Bytes of artefacts kept at most (see the module docs).
    budget: u64,
}

impl Default for CompileCache {
    fn default() -> Self {
        CompileCache::new(None)
    }
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
        CompileCache {
            dir,
            budget: DEFAULT_CACHE_BYTES,
        }
    }

    /// Keep at most `bytes` of artefacts (default [`DEFAULT_CACHE_BYTES`]).
    pub fn with_budget(mut self, bytes: u64) -> Self {
        self.budget = bytes;
        self
    }

    /// Remove artefacts, least recently used first, until the cache holds at
    /// most its budget, leaving those of the digests in `in_use` (components
    /// loaded now); remove stale temporary files. Returns the bytes held
    /// after. Errors cost only the cache: they are logged.
    pub fn prune(&self, in_use: &HashSet<String>) -> u64 {
        let Some(dir) = &self.dir else {
            return 0;
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(error) => {
                tracing::debug!(dir = %dir.display(), %error, "cannot list the compile cache");
                return 0;
            }
        };
        let now = SystemTime::now();
        let mut artefacts = Vec::new();
        let mut total = 0u64;
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let used = meta.modified().unwrap_or(now);
            if name.starts_with('.') && name.ends_with(".tmp") {
                let age = now.duration_since(used).unwrap_or_default();
                if age >= STALE_TEMPORARY && std::fs::remove_file(&path).is_ok() {
                    tracing::info!(path = %path.display(), "removed a temporary file left by a crashed write");
                } else {
                    total += meta.len();
                }
                continue;
            }
            if !name.ends_with(".cwasm") {
                continue;
            }
            total += meta.len();
            let digest = name.split('-').next().unwrap_or_default().to_string();
            artefacts.push((used, meta.len(), digest, path));
        }
        // Oldest first.
        artefacts.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.3.cmp(&b.3)));
        for (_, size, digest, path) in artefacts {
            if total <= self.budget {
                break;
            }
            if in_use.contains(&digest) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    total -= size;
                    tracing::info!(path = %path.display(), bytes = size, budget = self.budget, "pruned a precompiled component, least recently used");
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "cannot prune a precompiled component")
                }
            }
        }
        if total > self.budget {
            tracing::warn!(dir = %dir.display(), bytes = total, budget = self.budget, "compile cache over its budget: what is left is in use");
        }
        total
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
    /// artefact exists. `compiling` is called as a compile starts; what it
    /// returns is dropped when it ends.
    #[allow(
        clippy::too_many_arguments,
        reason = "the compile's inputs, each needed; a struct would only be built here"
    )]
    pub fn component(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest: &str,
        compiler: &Compiler,
        limits: CompileLimits,
        slots: &Slots,
        compiling: &dyn Fn() -> Box<dyn Send>,
    ) -> Result<(Component, Origin), LoadError> {
        let refused = |e: wasmtime::Error| LoadError::NotAComponent(super::error::boxed(e));
        if let Compiler::Subprocess(exe) = compiler {
            return self.compile_in_child(engine, bytes, digest, exe, limits, slots, compiling);
        }
        let Some(path) = self.artefact(engine, digest) else {
            let _slot = slots.take();
            let _compiling = compiling();
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
            let _compiling = compiling();
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
            Ok(component) => {
                touch(path);
                Some(component)
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "discarding unreadable precompiled component");
                let _ = std::fs::remove_file(path);
                None
            }
        }
    }

    /// Compile in a child process (see [`super::compile`]) into the cache,
    /// or into a temporary file when there is no cache.
    #[allow(
        clippy::too_many_arguments,
        reason = "the compile's inputs, each needed; a struct would only be built here"
    )]
    fn compile_in_child(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest: &str,
        exe: &Path,
        limits: CompileLimits,
        slots: &Slots,
        compiling: &dyn Fn() -> Box<dyn Send>,
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
        let watched = compiling();
        compile_in_child(exe, &input, &output, limits)?;
        drop((watched, slot));
        // SAFETY: the child is this executable with the same engine
        // configuration, and wrote the file for these exact bytes.
        let component = unsafe { Component::deserialize_file(engine, &output) }
            .map_err(|e| LoadError::Compile(format!("unreadable compiled component: {e}")))?;
        Ok((component, Origin::Compiled))
    }
}

/// Mark an artefact used now, for least-recently-used pruning. Failing
/// costs only the order of pruning.
fn touch(path: &Path) {
    let touched = std::fs::File::open(path).and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(error) = touched {
        tracing::debug!(path = %path.display(), %error, "cannot mark a precompiled component used");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::Components;
    use std::sync::Arc;

    /// A distinct empty component: `(component)` with a custom section
    /// holding `n`.
    fn component_bytes(n: u32) -> Vec<u8> {
        let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
        let payload = format!("n{n:08}");
        // Custom section: id 0, size, name length, name, payload.
        let name = b"t";
        bytes.push(0);
        bytes.push((1 + name.len() + payload.len()) as u8);
        bytes.push(name.len() as u8);
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(payload.as_bytes());
        bytes
    }

    fn digest(bytes: &[u8]) -> String {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(bytes))
    }

    /// Load component `n` as `Runtime::load` does: through the shared
    /// components, then prune.
    fn load(
        cache: &CompileCache,
        components: &Components,
        engine: &Engine,
        n: u32,
    ) -> (Arc<Component>, Option<Origin>) {
        let bytes = component_bytes(n);
        let digest = digest(&bytes);
        let loaded = components
            .get_or_make(&digest, |slots| {
                cache.component(
                    engine,
                    &bytes,
                    &digest,
                    &Compiler::InProcess,
                    CompileLimits::default(),
                    slots,
                    &|| Box::new(()),
                )
            })
            .expect("an empty component compiles");
        if loaded.1 == Some(Origin::Compiled) {
            cache.prune(&components.in_use());
        }
        loaded
    }

    fn held(dir: &Path) -> (u64, Vec<String>) {
        let mut names = Vec::new();
        let mut total = 0;
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            total += entry.metadata().unwrap().len();
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        (total, names)
    }

    fn artefact_size(engine: &Engine) -> u64 {
        engine
            .precompile_component(&component_bytes(0))
            .unwrap()
            .len() as u64
    }

    #[test]
    fn a_compile_is_watched_from_start_to_end_and_a_cache_load_is_not() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Ends(Arc<AtomicUsize>);
        impl Drop for Ends {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = CompileCache::new(Some(dir.path().to_path_buf()));
        let slots = Components::new(1);
        let (started, ended) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let compiling = || -> Box<dyn Send> {
            started.fetch_add(1, Ordering::SeqCst);
            Box::new(Ends(ended.clone()))
        };
        let bytes = component_bytes(7);
        let digest = digest(&bytes);
        for expected in [Origin::Compiled, Origin::Cached] {
            let (_, origin) = slots
                .get_or_make(&digest, |slots| {
                    cache.component(
                        &engine,
                        &bytes,
                        &digest,
                        &Compiler::InProcess,
                        CompileLimits::default(),
                        slots,
                        &compiling,
                    )
                })
                .unwrap();
            assert_eq!(origin, Some(expected));
        }
        assert_eq!(
            started.load(Ordering::SeqCst),
            1,
            "only the compile is watched"
        );
        assert_eq!(ended.load(Ordering::SeqCst), 1, "and its end is seen");
    }

    #[test]
    fn cycling_distinct_components_keeps_the_cache_under_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let budget = 3 * artefact_size(&engine) + artefact_size(&engine) / 2;
        let cache = CompileCache::new(Some(dir.path().to_path_buf())).with_budget(budget);
        let components = Components::new(1);
        for n in 0..20 {
            // Each is loaded, used and unloaded, as a plugin updated again
            // and again would be.
            let (_component, origin) = load(&cache, &components, &engine, n);
            assert_eq!(origin, Some(Origin::Compiled));
            let (total, names) = held(dir.path());
            assert!(total <= budget, "{total} > {budget} after {n}: {names:?}");
        }
        let (_, names) = held(dir.path());
        assert_eq!(names.len(), 3, "the budget holds three: {names:?}");
        // The newest three are the ones kept.
        let (_, origin) = load(&cache, &components, &engine, 19);
        assert_eq!(origin, Some(Origin::Cached));
    }

    #[test]
    fn the_least_recently_used_artefact_goes_first_and_a_load_counts_as_use() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let budget = 2 * artefact_size(&engine) + artefact_size(&engine) / 2;
        let cache = CompileCache::new(Some(dir.path().to_path_buf())).with_budget(budget);
        let components = Components::new(1);
        load(&cache, &components, &engine, 0);
        std::thread::sleep(Duration::from_millis(20));
        load(&cache, &components, &engine, 1);
        std::thread::sleep(Duration::from_millis(20));
        // 0 is used again (a restart loading it from the cache).
        assert_eq!(
            load(&cache, &components, &engine, 0).1,
            Some(Origin::Cached)
        );
        std::thread::sleep(Duration::from_millis(20));
        load(&cache, &components, &engine, 2);
        assert_eq!(
            load(&cache, &components, &engine, 0).1,
            Some(Origin::Cached)
        );
        assert_eq!(
            load(&cache, &components, &engine, 2).1,
            Some(Origin::Cached)
        );
        assert_eq!(
            load(&cache, &components, &engine, 1).1,
            Some(Origin::Compiled),
            "1 was the least recently used"
        );
    }

    #[test]
    fn an_artefact_of_a_loaded_component_is_never_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        // Room for one: every new one is over budget.
        let cache =
            CompileCache::new(Some(dir.path().to_path_buf())).with_budget(artefact_size(&engine));
        let components = Components::new(1);
        let (kept, _) = load(&cache, &components, &engine, 0);
        std::thread::sleep(Duration::from_millis(20));
        for n in 1..5 {
            load(&cache, &components, &engine, n);
        }
        let kept_name = format!("{}-", digest(&component_bytes(0)));
        let (_, names) = held(dir.path());
        assert!(
            names.iter().any(|n| n.starts_with(&kept_name)),
            "the loaded one stays, though oldest: {names:?}"
        );
        // Each newcomer is loaded while the cache is pruned after its compile,
        // so the newest stays too; those between were pruned.
        assert_eq!(names.len(), 2, "the rest were pruned: {names:?}");
        drop(kept);
    }

    #[test]
    fn a_temporary_file_left_by_a_crash_is_removed_once_stale() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(Some(dir.path().to_path_buf())).with_budget(1 << 20);
        let stale = dir.path().join(".x.cwasm.1.tmp");
        let fresh = dir.path().join(".y.cwasm.2.tmp");
        std::fs::write(&stale, b"torn").unwrap();
        std::fs::write(&fresh, b"being written").unwrap();
        let old = SystemTime::now() - STALE_TEMPORARY - Duration::from_secs(1);
        std::fs::File::open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        cache.prune(&HashSet::new());
        assert!(!stale.exists());
        assert!(fresh.exists(), "a write in progress is left alone");
    }
}
