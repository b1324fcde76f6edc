//! How an error is shown to a person: its chain of sources on one line.
//!
//! One printer for every place an error leaves the host as text (logs,
//! Event notes, shadow comparisons, previews, replays), so the same failure
//! reads the same everywhere. Pure: no kube, no runtime.

/// An error and its sources on one line, for logs and Event notes.
pub fn format_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
