//! Fixture files (docs/fixtures.md): one case per YAML document or JSON
//! file, each a call with fixed inputs and the answer the plugin must give.
//! Parsing only; running a case is [`super::check`].

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::outcome::{Call, ExpectError, Outcome};
use crate::webhook::admit;
use kubeplug_core::webhook::{AdmissionCall, Operation};
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
        reason: CaseError,
    },
}

/// A document that is not a case (shown in [`FixtureError::Invalid`]'s
/// message, so not its source).
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// Not the shape of a case (an unknown key, a wrong type).
    #[error(transparent)]
    Shape(serde_json::Error),
    /// An input (named) the call is not given.
    #[error("a {call} case takes no {input}")]
    TakesNo { call: Call, input: &'static str },
    #[error("now: {now:?} is not an RFC 3339 time: {error}")]
    Now { now: String, error: jiff::Error },
    #[error("entropy: expected 64 hex digits, got {0:?}")]
    Entropy(String),
    #[error("a {0} case needs a parent")]
    NoParent(Call),
    #[error("parent: expected an object")]
    ParentNotObject,
    #[error("parent.metadata: expected a mapping")]
    ParentMetadata,
    #[error("config: expected a mapping")]
    Config,
    /// A list (named) with something not an object.
    #[error("{0}: expected a list of objects")]
    NotObjects(&'static str),
    #[error("a validate or mutate case needs an operation (create, update or delete)")]
    NoOperation,
    #[error("operation: expected create, update or delete, got {0:?}")]
    Operation(String),
    /// A review object (`key`) the operation (`named`) carries is missing;
    /// `a` is the article before it.
    #[error("{a} {named} case needs {key}")]
    Needs {
        a: &'static str,
        named: String,
        key: &'static str,
    },
    /// A review object (`key`) the operation (`named`) does not carry.
    #[error("a {named} carries no {key} ({why})")]
    CarriesNo {
        named: String,
        key: &'static str,
        why: &'static str,
    },
    #[error(transparent)]
    Review(#[from] admit::ReviewInputError),
    #[error("a convert case needs objects")]
    NoObjects,
    #[error("a convert case needs the apiVersion to convert to")]
    NoApiVersion,
    #[error("expect: {0}")]
    Expect(ExpectError),
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
    /// Objects in the cluster the parent's references may find (`cluster`):
    /// those they find are handed after `related`, as the operator does.
    pub cluster: Vec<Value>,
    /// `validate` and `mutate`: the review of the case's write.
    pub review: Option<AdmissionCall>,
    /// `convert`: the objects and the version asked.
    pub conversion: Option<Conversion>,
    pub expect: Outcome,
}

/// What a `convert` case asks.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    pub objects: Vec<Value>,
    /// The version to convert to (`apiVersion`).
    pub api_version: String,
    /// Also convert the answer back to each object's own version and
    /// expect nothing lost (`roundTrip`).
    pub round_trip: bool,
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
    observed: Option<Vec<Value>>,
    related: Option<Vec<Value>>,
    cluster: Option<Vec<Value>>,
    // validate and mutate
    operation: Option<String>,
    object: Option<Value>,
    #[serde(rename = "oldObject")]
    old_object: Option<Value>,
    user: Option<User>,
    #[serde(rename = "dryRun")]
    dry_run: Option<bool>,
    // convert
    objects: Option<Vec<Value>>,
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    #[serde(rename = "roundTrip")]
    round_trip: Option<bool>,
    #[serde(default)]
    expect: Option<Value>,
}

/// Who writes, in a `validate` or `mutate` case.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct User {
    username: Option<String>,
    #[serde(default)]
    groups: Vec<String>,
}

impl Written {
    /// The inputs given, by key, for refusing those the call does not take.
    fn inputs(&self) -> [(&'static str, bool); 14] {
        [
            ("parent", self.parent.is_some()),
            ("observed", self.observed.is_some()),
            ("related", self.related.is_some()),
            ("cluster", self.cluster.is_some()),
            ("entropy", self.entropy.is_some()),
            ("now", self.now.is_some()),
            ("operation", self.operation.is_some()),
            ("object", self.object.is_some()),
            ("oldObject", self.old_object.is_some()),
            ("user", self.user.is_some()),
            ("dryRun", self.dry_run.is_some()),
            ("objects", self.objects.is_some()),
            ("apiVersion", self.api_version.is_some()),
            ("roundTrip", self.round_trip.is_some()),
        ]
    }
}

/// The inputs a call takes besides `config` (manifest cases keep taking
/// what they always ignored, except a parent).
fn takes(call: Call, input: &str) -> bool {
    match call {
        Call::Reconcile | Call::Finalize => {
            matches!(
                input,
                "parent" | "observed" | "related" | "cluster" | "entropy" | "now"
            )
        }
        Call::Manifest => matches!(input, "observed" | "related" | "entropy" | "now"),
        Call::Validate | Call::Mutate => matches!(
            input,
            "operation" | "object" | "oldObject" | "user" | "dryRun" | "now"
        ),
        Call::Convert => matches!(input, "objects" | "apiVersion" | "roundTrip"),
    }
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
        let invalid = |reason: CaseError| FixtureError::Invalid {
            path: path.display().to_string(),
            document: index + 1,
            reason,
        };
        let written: Written = doc.to_typed().map_err(|e| invalid(CaseError::Shape(e)))?;
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
    mut written: Written,
    default_name: String,
    file: &Path,
    document: usize,
) -> Result<Case, CaseError> {
    let call = written.call;
    if let Some((input, _)) = written
        .inputs()
        .into_iter()
        .find(|(input, given)| *given && !takes(call, input))
    {
        return Err(CaseError::TakesNo { call, input });
    }
    let now = written.now.take().unwrap_or_else(|| DEFAULT_NOW.into());
    now.parse::<jiff::Timestamp>()
        .map_err(|error| CaseError::Now {
            now: now.clone(),
            error,
        })?;
    let entropy = match written.entropy.take() {
        None => default_entropy(),
        Some(hex_text) => match hex::decode(&hex_text) {
            Ok(bytes) if bytes.len() == 32 => bytes,
            _ => return Err(CaseError::Entropy(hex_text)),
        },
    };
    let parent = match (call, written.parent.take()) {
        (Call::Reconcile | Call::Finalize, None) => {
            return Err(CaseError::NoParent(call));
        }
        (_, parent) => parent.map(with_uid).transpose()?,
    };
    if written.config.as_ref().is_some_and(|c| !c.is_object()) {
        return Err(CaseError::Config);
    }
    let observed = written.observed.take().unwrap_or_default();
    let related = written.related.take().unwrap_or_default();
    let cluster = written.cluster.take().unwrap_or_default();
    for (what, objects) in [
        ("observed", &observed),
        ("related", &related),
        ("cluster", &cluster),
    ] {
        if objects.iter().any(|o| !o.is_object()) {
            return Err(CaseError::NotObjects(what));
        }
    }
    let review = match call {
        Call::Validate | Call::Mutate => Some(review(&mut written)?),
        _ => None,
    };
    let conversion = match call {
        Call::Convert => Some(conversion(&mut written)?),
        _ => None,
    };
    let expect = Outcome::expected(call, written.expect).map_err(CaseError::Expect)?;
    Ok(Case {
        name: written.name.unwrap_or(default_name),
        file: file.to_path_buf(),
        document,
        call,
        config: written.config,
        now,
        entropy,
        parent,
        observed,
        related,
        cluster,
        review,
        conversion,
        expect,
    })
}

/// The review of a `validate` or `mutate` case: its `operation`, the
/// objects that operation carries, `user` and `dryRun`.
fn review(written: &mut Written) -> Result<AdmissionCall, CaseError> {
    let named = written.operation.as_deref().ok_or(CaseError::NoOperation)?;
    let operation = admit::operation(named).ok_or_else(|| CaseError::Operation(named.into()))?;
    let (object, old_object) = admit::carries(operation);
    let a = if operation == Operation::Update {
        "an"
    } else {
        "a"
    };
    for (key, carried, given) in [
        ("object", object, written.object.is_some()),
        ("oldObject", old_object, written.old_object.is_some()),
    ] {
        match (carried, given) {
            (true, false) => {
                return Err(CaseError::Needs {
                    a,
                    named: named.into(),
                    key,
                });
            }
            (false, true) => {
                let why = match operation {
                    Operation::Delete => "the object deleted is oldObject",
                    _ => "nothing is stored before a create",
                };
                return Err(CaseError::CarriesNo {
                    named: named.into(),
                    key,
                    why,
                });
            }
            _ => {}
        }
    }
    let mut call = admit::review(operation, written.object.take(), written.old_object.take())?;
    if let Some(user) = written.user.take() {
        call.username = user.username.unwrap_or(call.username);
        call.groups = user.groups;
    }
    call.dry_run = written.dry_run.unwrap_or(false);
    Ok(call)
}

/// The objects and version of a `convert` case.
fn conversion(written: &mut Written) -> Result<Conversion, CaseError> {
    let objects = written.objects.take().ok_or(CaseError::NoObjects)?;
    if objects.iter().any(|o| !o.is_object()) {
        return Err(CaseError::NotObjects("objects"));
    }
    let api_version = written.api_version.take().ok_or(CaseError::NoApiVersion)?;
    Ok(Conversion {
        objects,
        api_version,
        round_trip: written.round_trip.unwrap_or(false),
    })
}

/// The parent as the host would hand it over: a stored object has a uid
/// (the placeholder of `kubeplug render` when the file gives none).
fn with_uid(mut parent: Value) -> Result<Value, CaseError> {
    let Some(object) = parent.as_object_mut() else {
        return Err(CaseError::ParentNotObject);
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(metadata) = metadata.as_object_mut() else {
        return Err(CaseError::ParentMetadata);
    };
    metadata
        .entry("uid")
        .or_insert_with(|| crate::stored::PLACEHOLDER_UID.into());
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
    const OBJECT: &str =
        "{apiVersion: example.com/v1, kind: Database, metadata: {name: d, namespace: shop}}";

    #[test]
    fn a_write_is_a_review_named_after_its_object() {
        let text = format!(
            "call: validate\noperation: update\nobject: {OBJECT}\noldObject: {OBJECT}\nuser: {{username: alice, groups: [devs]}}\ndryRun: true\n---\ncall: mutate\noperation: delete\noldObject: {OBJECT}\n"
        );
        let [update, delete] = <[Case; 2]>::try_from(cases(&text).unwrap()).unwrap();
        let review = update.review.unwrap();
        assert_eq!(review.operation, Operation::Update);
        assert_eq!(
            (
                review.group.as_str(),
                review.version.as_str(),
                review.kind.as_str()
            ),
            ("example.com", "v1", "Database")
        );
        assert_eq!(
            (review.namespace.as_str(), review.name.as_str()),
            ("shop", "d")
        );
        assert_eq!(
            (review.username.as_str(), review.groups),
            ("alice", vec!["devs".to_string()])
        );
        assert!(review.dry_run);
        assert!(review.object.is_some() && review.old_object.is_some());
        assert_eq!(
            update.expect,
            Outcome::expected(Call::Validate, None).unwrap()
        );
        let review = delete.review.unwrap();
        assert_eq!((review.object, review.name.as_str()), (None, "d"));
        assert_eq!(
            (review.username.as_str(), review.dry_run),
            (admit::TEST_USER, false),
            "the test user, no dry run"
        );
    }

    #[test]
    fn a_conversion_names_its_objects_and_version() {
        let text = format!(
            "call: convert\nobjects: [{OBJECT}]\napiVersion: example.com/v2\nroundTrip: true\n"
        );
        let [case] = <[Case; 1]>::try_from(cases(&text).unwrap()).unwrap();
        let conversion = case.conversion.unwrap();
        assert_eq!(conversion.api_version, "example.com/v2");
        assert_eq!(conversion.objects.len(), 1);
        assert!(conversion.round_trip);
        assert!(case.review.is_none() && case.parent.is_none());
    }

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
            crate::stored::PLACEHOLDER_UID
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
            (format!("{PARENT}operation: create\n"), "takes no operation"),
            (format!("call: validate\n{PARENT}"), "takes no parent"),
            ("call: validate\n".into(), "needs an operation"),
            (
                "call: mutate\noperation: upsert\n".into(),
                "expected create, update or delete",
            ),
            (
                "call: validate\noperation: create\n".into(),
                "a create case needs object",
            ),
            (
                format!("call: validate\noperation: update\nobject: {OBJECT}\n"),
                "an update case needs oldObject",
            ),
            (
                format!(
                    "call: validate\noperation: delete\noldObject: {OBJECT}\nobject: {OBJECT}\n"
                ),
                "a delete carries no object",
            ),
            (
                format!(
                    "call: validate\noperation: create\nobject: {OBJECT}\noldObject: {OBJECT}\n"
                ),
                "a create carries no oldObject",
            ),
            (
                "call: validate\noperation: create\nobject: {metadata: {}}\n".into(),
                "apiVersion or kind",
            ),
            (
                format!("call: mutate\noperation: create\nobject: {OBJECT}\nuser: {{name: x}}\n"),
                "unknown field `name`",
            ),
            (
                format!("call: validate\noperation: create\nobject: {OBJECT}\nroundTrip: true\n"),
                "takes no roundTrip",
            ),
            ("call: convert\napiVersion: v2\n".into(), "needs objects"),
            (
                format!("call: convert\nobjects: [{OBJECT}]\n"),
                "needs the apiVersion",
            ),
            (
                format!(
                    "call: convert\nobjects: [{OBJECT}]\napiVersion: v2\nnow: \"2026-11-29T18:00:00Z\"\n"
                ),
                "takes no now",
            ),
        ] {
            let error = cases(&text).unwrap_err().to_string();
            assert!(error.contains("document 1"), "{error}");
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
