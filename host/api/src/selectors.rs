//! `labelSelector` and `fieldSelector` of a list or watch of `plugins`, in
//! kube-apiserver's grammar, so that `kubectl get plugins -l ...` and
//! `kubectl get plugin NAME -w` (a watch with `metadata.name=NAME`) see only
//! what they select.
//!
//! Labels: comma-separated requirements, all of which must hold: `k`, `!k`,
//! `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>n`, `k<n`
//! (integers); whitespace between tokens is ignored. As in Kubernetes, `!=`
//! and `notin` hold for an object without the label, `>` and `<` only for
//! one whose label is an integer.
//!
//! Fields: `metadata.name` and `metadata.namespace` (always empty: plugins
//! are cluster-scoped) with `=`, `==` or `!=`; values may escape `\`, `,`
//! and `=` with a backslash. Any other field is refused with kube-apiserver's
//! own message, `field label not supported: <field>`.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What a list or watch selects: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    labels: Vec<Requirement>,
    fields: Vec<FieldRequirement>,
}

/// A selector that cannot be used, and why (the 400's message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// A label selector that does not parse, or names an invalid key or
    /// value.
    #[error("invalid label selector \"{selector}\": {why}")]
    Label { selector: String, why: String },
    /// A field selector term that is not `field=value`, `field==value` or
    /// `field!=value`.
    #[error("invalid field selector \"{selector}\": {why}")]
    Field { selector: String, why: String },
    /// A field `plugins` cannot be selected on (kube-apiserver's words).
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    /// `k`
    Exists(String),
    /// `!k`
    DoesNotExist(String),
    /// `k=v`, `k==v`, `k in (a,b)`: the label is one of the values.
    In(String, BTreeSet<String>),
    /// `k!=v`, `k notin (a,b)`: the label is absent or none of the values.
    NotIn(String, BTreeSet<String>),
    /// `k>n`
    GreaterThan(String, i64),
    /// `k<n`
    LessThan(String, i64),
}

/// One field requirement: the field is (or, unless `equal`, is not) `value`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    field: Field,
    value: String,
    equal: bool,
}

/// The fields a `Plugin` can be selected on (those kube-apiserver supports
/// for every resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
}

impl Field {
    /// The field's value in an object's `metadata` (empty when absent, as
    /// for the namespace of a cluster-scoped object).
    fn of(self, metadata: &ObjectMeta) -> &str {
        match self {
            Field::Name => &metadata.name,
            Field::Namespace => &metadata.namespace,
        }
        .as_deref()
        .unwrap_or("")
    }
}

impl Selector {
    /// The selectors of a request's query string (`None`, or neither
    /// parameter: everything). Each parameter is read once, its first
    /// occurrence, as kube-apiserver reads it.
    pub fn from_query(query: Option<&str>) -> Result<Selector, Invalid> {
        let (mut labels, mut fields) = (None, None);
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*key {
                "labelSelector" if labels.is_none() => labels = Some(value),
                "fieldSelector" if fields.is_none() => fields = Some(value),
                _ => {}
            }
        }
        Selector::parse(labels.as_deref(), fields.as_deref())
    }

    /// A label selector and a field selector, already decoded.
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Selector, Invalid> {
        let labels = match labels {
            Some(selector) => parse_labels(selector).map_err(|why| Invalid::Label {
                selector: selector.into(),
                why,
            })?,
            None => Vec::new(),
        };
        let fields = match fields {
            Some(selector) => parse_fields(selector)?,
            None => Vec::new(),
        };
        Ok(Selector { labels, fields })
    }

    /// Whether the object with `metadata` (a `Plugin`'s) is selected.
    pub fn matches(&self, metadata: &ObjectMeta) -> bool {
        let labels = metadata.labels.as_ref();
        let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
        self.labels.iter().all(|r| r.matches(label))
            && self
                .fields
                .iter()
                .all(|f| (f.field.of(metadata) == f.value) == f.equal)
    }
}

impl Requirement {
    fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        let integer = |key: &str| label(key).and_then(|v| v.parse::<i64>().ok());
        match self {
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::DoesNotExist(key) => label(key).is_none(),
            Requirement::In(key, values) => label(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => !label(key).is_some_and(|v| values.contains(v)),
            Requirement::GreaterThan(key, n) => integer(key).is_some_and(|v| v > *n),
            Requirement::LessThan(key, n) => integer(key).is_some_and(|v| v < *n),
        }
    }
}

/// A token of the label selector grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    /// A key, a value, `in` or `notin`.
    Word(&'a str),
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    Greater,
    Less,
    Open,
    Close,
    Comma,
}

impl std::fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Token::Word(word) => word,
            Token::Not => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::Greater => ">",
            Token::Less => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
        })
    }
}

fn lex(selector: &str) -> Vec<Token<'_>> {
    const SPECIAL: &[char] = &['!', '=', '>', '<', '(', ')', ','];
    let mut tokens = Vec::new();
    let mut rest = selector.trim_start();
    while let Some(c) = rest.chars().next() {
        let (token, len) = match c {
            '!' if rest.starts_with("!=") => (Token::NotEquals, 2),
            '!' => (Token::Not, 1),
            '=' if rest.starts_with("==") => (Token::DoubleEquals, 2),
            '=' => (Token::Equals, 1),
            '>' => (Token::Greater, 1),
            '<' => (Token::Less, 1),
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            ',' => (Token::Comma, 1),
            _ => {
                let len = rest
                    .find(|c: char| c.is_whitespace() || SPECIAL.contains(&c))
                    .unwrap_or(rest.len());
                (Token::Word(&rest[..len]), len)
            }
        };
        tokens.push(token);
        rest = rest[len..].trim_start();
    }
    tokens
}

/// The label selector's requirements, or why it does not parse.
fn parse_labels(selector: &str) -> Result<Vec<Requirement>, String> {
    let tokens = lex(selector);
    let mut tokens = tokens.iter().copied().peekable();
    let mut requirements = Vec::new();
    if tokens.peek().is_none() {
        return Ok(requirements);
    }
    loop {
        requirements.push(requirement(&mut tokens)?);
        match tokens.next() {
            None => return Ok(requirements),
            Some(Token::Comma) => {}
            Some(token) => return Err(format!("found '{token}', expected ','")),
        }
    }
}

type Tokens<'t, 'a> = std::iter::Peekable<std::iter::Copied<std::slice::Iter<'t, Token<'a>>>>;

fn requirement(tokens: &mut Tokens<'_, '_>) -> Result<Requirement, String> {
    if tokens.next_if_eq(&Token::Not).is_some() {
        return Ok(Requirement::DoesNotExist(key(tokens)?));
    }
    let key = key(tokens)?;
    Ok(match tokens.peek() {
        None | Some(Token::Comma) => Requirement::Exists(key),
        Some(Token::Equals | Token::DoubleEquals) => {
            tokens.next();
            Requirement::In(key, BTreeSet::from([exact_value(tokens)?]))
        }
        Some(Token::NotEquals) => {
            tokens.next();
            Requirement::NotIn(key, BTreeSet::from([exact_value(tokens)?]))
        }
        Some(Token::Word("in")) => {
            tokens.next();
            Requirement::In(key, values(tokens)?)
        }
        Some(Token::Word("notin")) => {
            tokens.next();
            Requirement::NotIn(key, values(tokens)?)
        }
        Some(op @ (Token::Greater | Token::Less)) => {
            let op = *op;
            tokens.next();
            let n = match tokens.next() {
                Some(Token::Word(word)) => word.parse::<i64>().map_err(|_| {
                    format!("'{op}' needs an integer, found '{word}' after \"{key}\"")
                })?,
                Some(token) => {
                    return Err(format!(
                        "'{op}' needs an integer, found '{token}' after \"{key}\""
                    ));
                }
                None => return Err(format!("'{op}' needs an integer after \"{key}\"")),
            };
            match op {
                Token::Greater => Requirement::GreaterThan(key, n),
                _ => Requirement::LessThan(key, n),
            }
        }
        Some(token) => {
            return Err(format!(
                "found '{token}' after \"{key}\", expected one of '=', '==', '!=', 'in', 'notin', '>', '<' or ','"
            ));
        }
    })
}

fn key(tokens: &mut Tokens<'_, '_>) -> Result<String, String> {
    match tokens.next() {
        Some(Token::Word(word)) => {
            check_key(word)?;
            Ok(word.into())
        }
        Some(token) => Err(format!("found '{token}', expected a label key")),
        None => Err("expected a label key at the end".into()),
    }
}

/// The value after `=`, `==` or `!=`: a word, or nothing (the empty value).
fn exact_value(tokens: &mut Tokens<'_, '_>) -> Result<String, String> {
    match tokens.peek() {
        None | Some(Token::Comma) => Ok(String::new()),
        Some(Token::Word(word)) => {
            let word = *word;
            tokens.next();
            check_value(word)?;
            Ok(word.into())
        }
        Some(token) => Err(format!("found '{token}', expected a label value")),
    }
}

/// `(a, b, ...)`: at least one value.
fn values(tokens: &mut Tokens<'_, '_>) -> Result<BTreeSet<String>, String> {
    if tokens.next_if_eq(&Token::Open).is_none() {
        return Err("'in' and 'notin' need a parenthesized list of values".into());
    }
    let mut values = BTreeSet::new();
    loop {
        match tokens.next() {
            Some(Token::Word(word)) => {
                check_value(word)?;
                values.insert(word.to_string());
            }
            Some(Token::Close) if values.is_empty() => {
                return Err("the values of 'in' and 'notin' cannot be empty".into());
            }
            Some(token) => return Err(format!("found '{token}', expected a label value")),
            None => return Err("expected a label value, found the end".into()),
        }
        match tokens.next() {
            Some(Token::Comma) => {}
            Some(Token::Close) => return Ok(values),
            Some(token) => return Err(format!("found '{token}', expected ',' or ')'")),
            None => return Err("expected ')', found the end".into()),
        }
    }
}

/// What a label key and value may be, Kubernetes' words (validation.go).
const NAME_RULE: &str = "at most 63 characters: letters, digits, '-', '_' or '.', beginning and ending with a letter or digit";

/// A qualified name: an optional DNS subdomain prefix and `/`, then a name
/// ([`NAME_RULE`]), as Kubernetes requires of label keys.
fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(format!(
            "invalid label key \"{key}\": the prefix before '/' must be a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)"
        ));
    }
    if !is_name(name) {
        return Err(format!(
            "invalid label key \"{key}\": the name part must be {NAME_RULE}"
        ));
    }
    Ok(())
}

/// Empty, or a name ([`NAME_RULE`]).
fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_name(value) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value \"{value}\": must be empty or {NAME_RULE}"
        ))
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters.
fn is_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    (1..=63).contains(&name.len())
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Dot-separated lowercase DNS labels, at most 253 characters.
fn is_dns_subdomain(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (1..=253).contains(&name.len())
        && name.split('.').all(|label| {
            edge(label.chars().next())
                && edge(label.chars().last())
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

/// The field selector's requirements.
fn parse_fields(selector: &str) -> Result<Vec<FieldRequirement>, Invalid> {
    let invalid = |why: String| Invalid::Field {
        selector: selector.into(),
        why,
    };
    let mut requirements = Vec::new();
    for term in split_unescaped(selector, ',') {
        let term = term.trim();
        if term.is_empty() {
            continue;
        }
        let Some((field, op, value)) = split_term(term) else {
            return Err(invalid(format!(
                "can't understand '{term}': expected field=value, field==value or field!=value"
            )));
        };
        let field = match field.trim() {
            "metadata.name" => Field::Name,
            "metadata.namespace" => Field::Namespace,
            other => return Err(Invalid::UnsupportedField(other.into())),
        };
        requirements.push(FieldRequirement {
            field,
            value: unescape(value.trim()).map_err(invalid)?,
            equal: op != "!=",
        });
    }
    Ok(requirements)
}

/// `s` split at each `separator` not escaped with a backslash.
fn split_unescaped(s: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == separator => {
                parts.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// A term's field, operator and (still escaped) value, split at the first
/// unescaped operator.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    let mut escaped = false;
    for (i, c) in term.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c == '\\' {
            escaped = true;
            continue;
        }
        for op in ["!=", "==", "="] {
            if term[i..].starts_with(op) {
                return Some((&term[..i], op, &term[i + op.len()..]));
            }
        }
    }
    None
}

/// A field value with `\\`, `\,` and `\=` unescaped.
fn unescape(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(c @ ('\\' | ',' | '=')) => out.push(c),
            Some(c) => return Err(format!("invalid escape sequence '\\{c}' in \"{value}\"")),
            None => return Err(format!("\"{value}\" ends in an unfinished escape")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn labels(selector: &str) -> Vec<Requirement> {
        parse_labels(selector).unwrap_or_else(|why| panic!("{selector}: {why}"))
    }

    fn set(values: &[&str]) -> BTreeSet<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    fn plugin(name: &str, labels: Value) -> ObjectMeta {
        serde_json::from_value(json!({"name": name, "labels": labels})).expect("metadata")
    }

    #[test]
    fn every_label_operator_parses_as_kubernetes_writes_it() {
        use Requirement::*;
        assert_eq!(labels(""), vec![]);
        assert_eq!(labels("  "), vec![]);
        assert_eq!(labels("a"), vec![Exists("a".into())]);
        assert_eq!(labels("!a"), vec![DoesNotExist("a".into())]);
        assert_eq!(labels("a=b"), vec![In("a".into(), set(&["b"]))]);
        assert_eq!(labels("a==b"), vec![In("a".into(), set(&["b"]))]);
        assert_eq!(labels("a!=b"), vec![NotIn("a".into(), set(&["b"]))]);
        assert_eq!(labels("a="), vec![In("a".into(), set(&[""]))]);
        assert_eq!(labels("a in (b,c)"), vec![In("a".into(), set(&["b", "c"]))]);
        assert_eq!(
            labels("a notin (b, c)"),
            vec![NotIn("a".into(), set(&["b", "c"]))]
        );
        assert_eq!(labels("a>3"), vec![GreaterThan("a".into(), 3)]);
        assert_eq!(labels("a<-2"), vec![LessThan("a".into(), -2)]);
        assert_eq!(
            labels(" kubeplug.io/mode = decorator , ! x ,y in ( p , q ) ,z"),
            vec![
                In("kubeplug.io/mode".into(), set(&["decorator"])),
                DoesNotExist("x".into()),
                In("y".into(), set(&["p", "q"])),
                Exists("z".into()),
            ]
        );
    }

    #[test]
    fn a_bad_label_selector_says_what_is_wrong() {
        let why = |selector: &str| parse_labels(selector).expect_err(selector);
        assert_eq!(why("a,"), "expected a label key at the end");
        assert_eq!(
            why("a,b c"),
            "found 'c' after \"b\", expected one of '=', '==', '!=', 'in', 'notin', '>', '<' or ','"
        );
        assert_eq!(why("a=b c"), "found 'c', expected ','");
        assert_eq!(why("=b"), "found '=', expected a label key");
        assert_eq!(
            why("a in ()"),
            "the values of 'in' and 'notin' cannot be empty"
        );
        assert_eq!(
            why("a in b"),
            "'in' and 'notin' need a parenthesized list of values"
        );
        assert_eq!(why("a in (b"), "expected ')', found the end");
        assert_eq!(why("a>b"), "'>' needs an integer, found 'b' after \"a\"");
        assert_eq!(why("a<"), "'<' needs an integer after \"a\"");
        assert!(
            why("a (b)").starts_with("found '(' after \"a\", expected one of '='"),
            "{}",
            why("a (b)")
        );
        assert!(why("-a=b").starts_with("invalid label key \"-a\""));
        assert!(why("Kubeplug.io/a").contains("the prefix before '/' must be a DNS subdomain"));
        assert!(why("/a").contains("the prefix before '/'"));
        assert!(why("a/").contains("the name part"));
        assert!(why("a/b/c").contains("the name part"));
        assert!(why(&"k".repeat(64)).contains("at most 63 characters"));
        assert!(why("a=b_").starts_with("invalid label value \"b_\""));
        assert!(why("a in (b,c!)").contains("found '!'"));
        // The message of the 400 names the selector and the problem.
        assert_eq!(
            Selector::parse(Some("a=b c"), None)
                .expect_err("invalid")
                .to_string(),
            "invalid label selector \"a=b c\": found 'c', expected ','"
        );
    }

    #[test]
    fn labels_match_as_in_kubernetes() {
        let object = plugin(
            "database",
            json!({"kubeplug.io/mode": "composite", "kubeplug.io/state": "running", "n": "5"}),
        );
        let selects = |selector: &str| {
            Selector::parse(Some(selector), None)
                .expect("valid")
                .matches(&object)
        };
        for yes in [
            "",
            "kubeplug.io/mode",
            "!other",
            "kubeplug.io/mode=composite",
            "kubeplug.io/mode==composite",
            "kubeplug.io/mode!=decorator",
            "other!=x",
            "kubeplug.io/state in (running,degraded)",
            "kubeplug.io/state notin (failed)",
            "other notin (x)",
            "n>4",
            "n<6",
            "kubeplug.io/mode=composite,kubeplug.io/state=running",
        ] {
            assert!(selects(yes), "{yes}");
        }
        for no in [
            "other",
            "!kubeplug.io/mode",
            "kubeplug.io/mode=decorator",
            "kubeplug.io/mode!=composite",
            "other=x",
            "kubeplug.io/state in (failed)",
            "kubeplug.io/state notin (running)",
            "n>5",
            "n<5",
            "kubeplug.io/mode>1",
            "other<1",
            "kubeplug.io/mode=composite,kubeplug.io/state=failed",
        ] {
            assert!(!selects(no), "{no}");
        }
        // An object without labels: only negative requirements hold.
        let bare = ObjectMeta {
            name: Some("x".into()),
            ..ObjectMeta::default()
        };
        let selector = Selector::parse(Some("!a,b!=c,d notin (e)"), None).expect("valid");
        assert!(selector.matches(&bare));
        assert!(
            !Selector::parse(Some("a"), None)
                .expect("valid")
                .matches(&bare)
        );
    }

    #[test]
    fn fields_select_on_name_and_namespace_and_refuse_the_rest() {
        let database = plugin("database", json!({}));
        let selects = |selector: &str| {
            Selector::parse(None, Some(selector))
                .expect("valid")
                .matches(&database)
        };
        assert!(selects("metadata.name=database"));
        assert!(selects("metadata.name==database"));
        assert!(selects(" metadata.name = database "));
        assert!(selects("metadata.name!=myapp"));
        assert!(!selects("metadata.name=myapp"));
        assert!(!selects("metadata.name!=database"));
        assert!(selects("metadata.namespace="), "cluster-scoped: empty");
        assert!(!selects("metadata.namespace=default"));
        assert!(selects("metadata.name=database,metadata.namespace!=x"));
        assert!(!selects("metadata.name=database,metadata.name=myapp"));
        assert!(selects(""));
        // Escaped separators belong to the value.
        let odd = plugin("a,b=c", json!({}));
        let selector = Selector::parse(None, Some(r"metadata.name=a\,b\=c")).expect("valid");
        assert!(selector.matches(&odd));

        let refused = |selector: &str| {
            Selector::parse(None, Some(selector))
                .expect_err(selector)
                .to_string()
        };
        assert_eq!(
            refused("spec.file=x"),
            "field label not supported: spec.file"
        );
        assert_eq!(
            refused("metadata.name=database,status.state=running"),
            "field label not supported: status.state"
        );
        assert_eq!(
            refused("metadata.name"),
            "invalid field selector \"metadata.name\": can't understand 'metadata.name': expected field=value, field==value or field!=value"
        );
        assert!(refused(r"metadata.name=a\b").contains("invalid escape sequence '\\b'"));
    }

    #[test]
    fn selectors_are_read_from_an_encoded_query() {
        let selector = Selector::from_query(Some(
            "watch=true&labelSelector=kubeplug.io%2Fmode+in+%28decorator%29&fieldSelector=metadata.name%3Dpod-annotator&resourceVersion=3",
        ))
        .expect("valid");
        assert_eq!(
            selector,
            Selector::parse(
                Some("kubeplug.io/mode in (decorator)"),
                Some("metadata.name=pod-annotator")
            )
            .expect("valid")
        );
        assert_eq!(Selector::from_query(None), Ok(Selector::default()));
        assert_eq!(
            Selector::from_query(Some("limit=500")),
            Ok(Selector::default())
        );
        assert_eq!(
            Selector::from_query(Some("fieldSelector=spec.file%3Dx")),
            Err(Invalid::UnsupportedField("spec.file".into()))
        );
    }
}
