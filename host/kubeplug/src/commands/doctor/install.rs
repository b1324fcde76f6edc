//! Installation mode (no `--plugins`, no `--policy`): the host as its
//! Deployment runs it. The container's flags (`--plugins`, `--policy`,
//! `--settings`, `--namespaces`, `--lease-namespace`, `--leader-elect`,
//! `--cache-dir`, `--compile-cache-bytes`, or their `KUBEPLUG_*`
//! environment variables) say which paths it reads; the pod's volumes say
//! what backs them. The policy and the settings are read from the ConfigMaps
//! mounted there (`configMap` volumes and `projected` sources, the key
//! being the file name, or as `items` map it), the plugin files from the
//! ConfigMaps projected into the plugins path, written into a temporary
//! directory laid out as the pod sees it so that the plugin checks run on
//! it. Image volumes cannot be read from here: one `warn` each.
//!
//! The pure part ([`Host::from_deployment`], [`Host::file`],
//! [`Host::directory`]) reads the Deployment object; [`read`] asks the API
//! server for the ConfigMaps.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, KeyToPath, Volume};
use kube::Api;

use super::report::Check;
use kubeplug_core::policy::Policy;

/// The host's container, by name; else the first one.
const CONTAINER: &str = "kubeplug";

/// The host's flags doctor reads, as `kubeplug run` takes them (a flag
/// first, else its environment variable when given as a plain `value`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HostArgs {
    pub plugins: Option<String>,
    pub policy: Vec<String>,
    pub settings: Option<String>,
    pub namespaces: Vec<String>,
    pub leader_elect: bool,
    /// `--lease-namespace`, else `POD_NAMESPACE`, else `default`.
    pub lease_namespace: String,
    pub cache_dir: Option<String>,
    pub no_cache: bool,
    pub compile_cache_bytes: Option<String>,
}

/// What backs one volume (a `projected` volume: each ConfigMap source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// A ConfigMap: every key a file of its name, or only `items` (key,
    /// path).
    ConfigMap {
        name: String,
        items: Option<Vec<(String, String)>>,
        optional: bool,
    },
    /// An OCI image (`image:` volume): its reference.
    Image {
        reference: String,
    },
    EmptyDir {
        size_limit: Option<String>,
    },
    /// Anything else (`secret`, `persistentVolumeClaim`, ...): its kind.
    Other {
        kind: String,
    },
}

/// A volume as the host's container mounts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub volume: String,
    /// `mountPath`, without a trailing `/`.
    pub path: String,
    /// `subPath`, or empty.
    pub sub_path: String,
    pub read_only: bool,
    /// Empty when the pod has no volume of that name.
    pub backings: Vec<Backing>,
}

/// The host as its Deployment describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// `namespace/name` of the Deployment.
    pub deployment: String,
    pub namespace: String,
    /// `serviceAccountName` (`default` when it names none).
    pub service_account: String,
    pub container: String,
    pub args: HostArgs,
    pub read_only_root: bool,
    pub mounts: Vec<Mount>,
}

/// Where one file of a path comes from: a ConfigMap's key (`optional`: its
/// ConfigMap may be absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyAt {
    pub volume: String,
    pub config_map: String,
    pub key: String,
    pub optional: bool,
}

/// What backs a file path in the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSource {
    /// The ConfigMap keys that could hold it (a projected volume: one per
    /// source), in order.
    Keys(Vec<KeyAt>),
    /// On a volume doctor does not read (its kind and name).
    Unreadable { volume: String, kind: String },
    /// On no volume: the image's own filesystem.
    Image,
}

/// One volume under (or holding) a directory path: what of it shows there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirPart {
    pub mount: Mount,
    /// The folder inside the volume that shows at `at` (empty: its root).
    pub inside: String,
    /// Where, relative to the directory (empty: the directory itself).
    pub at: String,
}

impl DirPart {
    /// Where the file at `inside` its volume shows, relative to the
    /// directory: `None` when it does not show there.
    pub fn place(&self, inside: &str) -> Option<String> {
        let rest = below(inside, &self.inside)?;
        let rel = join(&self.at, &rest);
        plain(&rel).then_some(rel)
    }
}

/// `a/b` joined with `c` (either may be empty).
fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{}/{}", a.trim_end_matches('/'), b.trim_start_matches('/')),
    }
}

/// `path` relative to `base` (component-wise), if it is at or below it.
fn below(path: &str, base: &str) -> Option<String> {
    let path = path.trim_end_matches('/');
    let base = base.trim_end_matches('/');
    if base.is_empty() {
        return Some(path.trim_start_matches('/').to_string());
    }
    if path == base {
        return Some(String::new());
    }
    let rest = path.strip_prefix(base)?;
    rest.strip_prefix('/').map(str::to_string)
}

fn items(list: &Option<Vec<KeyToPath>>) -> Option<Vec<(String, String)>> {
    list.as_ref().map(|items| {
        items
            .iter()
            .map(|i| (i.key.clone(), i.path.clone()))
            .collect()
    })
}

fn backings(volume: &Volume) -> Vec<Backing> {
    if let Some(map) = &volume.config_map {
        return vec![Backing::ConfigMap {
            name: map.name.clone(),
            items: items(&map.items),
            optional: map.optional.unwrap_or(false),
        }];
    }
    if let Some(projected) = &volume.projected {
        return projected
            .sources
            .iter()
            .flatten()
            .map(|source| match &source.config_map {
                Some(map) => Backing::ConfigMap {
                    name: map.name.clone(),
                    items: items(&map.items),
                    optional: map.optional.unwrap_or(false),
                },
                None => Backing::Other {
                    kind: if source.secret.is_some() {
                        "projected secret"
                    } else if source.service_account_token.is_some() {
                        "projected serviceAccountToken"
                    } else {
                        "projected source"
                    }
                    .into(),
                },
            })
            .collect();
    }
    if let Some(image) = &volume.image {
        return vec![Backing::Image {
            reference: image.reference.clone().unwrap_or_default(),
        }];
    }
    if let Some(empty) = &volume.empty_dir {
        return vec![Backing::EmptyDir {
            size_limit: empty.size_limit.as_ref().map(|q| q.0.clone()),
        }];
    }
    let kind = if volume.secret.is_some() {
        "secret"
    } else if volume.persistent_volume_claim.is_some() {
        "persistentVolumeClaim"
    } else if volume.host_path.is_some() {
        "hostPath"
    } else if volume.csi.is_some() {
        "csi"
    } else if volume.ephemeral.is_some() {
        "ephemeral"
    } else {
        "other"
    };
    vec![Backing::Other { kind: kind.into() }]
}

/// A boolean environment variable as clap reads one.
fn truthy(value: &str) -> bool {
    !matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "" | "n" | "no" | "f" | "false" | "off" | "0"
    )
}

impl HostArgs {
    /// The flags of `container` (its `command` and `args`), else its
    /// environment; `namespace`: the pod's, for `POD_NAMESPACE` from the
    /// downward API.
    pub fn of(container: &Container, namespace: &str) -> HostArgs {
        let words: Vec<&str> = container
            .command
            .iter()
            .flatten()
            .chain(container.args.iter().flatten())
            .map(String::as_str)
            .collect();
        let mut flags: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        let mut switches: Vec<&str> = Vec::new();
        const VALUED: &[&str] = &[
            "plugins",
            "policy",
            "settings",
            "namespaces",
            "lease-namespace",
            "cache-dir",
            "compile-cache-bytes",
        ];
        let mut i = 0;
        while i < words.len() {
            let word = words[i];
            i += 1;
            let Some(flag) = word.strip_prefix("--") else {
                continue;
            };
            let (name, value) = match flag.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (flag, None),
            };
            if VALUED.contains(&name) {
                let value = match value {
                    Some(value) => value,
                    None if i < words.len() => {
                        i += 1;
                        words[i - 1].to_string()
                    }
                    None => continue,
                };
                flags.entry(name).or_default().push(value);
            } else if value.is_none_or(|v| truthy(&v)) {
                switches.push(name);
            }
        }
        let env = |name: &str| -> Option<String> {
            let var = container.env.iter().flatten().find(|e| e.name == name)?;
            if let Some(value) = &var.value {
                return Some(value.clone());
            }
            let field = var.value_from.as_ref()?.field_ref.as_ref()?;
            (field.field_path == "metadata.namespace").then(|| namespace.to_string())
        };
        let one = |flag: &str, var: &str| {
            flags
                .get(flag)
                .and_then(|v| v.last().cloned())
                .or_else(|| env(var))
        };
        let list = |flag: &str, var: &str| -> Vec<String> {
            let given: Vec<String> = match flags.get(flag) {
                Some(values) => values.clone(),
                None => env(var).into_iter().collect(),
            };
            given
                .iter()
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
                .collect()
        };
        let switch = |flag: &str, var: &str| {
            switches.contains(&flag) || env(var).is_some_and(|v| truthy(&v))
        };
        HostArgs {
            plugins: one("plugins", "KUBEPLUG_PLUGINS"),
            policy: list("policy", "KUBEPLUG_POLICY"),
            settings: one("settings", "KUBEPLUG_SETTINGS"),
            namespaces: list("namespaces", "KUBEPLUG_NAMESPACES"),
            leader_elect: switch("leader-elect", "KUBEPLUG_LEADER_ELECT"),
            lease_namespace: one("lease-namespace", "POD_NAMESPACE")
                .unwrap_or_else(|| "default".into()),
            cache_dir: one("cache-dir", "KUBEPLUG_CACHE_DIR"),
            no_cache: switch("no-cache", "KUBEPLUG_NO_CACHE"),
            compile_cache_bytes: one("compile-cache-bytes", "KUBEPLUG_COMPILE_CACHE_BYTES"),
        }
    }
}

impl Host {
    /// Read `deployment`'s pod template: its ServiceAccount, the host's
    /// container, its flags and its volume mounts.
    pub fn from_deployment(deployment: &Deployment) -> Result<Host, String> {
        let namespace = deployment
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = deployment.metadata.name.clone().unwrap_or_default();
        let shown = format!("{namespace}/{name}");
        let pod = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .ok_or_else(|| format!("Deployment {shown} has no pod template"))?;
        let container = pod
            .containers
            .iter()
            .find(|c| c.name == CONTAINER)
            .or_else(|| pod.containers.first())
            .ok_or_else(|| format!("Deployment {shown}'s pod template has no container"))?;
        let volumes = pod.volumes.as_deref().unwrap_or_default();
        let mounts = container
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| Mount {
                volume: m.name.clone(),
                path: {
                    let path = m.mount_path.trim_end_matches('/');
                    if path.is_empty() { "/" } else { path }.to_string()
                },
                sub_path: m.sub_path.clone().unwrap_or_default(),
                read_only: m.read_only.unwrap_or(false),
                backings: volumes
                    .iter()
                    .find(|v| v.name == m.name)
                    .map(backings)
                    .unwrap_or_default(),
            })
            .collect();
        Ok(Host {
            deployment: shown,
            service_account: pod
                .service_account_name
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".into()),
            container: container.name.clone(),
            args: HostArgs::of(container, &namespace),
            read_only_root: container
                .security_context
                .as_ref()
                .and_then(|s| s.read_only_root_filesystem)
                .unwrap_or(false),
            namespace,
            mounts,
        })
    }

    /// The mount `path` is on (the deepest holding it), and where inside
    /// its volume.
    pub fn mount_of(&self, path: &str) -> Option<(&Mount, String)> {
        self.mounts
            .iter()
            .filter_map(|m| below(path, &m.path).map(|rest| (m, rest)))
            .max_by_key(|(m, _)| m.path.len())
            .map(|(m, rest)| (m, join(&m.sub_path, &rest)))
    }

    /// What backs the file `path`.
    pub fn file(&self, path: &str) -> FileSource {
        let Some((mount, inside)) = self.mount_of(path) else {
            return FileSource::Image;
        };
        let mut keys = Vec::new();
        for backing in &mount.backings {
            match backing {
                Backing::ConfigMap {
                    name,
                    items,
                    optional,
                } => {
                    let key = match items {
                        Some(items) => items
                            .iter()
                            .find(|(_, p)| p.trim_matches('/') == inside)
                            .map(|(k, _)| k.clone()),
                        None => {
                            (!inside.is_empty() && !inside.contains('/')).then(|| inside.clone())
                        }
                    };
                    if let Some(key) = key {
                        keys.push(KeyAt {
                            volume: mount.volume.clone(),
                            config_map: name.clone(),
                            key,
                            optional: *optional,
                        });
                    }
                }
                other => {
                    if keys.is_empty() {
                        return FileSource::Unreadable {
                            volume: mount.volume.clone(),
                            kind: kind(other),
                        };
                    }
                }
            }
        }
        if keys.is_empty() && mount.backings.is_empty() {
            return FileSource::Unreadable {
                volume: mount.volume.clone(),
                kind: "missing volume".into(),
            };
        }
        FileSource::Keys(keys)
    }

    /// The volumes that show in the directory `dir`: the one holding it
    /// (deepest), and every one mounted below it.
    pub fn directory(&self, dir: &str) -> Vec<DirPart> {
        let mut parts = Vec::new();
        if let Some((mount, inside)) = self.mount_of(dir) {
            parts.push(DirPart {
                mount: mount.clone(),
                inside,
                at: String::new(),
            });
        }
        for mount in &self.mounts {
            if let Some(at) = below(&mount.path, dir)
                && !at.is_empty()
            {
                parts.push(DirPart {
                    mount: mount.clone(),
                    inside: mount.sub_path.clone(),
                    at,
                });
            }
        }
        parts
    }
}

/// `configMap`, `image`, `emptyDir` or the kind of another volume.
fn kind(backing: &Backing) -> String {
    match backing {
        Backing::ConfigMap { .. } => "configMap".into(),
        Backing::Image { .. } => "image".into(),
        Backing::EmptyDir { .. } => "emptyDir".into(),
        Backing::Other { kind } => kind.clone(),
    }
}

/// The files a ConfigMap's keys make in its volume (path inside the volume,
/// key): every key, or its `items`.
fn volume_files(map: &ConfigMap, items: &Option<Vec<(String, String)>>) -> Vec<(String, String)> {
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
fn value(map: &ConfigMap, key: &str) -> Option<Vec<u8>> {
    if let Some(text) = map.data.as_ref().and_then(|d| d.get(key)) {
        return Some(text.as_bytes().to_vec());
    }
    map.binary_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
}

/// A directory removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "kubeplug-doctor-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What installation mode read: the checks it made, and what the plugin
/// checks run on.
pub struct Installation {
    pub host: Host,
    /// The policy as the host loads it; `None` when it could not be read.
    pub policy: Option<Policy>,
    /// The plugins path laid out as the pod sees it (the ConfigMaps'
    /// files), and how to name it; `None` when the host has no `--plugins`.
    pub plugins: Option<(PathBuf, String)>,
    /// The settings path likewise (`--settings`).
    pub settings: Option<PathBuf>,
    /// Holds the files above.
    pub _scratch: Scratch,
}

/// ConfigMaps read once each: `None` when absent, `Err` when unreadable.
struct Maps {
    api: Api<ConfigMap>,
    namespace: String,
    read: BTreeMap<String, Result<Option<ConfigMap>, String>>,
}

impl Maps {
    async fn get(&mut self, name: &str) -> Result<Option<ConfigMap>, String> {
        if !self.read.contains_key(name) {
            let got = self.api.get_opt(name).await.map_err(|error| {
                format!("cannot read ConfigMap {}/{name}: {error}", self.namespace)
            });
            self.read.insert(name.to_string(), got);
        }
        self.read[name].clone()
    }
}

/// Read the Deployment `namespace/name` and what it mounts, pushing the
/// `deployment`, `cache volume`, `policy`, `settings` and `plugin volume
/// <volume>` checks. `None` when there is no Deployment to read.
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    checks: &mut Vec<Check>,
) -> Option<Installation> {
    const CHECK: &str = "deployment";
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment = match api.get_opt(name).await {
        Ok(Some(deployment)) => deployment,
        Ok(None) => {
            checks.push(Check::fail(
                CHECK,
                format!(
                    "Deployment {namespace}/{name} does not exist: install the host (`kubectl apply --server-side -k deploy/`, or `helm install kubeplug deploy/chart -n {namespace}`), give --deployment/-n the host's, or check local files with --plugins DIR --policy FILE"
                ),
            ));
            return None;
        }
        Err(error) => {
            checks.push(Check::fail(
                CHECK,
                format!(
                    "cannot read Deployment {namespace}/{name}: {error}: doctor needs `get` on deployments.apps there"
                ),
            ));
            return None;
        }
    };
    let host = match Host::from_deployment(&deployment) {
        Ok(host) => host,
        Err(why) => {
            checks.push(Check::fail(
                CHECK,
                format!("{why}: re-apply deploy/base/deployment.yaml (or the chart)"),
            ));
            return None;
        }
    };
    let scratch = match Scratch::new() {
        Ok(scratch) => scratch,
        Err(error) => {
            checks.push(Check::fail(
                CHECK,
                format!("cannot make a temporary directory for the ConfigMaps' files: {error}: set TMPDIR to a writable directory"),
            ));
            return None;
        }
    };
    checks.push(deployment_check(&host));
    checks.push(cache_volume(&host));
    let mut maps = Maps {
        api: Api::namespaced(client.clone(), &host.namespace),
        namespace: host.namespace.clone(),
        read: BTreeMap::new(),
    };
    let policy = policy(&host, &mut maps, scratch.path(), checks).await;
    let settings = match &host.args.settings {
        None => {
            checks.push(Check::ok(
                "settings",
                "the Deployment gives no --settings: each plugin's settings sit beside its .wasm",
            ));
            None
        }
        Some(path) => {
            let local = scratch.path().join("settings");
            let read = directory(&host, path, &mut maps, &local, "settings", checks).await;
            checks.push(match read {
                Ok(read) => Check::ok(
                    "settings",
                    format!(
                        "--settings {path} in the Deployment's pod: {}",
                        read.describe()
                    ),
                ),
                Err(why) => Check::fail("settings", why),
            });
            Some(local)
        }
    };
    let plugins = match &host.args.plugins {
        None => {
            checks.push(Check::fail(
                "plugin directory",
                format!(
                    "the Deployment's container {} runs without --plugins (nor KUBEPLUG_PLUGINS): give it --plugins=/plugins (deploy/base/deployment.yaml)",
                    host.container
                ),
            ));
            None
        }
        Some(path) => {
            let local = scratch.path().join("plugins");
            match directory(&host, path, &mut maps, &local, "plugin", checks).await {
                Ok(read) => Some((
                    local,
                    format!(
                        "--plugins {path} in the Deployment's pod ({})",
                        read.describe()
                    ),
                )),
                Err(why) => {
                    checks.push(Check::fail("plugin directory", why));
                    None
                }
            }
        }
    };
    Some(Installation {
        host,
        policy,
        plugins,
        settings,
        _scratch: scratch,
    })
}

fn deployment_check(host: &Host) -> Check {
    let a = &host.args;
    let mut flags = Vec::new();
    if let Some(p) = &a.plugins {
        flags.push(format!("--plugins {p}"));
    }
    if !a.policy.is_empty() {
        flags.push(format!("--policy {}", a.policy.join(",")));
    }
    if let Some(s) = &a.settings {
        flags.push(format!("--settings {s}"));
    }
    if !a.namespaces.is_empty() {
        flags.push(format!("--namespaces {}", a.namespaces.join(",")));
    }
    if a.leader_elect {
        flags.push(format!("--leader-elect (Leases in {})", a.lease_namespace));
    }
    Check::ok(
        "deployment",
        format!(
            "Deployment {} (installation mode: read from the cluster), ServiceAccount {}, container {}: {}",
            host.deployment,
            host.service_account,
            host.container,
            flags.join(" ")
        ),
    )
}

/// Bytes of a Kubernetes quantity (`1Gi`, `500M`, `1073741824`, `1.5Gi`).
pub fn quantity_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        _ => return None,
    };
    Some((number * factor) as u64)
}

/// The pod's compile cache: the volume `--cache-dir` is on, and its
/// `sizeLimit` against `--compile-cache-bytes`.
pub fn cache_volume(host: &Host) -> Check {
    const CHECK: &str = "cache volume";
    let a = &host.args;
    let fix = "mount an emptyDir with a sizeLimit above --compile-cache-bytes there (deploy/base/deployment.yaml's `cache` volume; the chart's compileCache)";
    if a.no_cache {
        return Check::warn(
            CHECK,
            "the Deployment runs the host with --no-cache: every restart compiles every plugin again (a Python guest: ~17 s); drop it and give --cache-dir on an emptyDir",
        );
    }
    let Some(dir) = &a.cache_dir else {
        return Check::warn(
            CHECK,
            format!(
                "the Deployment gives no --cache-dir: the host caches under its home directory{}; give --cache-dir=/var/cache/kubeplug and {fix}",
                if host.read_only_root {
                    ", on a read-only root filesystem, so it compiles in memory at every start"
                } else {
                    ", on the container's own filesystem"
                }
            ),
        );
    };
    let budget_text = a.compile_cache_bytes.as_deref().unwrap_or("768Mi");
    let budget = crate::args::parse_bytes_u64(budget_text);
    let Some((mount, _)) = host.mount_of(dir) else {
        return if host.read_only_root {
            Check::fail(
                CHECK,
                format!(
                    "--cache-dir {dir} is on no volume of the pod, and its root filesystem is read-only: the host cannot write its cache; {fix}"
                ),
            )
        } else {
            Check::warn(
                CHECK,
                format!(
                    "--cache-dir {dir} is on no volume of the pod: the cache is lost at every restart; {fix}"
                ),
            )
        };
    };
    let on = format!("--cache-dir {dir} on volume {}", mount.volume);
    if mount.read_only {
        return Check::fail(
            CHECK,
            format!(
                "{on}, mounted read-only: the host cannot write its cache; drop readOnly from that volumeMount"
            ),
        );
    }
    let budget = match budget {
        Ok(budget) => budget,
        Err(why) => {
            return Check::fail(
                CHECK,
                format!(
                    "--compile-cache-bytes {why}: the host does not start; fix the flag in the Deployment (the chart's compileCache.maxBytes)"
                ),
            );
        }
    };
    match mount.backings.first() {
        Some(Backing::EmptyDir {
            size_limit: Some(limit),
        }) => match quantity_bytes(limit) {
            Some(bytes) if budget >= bytes => Check::fail(
                CHECK,
                format!(
                    "{on} (emptyDir, sizeLimit {limit}): --compile-cache-bytes {budget_text} is not below the sizeLimit, so the kubelet evicts the pod when the cache fills it; lower --compile-cache-bytes (the chart's compileCache.maxBytes) or raise the sizeLimit in deploy/base/deployment.yaml"
                ),
            ),
            Some(_) => Check::ok(
                CHECK,
                format!(
                    "{on} (emptyDir, sizeLimit {limit}), --compile-cache-bytes {budget_text} below it (installation mode: the pod's volume)"
                ),
            ),
            None => Check::warn(CHECK, format!("{on}: cannot read its sizeLimit {limit:?}")),
        },
        Some(Backing::EmptyDir { size_limit: None }) => Check::warn(
            CHECK,
            format!(
                "{on} (emptyDir without a sizeLimit): only --compile-cache-bytes {budget_text} bounds it, against the node's disk; give it a sizeLimit above that"
            ),
        ),
        Some(Backing::Other { kind }) if kind == "persistentVolumeClaim" => Check::ok(
            CHECK,
            format!(
                "{on} (persistentVolumeClaim, kept across restarts), --compile-cache-bytes {budget_text}"
            ),
        ),
        Some(other) => Check::warn(CHECK, format!("{on} (a {} volume): {fix}", kind(other))),
        None => Check::fail(
            CHECK,
            format!("{on}, but the pod has no volume {}: {fix}", mount.volume),
        ),
    }
}

/// Read each `--policy` path from its ConfigMap into `scratch/policy/N/`,
/// and load them together as the host does.
async fn policy(
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
        let keys = match host.file(path) {
            FileSource::Keys(keys) if !keys.is_empty() => keys,
            FileSource::Keys(_) => {
                let (mount, inside) = host.mount_of(path).expect("a key source is on a mount");
                checks.push(fail(format!(
                    "--policy {path}: volume {} has no {inside:?} (its ConfigMap items map no key there): mount the policy ConfigMap kubeplug-policy there (deploy/base/deployment.yaml's `policy` volume)",
                    mount.volume
                )));
                return None;
            }
            FileSource::Unreadable { volume, kind } => {
                checks.push(Check::warn(
                    CHECK,
                    format!(
                        "--policy {path} is on volume {volume} ({kind}), which doctor cannot read: mount it from a ConfigMap (kubeplug-policy), or check the file with --policy FILE"
                    ),
                ));
                return None;
            }
            FileSource::Image => {
                checks.push(Check::warn(
                    CHECK,
                    format!(
                        "--policy {path} is on no volume of the pod (the image's own files), which doctor cannot read: mount it from the ConfigMap kubeplug-policy (deploy/base/deployment.yaml), or check the file with --policy FILE"
                    ),
                ));
                return None;
            }
        };
        let mut found = None;
        let mut absent = Vec::new();
        for at in &keys {
            match maps.get(&at.config_map).await {
                Err(why) => {
                    checks.push(Check::warn(CHECK, why));
                    return None;
                }
                Ok(None) => {
                    if !at.optional {
                        absent.push(format!(
                            "ConfigMap {}/{} (volume {}) does not exist",
                            host.namespace, at.config_map, at.volume
                        ));
                    }
                }
                Ok(Some(map)) => match value(&map, &at.key) {
                    Some(bytes) => {
                        found = Some((at.clone(), bytes));
                        break;
                    }
                    None => absent.push(format!(
                        "ConfigMap {}/{} has no key {}",
                        host.namespace, at.config_map, at.key
                    )),
                },
            }
        }
        let Some((at, bytes)) = found else {
            checks.push(fail(format!(
                "--policy {path}: {}: apply it (`kubectl apply --server-side -k deploy/`: configMapGenerator kubeplug-policy in deploy/base/kustomization.yaml; or the chart's policy values)",
                absent.join("; ")
            )));
            return None;
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

/// What a directory was read from.
struct DirRead {
    files: usize,
    config_maps: Vec<String>,
    others: Vec<String>,
}

impl DirRead {
    fn describe(&self) -> String {
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

/// A relative path with only plain parts.
fn plain(rel: &str) -> bool {
    !rel.is_empty()
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// Lay the directory `path` of the pod out in `local`: the files of every
/// ConfigMap that shows there. A ConfigMap absent (and not optional) is a
/// `<what> volume <volume>` FAIL, an image volume a warn; `Err`: the
/// directory could not be laid out.
async fn directory(
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
                    for (inside, key) in volume_files(&map, items) {
                        let Some(rel) = part.place(&inside) else {
                            continue;
                        };
                        let file = local.join(&rel);
                        let bytes = value(&map, &key).unwrap_or_default();
                        std::fs::create_dir_all(file.parent().expect("a parent"))
                            .and_then(|()| std::fs::write(&file, bytes))
                            .map_err(|error| format!("cannot write {}: {error}", file.display()))?;
                        read.files += 1;
                    }
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

#[cfg(test)]
mod tests;
