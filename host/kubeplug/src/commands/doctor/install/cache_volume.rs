//! The pod's compile cache as installed: the volume under `--cache-dir`
//! and its `sizeLimit` against `--compile-cache-bytes` (the local-files
//! check is [`super::super::cache`]).

use super::{Backing, Host};
use kubeplug_doctor::report::Check;

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
        Some(other) => Check::warn(CHECK, format!("{on} (a {} volume): {fix}", other.kind())),
        None => Check::fail(
            CHECK,
            format!("{on}, but the pod has no volume {}: {fix}", mount.volume),
        ),
    }
}
