//! `kubeplug test DIR`: every fixture of a directory against one plugin
//! file, a report like `cargo test`'s, and `--update` rewriting `expect`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::check::{self, FieldDiff, Subject};
use super::fixture::{self, Case, FixtureError};
use super::outcome::Call;
use crate::webhook;
use kubeplug_core::admission::{Admission, AdmitError, Offline};
use kubeplug_core::policy::Policy;
use kubeplug_core::webhook::Webhook;
use kubeplug_core::yaml;
use kubeplug_runtime::{
    CallError, GuestError, LimitSettings, Limits, LoadError, Plugin, PluginOptions, Runtime,
};

/// What a run needs besides the directory.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The plugin file; `None`: the one `*.wasm` in `DIR/dist/`.
    pub plugin: Option<PathBuf>,
    /// Rewrite the `expect` of failing cases with the plugin's answer.
    pub update: bool,
    /// The configuration of cases that give none (`{}` when `None`).
    pub config: Option<Value>,
    /// The policy the plugin is admitted under, as the live host would
    /// admit it, and whose grant the fence checks apply (quotas, decorator
    /// keys).
    pub policy: Policy,
    /// CustomResourceDefinitions that tell the scope of custom kinds to the
    /// admission (see [`kubeplug_core::admission::Offline`]).
    pub crds: Vec<Value>,
    /// Limits of every call (the host's defaults unless the caller says).
    pub limits: Limits,
}

/// Nothing could be tested: exit code 2 of `kubeplug test`.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("no plugin: {dir} holds no *.wasm file (build the plugin, or pass --plugin)")]
    NoPlugin { dir: String },
    #[error("{dir} holds several *.wasm files ({found}); pass --plugin")]
    SeveralPlugins { dir: String, found: String },
    #[error("no fixtures (*.yaml, *.yml, *.json) in {dir}")]
    NoFixtures { dir: String },
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    #[error("cannot read plugin {path}")]
    ReadPlugin {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot load plugin {path}")]
    Load {
        path: String,
        #[source]
        source: LoadError,
    },
    /// The plugin as loaded with a case's configuration is one the live
    /// host would not serve.
    #[error("the live host would refuse plugin {path}: {error}")]
    Refused { path: String, error: AdmitError },
    #[error("cannot write {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// How one case went.
#[derive(Debug)]
pub enum Verdict {
    Passed,
    /// `--update` rewrote its `expect`.
    Updated,
    Failed(Vec<FieldDiff>),
    /// No answer to compare (e.g. the plugin trapped).
    Broken(String),
}

#[derive(Debug)]
pub struct CaseResult {
    /// The case's name, with its file's when the name is its own.
    pub label: String,
    pub file: PathBuf,
    /// 1-based, as editors count documents.
    pub document: usize,
    pub verdict: Verdict,
}

/// Every case's verdict, in file and document order.
#[derive(Debug)]
pub struct Report {
    pub plugin: PathBuf,
    /// What the admission took on trust (see [`kubeplug_core::admission::Admitted`]),
    /// and webhooks the cases call that the plugin's grant does not serve.
    pub notes: Vec<String>,
    pub results: Vec<CaseResult>,
}

impl Report {
    /// True when no case failed (updated ones count as passed).
    pub fn passed(&self) -> bool {
        self.results
            .iter()
            .all(|r| matches!(r.verdict, Verdict::Passed | Verdict::Updated))
    }

    /// The report as `kubeplug test` prints it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let count = self.results.len();
        let plural = if count == 1 { "" } else { "s" };
        let _ = writeln!(
            out,
            "running {count} case{plural} with {}",
            self.plugin.display()
        );
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        for r in &self.results {
            let word = match r.verdict {
                Verdict::Passed => "ok",
                Verdict::Updated => "updated",
                Verdict::Failed(_) | Verdict::Broken(_) => "FAILED",
            };
            let _ = writeln!(out, "test {} ... {word}", r.label);
        }
        let failed: Vec<&CaseResult> = self
            .results
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Failed(_) | Verdict::Broken(_)))
            .collect();
        if !failed.is_empty() {
            out.push_str("\nfailures:\n");
            for r in &failed {
                let _ = writeln!(
                    out,
                    "\n---- {} ({}, document {}) ----",
                    r.label,
                    r.file.display(),
                    r.document
                );
                match &r.verdict {
                    Verdict::Failed(diffs) => {
                        for d in diffs {
                            let _ = writeln!(out, "{} ({}):", d.field, d.sides);
                            out.push_str(&d.diff);
                        }
                    }
                    Verdict::Broken(reason) => {
                        let _ = writeln!(out, "{reason}");
                    }
                    _ => {}
                }
            }
            out.push_str("\nfailures:\n");
            for r in &failed {
                let _ = writeln!(out, "    {}", r.label);
            }
        }
        let updated = self
            .results
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Updated))
            .count();
        let passed = count - failed.len() - updated;
        let result = if failed.is_empty() { "ok" } else { "FAILED" };
        let updated = if updated > 0 {
            format!(" {updated} updated;")
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "\ntest result: {result}. {passed} passed;{updated} {} failed",
            failed.len()
        );
        out
    }
}

/// The plugin file of `dir`: the one `*.wasm` in `dir/dist/` (where the
/// scaffolds' `build` scripts put it; not `build/`, which is the script).
pub fn find_plugin(dir: &Path) -> Result<PathBuf, SuiteError> {
    let build = dir.join("dist");
    let shown = build.display().to_string();
    let mut found: Vec<PathBuf> = std::fs::read_dir(&build)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    match found.len() {
        0 => Err(SuiteError::NoPlugin { dir: shown }),
        1 => Ok(found.remove(0)),
        _ => Err(SuiteError::SeveralPlugins {
            dir: shown,
            found: found
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// The plugin loaded and admitted once per configuration the cases use.
struct Loader<'a> {
    runtime: &'a Runtime,
    path: &'a Path,
    bytes: Vec<u8>,
    limits: Limits,
    policy: &'a Policy,
    served: Offline,
    notes: Vec<String>,
    loaded: HashMap<String, Result<Plugin, GuestError>>,
}

impl Loader<'_> {
    fn get(&mut self, config: &Value) -> Result<Subject<'_>, SuiteError> {
        let key = config.to_string();
        if !self.loaded.contains_key(&key) {
            let options = PluginOptions {
                config: Some(config.clone()),
                label: Some(self.path.display().to_string()),
                limits: self.limits,
                ..Default::default()
            };
            let loaded = match self.runtime.load(&self.bytes, options) {
                Ok(plugin) => {
                    self.admit(&plugin)?;
                    Ok(plugin)
                }
                // A configuration the plugin refuses is its answer.
                Err(LoadError::Manifest(CallError::Guest { error, .. })) => Err(error),
                Err(source) => {
                    return Err(SuiteError::Load {
                        path: self.path.display().to_string(),
                        source,
                    });
                }
            };
            self.loaded.insert(key.clone(), loaded);
        }
        Ok(match &self.loaded[&key] {
            Ok(plugin) => Subject::Loaded(plugin),
            Err(error) => Subject::Refused(error),
        })
    }

    /// Refuse the plugin the live host would refuse. The cases still run on
    /// the plugin as it declares itself (a `manifest` case expects the
    /// manifest as declared), with the limits they were given.
    fn admit(&mut self, plugin: &Plugin) -> Result<(), SuiteError> {
        let admitted = Admission::new(self.policy)
            .admit(
                plugin.manifest(),
                plugin.digest(),
                LimitSettings::default(),
                &self.served,
            )
            .map_err(|error| SuiteError::Refused {
                path: self.path.display().to_string(),
                error,
            })?;
        for note in admitted.notes {
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        Ok(())
    }
}

/// Run every fixture of `dir` (see [`fixture::files`]).
pub fn run(runtime: &Runtime, dir: &Path, options: &Options) -> Result<Report, SuiteError> {
    let files = fixture::files(dir)?;
    let mut cases = Vec::new();
    for file in &files {
        cases.extend(fixture::read_cases(file)?);
    }
    if cases.is_empty() {
        return Err(SuiteError::NoFixtures {
            dir: dir.display().to_string(),
        });
    }
    let path = match &options.plugin {
        Some(path) => path.clone(),
        None => find_plugin(dir)?,
    };
    let bytes = std::fs::read(&path).map_err(|source| SuiteError::ReadPlugin {
        path: path.display().to_string(),
        source,
    })?;
    let mut loader = Loader {
        runtime,
        path: &path,
        bytes,
        limits: options.limits,
        policy: &options.policy,
        served: Offline::from_crds(&options.crds),
        notes: Vec::new(),
        loaded: HashMap::new(),
    };
    let default_config = options
        .config
        .clone()
        .unwrap_or_else(|| Value::Object(Default::default()));
    let mut results = Vec::new();
    // file -> document -> new `expect`.
    let mut updates: BTreeMap<PathBuf, BTreeMap<usize, yaml::Value>> = BTreeMap::new();
    let mut ungranted = Vec::new();
    for case in &cases {
        let subject = loader.get(case.config.as_ref().unwrap_or(&default_config))?;
        if let Subject::Loaded(plugin) = subject {
            ungranted.extend(webhook_notes(case.call, plugin, &options.policy));
        }
        let answered = check::answer(case, subject, &options.policy).and_then(|actual| {
            let lost = check::round_trip(case, subject, &actual)?;
            Ok((actual, lost))
        });
        let verdict = match answered {
            Err(error) => Verdict::Broken(format!("{:#}", anyhow::Error::from(error))),
            Ok((actual, lost)) => {
                let diffs = check::compare(&case.expect, &actual);
                let update = options.update && !diffs.is_empty();
                if update {
                    updates
                        .entry(case.file.clone())
                        .or_default()
                        .insert(case.document, actual.to_expect());
                }
                // A loss is no answer to record: --update cannot pass it.
                let mut failed = if update { Vec::new() } else { diffs };
                failed.extend(lost);
                if !failed.is_empty() {
                    Verdict::Failed(failed)
                } else if update {
                    Verdict::Updated
                } else {
                    Verdict::Passed
                }
            }
        };
        results.push(CaseResult {
            label: label(case),
            file: case.file.clone(),
            document: case.document + 1,
            verdict,
        });
    }
    let mut notes = loader.notes;
    for note in ungranted {
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    for (file, expects) in updates {
        rewrite(&file, &expects)?;
    }
    Ok(Report {
        plugin: path,
        notes,
        results,
    })
}

/// What the plugin's grant does not serve of the webhook a case calls.
fn webhook_notes(call: Call, plugin: &Plugin, policy: &Policy) -> Vec<String> {
    let export = match call {
        Call::Validate => Webhook::Validate,
        Call::Mutate => Webhook::Mutate,
        Call::Convert => Webhook::Convert,
        Call::Reconcile | Call::Finalize | Call::Manifest => return Vec::new(),
    };
    policy
        .grant(plugin.name())
        .map(|grant| webhook::ungranted(&grant, &[export]))
        .unwrap_or_default()
}

fn label(case: &Case) -> String {
    let file = case
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if case.name.starts_with(&file) {
        case.name.clone()
    } else {
        format!("{file}: {}", case.name)
    }
}

/// Write `expects` (by document index) into `file`, keeping every other key
/// of every case. In a YAML file only the `expect` blocks are replaced, so
/// comments and layout elsewhere survive; when that cannot be done safely
/// (e.g. a case in flow style, or JSON) the file is written out again whole,
/// keys in their order but without comments.
pub fn rewrite(file: &Path, expects: &BTreeMap<usize, yaml::Value>) -> Result<(), SuiteError> {
    let read = |source| SuiteError::Write {
        path: file.display().to_string(),
        source,
    };
    let text = std::fs::read_to_string(file).map_err(read)?;
    let mut documents = fixture::read_documents(file)?;
    for (index, expect) in expects {
        if let Some(yaml::Value::Mapping(case)) = documents.get_mut(*index) {
            case.insert("expect".into(), expect.clone());
        }
    }
    let json = file.extension().is_some_and(|e| e == "json");
    let spliced = (!json)
        .then(|| splice::expects(&text, expects))
        .flatten()
        .filter(|spliced| reads_as(spliced, &documents));
    let text = match spliced {
        Some(spliced) => spliced,
        None if json => documents
            .iter()
            .filter(|d| !d.is_null())
            .map(|d| serde_json::to_string_pretty(d).expect("YAML values serialize as JSON") + "\n")
            .collect(),
        None => documents
            .iter()
            .filter(|d| !d.is_null())
            .map(yaml::to_string)
            .collect::<Vec<_>>()
            .join("---\n"),
    };
    std::fs::write(file, text).map_err(read)
}

/// Does `text` parse into exactly `documents` (empty ones aside)?
fn reads_as(text: &str, documents: &[yaml::Value]) -> bool {
    let parsed = yaml::from_documents::<yaml::Value>(text);
    let want: Vec<&yaml::Value> = documents.iter().filter(|d| !d.is_null()).collect();
    parsed.is_ok_and(|p| p.iter().filter(|d| !d.is_null()).collect::<Vec<_>>() == want)
}

mod splice {
    //! Replace the top-level `expect:` block of YAML documents as text.

    use std::collections::BTreeMap;

    use kubeplug_core::yaml;

    fn separator(line: &str) -> bool {
        line == "---" || line.starts_with("--- ") || line.starts_with("---\t")
    }

    fn content(line: &str) -> bool {
        let t = line.trim();
        !t.is_empty() && !t.starts_with('#') && !separator(line)
    }

    /// `text` with the `expect` of the documents in `expects` replaced; the
    /// caller checks that the result parses as intended.
    pub fn expects(text: &str, expects: &BTreeMap<usize, yaml::Value>) -> Option<String> {
        let mut chunks: Vec<Vec<String>> = vec![Vec::new()];
        for line in text.lines() {
            if separator(line) {
                chunks.push(Vec::new());
            }
            chunks
                .last_mut()
                .expect("one chunk at least")
                .push(line.to_string());
        }
        // A leading chunk of comments only is no document.
        let skip = usize::from(!chunks[0].iter().any(|l| content(l)));
        for (index, expect) in expects {
            let chunk = chunks.get_mut(index + skip)?;
            replace(chunk, expect)?;
        }
        let mut out = chunks.concat().join("\n");
        out.push('\n');
        Some(out)
    }

    fn replace(lines: &mut Vec<String>, expect: &yaml::Value) -> Option<()> {
        let body = kubeplug_core::yaml::to_string(expect);
        let block: Vec<String> = if expect.as_mapping().is_some_and(|m| m.is_empty()) {
            vec!["expect: {}".into()]
        } else {
            std::iter::once("expect:".to_string())
                .chain(body.lines().map(|l| format!("  {l}")))
                .collect()
        };
        let top_level = |l: &String| l.starts_with(|c: char| !c.is_whitespace());
        match lines
            .iter()
            .position(|l| l == "expect:" || l.starts_with("expect: "))
        {
            Some(start) => {
                let mut end = lines[start + 1..]
                    .iter()
                    .position(top_level)
                    .map_or(lines.len(), |i| start + 1 + i);
                while end > start + 1 && lines[end - 1].trim().is_empty() {
                    end -= 1;
                }
                lines.splice(start..end, block);
            }
            None => {
                let end = lines
                    .iter()
                    .rposition(|l| content(l))
                    .map_or(lines.len(), |i| i + 1);
                lines.splice(end..end, block);
            }
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(name: &str, text: &str, expects: &[(usize, &str)]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let expects = expects
            .iter()
            .map(|(i, y)| (*i, yaml::from_str(y).unwrap()))
            .collect();
        rewrite(&path, &expects).unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn update_replaces_only_the_expect_blocks_and_keeps_comments() {
        let text = "# header\nname: one\nexpect:\n  status: {a: 1}\n\n# about two\n---\nname: two\n# the parent\nparent: {}\n";
        let out = rewritten("c.yaml", text, &[(0, "{status: {a: 2}}"), (1, "{}")]);
        assert_eq!(
            out,
            "# header\nname: one\nexpect:\n  status:\n    a: 2\n\n# about two\n---\nname: two\n# the parent\nparent: {}\nexpect: {}\n"
        );
    }

    #[test]
    fn update_writes_a_flow_style_case_or_json_whole() {
        let out = rewritten(
            "c.yaml",
            "{name: one, expect: {}}\n",
            &[(0, "{status: {a: 2}}")],
        );
        assert_eq!(out, "name: one\nexpect:\n  status:\n    a: 2\n");
        let out = rewritten("c.json", "{\"name\": \"one\"}", &[(0, "{status: {a: 2}}")]);
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            back,
            serde_json::json!({"name": "one", "expect": {"status": {"a": 2}}})
        );
    }
}
