//! The plugin directory: what is loaded, from which file, in which state.
//!
//! Users ship plugins by dropping `.wasm` files into a directory (a ConfigMap,
//! a PVC, an image volume). The registry scans it on every change, loads new
//! and changed files off the hot path, and swaps versions atomically:
//!
//! - a new file starts a controller; a changed file (new digest) is compiled
//!   and validated first, then replaces the running version, and every parent
//!   is re-queued; reconciles in flight finish on the old version;
//! - a file that fails to load never replaces a working version: the old one
//!   keeps serving and the plugin is reported `degraded` with the error;
//! - a removed file stops its controller; its children stay;
//! - a second plugin for a parent kind already served is refused (several
//!   decorators of one kind may run side by side);
//! - every plugin is admitted by the platform's [`crate::policy::Policy`]: its manifest is
//!   resolved through API discovery and checked against its grant, and its
//!   controller writes as the plugin's own ServiceAccount.
//!
//! Loads run concurrently, one task per file: a slow compile delays no other
//! plugin's load.
//!
//! A file serves as plugin `N` only from `N`'s location, which the platform's
//! policy binds (see [`placement`]): by default `N.wasm` or `N/N.wasm`, and
//! its manifest must declare `N`. A file anywhere else is refused before it
//! is read; so is one resolving outside the directory through a symlink, or
//! one larger than `--max-plugin-bytes`.
//!
//! Optional settings live beside each plugin (or in `--settings`): `N.yaml`
//! (or `.yml`, `.json`) with `config` (the plugin's configuration document),
//! `limits` (see [`Limits`]). A change to that file reloads the plugin too.
//!
//! Assumptions: files are written in place or swapped in (ConfigMap `..data`
//! symlinks, renames). Half-written files are caught by waiting until a file's
//! modification time is [`SETTLE`] old; a file that still fails is retried
//! when its content changes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::controller::{self, Controller, Identity, Settings};
use crate::discovery::Scopes;
use crate::identity::{self, Access};
use crate::informers::Informers;
use crate::manifest::Mode;
use crate::metrics::OperatorMetrics;
use crate::policy::PolicyFiles;
use crate::rollback::RollbackSettings;
use crate::runtime::{LimitSettings, Plugin, PluginOptions, Runtime};
use crate::shadow::{Shadow, ShadowStatus};

mod placement;

pub use placement::MAX_PLUGIN_BYTES;
use placement::{Layout, Place, Root, pair_of};

/// How long a file must be unchanged before it is loaded.
pub const SETTLE: Duration = Duration::from_millis(500);

/// Settings beside a plugin file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginSettings {
    /// The plugin's configuration document.
    pub config: Option<serde_json::Value>,
    /// Requests to lower the per-call limits below the policy's quotas.
    pub limits: LimitSettings,
    /// When a new version of this plugin is rolled back automatically.
    pub rollback: RollbackSettings,
}

/// A plugin's state, as reported by `/plugins` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Serving its latest file.
    Running,
    /// Serving an older version (the latest file failed to load), or
    /// unable to watch a kind it needs (RBAC, a missing CRD): see `reason`.
    Degraded,
    /// Nothing serving: the file failed to load.
    Failed,
    /// The latest file loaded but failed its probation: the previous
    /// version serves again (see [`crate::rollback`]); `reason` says why.
    #[serde(rename = "rolled-back")]
    RolledBack,
}

/// One row of `/plugins`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub file: String,
    pub name: Option<String>,
    pub version: Option<String>,
    pub digest: Option<String>,
    pub state: State,
    /// RFC 3339 time the serving version was loaded.
    pub loaded_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Why the plugin is degraded or cannot see all it needs now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Every cache the plugin reads has listed once.
    pub synced: bool,
    /// This replica may write for the plugin now.
    pub leading: bool,
    /// The candidate (`<stem>.next.wasm`) in shadow, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowStatus>,
    /// Why the candidate file cannot run in shadow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_error: Option<String>,
    /// What the aggregated API adds (not on `/plugins`).
    #[serde(skip)]
    pub detail: Option<PluginDetail>,
}

/// A serving plugin's manifest and counters.
#[derive(Debug, Clone)]
pub struct PluginDetail {
    pub manifest: crate::manifest::Manifest,
    pub reconciles: u64,
    pub errors: u64,
    pub queue_depth: usize,
}

impl Status {
    /// The row without what only the host's operators should see: the
    /// file's path (only its name stays) and error text, which a plugin
    /// can fill with anything, including what it was handed.
    pub fn summary(self) -> Status {
        let file = Path::new(&self.file)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Status {
            file,
            last_error: None,
            reason: None,
            shadow: self.shadow.map(ShadowStatus::summary),
            candidate_error: None,
            ..self
        }
    }
}

/// What the registry knows about one file.
#[derive(Default)]
struct FileEntry {
    /// Content key (plugin + settings) last attempted, loaded or not.
    attempted: String,
    /// The plugin served from this file, if any.
    serving: Option<Serving>,
    last_error: Option<String>,
    /// The policy changed: the next load decides whether what serves may
    /// go on (a refusal then stops it instead of leaving it serving).
    revalidate: bool,
    /// The candidate beside this file that cannot shadow it: its content
    /// key and why.
    candidate_error: Option<(String, String)>,
}

struct Serving {
    name: String,
    controller: Controller,
    loaded_at: String,
    /// Content key (plugin + settings) of what serves.
    key: String,
}

/// What the registry needs from the rest of the host.
pub struct Wiring {
    pub runtime: Arc<Runtime>,
    pub informers: Arc<Informers>,
    /// The host's own client (discovery, Leases).
    pub client: kube::Client,
    /// The host's connection settings, from which each plugin's
    /// impersonating client is made.
    pub config: kube::Config,
    /// Rate limit and timeouts of each plugin's client.
    pub client_settings: crate::client::ClientSettings,
    pub access: Arc<Access>,
    /// The platform's policy, re-read on every rescan.
    pub policy: Arc<PolicyFiles>,
    pub metrics: OperatorMetrics,
    /// Each plugin's writes and reads, counted by its writer.
    pub apply_metrics: crate::apply::metrics::ApplyMetrics,
    pub settings: Settings,
    /// `--namespaces`: the only namespaces any plugin is served in.
    pub namespaces: Option<Vec<String>>,
    /// `--max-plugin-bytes`: larger plugin files are refused unread.
    pub max_plugin_bytes: u64,
}

/// The host's plugins and their controllers.
pub struct Registry {
    dir: PathBuf,
    /// Where files are found, and how they are read.
    layout: Layout,
    /// Where settings files live, if not beside each `.wasm`.
    settings_dir: Option<PathBuf>,
    wiring: Wiring,
    files: Mutex<BTreeMap<PathBuf, FileEntry>>,
    /// Files being loaded now.
    loading: Mutex<HashSet<PathBuf>>,
}

/// A removed plugin that kept a finalizer on its parents leaves them stuck
/// in Terminating when deleted: say so, and how to release them.
fn warn_orphaned_finalizer(plugin: &Plugin) {
    let manifest = plugin.manifest();
    if let Some(finalizer) = &manifest.finalizer {
        let resource = if manifest.parent.group.is_empty() {
            manifest.parent.plural.clone()
        } else {
            format!("{}.{}", manifest.parent.plural, manifest.parent.group)
        };
        tracing::warn!(
            plugin = %manifest.name,
            %finalizer,
            "the removed plugin keeps finalizer {finalizer} on its {resource}: a deleted one stays Terminating until the plugin is back or `kubeplug release-finalizers {} --resource {resource}` releases it",
            manifest.name
        );
    }
}

/// Why a load failed, and whether to try the same content again.
struct Failure {
    error: String,
    /// Worth retrying without a change (e.g. a CRD not installed yet).
    retry: bool,
}

impl From<String> for Failure {
    fn from(error: String) -> Self {
        Failure {
            error,
            retry: false,
        }
    }
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A file ready to load: its bytes, settings and content key.
struct Candidate {
    /// The plugin bound to the file's location (its manifest must say so).
    bound: String,
    bytes: Vec<u8>,
    settings: PluginSettings,
    key: String,
}

impl Registry {
    pub fn new(dir: PathBuf, settings_dir: Option<PathBuf>, wiring: Wiring) -> Self {
        Registry {
            layout: Layout {
                root: Root::new(&dir),
                settings: settings_dir.as_deref().map(Root::new),
                max_plugin_bytes: wiring.max_plugin_bytes,
            },
            dir,
            settings_dir,
            wiring,
            files: Mutex::new(BTreeMap::new()),
            loading: Mutex::new(HashSet::new()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bring the loaded plugins in line with the directory: start a load for
    /// every new or changed file (each in its own task). Returns true if a
    /// file was too fresh to load, or still loading, so a later scan is
    /// needed.
    pub async fn sync(self: &Arc<Self>) -> bool {
        let (placed, mut again) = match self.layout.scan(&self.wiring.policy.current()) {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "cannot scan plugin directory");
                return true;
            }
        };
        let mut present = Vec::new();
        let mut live = Vec::new();
        let mut candidates = Vec::new();
        for (path, place) in placed {
            present.push(path.clone());
            match place {
                Err(reason) => self.misplaced(&path, reason),
                Ok(Place::Live(name)) => live.push((path, name)),
                Ok(Place::Candidate(name)) => candidates.push((path, name)),
            }
        }
        self.remove_missing(&present);
        again |= self.sync_candidates(&candidates, &live);
        for (path, name) in live {
            if self.loading.lock().expect("loading lock").contains(&path) {
                again = true;
                continue;
            }
            let candidate = match self.layout.read(&path, &Place::Live(name)) {
                Ok(c) => c,
                Err(error) => {
                    self.failed(&path, None, error);
                    continue;
                }
            };
            let attempted = self
                .files
                .lock()
                .expect("registry lock")
                .get(&path)
                .map(|e| e.attempted.clone());
            if attempted.as_deref() == Some(candidate.key.as_str()) {
                continue;
            }
            self.loading
                .lock()
                .expect("loading lock")
                .insert(path.clone());
            let registry = self.clone();
            tokio::spawn(async move {
                registry.load(&path, candidate).await;
                registry.loading.lock().expect("loading lock").remove(&path);
            });
        }
        again
    }

    /// A file at no plugin's location: refused unread, and whatever it
    /// served stops (the policy moved the plugin elsewhere). Logged once per
    /// reason.
    fn misplaced(&self, path: &Path, reason: String) {
        let key = format!("misplaced: {reason}");
        {
            let mut files = self.files.lock().expect("registry lock");
            let entry = files.entry(path.to_path_buf()).or_default();
            if let Some(serving) = entry.serving.take() {
                tracing::warn!(plugin = %serving.name, file = %path.display(), %reason, "the file is no longer at its plugin's location; stopping its controller (children are kept)");
                self.wiring.metrics.plugin_removed(&serving.name);
                serving.controller.stop();
            }
            entry.revalidate = false;
            if entry.attempted == key {
                return;
            }
        }
        self.failed(path, Some(key), reason);
    }

    /// Wait until no load is running, at most `limit`.
    pub async fn loaded(&self, limit: Duration) {
        let started = std::time::Instant::now();
        while !self.loading.lock().expect("loading lock").is_empty() && started.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn remove_missing(&self, present: &[PathBuf]) {
        let mut files = self.files.lock().expect("registry lock");
        let gone: Vec<PathBuf> = files
            .keys()
            .filter(|p| !present.contains(p) && !p.exists())
            .cloned()
            .collect();
        for path in gone {
            if let Some(FileEntry {
                serving: Some(s), ..
            }) = files.remove(&path)
            {
                tracing::info!(plugin = %s.name, file = %path.display(), "plugin file removed; stopping its controller (children are kept)");
                self.wiring.metrics.plugin_removed(&s.name);
                warn_orphaned_finalizer(&s.controller.plugin());
                s.controller.stop();
            }
        }
    }

    /// Load, admit and serve one file; on any failure keep what serves.
    async fn load(&self, path: &Path, candidate: Candidate) {
        let key = candidate.key.clone();
        let rollback = candidate.settings.rollback;
        match self.admit(path, candidate).await {
            Ok((plugin, identity)) => self.serve(path, key, plugin, identity, rollback),
            Err(Failure { error, retry }) => {
                self.revoke_if_revalidating(path, &error);
                self.failed(path, (!retry).then_some(key), error)
            }
        }
    }

    /// After a policy change, a plugin the new policy refuses stops serving
    /// (its children stay): a grant the platform withdrew is withdrawn now,
    /// not at the next upgrade.
    fn revoke_if_revalidating(&self, path: &Path, error: &str) {
        let mut files = self.files.lock().expect("registry lock");
        let Some(entry) = files.get_mut(path) else {
            return;
        };
        if !std::mem::take(&mut entry.revalidate) {
            return;
        }
        if let Some(serving) = entry.serving.take() {
            tracing::warn!(plugin = %serving.name, %error, "the new policy refuses this plugin; stopping its controller (children are kept)");
            self.wiring.metrics.plugin_removed(&serving.name);
            serving.controller.stop();
        }
    }

    /// The policy changed: admit every file again under it.
    fn revalidate_all(&self) {
        let mut files = self.files.lock().expect("registry lock");
        for entry in files.values_mut() {
            entry.attempted.clear();
            entry.revalidate = true;
        }
    }

    /// Compile within the policy's quotas, call `manifest()`, resolve it
    /// through discovery and check it against the plugin's grant.
    async fn admit(
        &self,
        path: &Path,
        candidate: Candidate,
    ) -> Result<(Plugin, Identity), Failure> {
        let w = &self.wiring;
        let policy = w.policy.current();
        // The plugin the file's location is bound to: its grant, pins and
        // quotas, whatever the file will say its name is.
        let bound = candidate.bound.clone();
        let no_grant = |name: &str| {
            format!(
                "plugin {name} has no grant in the policy, which is strict: ask the platform team to add one"
            )
        };
        // Strict mode, pins: checked before compiling, so a file that may
        // not serve costs nothing.
        if policy.strict && policy.grant(&bound).is_none() {
            return Err(no_grant(&bound).into());
        }
        let digest = hex::encode(Sha256::digest(&candidate.bytes));
        let pins = policy.pins_for_file(&bound);
        if !pins.is_empty() && !pins.contains(&digest) {
            return Err(format!(
                "digest sha256:{digest} is not pinned for plugin {bound} by the policy"
            )
            .into());
        }
        let quotas = policy.quotas_for_file(&bound);
        let runtime = w.runtime.clone();
        let label = path.display().to_string();
        let settings = candidate.settings;
        // Compiling may take long for big guests: keep it off the workers.
        let loaded = tokio::task::spawn_blocking(move || {
            runtime.load(
                &candidate.bytes,
                PluginOptions {
                    config: settings.config,
                    limits: settings.limits.within(quotas.limits()),
                    compile: quotas.compile(),
                    label: Some(label),
                },
            )
        })
        .await;
        let plugin = match loaded {
            Ok(Ok(plugin)) => plugin,
            Ok(Err(error)) => return Err(controller::format_chain(&error).into()),
            Err(error) => return Err(format!("loader panicked: {error}").into()),
        };
        let name = plugin.name().to_string();
        if name != bound {
            return Err(placement::name_mismatch(
                &policy,
                self.layout.root.rel(path),
                &bound,
                &name,
            )
            .into());
        }
        let Some(grant) = policy.grant(&name) else {
            return Err(no_grant(&name).into());
        };
        let scopes = Scopes::discover(&w.client, plugin.manifest())
            .await
            .map_err(|e| Failure {
                error: format!("cannot ask the API server about the plugin's kinds: {e}"),
                retry: true,
            })?;
        let resolved = scopes
            .resolve(plugin.manifest())
            .map_err(|problems| Failure {
                // A CRD may be installed later: try again on the next scan.
                retry: problems.iter().any(|p| p.contains("not served")),
                error: format!("plugin {name} refused: {}", problems.join("; ")),
            })?;
        let admitted = grant
            .admit(&resolved, plugin.digest())
            .map_err(|refusal| refusal.to_string())?;
        let admitted = match &w.namespaces {
            Some(bound) => admitted
                .bound_to(bound)
                .map_err(|why| format!("plugin {name} refused: {why}"))?,
            None => admitted,
        };
        let limits = settings.limits.within(grant.quotas.limits());
        let client = identity::client_for(&w.config, &grant, &w.client_settings)
            .map_err(|e| format!("cannot make a client for plugin {name}: {e}"))?;
        let identity = Identity {
            grant,
            client,
            access: w.access.clone(),
        };
        Ok((plugin.admitted(admitted, limits), identity))
    }

    /// Refuse a plugin whose name another file already serves, or whose
    /// parent kind (group and kind, whatever the version) another file
    /// already reconciles, unless both are decorators: decorators only merge
    /// the labels and annotations their grants allow, each under its own
    /// field manager, so several may stamp the same Pods (`pod-annotator`
    /// and `pod-labeler`), whereas two composites would fight over one
    /// parent's children and status.
    fn conflict(
        files: &BTreeMap<PathBuf, FileEntry>,
        path: &Path,
        plugin: &Plugin,
    ) -> Option<String> {
        for (other_path, entry) in files.iter().filter(|(p, _)| p.as_path() != path) {
            let Some(serving) = &entry.serving else {
                continue;
            };
            let other = serving.controller.plugin();
            if other.name() == plugin.name() {
                return Some(format!(
                    "plugin name {} is already served from {}",
                    plugin.name(),
                    other_path.display()
                ));
            }
            let decorators = [other.manifest(), plugin.manifest()]
                .iter()
                .all(|m| m.mode == Mode::Decorator);
            if other.manifest().parent.same_kind(&plugin.manifest().parent) && !decorators {
                return Some(format!(
                    "parent kind {} is already reconciled by plugin {} ({})",
                    plugin.manifest().parent,
                    other.name(),
                    other_path.display()
                ));
            }
        }
        None
    }

    fn serve(
        &self,
        path: &Path,
        key: String,
        plugin: Plugin,
        identity: Identity,
        rollback: RollbackSettings,
    ) {
        let w = &self.wiring;
        let mut files = self.files.lock().expect("registry lock");
        if let Some(error) = Self::conflict(&files, path, &plugin) {
            drop(files);
            return self.failed(path, Some(key), error);
        }
        let entry = files.entry(path.to_path_buf()).or_default();
        // A version rolled back is not tried again until its file changes
        // (a policy change re-admits every file: not a reason).
        if let Some(serving) = &entry.serving
            && serving
                .controller
                .rolled_back()
                .is_some_and(|back| back.key == key)
        {
            entry.attempted = key;
            entry.revalidate = false;
            return;
        }
        entry.attempted = key.clone();
        entry.last_error = None;
        entry.revalidate = false;
        let manifest = plugin.manifest().clone();
        w.metrics.plugin_info(
            &manifest.name,
            &manifest.version,
            plugin.digest(),
            "running",
        );
        let loaded_at = now_rfc3339();
        match entry.serving.take() {
            // Admitted again after a policy change, and nothing changed for
            // it: keep serving as it was, without re-queueing every parent.
            Some(old)
                if old.key == key
                    && old.controller.plugin().manifest() == &manifest
                    && old.controller.grant() == &identity.grant =>
            {
                entry.serving = Some(old);
            }
            Some(old)
                if controller::same_shape(old.controller.plugin().manifest(), &manifest)
                    && old.controller.grant() == &identity.grant =>
            {
                tracing::info!(plugin = %manifest.name, version = %manifest.version, digest = %plugin.digest(), "upgrading plugin in place");
                old.controller.upgrade(plugin, key.clone(), rollback);
                entry.serving = Some(Serving {
                    name: manifest.name,
                    controller: old.controller,
                    loaded_at,
                    key,
                });
            }
            old => {
                if let Some(old) = old {
                    tracing::info!(plugin = %old.name, "plugin changed shape; restarting its controller");
                    if old.name != manifest.name {
                        w.metrics.plugin_removed(&old.name);
                    }
                    old.controller.stop();
                }
                tracing::info!(plugin = %manifest.name, version = %manifest.version, digest = %plugin.digest(), file = %path.display(), service_account = %identity.grant.user(), "plugin loaded");
                let controller = Controller::start(
                    plugin,
                    identity,
                    &w.informers,
                    w.metrics.clone(),
                    w.apply_metrics.clone(),
                    w.settings.clone(),
                );
                entry.serving = Some(Serving {
                    name: manifest.name,
                    controller,
                    loaded_at,
                    key,
                });
            }
        }
    }

    fn failed(&self, path: &Path, key: Option<String>, error: String) {
        let mut files = self.files.lock().expect("registry lock");
        let entry = files.entry(path.to_path_buf()).or_default();
        if let Some(key) = key {
            entry.attempted = key;
        }
        // The file's path without `.wasm` (`database`, `team-a/database`):
        // a file in a team's folder must not count against the plugin it
        // is named after.
        let label = entry
            .serving
            .as_ref()
            .map(|s| s.name.clone())
            .unwrap_or_else(|| {
                self.layout
                    .root
                    .rel(path)
                    .with_extension("")
                    .to_string_lossy()
                    .into_owned()
            });
        match &entry.serving {
            Some(s) => {
                let p = s.controller.plugin();
                self.wiring.metrics.plugin_info(
                    &s.name,
                    &p.manifest().version,
                    p.digest(),
                    "degraded",
                );
                tracing::error!(plugin = %s.name, file = %path.display(), %error, "new plugin version refused; the previous version keeps serving");
            }
            None => {
                tracing::error!(file = %path.display(), %error, "plugin refused");
            }
        }
        self.wiring.metrics.load_failed(&label);
        entry.last_error = Some(error);
    }

    /// Every file and what it serves.
    pub fn status(&self) -> Vec<Status> {
        let files = self.files.lock().expect("registry lock");
        files
            .iter()
            .map(|(path, entry)| {
                let plugin = entry.serving.as_ref().map(|s| s.controller.plugin());
                let problem = entry.serving.as_ref().and_then(|s| s.controller.problem());
                let stuck = problem.as_ref().is_some_and(|p| p.persistent);
                let rolled_back = entry
                    .serving
                    .as_ref()
                    .and_then(|s| s.controller.rolled_back());
                let state = match (&entry.serving, &entry.last_error) {
                    (Some(_), None) if rolled_back.is_some() => State::RolledBack,
                    (Some(_), None) if !stuck => State::Running,
                    (Some(_), _) => State::Degraded,
                    (None, _) => State::Failed,
                };
                let rolled_back = rolled_back.map(|back| {
                    format!(
                        "version {} (sha256:{}) was rolled back at {}: {}; the previous version serves, and the file is not loaded again until it changes",
                        back.version, back.digest, back.at, back.reason
                    )
                });
                let reason = problem.map(|p| p.message).or(rolled_back).or_else(|| {
                    entry
                        .last_error
                        .as_ref()
                        .filter(|_| entry.serving.is_some())
                        .map(|e| format!("serving the previous version: {e}"))
                });
                Status {
                    file: path.display().to_string(),
                    name: plugin.as_ref().map(|p| p.name().to_string()),
                    version: plugin.as_ref().map(|p| p.manifest().version.clone()),
                    digest: plugin.as_ref().map(|p| p.digest().to_string()),
                    state,
                    loaded_at: entry.serving.as_ref().map(|s| s.loaded_at.clone()),
                    last_error: entry.last_error.clone(),
                    reason,
                    synced: entry
                        .serving
                        .as_ref()
                        .is_some_and(|s| s.controller.synced()),
                    leading: entry
                        .serving
                        .as_ref()
                        .is_some_and(|s| s.controller.leading()),
                    shadow: entry
                        .serving
                        .as_ref()
                        .and_then(|s| s.controller.shadow())
                        .map(|shadow| shadow.status()),
                    candidate_error: entry.candidate_error.as_ref().map(|(_, e)| e.clone()),
                    detail: entry.serving.as_ref().map(|s| {
                        let (reconciles, errors) = s.controller.counts();
                        PluginDetail {
                            manifest: s.controller.plugin().manifest().clone(),
                            reconciles,
                            errors,
                            queue_depth: s.controller.queue_len(),
                        }
                    }),
                }
            })
            .collect()
    }

    /// Bring shadows in line with the candidate files present: load a new
    /// or changed candidate beside a serving plugin, stop the shadow of one
    /// removed. Returns true if a candidate waits for its live file to load.
    ///
    /// A candidate pairs only with the live file of its plugin in its own
    /// folder; one in another folder than that file is refused (a row of
    /// its own, `failed`), never shadowed.
    fn sync_candidates(
        self: &Arc<Self>,
        candidates: &[(PathBuf, String)],
        live: &[(PathBuf, String)],
    ) -> bool {
        let mut again = false;
        let mut pairs: Vec<(PathBuf, PathBuf)> = Vec::new();
        for (next, name) in candidates {
            match pair_of(next, name, live) {
                Some(file) => pairs.push((next.clone(), file)),
                None => {
                    if let Some((file, _)) = live.iter().find(|(_, bound)| bound == name) {
                        let reason = format!(
                            "{} is not beside plugin {name}'s file ({}): a candidate stands in the same folder as the live file it would replace; it is never shadowed or previewed",
                            self.layout.root.rel(next).display(),
                            self.layout.root.rel(file).display()
                        );
                        self.misplaced(next, reason);
                    }
                }
            }
        }
        {
            let mut files = self.files.lock().expect("registry lock");
            // A candidate now beside its live file is no longer refused.
            for (next, _) in &pairs {
                if files.get(next).is_some_and(|e| e.serving.is_none()) {
                    files.remove(next);
                }
            }
            for (path, entry) in files.iter_mut() {
                if pairs.iter().any(|(_, live)| live == path) {
                    continue;
                }
                entry.candidate_error = None;
                if let Some(serving) = &entry.serving
                    && let Some(shadow) = serving.controller.shadow()
                {
                    tracing::info!(plugin = %serving.name, file = %shadow.status().file, "candidate removed; shadow stopped");
                    serving.controller.set_shadow(None);
                }
            }
        }
        for (next, live) in &pairs {
            let name = candidates
                .iter()
                .find(|(c, _)| c == next)
                .map(|(_, n)| n.clone())
                .unwrap_or_default();
            let candidate = match self.layout.read(next, &Place::Candidate(name)) {
                Ok(c) => c,
                Err(error) => {
                    self.candidate_failed(live, String::new(), error);
                    continue;
                }
            };
            {
                let loading = self.loading.lock().expect("loading lock");
                if loading.contains(next) {
                    continue;
                }
                let files = self.files.lock().expect("registry lock");
                let Some(entry) = files.get(live) else {
                    again |= loading.contains(live);
                    continue;
                };
                let Some(serving) = &entry.serving else {
                    again |= loading.contains(live);
                    continue;
                };
                let shadowing = serving.controller.shadow();
                let tried = shadowing
                    .as_ref()
                    .map(|s| s.key())
                    .or(entry.candidate_error.as_ref().map(|(k, _)| k.as_str()));
                if tried == Some(candidate.key.as_str()) {
                    continue;
                }
            }
            self.loading
                .lock()
                .expect("loading lock")
                .insert(next.clone());
            let (registry, next, live) = (self.clone(), next.clone(), live.clone());
            tokio::spawn(async move {
                registry.shadow(&live, &next, candidate).await;
                registry.loading.lock().expect("loading lock").remove(&next);
            });
        }
        again
    }

    /// Admit the candidate `next` as a load would, and run it in shadow of
    /// the plugin served from `live`.
    async fn shadow(&self, live: &Path, next: &Path, candidate: Candidate) {
        let key = candidate.key.clone();
        let admitted = self.admit(next, candidate).await.map_err(|f| f.error);
        let files = self.files.lock().expect("registry lock");
        let Some(serving) = files.get(live).and_then(|e| e.serving.as_ref()) else {
            return;
        };
        let current = serving.controller.plugin();
        let refused = match admitted {
            Err(error) => Some(error),
            Ok((plugin, _)) if plugin.name() != current.name() => Some(format!(
                "the candidate is plugin {}, not {}",
                plugin.name(),
                current.name()
            )),
            Ok((plugin, _)) if !controller::same_shape(plugin.manifest(), current.manifest()) => {
                Some(format!(
                    "the candidate {} asks for other kinds, namespaces or finalizer than the serving version; a shadow runs on the serving version's caches (preview it, or promote it directly)",
                    plugin.manifest().version
                ))
            }
            Ok((plugin, _)) => {
                tracing::info!(plugin = %plugin.name(), version = %plugin.manifest().version, digest = %plugin.digest(), file = %next.display(), "candidate loaded in shadow: it decides beside the live version and writes nothing");
                serving.controller.set_shadow(Some(Shadow::new(
                    plugin,
                    key.clone(),
                    next.display().to_string(),
                    self.wiring.settings.concurrency,
                )));
                None
            }
        };
        drop(files);
        match refused {
            None => {
                if let Some(entry) = self.files.lock().expect("registry lock").get_mut(live) {
                    entry.candidate_error = None;
                }
            }
            Some(error) => self.candidate_failed(live, key, error),
        }
    }

    /// A candidate cannot run in shadow: stop any shadow and say why.
    fn candidate_failed(&self, live: &Path, key: String, error: String) {
        let mut files = self.files.lock().expect("registry lock");
        let Some(entry) = files.get_mut(live) else {
            return;
        };
        if entry
            .candidate_error
            .as_ref()
            .is_some_and(|(k, _)| *k == key)
        {
            return;
        }
        if let Some(serving) = &entry.serving {
            tracing::error!(plugin = %serving.name, file = %live.display(), %error, "candidate refused; no shadow");
            serving.controller.set_shadow(None);
        }
        entry.candidate_error = Some((key, error));
    }

    /// The candidate version of `plugin`: `<stem>.next.wasm` beside the
    /// file it serves from (settings `<stem>.next.yaml`), compiled and
    /// admitted as a load would be, serving nothing. For previews of an
    /// upgrade before it ships.
    pub async fn candidate(&self, plugin: &str) -> Result<Plugin, String> {
        let live = {
            let files = self.files.lock().expect("registry lock");
            files
                .iter()
                .find(|(_, e)| e.serving.as_ref().is_some_and(|s| s.name == plugin))
                .map(|(path, _)| path.clone())
        }
        .ok_or_else(|| format!("plugin {plugin} is not loaded"))?;
        // Only beside the live file: a candidate elsewhere is no version
        // of this plugin (see `sync_candidates`).
        let next = live.with_file_name(format!("{plugin}.next.wasm"));
        if !next.is_file() {
            return Err(format!(
                "no candidate: {} does not exist",
                self.layout.root.rel(&next).display()
            ));
        }
        let candidate = self
            .layout
            .read(&next, &Place::Candidate(plugin.to_string()))?;
        let (loaded, _) = self.admit(&next, candidate).await.map_err(|f| f.error)?;
        if loaded.name() != plugin {
            return Err(format!(
                "{} is plugin {}, not {plugin}",
                next.display(),
                loaded.name()
            ));
        }
        Ok(loaded)
    }

    /// The running controller of `plugin`, for a dry run.
    pub fn preview_handle(&self, plugin: &str) -> Option<controller::PreviewHandle> {
        let files = self.files.lock().expect("registry lock");
        files
            .values()
            .filter_map(|e| e.serving.as_ref())
            .find(|s| s.name == plugin)
            .map(|s| s.controller.preview_handle())
    }

    /// Serving plugins whose caches have not listed once yet, leaving out
    /// those that cannot list at all (a missing CRD, RBAC): they are
    /// `degraded` and must not hold the host's readiness back.
    pub fn unsynced(&self) -> Vec<String> {
        let files = self.files.lock().expect("registry lock");
        files
            .values()
            .filter_map(|e| e.serving.as_ref())
            .filter(|s| {
                !s.controller.synced() && !s.controller.problem().is_some_and(|p| p.persistent)
            })
            .map(|s| s.name.clone())
            .collect()
    }

    /// Refresh each serving plugin's state in metrics (`plugin_info`): a
    /// plugin whose kinds cannot be watched turns `degraded` while it lasts.
    pub fn report_states(&self) {
        for status in self.status() {
            let (Some(name), Some(version), Some(digest)) =
                (&status.name, &status.version, &status.digest)
            else {
                continue;
            };
            let state = match status.state {
                State::Running => "running",
                State::Degraded => "degraded",
                State::RolledBack => "rolled-back",
                State::Failed => continue,
            };
            self.wiring
                .metrics
                .plugin_info(name, version, digest, state);
        }
    }

    /// Stop every controller for a host shutdown (see
    /// [`Controller::shutdown`]).
    pub async fn shutdown(&self, grace: Duration) {
        let controllers: Vec<Controller> = {
            let mut files = self.files.lock().expect("registry lock");
            files
                .values_mut()
                .filter_map(|e| e.serving.take())
                .map(|s| s.controller)
                .collect()
        };
        futures::future::join_all(controllers.into_iter().map(|c| c.shutdown(grace))).await;
    }

    /// Queue lengths per plugin, for metrics.
    pub fn queue_lengths(&self) -> HashMap<String, usize> {
        let files = self.files.lock().expect("registry lock");
        files
            .values()
            .filter_map(|e| e.serving.as_ref())
            .map(|s| (s.name.clone(), s.controller.queue_len()))
            .collect()
    }

    /// Watch the directory and sync on every change until the task ends.
    /// Events are debounced; a periodic rescan covers filesystems whose
    /// change notifications are unreliable (some network volumes). `fresh`:
    /// the last sync skipped a fresh file, so scan again after [`SETTLE`].
    pub async fn watch(self: Arc<Self>, rescan: Duration, fresh: bool) {
        use notify::Watcher as _;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let watcher = notify::recommended_watcher(move |_event: notify::Result<notify::Event>| {
            let _ = tx.send(());
        });
        // Recursive: a plugin may sit one directory down (an image volume).
        let dirs: Vec<&Path> = std::iter::once(self.dir.as_path())
            .chain(self.settings_dir.as_deref())
            .collect();
        let _watcher = match watcher {
            Ok(mut w) => {
                for dir in &dirs {
                    if let Err(error) = w.watch(dir, notify::RecursiveMode::Recursive) {
                        tracing::warn!(dir = %dir.display(), %error, "cannot watch directory; rescanning it periodically only");
                    }
                }
                Some(w)
            }
            Err(error) => {
                tracing::warn!(%error, "no file watcher; rescanning periodically only");
                None
            }
        };
        let mut again = fresh;
        loop {
            let wait = if again { SETTLE } else { rescan };
            tokio::select! {
                got = rx.recv() => {
                    if got.is_none() { return; }
                    // Debounce: wait for the burst of events to end.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    while rx.try_recv().is_ok() {}
                }
                _ = tokio::time::sleep(wait) => {}
            }
            match self.wiring.policy.refresh() {
                Ok(false) => {}
                Ok(true) => {
                    tracing::info!("policy changed; admitting every plugin again");
                    self.revalidate_all();
                }
                Err(error) => {
                    tracing::error!(error = %controller::format_chain(&error), "policy unreadable; the previous one stays in force")
                }
            }
            again = self.sync().await;
        }
    }

    /// The failure ring of `plugin`, if it serves.
    pub fn replays(&self, plugin: &str) -> Option<Arc<crate::replay::Ring>> {
        let files = self.files.lock().expect("registry lock");
        files
            .values()
            .filter_map(|e| e.serving.as_ref())
            .find(|s| s.name == plugin)
            .map(|s| s.controller.replays())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_row_keeps_shadow_counts_and_drops_what_holds_cluster_data() {
        let shadow = ShadowStatus {
            file: "/plugins/db.next.wasm".into(),
            version: "0.2.0".into(),
            digest: "ab".into(),
            since: "2026-11-30T00:00:00Z".into(),
            comparisons: 4,
            parents_compared: 2,
            parents_differing: 1,
            candidate_errors: 0,
            skipped: 0,
            examples: vec![serde_json::json!({"parent": "a/b", "differences": ["secret"]})],
        };
        let row = Status {
            file: "/plugins/db.wasm".into(),
            name: Some("db".into()),
            version: None,
            digest: None,
            state: State::RolledBack,
            loaded_at: None,
            last_error: Some("boom".into()),
            reason: Some("rolled back".into()),
            synced: true,
            leading: true,
            shadow: Some(shadow),
            candidate_error: Some("refused".into()),
            detail: None,
        };
        let summary = serde_json::to_value(row.summary()).unwrap();
        assert_eq!(summary["state"], "rolled-back");
        assert_eq!(summary["shadow"]["parentsDiffering"], 1);
        assert!(summary["shadow"].get("examples").is_none(), "{summary}");
        assert!(summary.get("candidateError").is_none(), "{summary}");
        assert!(summary.get("lastError").is_none(), "{summary}");
    }
}
