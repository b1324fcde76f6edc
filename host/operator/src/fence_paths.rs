//! Every path by which the host calls a plugin with what the cluster holds,
//! and where the fence ([`kubeplug_core::fence`] and the grant's
//! [`kubeplug_core::policy::Effective`]) decides what it is handed and what
//! its answer may change on that path.
//!
//! The table is checked, not only read: a test enumerates the functions the
//! WIT world lets a plugin export and every place in this crate that calls
//! one of them, and fails on an export or a call site without a row here. A
//! new surface therefore cannot reach a plugin without its author saying how
//! it is fenced (and `docs/security.md` naming it, which the test checks
//! too). The offline kit (`kubeplug test`, `render`) calls plugins on files a
//! developer gives it, not on the cluster, and is not a path here.

/// One path into a plugin.
#[derive(Debug)]
pub struct Path {
    /// As `docs/security.md`'s surfaces table names it.
    pub name: &'static str,
    /// The WIT export it calls.
    pub export: &'static str,
    /// Files of this crate (under `src/`) that call the export directly.
    pub call_sites: &'static [&'static str],
    /// What the fence decides on this path, and where.
    pub fenced_by: &'static str,
}

/// Every path. Previews, what-ifs and shadows reach `reconcile` through
/// `inputs::gather` and `inputs::decide`, so they are fenced as
/// reconcile is; what their readers see is fenced apart (see
/// `docs/security.md`, "Readers of previews and what-ifs").
pub const PATHS: &[Path] = &[
    Path {
        name: "reconcile",
        export: "reconcile",
        call_sites: &["inputs.rs", "shadow.rs"],
        fenced_by: "inputs: inputs::gather (Fence::sees, read checks as the plugin); \
                    answers: plan::decide and Effective::check_answer; a shadow's candidate is \
                    handed the serving version's fenced request and its answer is checked, never written",
    },
    Path {
        name: "finalize",
        export: "finalize",
        call_sites: &["reconcile.rs"],
        fenced_by: "as reconcile: inputs::gather, then Effective::check_answer on what it answers",
    },
    Path {
        name: "references",
        export: "references",
        call_sites: &["inputs.rs"],
        fenced_by: "kubeplug_core::reference: granted kinds only, resolved in the parent's namespace \
                    (a cluster-scoped parent: Fence::sees), at most 32",
    },
    Path {
        name: "validate",
        export: "validate",
        call_sites: &["webhooks.rs"],
        fenced_by: "webhooks::answer: the grant allows the webhook, Fence::sees the reviewed object",
    },
    Path {
        name: "mutate",
        export: "mutate",
        call_sites: &["webhooks.rs"],
        fenced_by: "webhooks::answer: Fence::sees the reviewed object, Fence::mutation bounds the patch",
    },
    Path {
        name: "convert",
        export: "convert",
        call_sites: &["webhooks.rs", "migrate.rs"],
        fenced_by: "webhooks: Fence::check_conversion refuses a review with an object outside the \
                    plugin's namespaces, webhook::check_converted its answer; migrate (the platform's \
                    own command, no grant) stores nothing the plugin answers",
    },
];

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path as FsPath, PathBuf};

    use super::PATHS;

    fn root() -> PathBuf {
        FsPath::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// The WIT without comments.
    fn wit() -> String {
        std::fs::read_to_string(root().join("wit/plugin.wit"))
            .expect("read the WIT")
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The body of each `<keyword> <name> { ... }` block at the top level
    /// of `text` (or of a block), by name.
    fn blocks<'t>(text: &'t str, keyword: &str) -> BTreeMap<String, &'t str> {
        let mut found = BTreeMap::new();
        let opener = format!("{keyword} ");
        let mut depth = 0usize;
        let mut i = 0;
        while i < text.len() {
            let rest = &text[i..];
            if depth == 0
                && rest.starts_with(&opener)
                && (i == 0 || text[..i].ends_with(|c: char| c.is_whitespace()))
                && let Some(open) = rest.find('{')
            {
                let name = rest[opener.len()..open].trim().to_string();
                let body = &rest[open + 1..];
                let mut inner = 1usize;
                let end = body
                    .char_indices()
                    .find(|&(_, c)| {
                        match c {
                            '{' => inner += 1,
                            '}' => inner -= 1,
                            _ => {}
                        }
                        inner == 0
                    })
                    .map(|(at, _)| at)
                    .expect("a closed block");
                found.insert(name, &body[..end]);
                i += open + 1 + end + 1;
                continue;
            }
            match rest.chars().next() {
                Some('{') => depth += 1,
                Some('}') => depth = depth.saturating_sub(1),
                _ => {}
            }
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
        found
    }

    /// Every `name: func(params)` in `body`, however its parameters are
    /// laid out over lines.
    fn functions_in(body: &str, out: &mut BTreeMap<String, String>) {
        for (at, _) in body.match_indices(": func(") {
            let name = body[..at]
                .rsplit(|c: char| c.is_whitespace() || c == '{' || c == ';')
                .next()
                .unwrap_or_default()
                .trim_start_matches("export ")
                .to_string();
            let params = &body[at + ": func(".len()..];
            let params = &params[..params.find(')').expect("a closed parameter list")];
            out.insert(
                name,
                params.split_whitespace().collect::<Vec<_>>().join(" "),
            );
        }
    }

    /// The functions a plugin world exports (from the interfaces it
    /// exports, or inline), with their parameter lists.
    fn wit_exports() -> BTreeMap<String, String> {
        let wit = wit();
        let interfaces = blocks(&wit, "interface");
        let mut functions = BTreeMap::new();
        for world in blocks(&wit, "world").values() {
            for line in world.lines().map(str::trim) {
                let Some(export) = line.strip_prefix("export ") else {
                    continue;
                };
                match export.trim_end_matches(';').trim() {
                    name if interfaces.contains_key(name) => {
                        functions_in(interfaces[name], &mut functions)
                    }
                    // `export f: func(...)` or `export x: interface { ... }`.
                    _ => functions_in(world, &mut functions),
                }
            }
        }
        assert!(
            functions.contains_key("reconcile") && functions.contains_key("convert"),
            "the WIT parse found no reconcile or convert: {functions:?}"
        );
        functions
    }

    /// Every `.rs` file under `dir`, relative to it.
    fn sources(dir: &FsPath, base: &FsPath, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                sources(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, std::fs::read_to_string(&path).expect("read source")));
            }
        }
    }

    /// The exports handed cluster data: all but those called with the
    /// plugin's own configuration only.
    fn handed() -> Vec<String> {
        wit_exports()
            .into_iter()
            .filter(|(_, params)| {
                !params
                    .split(',')
                    .all(|p| p.trim().is_empty() || p.contains("config: string"))
            })
            .map(|(name, _)| name)
            .collect()
    }

    #[test]
    fn every_export_that_is_handed_cluster_data_has_a_fenced_path() {
        let handed = handed();
        // The parse sees the exports called with configuration only, and
        // tells them apart.
        let exports = wit_exports();
        for config_only in ["manifest", "kinds", "metadata-only", "offered"] {
            assert!(exports.contains_key(config_only), "{exports:?}");
            assert!(!handed.iter().any(|h| h == config_only), "{handed:?}");
        }
        for name in &handed {
            assert!(
                PATHS.iter().any(|p| p.export == name),
                "the WIT export {name} is handed cluster data but has no row in fence_paths::PATHS: say how the fence decides for it"
            );
        }
        for path in PATHS {
            assert!(
                handed.iter().any(|h| h == path.export),
                "{} names export {}, which the WIT does not have (or hands nothing)",
                path.name,
                path.export
            );
        }
    }

    /// `text` without its test modules (`#[cfg(test)]` then `mod`):
    /// unit tests call plugins on fixtures they build. Any other item under
    /// `#[cfg(test)]` is read.
    fn without_tests(text: &str) -> &str {
        let cut = text.match_indices("#[cfg(test)]").find(|&(at, marker)| {
            let next = text[at + marker.len()..].trim_start();
            next.starts_with("mod ") || next.starts_with("pub(crate) mod ")
        });
        cut.map_or(text, |(at, _)| &text[..at])
    }

    /// The host code that may call plugins on what the cluster holds: the
    /// operator, and the binary's own modules. (The kit works on files a
    /// developer gives it.)
    const SCANNED: [&str; 2] = ["host/operator/src", "host/kubeplug/src"];

    #[test]
    fn every_call_of_a_plugin_export_is_a_listed_path() {
        let mut files = Vec::new();
        for dir in SCANNED {
            let src = root().join(dir);
            let mut here = Vec::new();
            sources(&src, &src, &mut here);
            // The operator's files by their path under src/, as listed.
            let prefix = if dir == "host/operator/src" {
                ""
            } else {
                "kubeplug/"
            };
            files.extend(here.into_iter().map(|(f, t)| (format!("{prefix}{f}"), t)));
        }
        let mut found: BTreeSet<(String, String)> = BTreeSet::new();
        for (file, text) in &files {
            if file.ends_with("tests.rs") || file.contains("/tests/") || file == "fence_paths.rs" {
                continue;
            }
            let text = without_tests(text);
            for export in handed() {
                let call = format!(".{}(", export.replace('-', "_"));
                for (at, _) in text.match_indices(&call) {
                    // A call with arguments (`hasher.finalize()` and
                    // `settings.validate()` are not plugin calls).
                    let next = text[at + call.len()..].chars().next();
                    if next.is_some_and(|c| c != ')') {
                        found.insert((file.clone(), export.clone()));
                    }
                }
            }
        }
        for (file, export) in &found {
            let listed = PATHS
                .iter()
                .find(|p| p.export == export)
                .is_some_and(|p| p.call_sites.contains(&file.as_str()));
            assert!(
                listed,
                "{file} calls the plugin's {export}, and fence_paths::PATHS does not list it there: route it through the fence and add it"
            );
        }
        for path in PATHS {
            assert!(
                !path.call_sites.is_empty(),
                "{} lists no call site: a path is where the host calls the plugin",
                path.name
            );
            for site in path.call_sites {
                assert!(
                    found.contains(&(site.to_string(), path.export.to_string())),
                    "{} lists {site}, which no longer calls {}: keep the table true",
                    path.name,
                    path.export
                );
            }
        }
    }

    /// The runtime calls an export only from the method named after it,
    /// so no wrapper under another name reaches a plugin around the table.
    #[test]
    fn the_runtime_calls_each_export_from_its_own_method_only() {
        let exports = wit_exports();
        let src = root().join("host/runtime/src");
        let mut files = Vec::new();
        sources(&src, &src, &mut files);
        let mut calls = 0;
        for (file, text) in &files {
            let text = without_tests(text);
            for (at, _) in text.match_indices("self.call_export(") {
                calls += 1;
                let method = text[..at]
                    .rsplit_once("pub fn ")
                    .map(|(_, after)| {
                        after
                            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                            .next()
                            .unwrap_or_default()
                    })
                    .unwrap_or_default();
                assert!(
                    exports.contains_key(&method.replace('_', "-")),
                    "host/runtime/src/{file} calls an export from `{method}`, not from the method named after the export: a path around fence_paths::PATHS"
                );
            }
        }
        assert!(
            calls >= PATHS.len(),
            "found {calls} calls of exports in the runtime"
        );
    }

    #[test]
    fn the_security_document_names_every_path() {
        let doc = std::fs::read_to_string(root().join("docs/security.md"))
            .expect("read docs/security.md");
        let surfaces = doc
            .split("## Surfaces")
            .nth(1)
            .expect("docs/security.md has a Surfaces section");
        for path in PATHS {
            assert!(
                surfaces.contains(path.name),
                "docs/security.md's Surfaces section does not name the {} path",
                path.name
            );
        }
    }
}
