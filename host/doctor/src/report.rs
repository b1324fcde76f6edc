//! What a check found, and the two ways it is printed: one aligned line per
//! check (`ok`, `warn`, `FAIL`, `skipped`), or a JSON array of
//! `{name, status, detail}`.

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, but worth a look (an optional part absent, a certificate
    /// expiring soon, something doctor could not ask).
    Warn,
    /// Broken: the detail names the fix. Makes `doctor` exit non-zero.
    Fail,
    /// Not run because an earlier check failed or an input is missing;
    /// neither ok nor failed.
    Skipped,
}

impl Status {
    /// The word of a text line.
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skipped => "skipped",
        }
    }
}

/// One check: its name, how it came out, and a short detail that names the
/// problem and its fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
}

impl Check {
    pub fn new(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            status,
            detail: detail.into(),
        }
    }

    pub fn ok(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Status::Ok, detail)
    }

    pub fn warn(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Status::Warn, detail)
    }

    pub fn fail(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Status::Fail, detail)
    }

    pub fn skipped(name: impl Into<String>, why: impl Into<String>) -> Self {
        Self::new(name, Status::Skipped, why)
    }
}

/// True if any check failed: `doctor` exits non-zero.
pub fn failed(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.status == Status::Fail)
}

/// One line per check: status, name and detail in aligned columns (the
/// status column as wide as its longest word, whatever the checks say).
pub fn text(checks: &[Check]) -> String {
    let status = "skipped".len();
    let name = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    checks
        .iter()
        .map(|c| {
            let line = format!(
                "{:status$}  {:name$}  {}",
                c.status.word(),
                c.name,
                c.detail
            );
            format!("{}\n", line.trim_end())
        })
        .collect()
}

/// The failed checks again, after a blank line and a count, as [`text`]
/// prints them; nothing when none failed. A pod's termination message is
/// its log's tail, and a long run's failures would be far above it.
pub fn failures(checks: &[Check]) -> String {
    let failed: Vec<Check> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .cloned()
        .collect();
    if failed.is_empty() {
        return String::new();
    }
    format!(
        "\n{} of {} check(s) failed:\n{}",
        failed.len(),
        checks.len(),
        text(&failed)
    )
}

/// The checks as a JSON array of `{name, status, detail}`.
pub fn json(checks: &[Check]) -> String {
    serde_json::to_string_pretty(checks).expect("checks serialize") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks() -> Vec<Check> {
        vec![
            Check::ok("kubeconfig", "context kind, cluster https://127.0.0.1:6443"),
            Check::fail("front-proxy CA", "missing: start kube-apiserver with it"),
            Check::warn("APIService", "not registered"),
            Check::skipped("plugins", ""),
        ]
    }

    #[test]
    fn text_has_one_aligned_line_per_check() {
        assert_eq!(
            text(&checks()),
            "\
ok       kubeconfig      context kind, cluster https://127.0.0.1:6443
FAIL     front-proxy CA  missing: start kube-apiserver with it
warn     APIService      not registered
skipped  plugins
"
        );
        assert_eq!(text(&[]), "");
        assert_eq!(
            text(&[Check::ok("policy", "none")]),
            "ok       policy  none\n",
            "the status column keeps its width"
        );
    }

    #[test]
    fn json_is_an_array_of_name_status_and_detail() {
        let parsed: serde_json::Value = serde_json::from_str(&json(&checks())).unwrap();
        assert_eq!(
            parsed[1],
            serde_json::json!({
                "name": "front-proxy CA",
                "status": "fail",
                "detail": "missing: start kube-apiserver with it"
            })
        );
        let statuses: Vec<_> = parsed
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, ["ok", "fail", "warn", "skipped"]);
    }

    #[test]
    fn the_failures_are_repeated_last_with_a_count() {
        assert_eq!(
            failures(&checks()),
            "\n1 of 4 check(s) failed:\nFAIL     front-proxy CA  missing: start kube-apiserver with it\n"
        );
        assert_eq!(failures(&checks()[2..]), "", "nothing when none failed");
    }

    #[test]
    fn only_a_failure_fails_the_run() {
        let mut all = checks();
        assert!(failed(&all));
        all.remove(1);
        assert!(!failed(&all), "warnings and skipped checks do not fail");
    }
}
