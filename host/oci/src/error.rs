//! The crate's one error: what failed, in the words `kubeplug push`,
//! `verify`, the host's puller and `doctor` print, and why (the source,
//! kept as a chain, never flattened into the text).
//!
//! Most failures are [`Error::Failed`]: every caller reports them and none
//! branches on them; their messages carry the registry's URL and answer,
//! which is what a person acts on.

use std::fmt;

/// A failure of the OCI client or of reading OCI content.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// What failed, in the caller's words, and the cause beneath it.
    #[error("{message}")]
    Failed {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// JSON that is not what it should be.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A request that could not be built.
    #[error(transparent)]
    Http(#[from] http::Error),
    /// A registry connection that failed.
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
    /// A time out of range.
    #[error(transparent)]
    Time(#[from] jiff::Error),
}

/// The crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A failure with no cause beneath it.
    pub fn msg(message: impl fmt::Display) -> Error {
        Error::Failed {
            message: message.to_string(),
            source: None,
        }
    }

    /// `message`, caused by `source`.
    pub fn new(
        message: impl fmt::Display,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::Failed {
            message: message.to_string(),
            source: Some(Box::new(source)),
        }
    }
}

/// Returns early with an [`Error`] of this text.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::msg(format!($($arg)*)))
    };
}
pub(crate) use bail;

/// `context` and `with_context`, as anyhow spells them, for this crate's
/// [`Error`].
pub trait Context<T> {
    fn context(self, message: impl fmt::Display) -> Result<T>;
    fn with_context<M: fmt::Display>(self, message: impl FnOnce() -> M) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, message: impl fmt::Display) -> Result<T> {
        self.map_err(|source| Error::new(message, source))
    }

    fn with_context<M: fmt::Display>(self, message: impl FnOnce() -> M) -> Result<T> {
        self.map_err(|source| Error::new(message(), source))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, message: impl fmt::Display) -> Result<T> {
        self.ok_or_else(|| Error::msg(message))
    }

    fn with_context<M: fmt::Display>(self, message: impl FnOnce() -> M) -> Result<T> {
        self.ok_or_else(|| Error::msg(message()))
    }
}

/// An error and its causes, as anyhow's `{:#}` prints them (the commands
/// print them so).
#[cfg(test)]
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(source) = cause {
        text.push_str(&format!(": {source}"));
        cause = source.source();
    }
    text
}
