//! The one home of YAML in the host: how files are read (several documents,
//! YAML 1.2 scalars) and how values are written (the layout `kubeplug` has
//! always printed), over serde-saphyr.
//!
//! Reading follows YAML 1.2 as serde_yaml did: `yes`, `on`, `0755` and
//! `1_000` are strings, not booleans or numbers. Writing quotes every string
//! a YAML 1.1 reader (PyYAML, js-yaml: the SDKs' fixtures) would take for
//! something else, dates included, and keeps serde_yaml's single quotes
//! where no escape is needed.

use indexmap::IndexMap;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A YAML text that does not read as the type asked for. Shown in one line
/// with its position, never with the text around it (a settings file may
/// hold a secret).
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.without_snippet())]
pub struct Error(Box<serde_saphyr::Error>);

/// What was wrong with a text, for messages that must not quote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mistake {
    /// A key the type does not have.
    UnknownKey,
    /// A value of the wrong type or shape.
    WrongType,
    /// A key given twice in one mapping.
    DuplicateKey,
    /// Anything else: not YAML, or not the document expected.
    Other,
}

impl Error {
    /// Line and column (1-based) where reading stopped, if known.
    pub fn location(&self) -> Option<(u64, u64)> {
        self.0.location().map(|l| (l.line(), l.column()))
    }

    pub fn mistake(&self) -> Mistake {
        use serde_saphyr::Error as E;
        match self.0.without_snippet() {
            E::SerdeUnknownField { .. } => Mistake::UnknownKey,
            E::SerdeInvalidType { .. } | E::SerdeInvalidValue { .. } | E::Unexpected { .. } => {
                Mistake::WrongType
            }
            E::DuplicateMappingKey { .. } => Mistake::DuplicateKey,
            other if other.to_string().starts_with("invalid") => Mistake::WrongType,
            _ => Mistake::Other,
        }
    }
}

/// A YAML document whose mappings keep their keys in the order written, so
/// that files rewritten from it (`kubeplug test --update`) stay in order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    #[default]
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Sequence(Vec<Value>),
    Mapping(Mapping),
}

/// A mapping in written order.
pub type Mapping = IndexMap<String, Value>;

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_mapping(&self) -> Option<&Mapping> {
        match self {
            Value::Mapping(m) => Some(m),
            _ => None,
        }
    }

    /// `T` read from this value (through JSON: every value here is JSON).
    pub fn to_typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(self)?)
    }
}

impl From<&serde_json::Value> for Value {
    fn from(value: &serde_json::Value) -> Self {
        use serde_json::Value as J;
        match value {
            J::Null => Value::Null,
            J::Bool(b) => Value::Bool(*b),
            J::Number(n) => Value::Number(n.clone()),
            J::String(s) => Value::String(s.clone()),
            J::Array(a) => Value::Sequence(a.iter().map(Value::from).collect()),
            J::Object(o) => Value::Mapping(o.iter().map(|(k, v)| (k.clone(), v.into())).collect()),
        }
    }
}

/// How every YAML text is read: YAML 1.2 scalars as serde_yaml read them.
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        null_as_string: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
        with_snippet: false,
    }
}

/// `T` from a text of one document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, options()).map_err(|e| Error(Box::new(e)))
}

/// Every document of `text` in order, an empty one read as null so that
/// indices stay those of the file (a leading chunk of comments only is no
/// document); on failure, the index of the document that failed.
pub fn from_documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, (usize, Error)> {
    let mut chunks: Vec<(usize, String)> = vec![(0, String::new())];
    for (number, line) in text.lines().enumerate() {
        if separator(line) {
            chunks.push((number, String::new()));
        }
        let chunk = &mut chunks.last_mut().expect("one chunk at least").1;
        chunk.push_str(line);
        chunk.push('\n');
    }
    if !chunks[0].1.lines().any(content) {
        chunks.remove(0);
    }
    chunks
        .into_iter()
        .enumerate()
        .map(|(index, (first_line, chunk))| {
            // Blank lines for the documents before keep reported lines
            // those of the file.
            let padded = "\n".repeat(first_line) + &chunk;
            from_str(&padded).map_err(|e| (index, e))
        })
        .collect()
}

/// A document start marker line.
pub fn separator(line: &str) -> bool {
    line == "---" || line.starts_with("--- ") || line.starts_with("---\t")
}

fn content(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#') && !separator(line)
}

/// `value` as YAML text (block style, lists not indented under their key,
/// long lines never folded).
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    // Through JSON text to a `Value`: keeps struct fields in their order.
    let json = serde_json::to_string(value).expect("values serialize as JSON");
    let value: Value = serde_json::from_str(&json).expect("JSON reads back");
    serde_saphyr::to_string_with_options(&Styled(&value), write_options())
        .expect("JSON values serialize as YAML")
}

fn write_options() -> serde_saphyr::SerializerOptions {
    serde_saphyr::ser_options! {
        folded_wrap_chars: usize::MAX,
    }
}

/// A value written with single quotes wherever serde-saphyr would quote a
/// string that needs no escape (serde_yaml's style, and the SDKs' fixtures').
struct Styled<'a>(&'a Value);

impl Serialize for Styled<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::String(text) if single_quoted(text) => {
                serde_saphyr::SingleQuoted(text.as_str()).serialize(s)
            }
            Value::Sequence(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Styled(item))?;
                }
                seq.end()
            }
            Value::Mapping(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    let key = Value::String(key.clone());
                    map.serialize_entry(&Styled(&key), &Styled(value))?;
                }
                map.end()
            }
            other => other.serialize(s),
        }
    }
}

/// Would serde-saphyr quote `text`, with no escape needed? (Keys keep
/// serde-saphyr's double quotes: it has no other style for them.)
fn single_quoted(text: &str) -> bool {
    !text.chars().any(char::is_control)
        && serde_saphyr::to_string(&text).is_ok_and(|plain| plain.starts_with('"'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_another_reader_would_misread_are_single_quoted() {
        let value: Value = from_str(
            "{at: '2026-11-29T18:00:00Z', list: ['2026-01-01', plain, 'yes', '3', ''], name: web, text: \"a\\nb: 2026-01-01\\n\"}",
        )
        .unwrap();
        let text = to_string(&value);
        assert_eq!(
            text,
            "at: '2026-11-29T18:00:00Z'\nlist:\n- '2026-01-01'\n- plain\n- 'yes'\n- '3'\n- ''\nname: web\ntext: |\n  a\n  b: 2026-01-01\n"
        );
        assert_eq!(from_str::<Value>(&text).unwrap(), value);
    }

    #[test]
    fn scalars_read_as_yaml_1_2() {
        let value: serde_json::Value =
            from_str("{a: yes, b: on, c: 0755, d: 1_000, e: true, f: 1.5, g: ~, h: .inf}").unwrap();
        assert_eq!(
            value,
            serde_json::json!({"a": "yes", "b": "on", "c": "0755", "d": "1_000", "e": true, "f": 1.5, "g": null, "h": null})
        );
    }

    #[test]
    fn mappings_keep_their_order() {
        let value: Value = from_str("b: 1\na: {d: 2, c: 3}\n").unwrap();
        assert_eq!(to_string(&value), "b: 1\na:\n  d: 2\n  c: 3\n");
    }

    #[test]
    fn documents_keep_the_file_s_indices_and_lines() {
        let docs: Vec<Value> = from_documents("# c\n---\na: 1\n---\n---\nb: 2\n").unwrap();
        assert_eq!(docs.len(), 3);
        assert!(docs[1].is_null());
        let (index, error) = from_documents::<Value>("a: 1\n---\nb: [2\n").unwrap_err();
        assert_eq!(index, 1);
        assert_eq!(error.location().map(|l| l.0), Some(3));
        let wrong: Error =
            from_str::<std::collections::BTreeMap<String, u32>>("a: x\n").unwrap_err();
        assert_eq!(wrong.mistake(), Mistake::WrongType);
        assert!(!error.to_string().contains('\n'), "{error}");
    }
}
