//! Errors on one line, in the API server's own words.
//!
//! kube's `Error::Api` shows the server's `Status` twice, once in `Debug`
//! form (about 1 KB of `Status { .. }`); a log line or an Event note needs
//! the message the server wrote, its reason and its code.

use std::error::Error;
use std::sync::Arc;

/// [`kubeplug_core::report::format_chain`], with an API server's answer as
/// `message (Reason, code)`.
pub fn format_chain(error: &(dyn Error + 'static)) -> String {
    kubeplug_core::report::format_chain_with(error, api_status)
}

fn api_status(error: &(dyn Error + 'static)) -> Option<String> {
    let error = error
        .downcast_ref::<kube::Error>()
        .or_else(|| error.downcast_ref::<Arc<kube::Error>>().map(|e| &**e))?;
    match error {
        kube::Error::Api(status) => Some(if status.reason.is_empty() {
            format!("{} ({})", status.message, status.code)
        } else {
            format!("{} ({}, {})", status.message, status.reason, status.code)
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("failed to apply StatefulSet team-a/db")]
    struct Apply(#[source] kube::Error);

    fn forbidden() -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            message: "statefulsets.apps \"db\" is forbidden: User \"system:serviceaccount:kubeplug-system:kubeplug-plugin-database\" cannot patch resource \"statefulsets\"".into(),
            reason: "Forbidden".into(),
            code: 403,
            ..Default::default()
        }))
    }

    #[test]
    fn an_api_error_reads_as_the_servers_message_once_without_debug_output() {
        let line = format_chain(&Apply(forbidden()));
        assert_eq!(
            line,
            "failed to apply StatefulSet team-a/db: statefulsets.apps \"db\" is forbidden: User \"system:serviceaccount:kubeplug-system:kubeplug-plugin-database\" cannot patch resource \"statefulsets\" (Forbidden, 403)"
        );
        assert!(!line.contains("Status {"), "{line}");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot check what u may read")]
    struct Review(#[source] Arc<kube::Error>);

    #[test]
    fn a_shared_api_error_reads_the_same() {
        let line = format_chain(&Review(Arc::new(forbidden())));
        assert!(line.ends_with("(Forbidden, 403)"), "{line}");
        assert_eq!(line.matches("is forbidden").count(), 1, "{line}");
    }
}
