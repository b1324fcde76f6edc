//! Watching the plugin directory (and the settings directory): a sync on
//! every change, debounced, a periodic rescan, and the policy re-read.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{Registry, SETTLE};

impl Registry {
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
                    tracing::error!(error = %kubeplug_kube::report::format_chain(&error), "policy unreadable; the previous one stays in force")
                }
            }
            again = self.sync().await;
        }
    }
}
