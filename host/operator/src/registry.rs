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
//! - every plugin is admitted by the platform's [`kubeplug_core::policy::Policy`]
//!   through the one admission ([`kubeplug_core::admission`]): its manifest is
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
//! `limits` (see [`kubeplug_runtime::Limits`]). A change to that file reloads the plugin too.
//!
//! One job per file: [`scan`] (the directory against what is loaded),
//! [`admission`] (compile, discover, admit), [`serving`] (start, upgrade,
//! refuse, revalidate), [`status`] (the rows of `/plugins`, states in
//! metrics), [`candidates`] (shadows and previews of `<name>.next.wasm`),
//! [`promotion`] (the gate) and [`promoted`] (its record in the cluster),
//! [`watch`] (file events and rescans), [`placement`] (where a file may
//! serve from, and reading it), [`survey()`] (the directory as a scan would
//! read it, for `kubeplug doctor`), [`artifacts`] (what the host's puller
//! verified on the files it wrote).
//!
//! Assumptions: files are written in place or swapped in (ConfigMap `..data`
//! symlinks, renames). Half-written files are caught by waiting until a file's
//! modification time is [`SETTLE`] old; a file that still fails is retried
//! when its content changes.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashSet;
use parking_lot::{Mutex, MutexGuard};
use serde::Deserialize;

use crate::controller::{Controller, Settings};
use crate::metrics::OperatorMetrics;
use kubeplug_core::policy::PolicyFiles;
use kubeplug_core::rollback::RollbackSettings;
use kubeplug_kube::identity::Access;
use kubeplug_kube::informers::Informers;
use kubeplug_runtime::{LimitSettings, Runtime};

mod admission;
mod artifacts;
mod candidates;
mod placement;
mod promoted;
mod promotion;
mod scan;
mod serving;
mod status;
mod survey;
mod watch;

pub use artifacts::Provenance;
pub use placement::MAX_PLUGIN_BYTES;
use placement::{Layout, Root};
pub use promoted::{Promoted, RECORD_NAME, Record, RecordError};
pub use promotion::Promotion;
pub use status::{PluginDetail, Status};
pub use survey::{Surveyed, survey};

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
    /// The latest file, kept out of service by the promotion gate.
    promotion: Option<promotion::Promotion>,
    /// What this process last recorded in the cluster as promoted for the
    /// plugin serving here (see [`promoted`]).
    recorded: Option<Promoted>,
    /// Why the serving version could not be recorded as promoted.
    unrecorded: Option<String>,
    /// The plugin whose artifact's latest pull failed, and why (see
    /// [`artifacts`]).
    source_error: Option<(String, String)>,
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
    pub client_settings: kubeplug_kube::client::ClientSettings,
    pub access: Arc<Access>,
    /// The platform's policy, re-read on every rescan.
    pub policy: Arc<PolicyFiles>,
    pub metrics: OperatorMetrics,
    /// Each plugin's writes and reads, counted by its writer.
    pub apply_metrics: kubeplug_kube::apply::metrics::ApplyMetrics,
    pub settings: Settings,
    /// `--namespaces`: the only namespaces any plugin is served in.
    pub namespaces: Option<Vec<String>>,
    /// `--max-plugin-bytes`: larger plugin files are refused unread.
    pub max_plugin_bytes: u64,
    /// Where the versions promoted under a gate are remembered.
    pub promotions: Record,
    /// What the artifact puller verified on the files it wrote.
    pub provenance: Arc<Provenance>,
}

/// The host's plugins and their controllers.
pub struct Registry {
    dir: PathBuf,
    /// Where files are found, and how they are read.
    layout: Layout,
    /// Where settings files live, if not beside each `.wasm`.
    settings_dir: Option<PathBuf>,
    wiring: Wiring,
    /// Every file and what it serves, behind one lock rather than in a
    /// concurrent map: a load's conflict check (no two plugins for one name
    /// or parent kind) reads every entry and then inserts one, a candidate
    /// pairs two entries, and `/plugins` lists them in path order; each must
    /// see one consistent table (see [`Registry::files`]).
    files: Mutex<BTreeMap<PathBuf, FileEntry>>,
    /// Files being loaded now: added by the scan, removed by each load's
    /// own task, read alone.
    loading: DashSet<PathBuf>,
    /// Held while the promotion record is brought in line (one pass at a
    /// time: see [`promoted`]).
    recording: tokio::sync::Mutex<()>,
}

fn now_rfc3339() -> String {
    format!("{:.0}", jiff::Timestamp::now())
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
            loading: DashSet::new(),
            recording: tokio::sync::Mutex::new(()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file table, locked.
    fn files(&self) -> MutexGuard<'_, BTreeMap<PathBuf, FileEntry>> {
        self.files.lock()
    }

    /// Wait until no load is running, at most `limit`.
    pub async fn loaded(&self, limit: Duration) {
        let started = std::time::Instant::now();
        while !self.loading.is_empty() && started.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The serving face of `plugin`'s running controller, for a dry run or
    /// a webhook (see [`crate::serving`]).
    pub fn serving(&self, plugin: &str) -> Option<crate::serving::Serving> {
        let files = self.files();
        files
            .values()
            .filter_map(|e| e.serving.as_ref())
            .find(|s| s.name == plugin)
            .map(|s| s.controller.serving())
    }

    /// Stop every controller for a host shutdown (see
    /// [`Controller::shutdown`]).
    pub async fn shutdown(&self, grace: Duration) {
        let controllers: Vec<Controller> = {
            let mut files = self.files();
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
        let files = self.files();
        files
            .values()
            .filter_map(|e| e.serving.as_ref())
            .map(|s| (s.name.clone(), s.controller.queue_len()))
            .collect()
    }

    /// The failure ring of `plugin`, if it serves.
    pub fn replays(&self, plugin: &str) -> Option<Arc<crate::replay::Ring>> {
        let files = self.files();
        files
            .values()
            .filter_map(|e| e.serving.as_ref())
            .find(|s| s.name == plugin)
            .map(|s| s.controller.replays())
    }
}
