//! How an error is shown to a person: its chain of sources on one line.
//!
//! One printer for every place an error leaves the host as text (logs,
//! Event notes, shadow comparisons, previews, replays), so the same failure
//! reads the same everywhere. Pure: no kube, no runtime.

/// An error and its sources on one line, for logs and Event notes.
pub fn format_chain(error: &(dyn std::error::Error + 'static)) -> String {
    format_chain_with(error, |_| None)
}

/// [`format_chain`], where `says` may give a level's text itself (`Some`),
/// which then ends the chain: a client error that knows the server's own
/// words better than its `Display` (see `kubeplug_kube::report`). A text of
/// several lines (a guest's traceback) is joined with ` | `, so that a log
/// line stays one line.
pub fn format_chain_with(
    error: &(dyn std::error::Error + 'static),
    says: impl Fn(&(dyn std::error::Error + 'static)) -> Option<String>,
) -> String {
    let mut parts = Vec::new();
    let mut level = Some(error);
    while let Some(e) = level {
        if let Some(text) = says(e) {
            parts.push(text);
            break;
        }
        parts.push(e.to_string());
        level = e.source();
    }
    one_line(&parts.join(": "))
}

/// `text` on one line: its lines joined with ` | ` (a lone `\r` too, which
/// would overwrite a terminal's line), blank ones left out.
fn one_line(text: &str) -> String {
    if !text.contains(['\n', '\r']) {
        return text.to_string();
    }
    text.split(['\n', '\r'])
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("KeyError: 'spec'\n  app.py:14 in reconcile\n")]
    struct Inner;

    #[test]
    fn a_chain_is_one_line_even_when_a_level_holds_a_traceback() {
        assert_eq!(
            format_chain(&Outer(Inner)),
            "outer: KeyError: 'spec' |   app.py:14 in reconcile"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("progress 10%\rdone\r\n")]
    struct Returns;

    #[test]
    fn a_lone_carriage_return_cannot_overwrite_the_line() {
        assert_eq!(format_chain(&Returns), "progress 10% | done");
    }

    #[test]
    fn a_level_that_says_itself_ends_the_chain() {
        let said = format_chain_with(&Outer(Inner), |e| {
            e.downcast_ref::<Inner>()
                .map(|_| "inner, briefly".to_string())
        });
        assert_eq!(said, "outer: inner, briefly");
    }
}
