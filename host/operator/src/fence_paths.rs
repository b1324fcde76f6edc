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
/// `reconcile::gather` and `reconcile::decide`, so they are fenced as
/// reconcile is; what their readers see is fenced apart (see
/// `docs/security.md`, "Readers of previews and what-ifs").
pub const PATHS: &[Path] = &[
    Path {
        name: "reconcile",
        export: "reconcile",
        call_sites: &["reconcile.rs", "shadow.rs"],
        fenced_by: "inputs: reconcile::gather (Fence::sees, read checks as the plugin); \
                    answers: plan::decide and Effective::check_answer; a shadow's candidate is \
                    handed the serving version's fenced request and its answer is checked, never written",
    },
    Path {
        name: "finalize",
        export: "finalize",
        call_sites: &["reconcile.rs"],
        fenced_by: "as reconcile: reconcile::gather, then Effective::check_answer on what it answers",
    },
    Path {
        name: "references",
        export: "references",
        call_sites: &["reconcile.rs"],
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

    /// The functions of the interfaces a plugin world exports, with their
    /// parameter lists.
    fn wit_exports() -> BTreeMap<String, String> {
        let wit = std::fs::read_to_string(root().join("wit/plugin.wit")).expect("read the WIT");
        let exported: BTreeSet<&str> = wit
            .lines()
            .filter_map(|l| l.trim().strip_prefix("export "))
            .map(|name| name.trim_end_matches(';').trim())
            .collect();
        let mut functions = BTreeMap::new();
        // The interface being read, and how deep in its braces (records
        // and variants nest).
        let mut current: Option<&str> = None;
        let mut depth = 0usize;
        for line in wit.lines() {
            let line = line.trim();
            if let Some(name) = line.strip_prefix("interface ") {
                current = Some(name.trim_end_matches('{').trim());
            }
            if current.is_some_and(|i| exported.contains(i))
                && let Some((name, rest)) = line.split_once(": func(")
            {
                let params = rest.split_once(')').map(|(p, _)| p).unwrap_or_default();
                functions.insert(name.trim().to_string(), params.to_string());
            }
            depth += line.matches('{').count();
            depth = depth.saturating_sub(line.matches('}').count());
            if depth == 0 {
                current = None;
            }
        }
        assert!(
            functions.contains_key("reconcile"),
            "the WIT parse found no reconcile: {functions:?}"
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

    #[test]
    fn every_call_of_a_plugin_export_is_a_listed_path() {
        let src = root().join("host/operator/src");
        let mut files = Vec::new();
        sources(&src, &src, &mut files);
        let mut found: BTreeSet<(String, String)> = BTreeSet::new();
        for (file, text) in &files {
            // Unit tests call plugins on fixtures they build.
            if file.ends_with("tests.rs") || file.contains("/tests/") || file == "fence_paths.rs" {
                continue;
            }
            let text = text.split("#[cfg(test)]").next().unwrap_or_default();
            for export in handed() {
                let call = format!(".{export}(");
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
