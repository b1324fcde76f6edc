//! What the ConfigMaps mounted in the host's pod hold, and the checks built
//! from them: the policy files `--policy` names, loaded as the host loads
//! them (`policy`), and a directory (`--plugins`, `--settings`) laid out in
//! a local one as the pod sees it, each missing ConfigMap a FAIL and each
//! volume doctor cannot read a warning naming it (`<what> volume <volume>`).
//! Where each path's files come from is [`host`](super::host)'s; this file
//! asks the API server.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::host::{Backing, DirPart, FileSource, Host, join};
use kubeplug_core::policy::Policy;
use kubeplug_doctor::report::Check;

/// ConfigMaps read once each: `None` when absent, `Err` when unreadable.
pub(super) struct Maps {
    api: Api<ConfigMap>,
    namespace: String,
    read: BTreeMap<String, Result<Option<ConfigMap>, String>>,
}

impl Maps {
    pub(super) fn new(client: &kube::Client, namespace: &str) -> Maps {
        Maps {
            api: Api::namespaced(client.clone(), namespace),
            namespace: namespace.to_string(),
            read: BTreeMap::new(),
        }
    }

    pub(super) async fn get(&mut self, name: &str) -> Result<Option<ConfigMap>, String> {
        if !self.read.contains_key(name) {
            let got = self.api.get_opt(name).await.map_err(|error| {
                format!("cannot read ConfigMap {}/{name}: {error}", self.namespace)
            });
            self.read.insert(name.to_string(), got);
        }
        self.read[name].clone()
    }
}

/// The files a ConfigMap's keys make in its volume (path inside the volume,
/// key): every key, or its `items`.
pub(super) fn volume_files(
    map: &ConfigMap,
    items: &Option<Vec<(String, String)>>,
) -> Vec<(String, String)> {
    let mut keys: Vec<&String> = map.data.iter().flat_map(|d| d.keys()).collect();
    keys.extend(map.binary_data.iter().flat_map(|d| d.keys()));
    match items {
        Some(items) => items
            .iter()
            .filter(|(key, _)| keys.contains(&key))
            .map(|(key, path)| (path.trim_matches('/').to_string(), key.clone()))
            .collect(),
        None => keys.into_iter().map(|k| (k.clone(), k.clone())).collect(),
    }
}

/// A key's bytes (`data` or `binaryData`).
pub(super) fn value(map: &ConfigMap, key: &str) -> Option<Vec<u8>> {
    if let Some(text) = map.data.as_ref().and_then(|d| d.get(key)) {
        return Some(text.as_bytes().to_vec());
    }
    map.binary_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
}

/// Read each `--policy` path from its ConfigMap into `scratch/policy/N/`,
/// and load them together as the host does.
pub(super) async fn policy(
    host: &Host,
    maps: &mut Maps,
    scratch: &Path,
    checks: &mut Vec<Check>,
) -> Option<Policy> {
    const CHECK: &str = "policy";
    if host.args.policy.is_empty() {
        checks.push(Check::ok(
            CHECK,
            "the Deployment gives no --policy (nor KUBEPLUG_POLICY): every plugin is judged under the default grant",
        ));
        return Some(Policy::default());
    }
    let mut files = Vec::new();
    let mut read_from = Vec::new();
    // Temporary path, and what to call it in messages.
    let mut names: Vec<(String, String)> = Vec::new();
    for (n, path) in host.args.policy.iter().enumerate() {
        let fail = |detail: String| Check::fail(CHECK, detail);
        let (at, bytes) = match file(host, maps, path).await {
            Read::Found { at, bytes } => (at, bytes),
            Read::Missing(why) => {
                checks.push(fail(format!(
                    "--policy {path}: {why}: apply it (`kubectl apply --server-side -k deploy/`: configMapGenerator kubeplug-policy in deploy/base/kustomization.yaml; or the chart's policy values)"
                )));
                return None;
            }
            Read::Unreadable(why) => {
                checks.push(Check::warn(
                    CHECK,
                    format!(
                        "--policy {path} {why}: mount it from the ConfigMap kubeplug-policy (deploy/base/deployment.yaml), or check the file with --policy FILE"
                    ),
                ));
                return None;
            }
        };
        let file_name = Path::new(path)
            .file_name()
            .map(|f| f.to_os_string())
            .unwrap_or_else(|| "policy.yaml".into());
        let local = scratch.join("policy").join(n.to_string()).join(file_name);
        let written = std::fs::create_dir_all(local.parent().expect("a parent"))
            .and_then(|()| std::fs::write(&local, &bytes));
        if let Err(error) = written {
            checks.push(fail(format!(
                "cannot write {} for loading: {error}: set TMPDIR to a writable directory",
                local.display()
            )));
            return None;
        }
        let shown = format!(
            "ConfigMap {}/{} key {}",
            host.namespace, at.config_map, at.key
        );
        names.push((local.display().to_string(), shown.clone()));
        read_from.push(format!("{shown} (--policy {path})"));
        files.push(local);
    }
    match Policy::load(&files) {
        Ok(policy) => {
            checks.push(Check::ok(
                CHECK,
                format!(
                    "{}: {} grant(s){}, identities in {}",
                    read_from.join(", "),
                    policy.service_accounts().len(),
                    if policy.strict { ", strict" } else { "" },
                    policy.identity_namespace
                ),
            ));
            Some(policy)
        }
        Err(error) => {
            let mut text = format!("{:#}", anyhow::Error::from(error));
            for (local, shown) in &names {
                text = text.replace(local, shown);
            }
            checks.push(Check::fail(
                CHECK,
                format!(
                    "{text}: fix the policy (deploy/base/policy.yaml, or the chart's policy values) and apply it again"
                ),
            ));
            None
        }
    }
}

/// How a file the host's flags name reads from its pod's volumes.
pub(super) enum Read {
    /// The ConfigMap key behind it, and its bytes.
    Found {
        at: super::host::KeyAt,
        bytes: Vec<u8>,
    },
    /// Its ConfigMap or key is missing (the host cannot read it either).
    Missing(String),
    /// It is on a volume doctor cannot read (the host may).
    Unreadable(String),
}

/// The file at `path` in the host's pod, from the ConfigMap key mounted
/// there.
pub(super) async fn file(host: &Host, maps: &mut Maps, path: &str) -> Read {
    let keys = match host.file(path) {
        FileSource::Keys(keys) if !keys.is_empty() => keys,
        FileSource::Keys(_) => {
            let (mount, inside) = host.mount_of(path).expect("a key source is on a mount");
            return Read::Missing(format!(
                "volume {} has no {inside:?} (its ConfigMap items map no key there)",
                mount.volume
            ));
        }
        FileSource::Unreadable { volume, kind } => {
            return Read::Unreadable(format!(
                "is on volume {volume} ({kind}), which doctor cannot read"
            ));
        }
        FileSource::Image => {
            return Read::Unreadable(
                "is on no volume of the pod (the image's own files), which doctor cannot read"
                    .into(),
            );
        }
    };
    let mut absent = Vec::new();
    for at in keys {
        match maps.get(&at.config_map).await {
            Err(why) => return Read::Unreadable(why),
            Ok(None) => {
                if !at.optional {
                    absent.push(format!(
                        "ConfigMap {}/{} (volume {}) does not exist",
                        host.namespace, at.config_map, at.volume
                    ));
                }
            }
            Ok(Some(map)) => match value(&map, &at.key) {
                Some(bytes) => return Read::Found { at, bytes },
                None => absent.push(format!(
                    "ConfigMap {}/{} has no key {}",
                    host.namespace, at.config_map, at.key
                )),
            },
        }
    }
    Read::Missing(absent.join("; "))
}

/// What a directory was read from.
pub(super) struct DirRead {
    files: usize,
    config_maps: Vec<String>,
    others: Vec<String>,
}

impl DirRead {
    pub(super) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.config_maps.is_empty() {
            parts.push(format!(
                "{} file(s) of ConfigMap(s) {}",
                self.files,
                self.config_maps.join(", ")
            ));
        }
        parts.extend(self.others.iter().cloned());
        if parts.is_empty() {
            parts.push("nothing read".into());
        }
        parts.join("; ")
    }
}

/// Write under `local` the files `map` makes in `part`'s volume (its keys,
/// or its `items`) that show in the directory; how many.
fn lay_out(
    map: &ConfigMap,
    items: &Option<Vec<(String, String)>>,
    part: &DirPart,
    local: &Path,
) -> Result<usize, String> {
    let mut written = 0;
    for (inside, key) in volume_files(map, items) {
        let Some(rel) = part.place(&inside) else {
            continue;
        };
        let file = local.join(&rel);
        let bytes = value(map, &key).unwrap_or_default();
        std::fs::create_dir_all(file.parent().expect("a parent"))
            .and_then(|()| std::fs::write(&file, bytes))
            .map_err(|error| format!("cannot write {}: {error}", file.display()))?;
        written += 1;
    }
    Ok(written)
}

/// Lay the directory `path` of the pod out in `local`: the files of every
/// ConfigMap that shows there. A ConfigMap absent (and not optional) is a
/// `<what> volume <volume>` FAIL, an image volume a warn; `Err`: the
/// directory could not be laid out.
pub(super) async fn directory(
    host: &Host,
    path: &str,
    maps: &mut Maps,
    local: &Path,
    what: &str,
    checks: &mut Vec<Check>,
) -> Result<DirRead, String> {
    std::fs::create_dir_all(local)
        .map_err(|error| format!("cannot make {}: {error}", local.display()))?;
    let mut read = DirRead {
        files: 0,
        config_maps: Vec::new(),
        others: Vec::new(),
    };
    let parts = host.directory(path);
    if parts.is_empty() {
        read.others
            .push("on no volume: the image's own files, which doctor cannot read".into());
    }
    for part in parts {
        let mount = &part.mount;
        let check = format!("{what} volume {}", mount.volume);
        let shown_at = join(path, &part.at);
        if mount.backings.is_empty() {
            checks.push(Check::fail(
                check,
                format!(
                    "the container mounts volume {} at {}, but the pod has no such volume: add it to the Deployment (deploy/base/deployment.yaml)",
                    mount.volume, mount.path
                ),
            ));
            continue;
        }
        let mut missing = Vec::new();
        for backing in &mount.backings {
            match backing {
                Backing::ConfigMap {
                    name,
                    items,
                    optional,
                } => {
                    let map = match maps.get(name).await {
                        Ok(Some(map)) => map,
                        Ok(None) => {
                            if !optional {
                                missing.push(name.clone());
                            }
                            continue;
                        }
                        Err(why) => {
                            checks.push(Check::warn(check.clone(), why));
                            continue;
                        }
                    };
                    read.config_maps.push(name.clone());
                    read.files += lay_out(&map, items, &part, local)?;
                }
                Backing::Image { reference } => {
                    checks.push(Check::warn(
                        check.clone(),
                        format!(
                            "image volume {} (image {reference}) at {shown_at} cannot be read from here: its plugins are not checked; check the image's .wasm with `kubeplug inspect`, or `kubeplug verify {reference}`",
                            mount.volume
                        ),
                    ));
                    read.others
                        .push(format!("image {reference} at {shown_at}, not read"));
                }
                Backing::EmptyDir { .. } => read
                    .others
                    .push(format!("emptyDir {} (empty at start)", mount.volume)),
                Backing::Other { kind } => {
                    checks.push(Check::warn(
                        check.clone(),
                        format!(
                            "volume {} ({kind}) at {shown_at} cannot be read from here: its files are not checked",
                            mount.volume
                        ),
                    ));
                    read.others
                        .push(format!("{kind} {} not read", mount.volume));
                }
            }
        }
        if !missing.is_empty() {
            let fix = if what == "plugin" {
                "apply them (`make plugins`, then `kubectl apply --server-side -k deploy/`; the chart: plugins.configMaps) or remove them from the volume"
            } else {
                "apply it (`kubectl apply --server-side -k deploy/`: configMapGenerator kubeplug-plugin-settings in deploy/base/kustomization.yaml) or remove it from the volume"
            };
            checks.push(Check::fail(
                check,
                format!(
                    "volume {} at {shown_at} names ConfigMap(s) that do not exist in {}: {}: the pod cannot start; {fix}",
                    mount.volume,
                    host.namespace,
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok(read)
}
