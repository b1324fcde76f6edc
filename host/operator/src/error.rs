//! Why a call for a parent failed: reconcile, preview and what-if alike.

use std::time::Duration;

use kubeplug_core::plan;
use kubeplug_kube::apply::WriteError;
use kubeplug_kube::identity::AccessError;
use kubeplug_runtime::CallError;

/// See [`ReconcileError::retry_within`].
pub const DENIED_RETRY_WITHIN: Duration = Duration::from_secs(30);

/// Why a reconcile failed. Each is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error(transparent)]
    Fence(#[from] plan::Fenced),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("the plugin call was cancelled or panicked in the host")]
    Join(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Access(#[from] AccessError),
}

impl ReconcileError {
    /// True if the reconcile stopped because this replica lost leadership.
    pub fn not_leader(&self) -> bool {
        matches!(self, ReconcileError::Write(e) if e.not_leader())
    }

    /// The longest its retry may wait: a refused read is the platform's to
    /// fix, and checking it again costs one cached SubjectAccessReview, so a
    /// rule the platform adds takes effect within this, however long the
    /// parent failed.
    pub fn retry_within(&self) -> Option<Duration> {
        matches!(self, ReconcileError::Access(AccessError::Denied { .. }))
            .then_some(DENIED_RETRY_WITHIN)
    }

    /// The server's `Retry-After` on the write that failed, if it
    /// throttled it: the retry waits at least that long.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ReconcileError::Write(e) => e.retry_after(),
            _ => None,
        }
    }

    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            ReconcileError::Call(e) => e.label(),
            ReconcileError::Fence(_) => "fence",
            ReconcileError::Write(_) => "write",
            ReconcileError::Join(_) => "join",
            ReconcileError::Access(_) => "read_denied",
        }
    }

    /// Event reason recorded on the parent.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Call(_) | ReconcileError::Join(_) => "PluginFailed",
            ReconcileError::Fence(_) => "FenceViolation",
            ReconcileError::Write(_) => "WriteFailed",
            ReconcileError::Access(_) => "ReadDenied",
        }
    }
}

impl ReconcileError {
    /// True if the plugin is to blame: it failed, trapped, ran out of time
    /// or memory, or answered outside its fence. Not the API server's or
    /// RBAC's failures, which a new plugin version cannot cause.
    pub fn plugin_fault(&self) -> bool {
        match self {
            ReconcileError::Call(e) => e.plugin_fault(),
            ReconcileError::Fence(_) => true,
            _ => false,
        }
    }
}
