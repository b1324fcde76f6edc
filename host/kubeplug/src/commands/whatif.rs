//! `kubeplug whatif`: what a plugin's candidate would do to every parent,
//! as a running host's what-if found it (see [`kubeplug_operator::whatif`]):
//! read from the host's plain-HTTP listener (`/plugins`, whose rows carry
//! the report with parent names to loopback clients only).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::Value;

use super::replay::get;

/// Parents the text summary names at most.
const NAMES: usize = 10;

#[derive(Args)]
pub struct WhatIfArgs {
    /// The host's HTTP listener (its `--listen`); a host in a pod is
    /// reached with `--pod`.
    #[arg(
        long,
        env = "KUBEPLUG_WHATIF_FROM",
        default_value = "http://127.0.0.1:8080"
    )]
    from: String,
    /// The plugin's name (as in its manifest).
    plugin: String,
    /// Wait for a what-if still running, at most this long (`30s`, `2m`;
    /// a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    wait: crate::args::duration::GoDuration,
    #[command(flatten)]
    pod: super::forward::PodArgs,
    /// `text` (a summary) or `json` (the report as the host holds it).
    #[arg(short = 'o', long = "output", default_value = "text")]
    output: Output,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

/// The report of `plugin` in the `/plugins` rows: the one its promotion
/// gate judged (with why it is blocked), else its candidate's in shadow.
pub fn report(rows: &Value, plugin: &str) -> Option<(Value, Option<String>)> {
    let row = rows
        .as_array()?
        .iter()
        .find(|r| r["name"].as_str() == Some(plugin))?;
    if let Some(promotion) = row.get("promotion") {
        return Some((
            promotion["whatIf"].clone(),
            promotion["blocked"].as_str().map(String::from),
        ));
    }
    let report = row["shadow"].get("whatIf")?;
    Some((report.clone(), None))
}

/// The report as a few lines of text.
pub fn summary(plugin: &str, report: &Value, blocked: Option<&str>) -> String {
    let mut out = String::new();
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let short = |d: &Value| {
        d.as_str()
            .unwrap_or_default()
            .chars()
            .take(12)
            .collect::<String>()
    };
    let _ = writeln!(
        out,
        "what-if of {plugin} {} (sha256:{}) against {} serving: {}{}",
        report["candidateVersion"].as_str().unwrap_or("?"),
        short(&report["candidateDigest"]),
        report["liveVersion"].as_str().unwrap_or("?"),
        report["phase"].as_str().unwrap_or("?"),
        report["seconds"]
            .as_f64()
            .map(|s| format!(" in {s:.2} s"))
            .unwrap_or_default(),
    );
    if let Some(error) = report["error"].as_str() {
        let _ = writeln!(out, "cannot run: {error}");
    }
    let parents = n(&report["parents"]);
    let changed = n(&report["changed"]);
    let percent = if parents == 0 {
        0.0
    } else {
        changed as f64 * 100.0 / parents as f64
    };
    let _ = writeln!(
        out,
        "parents: {parents} of {}   changed: {changed} ({percent:.1} %)   unchanged: {}   refused: {}   failed: {}   parent patches: {}",
        n(&report["parentsTotal"]),
        n(&report["unchanged"]),
        n(&report["refused"]),
        n(&report["failed"]),
        n(&report["parentPatches"]),
    );
    let details = &report["details"];
    let rows = |title: &str, list: &Value, out: &mut String| {
        let Some(list) = list.as_array().filter(|l| !l.is_empty()) else {
            return;
        };
        let _ = writeln!(out, "{title}:");
        for row in list {
            let examples: Vec<&str> = row["examples"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let _ = writeln!(
                out,
                "  {:<24} {:<48} {} parents{}",
                row["kind"].as_str().unwrap_or_default(),
                row["field"].as_str().unwrap_or_default(),
                n(&row["parents"]),
                if examples.is_empty() {
                    String::new()
                } else {
                    format!("   e.g. {}", examples.join(", "))
                }
            );
        }
    };
    // Whole field paths come with the details (a reader who may see them);
    // the summary names only their schema part.
    let whole = |key: &str| {
        if details[key].is_array() {
            &details[key]
        } else {
            &report[key]
        }
    };
    rows("updates", whole("updates"), &mut out);
    rows("creates", &report["creates"], &mut out);
    rows("prunes", &report["prunes"], &mut out);
    rows("status", whole("status"), &mut out);
    for (title, key, text) in [
        ("refused", "refusals", "reason"),
        ("failed", "failures", "error"),
    ] {
        for row in details[key].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "{title}: {}: {}",
                row["parent"].as_str().unwrap_or_default(),
                row[text].as_str().unwrap_or_default()
            );
        }
    }
    if let Some(names) = details["changed"].as_array().filter(|l| !l.is_empty()) {
        let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
        let shown = names.len().min(NAMES);
        let more = (changed as usize).saturating_sub(shown);
        let _ = writeln!(
            out,
            "changed parents: {}{}",
            names[..shown].join(", "),
            if more > 0 {
                format!(" and {more} more (-o json lists them)")
            } else {
                String::new()
            }
        );
    }
    if let Some(blocked) = blocked {
        let _ = writeln!(out, "promotion blocked: {blocked}");
    }
    out
}

pub fn whatif_cmd(args: WhatIfArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let deadline = Instant::now() + args.wait.0;
    let from = runtime.block_on(super::forward::base(&args.from, &args.pod, &args.plugin))?;
    let (report, blocked) = loop {
        let body = runtime
            .block_on(get(&from, "/plugins"))
            .with_context(|| format!("cannot read the plugins of the host at {from}"))?;
        let rows: Value = serde_json::from_slice(&body)
            .with_context(|| format!("{from}/plugins is not a JSON list"))?;
        let Some((report, blocked)) = report(&rows, &args.plugin) else {
            bail!(
                "plugin {} has no what-if: none runs without a candidate ({}.next.wasm beside its file) or a promotion its gate judged",
                args.plugin,
                args.plugin
            );
        };
        if report["phase"] != "running" || Instant::now() >= deadline {
            break (report, blocked);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Text => print!("{}", summary(&args.plugin, &report, blocked.as_deref())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_summary_names_fields_parents_and_the_block() {
        let report = json!({
            "phase": "complete", "candidateVersion": "0.1.0", "candidateDigest": "abcdef0123456789",
            "liveVersion": "0.1.0", "seconds": 0.25, "parentsTotal": 3, "parents": 3, "changed": 1,
            "unchanged": 2, "refused": 0, "failed": 0, "parentPatches": 0,
            "updates": [{"kind": "StatefulSet.apps", "field": "spec.template.spec.containers[0].image", "parents": 1}],
            "creates": [], "prunes": [], "status": [],
            "details": {"changed": ["a/pg"], "updates": [{"kind": "StatefulSet.apps", "field": "spec.template.spec.containers[0].image", "parents": 1, "examples": ["a/pg"]}]},
        });
        let rows =
            json!([{"name": "database", "promotion": {"blocked": "too many", "whatIf": report}}]);
        let (found, blocked) = super::report(&rows, "database").unwrap();
        let text = summary("database", &found, blocked.as_deref());
        assert!(text.contains("complete in 0.25 s"), "{text}");
        assert!(text.contains("changed: 1 (33.3 %)"), "{text}");
        assert!(
            text.contains("spec.template.spec.containers[0].image"),
            "{text}"
        );
        assert!(text.contains("e.g. a/pg"), "{text}");
        assert!(text.contains("changed parents: a/pg"), "{text}");
        assert!(text.ends_with("promotion blocked: too many\n"), "{text}");
        assert!(super::report(&json!([{"name": "database"}]), "database").is_none());
    }
}
