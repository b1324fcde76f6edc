//! Fixture files (docs/fixtures.md): one case per YAML document or JSON
//! file, each a call with fixed inputs and the answer the plugin must give.
//! Parsing only; running a case is [`super::check`].

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::outcome::{Call, Outcome};
use kubeplug_core::yaml;

/// The `now` of a case that gives none.
pub const DEFAULT_NOW: &str = "2026-11-29T18:00:00Z";

/// The entropy of a case that gives none: bytes 0, 1, ..., 31.
pub fn default_entropy() -> Vec<u8> {
    (0..32).collect()
}

/// A fixture file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: document {document} is not valid YAML or JSON")]
    Parse {
        path: String,
        document: usize,
        #[source]
        source: yaml::Error,
    },
    #[error("{path}: document {document}: {reason}")]
    Invalid {
        path: String,
        document: usize,
        reason: String,
    },
}

/// One case, defaults filled in.
#[derive(Debug, Clone)]
pub struct Case {
    /// The case's `name`, else the file name (+ `#<n>` in a file of several).
    pub name: String,
    pub file: PathBuf,
    /// Index of the case's document among all documents of its file (the
    /// one `--update` rewrites).
    pub document: usize,
    pub call: Call,
    /// `None`: the run's default configuration (`{}` unless `--config`).
    pub config: Option<Value>,
    pub now: String,
    pub entropy: Vec<u8>,
    /// The parent with `metadata.uid` filled in when missing.
    pub parent: Option<Value>,
    pub observed: Vec<Value>,
    pub related: Vec<Value>,
    pub expect: Outcome,
}

/// A case as written; unknown keys are refused, so a misspelt key cannot
/// silently test nothing.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    name: Option<String>,
    #[serde(default)]
    call: Call,
    config: Option<Value>,
    now: Option<String>,
    entropy: Option<String>,
    parent: Option<Value>,
    #[serde(default)]
    observed: Vec<Value>,
    #[serde(default)]
    related: Vec<Value>,
    #[serde(default)]
    expect: Option<Value>,
}

/// Is `path` a fixture file (by extension)?
pub fn is_fixture(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

/// Every document of a file as YAML values (JSON is YAML), empty ones kept
/// as `Null` so that indices stay those of the file.
pub fn read_documents(path: &Path) -> Result<Vec<yaml::Value>, FixtureError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| FixtureError::Read {
        path: shown.clone(),
        source,
    })?;
    yaml::from_documents(&text).map_err(|(document, source)| FixtureError::Parse {
        path: shown,
        document: document + 1,
        source,
    })
}

/// The cases of one file, in document order.
pub fn read_cases(path: &Path) -> Result<Vec<Case>, FixtureError> {
    let documents = read_documents(path)?;
    let count = documents.iter().filter(|d| !d.is_null()).count();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut cases = Vec::new();
    for (index, doc) in documents.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let invalid = |reason: String| FixtureError::Invalid {
            path: path.display().to_string(),
            document: index + 1,
            reason,
        };
        let written: Written = doc.to_typed().map_err(|e| invalid(e.to_string()))?;
        let default_name = if count > 1 {
            format!("{file_name}#{}", cases.len() + 1)
        } else {
            file_name.clone()
        };
        cases.push(case(written, default_name, path, index).map_err(invalid)?);
    }
    Ok(cases)
}

fn case(
    written: Written,
    default_name: String,
    file: &Path,
    document: usize,
) -> Result<Case, String> {
    let now = written.now.unwrap_or_else(|| DEFAULT_NOW.into());
    now.parse::<jiff::Timestamp>()
        .map_err(|e| format!("now: {now:?} is not an RFC 3339 time: {e}"))?;
    let entropy = match written.entropy {
        None => default_entropy(),
        Some(hex_text) => match hex::decode(&hex_text) {
            Ok(bytes) if bytes.len() == 32 => bytes,
            _ => return Err(format!("entropy: expected 64 hex digits, got {hex_text:?}")),
        },
    };
    let parent = match (written.call, written.parent) {
        (Call::Manifest, Some(_)) => return Err("a manifest case takes no parent".into()),
        (Call::Manifest, None) => None,
        (call, None) => return Err(format!("a {call} case needs a parent")),
        (_, Some(parent)) => Some(with_uid(parent)?),
    };
    if written.config.as_ref().is_some_and(|c| !c.is_object()) {
        return Err("config: expected a mapping".into());
    }
    for (what, objects) in [
        ("observed", &written.observed),
        ("related", &written.related),
    ] {
        if objects.iter().any(|o| !o.is_object()) {
            return Err(format!("{what}: expected a list of objects"));
        }
    }
    let expect =
        Outcome::expected(written.call, written.expect).map_err(|e| format!("expect: {e}"))?;
    Ok(Case {
        name: written.name.unwrap_or(default_name),
        file: file.to_path_buf(),
        document,
        call: written.call,
        config: written.config,
        now,
        entropy,
        parent,
        observed: written.observed,
        related: written.related,
        expect,
    })
}

/// The parent as the host would hand it over: a stored object has a uid
/// (the placeholder of `kubeplug render` when the file gives none).
fn with_uid(mut parent: Value) -> Result<Value, String> {
    let Some(object) = parent.as_object_mut() else {
        return Err("parent: expected an object".into());
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(metadata) = metadata.as_object_mut() else {
        return Err("parent.metadata: expected a mapping".into());
    };
    metadata
        .entry("uid")
        .or_insert_with(|| crate::render::PLACEHOLDER_UID.into());
    Ok(parent)
}

/// The fixture files of `dir`: those of `dir/fixtures/` if it exists, else
/// of `dir` itself, in name order.
pub fn files(dir: &Path) -> Result<Vec<PathBuf>, FixtureError> {
    let nested = dir.join("fixtures");
    let dir = if nested.is_dir() {
        nested
    } else {
        dir.to_path_buf()
    };
    let read = |source| FixtureError::Read {
        path: dir.display().to_string(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(read)? {
        let path = entry.map_err(read)?.path();
        if path.is_file() && is_fixture(&path) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cases(text: &str) -> Result<Vec<Case>, FixtureError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cases.yaml");
        std::fs::write(&path, text).unwrap();
        read_cases(&path)
    }

    const PARENT: &str = "parent: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n";

    #[test]
    fn defaults_fill_what_a_case_leaves_out() {
        let [case] = <[Case; 1]>::try_from(cases(PARENT).unwrap()).unwrap();
        assert_eq!(case.name, "cases.yaml");
        assert_eq!(case.call, Call::Reconcile);
        assert_eq!(case.config, None);
        assert_eq!(case.now, DEFAULT_NOW);
        assert_eq!(case.entropy, (0..32).collect::<Vec<u8>>());
        assert_eq!(
            case.parent.unwrap()["metadata"]["uid"],
            crate::render::PLACEHOLDER_UID
        );
        assert_eq!(case.expect, Outcome::empty(Call::Reconcile));
    }

    #[test]
    fn several_documents_are_several_cases_named_by_position() {
        let text = format!(
            "{PARENT}---\n{PARENT}name: second\nentropy: {}\n---\n# nothing\n---\ncall: manifest\n",
            "ff".repeat(32)
        );
        let found = cases(&text).unwrap();
        let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["cases.yaml#1", "second", "cases.yaml#3"]);
        assert_eq!(found[1].entropy, vec![0xff; 32]);
        let documents: Vec<usize> = found.iter().map(|c| c.document).collect();
        assert_eq!(documents, [0, 1, 3], "indices of the file's documents");
        assert_eq!(found[2].call, Call::Manifest);
    }

    #[test]
    fn bad_cases_are_refused_with_their_document() {
        for (text, says) in [
            ("call: reconcile\n".to_string(), "needs a parent"),
            (
                "call: manifest\nparent: {}\n".to_string(),
                "takes no parent",
            ),
            (format!("{PARENT}expcet: {{}}\n"), "unknown field `expcet`"),
            (format!("{PARENT}entropy: abc\n"), "64 hex digits"),
            (format!("{PARENT}now: yesterday\n"), "RFC 3339"),
            (
                format!("{PARENT}expect: {{done: true}}\n"),
                "unknown key \"done\"",
            ),
            (format!("{PARENT}observed: [1]\n"), "observed"),
            (format!("{PARENT}call: upgrade\n"), "unknown variant"),
        ] {
            let error = cases(&text).unwrap_err().to_string();
            assert!(error.contains("document 1"), "{error}");
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
