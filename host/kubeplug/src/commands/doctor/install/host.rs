//! The host as its Deployment describes it, pure: the container's flags
//! ([`HostArgs`], read as `kubeplug run` reads them), its volume mounts and
//! what backs each ([`Mount`], [`Backing`]), and what backs a path the
//! flags name ([`Host::file`], [`Host::directory`]). Apart from the
//! ConfigMaps' contents ([`config_maps`](super::config_maps)), so that what
//! the pod sees at a path is tested on Deployment objects alone.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, KeyToPath, Volume};

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
    /// `--plugin-artifacts`: the file naming each plugin's OCI artifact.
    pub plugin_artifacts: Option<String>,
    /// `--max-plugin-bytes`, as given.
    pub max_plugin_bytes: Option<String>,
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
pub(super) fn join(a: &str, b: &str) -> String {
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

/// A ConfigMap volume or projected source.
fn config_map(name: &str, items: &Option<Vec<KeyToPath>>, optional: Option<bool>) -> Backing {
    Backing::ConfigMap {
        name: name.into(),
        items: items.as_ref().map(|items| {
            items
                .iter()
                .map(|i| (i.key.clone(), i.path.clone()))
                .collect()
        }),
        optional: optional.unwrap_or(false),
    }
}

fn backings(volume: &Volume) -> Vec<Backing> {
    if let Some(map) = &volume.config_map {
        return vec![config_map(&map.name, &map.items, map.optional)];
    }
    if let Some(projected) = &volume.projected {
        return projected
            .sources
            .iter()
            .flatten()
            .map(|source| match &source.config_map {
                Some(map) => config_map(&map.name, &map.items, map.optional),
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
            "plugin-artifacts",
            "max-plugin-bytes",
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
            plugin_artifacts: one("plugin-artifacts", "KUBEPLUG_PLUGIN_ARTIFACTS"),
            max_plugin_bytes: one("max-plugin-bytes", "KUBEPLUG_MAX_PLUGIN_BYTES"),
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
            if keys.is_empty() && !matches!(backing, Backing::ConfigMap { .. }) {
                return FileSource::Unreadable {
                    volume: mount.volume.clone(),
                    kind: backing.kind(),
                };
            }
            keys.extend(backing.key_at(&mount.volume, &inside));
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

impl Backing {
    /// A ConfigMap's key that makes the file at `inside` the volume
    /// `volume` (as its `items` map it, else the key of that name), if one
    /// does.
    pub fn key_at(&self, volume: &str, inside: &str) -> Option<KeyAt> {
        let Backing::ConfigMap {
            name,
            items,
            optional,
        } = self
        else {
            return None;
        };
        let key = match items {
            Some(items) => items
                .iter()
                .find(|(_, p)| p.trim_matches('/') == inside)
                .map(|(k, _)| k.clone()),
            None => (!inside.is_empty() && !inside.contains('/')).then(|| inside.to_string()),
        }?;
        Some(KeyAt {
            volume: volume.into(),
            config_map: name.clone(),
            key,
            optional: *optional,
        })
    }

    /// `configMap`, `image`, `emptyDir` or the kind of another volume.
    pub fn kind(&self) -> String {
        match self {
            Backing::ConfigMap { .. } => "configMap".into(),
            Backing::Image { .. } => "image".into(),
            Backing::EmptyDir { .. } => "emptyDir".into(),
            Backing::Other { kind } => kind.clone(),
        }
    }
}

/// A relative path with only plain parts.
pub(super) fn plain(rel: &str) -> bool {
    !rel.is_empty()
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}
