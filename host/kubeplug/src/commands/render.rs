//! `kubeplug render`: a plugin's answer to a parent read from files, or to a
//! captured call (`--request`), printed as the operator would apply it; or
//! its webhooks' answers to a write (`--admission`) or a conversion
//! (`--convert-to`) of objects read from files.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::offline::{print, read_config, read_crds};
use crate::args::RenderArgs;
use kubeplug_core::policy::{Effective, Policy};
use kubeplug_kit::kit;
use kubeplug_kit::render;
use kubeplug_kit::webhook::admit;
use kubeplug_operator::replay::{Call, Capture};
use kubeplug_runtime::{LimitSettings, Plugin};

/// The offline runtime; off a terminal (CI), a compile is said in plain
/// lines on stderr.
fn unattended_runtime(args: &RenderArgs) -> anyhow::Result<kubeplug_runtime::Runtime> {
    let runtime = &args.common.runtime;
    Ok(crate::progress::unattended(
        runtime.bounded_runtime()?,
        !runtime.no_cache,
    ))
}

/// `kubeplug render`: run a plugin on a parent read from files and print
/// what the operator would apply.
pub fn run(args: RenderArgs) -> anyhow::Result<()> {
    let policy = args.policy.load()?;
    let crds = read_crds(&args.crd)?;
    if let Some(file) = &args.request {
        return replay_cmd(&args, file, &policy, &crds);
    }
    let config = args.common.config.as_deref().map(read_config).transpose()?;
    let limits = args.common.runtime.limits();
    let runtime = unattended_runtime(&args)?;
    let plugin = kit::load::compile(&runtime, &args.plugin, config, limits, &policy)?;
    let kit::load::Loaded {
        plugin,
        grant,
        notes,
        ..
    } = admit(&args, &plugin, &policy, &crds, limits)?;
    if let Some(operation) = args.admission.as_deref() {
        return admission(&args, operation, &plugin, &grant, notes);
    }
    if let Some(api_version) = args.convert_to.as_deref() {
        return conversion(&args, api_version, &plugin, &grant, notes);
    }
    let parent = args
        .parent
        .as_deref()
        .expect("clap requires -f without --request or --old");
    let mut parents = render::read_objects(parent)?;
    if parents.len() != 1 {
        return Err(render::RenderError::ParentCount {
            path: parent.display().to_string(),
            count: parents.len(),
        }
        .into());
    }
    let read_all = |paths: &[PathBuf]| -> anyhow::Result<Vec<serde_json::Value>> {
        let mut all = Vec::new();
        for p in paths {
            all.extend(render::read_objects(p)?);
        }
        Ok(all)
    };
    let mut rendered = render::render(
        &plugin,
        &grant,
        parents.remove(0),
        read_all(&args.observed)?,
        read_all(&args.related)?,
    )?;
    rendered.notes.splice(0..0, notes);
    print(&rendered, args.common.output)
}

/// Admit `plugin` as the live host would. Without `--policy` (and without
/// `--strict`) a plugin the default grant refuses is rendered under the
/// grant it asks for, each refusal printed as a warning on stderr: the
/// answer is what a platform would see once it grants the plugin.
fn admit(
    args: &RenderArgs,
    plugin: &Plugin,
    policy: &Policy,
    crds: &[Value],
    limits: LimitSettings,
) -> anyhow::Result<kit::load::Loaded> {
    let loaded = if args.policy.files.is_empty() && !args.strict {
        kit::load::admit_as_asked(plugin, policy, crds, limits)?
    } else {
        kit::load::admit(plugin, policy, crds, limits)?
    };
    for warning in &loaded.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(loaded)
}

/// The one object of `path`.
fn one_object(path: &Path) -> anyhow::Result<Value> {
    let mut objects = render::read_objects(path)?;
    if objects.len() != 1 {
        bail!(
            "{}: expected exactly one object, found {}",
            path.display(),
            objects.len()
        );
    }
    Ok(objects.remove(0))
}

/// `render --admission`: the write of `-f` (after `--old`) through the
/// plugin's `mutate` and `validate`, as the live host would answer them.
fn admission(
    args: &RenderArgs,
    operation: &str,
    plugin: &Plugin,
    grant: &Effective,
    notes: Vec<String>,
) -> anyhow::Result<()> {
    let operation = admit::operation(operation).expect("clap checks the operation");
    let given = args.parent.as_deref().map(one_object).transpose()?;
    let old = args.old.as_deref().map(one_object).transpose()?;
    let (carries_object, carries_old) = admit::carries(operation);
    let name = admit::operation_name(operation);
    let (object, old_object) = if carries_object {
        let object = given.with_context(|| format!("--admission {name} needs -f OBJECT"))?;
        match (carries_old, &old) {
            (true, None) => {
                bail!("--admission {name} needs --old FILE: the stored object before the write")
            }
            (false, Some(_)) => {
                bail!("--admission {name} takes no --old: nothing is stored before a create")
            }
            _ => (Some(object), old),
        }
    } else {
        // A delete carries only the stored object: -f or --old names it.
        if given.is_some() && old.is_some() {
            bail!("--admission {name} takes the object deleted once, as -f or --old");
        }
        (None, given.or(old))
    };
    let mut rendered = render::review::admission(plugin, grant, operation, object, old_object)?;
    rendered.notes.splice(0..0, notes);
    print(&rendered, args.common.output)
}

/// `render --convert-to`: the objects of `-f` through the plugin's
/// `convert`, and back.
fn conversion(
    args: &RenderArgs,
    api_version: &str,
    plugin: &Plugin,
    grant: &Effective,
    notes: Vec<String>,
) -> anyhow::Result<()> {
    let path = args
        .parent
        .as_deref()
        .expect("clap requires -f with --convert-to");
    let objects = render::read_objects(path)?;
    if objects.is_empty() {
        bail!("{}: no objects to convert", path.display());
    }
    let mut rendered = render::review::conversion(plugin, grant, objects, api_version)?;
    rendered.notes.splice(0..0, notes);
    print(&rendered, args.common.output)
}

/// Read a capture file (`kind: Replay`, YAML or JSON).
fn read_capture(path: &Path) -> anyhow::Result<Capture> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let capture: Capture = kubeplug_core::yaml::from_str(&text)
        .with_context(|| format!("{} is not a replay capture", path.display()))?;
    capture
        .check_kind()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(capture)
}

/// `render --request`: the captured call again, through the same path as
/// `render`. A failure prints as the host logged it (the capture's `error`).
fn replay_cmd(
    args: &RenderArgs,
    file: &Path,
    policy: &Policy,
    crds: &[serde_json::Value],
) -> anyhow::Result<()> {
    let capture = read_capture(file)?;
    let config = match &args.common.config {
        Some(path) => read_config(path)?,
        None => capture.config.clone(),
    };
    let limits = args.common.runtime.limits_over(LimitSettings {
        timeout_ms: Some(u64::try_from(capture.limits.timeout.as_millis()).unwrap_or(u64::MAX)),
        memory_bytes: Some(capture.limits.memory_bytes),
    });
    let runtime = unattended_runtime(args)?;
    let plugin = kit::load::compile(&runtime, &args.plugin, Some(config), limits, policy)?;
    let kit::load::Loaded {
        plugin,
        grant,
        mut notes,
        ..
    } = admit(args, &plugin, policy, crds, limits)?;
    if plugin.name() != capture.plugin {
        notes.push(format!(
            "the capture is of plugin {}, this is plugin {}",
            capture.plugin,
            plugin.name()
        ));
    }
    if plugin.digest() != capture.digest {
        notes.push(format!(
            "the failure happened on {}@{} (digest {}); this is {}@{} (digest {})",
            capture.plugin,
            capture.version,
            capture.digest,
            plugin.name(),
            plugin.manifest().version,
            plugin.digest()
        ));
    }
    let request = capture
        .request()
        .with_context(|| format!("{} cannot be replayed", file.display()))?;
    // On failure the notes go to stderr before the error, whose line stays
    // exactly the capture's.
    let failed = |error: render::RenderError, notes: &[String]| {
        for note in notes {
            eprintln!("note: {note}");
        }
        anyhow::Error::from(error)
    };
    match capture.call {
        Call::Reconcile => {
            let mut rendered =
                render::render_request(&plugin, &grant, &request).map_err(|e| failed(e, &notes))?;
            rendered.notes = notes;
            print(&rendered, args.common.output)
        }
        Call::Finalize => {
            let mut finalized = render::finalize_request(&plugin, &grant, &request)
                .map_err(|e| failed(e, &notes))?;
            finalized.notes = notes;
            print(&finalized, args.common.output)
        }
    }
}
