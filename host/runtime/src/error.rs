//! Typed errors of the runtime: why a plugin did not load, why a call failed.

use std::time::Duration;

/// A wasmtime error as a standard error, so it can be a `#[source]`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Keep a wasmtime error's whole chain as a standard error.
pub fn boxed(error: wasmtime::Error) -> BoxError {
    anyhow::Error::from(error).into()
}

/// A plugin could not be loaded. The previous version, if any, keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file is not a WebAssembly component (e.g. a core module or garbage).
    #[error("not a valid WebAssembly component")]
    NotAComponent(#[source] BoxError),
    /// The component exports a contract version this host does not speak.
    #[error("built for contract {found}, this host speaks {expected}")]
    WrongContract { found: String, expected: String },
    /// The component imports something the host does not provide (e.g. a
    /// socket or a newer WIT import).
    #[error("cannot be linked: it imports something this host does not provide")]
    Link(#[source] BoxError),
    /// The component imports interfaces the host does not provide (found
    /// before compiling).
    #[error("imports {}, which this host does not provide (plugins get WASI 0.2 without network, files or environment, wasi:http 0.2 refusing every request, and kubeplug:plugin 0.1 log)", .0.join(", "))]
    Unprovided(Vec<String>),
    /// Compiling failed (the compiler process reported an error).
    #[error("cannot compile: {0}")]
    Compile(String),
    /// Compiling ran past the plugin's compile deadline and was stopped.
    #[error("compiling took longer than the compile quota of {limit:?}; the compiler was stopped")]
    CompileTimeout { limit: Duration },
    /// The compiler's memory crossed the plugin's compile quota.
    #[error(
        "compiling needed more than the compile memory quota of {limit_bytes} bytes; the compiler was stopped"
    )]
    CompileMemory { limit_bytes: u64 },
    /// `manifest()` failed, trapped or returned a manifest the host refuses.
    #[error("manifest refused")]
    Manifest(#[source] CallError),
    /// The component needs more than the host's instances may have
    /// (memories, tables, core instances, instance metadata: a slot of the
    /// pool, or the plugin's own instance and table caps).
    #[error("cannot be instantiated within the host's instance limits: {0}")]
    DoesNotFit(String),
    /// The manifest is well-formed WIT but breaks a host rule.
    #[error("invalid manifest: {0}")]
    InvalidManifest(kubeplug_core::manifest::ManifestError),
}

/// A typed error the plugin returned on purpose.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuestError {
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("{0}")]
    Failed(String),
}

/// One call into a plugin failed. The host process is never affected.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The call ran past its wall-clock deadline and was interrupted.
    #[error("plugin {plugin} exceeded its deadline of {timeout:?}")]
    Deadline { plugin: String, timeout: Duration },
    /// The host's memory budget had no room for the call now (the host's
    /// side, not the plugin's fault: retried later).
    #[error("plugin {plugin} was not run: {reason}")]
    HostMemory { plugin: String, reason: String },
    /// Every instance slot of the host's pool stayed busy (the host's side,
    /// not the plugin's fault: retried later).
    #[error("plugin {plugin} was not run: {reason}")]
    HostBusy { plugin: String, reason: String },
    /// The component could not be instantiated (its shape breaks a limit of
    /// the host's instances; found at load).
    #[error("plugin {plugin} could not be instantiated: {message}")]
    Instantiate { plugin: String, message: String },
    /// The guest tried to grow a memory past its cap.
    #[error("plugin {plugin} exceeded its memory cap of {limit_bytes} bytes")]
    MemoryCap { plugin: String, limit_bytes: usize },
    /// The guest trapped (a panic, an `unreachable`, a bad access).
    #[error("plugin {plugin} trapped: {message}")]
    Trap { plugin: String, message: String },
    /// The guest answered with an error of its own.
    #[error("plugin {plugin} returned an error: {error}")]
    Guest { plugin: String, error: GuestError },
    /// The answer is over a quota of the plugin (children, bytes); it was
    /// not parsed.
    #[error("plugin {plugin} answered with {what}")]
    OverQuota { plugin: String, what: String },
    /// The guest answered with something that is not what the contract says
    /// (e.g. a child that is not a JSON object).
    #[error("plugin {plugin} returned a malformed response: {reason}")]
    Malformed { plugin: String, reason: String },
}

impl CallError {
    /// True if the plugin is to blame: everything but the host's own
    /// shortage of memory or of instance slots.
    pub fn plugin_fault(&self) -> bool {
        !matches!(
            self,
            CallError::HostMemory { .. } | CallError::HostBusy { .. }
        )
    }

    /// A short label for metrics and events.
    pub fn label(&self) -> &'static str {
        match self {
            CallError::Deadline { .. } => "deadline",
            CallError::MemoryCap { .. } => "memory_cap",
            CallError::HostMemory { .. } => "host_memory",
            CallError::HostBusy { .. } => "host_busy",
            CallError::Instantiate { .. } => "instantiate",
            CallError::Trap { .. } => "trap",
            CallError::Guest { .. } => "guest_error",
            CallError::Malformed { .. } => "malformed",
            CallError::OverQuota { .. } => "quota",
        }
    }
}
