//! The guest's `kubeplug:plugin/log` import, linked by hand so that only
//! what a call's log budget allows is ever copied out of guest memory.

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, WasmList, WasmStr};

use super::bindings::log;

/// Log calls a guest may make per call; the rest are dropped, so a chatty or
/// hostile plugin cannot flood the host's logs. Bytes are capped too
/// ([`Limits::log_bytes`]).
const LOG_BUDGET: u32 = 200;
/// What one call may still log, kept in its store.
pub(super) struct LogQuota {
    /// Log calls left ([`LOG_BUDGET`] at the start).
    calls: u32,
    /// Log bytes left ([`Limits::log_bytes`] at the start).
    bytes: usize,
}

impl LogQuota {
    /// A call's quota: [`LOG_BUDGET`] calls and `bytes` bytes.
    pub(super) fn new(bytes: usize) -> Self {
        LogQuota {
            calls: LOG_BUDGET,
            bytes,
        }
    }
}

/// What the log import needs of a store's data: whose lines they are, the
/// call's quota, and where the last error line goes. A trait rather than the
/// plugin's `State` so the import links into any store (the plugin's
/// implements it) and this module needs nothing of the plugin's.
pub(super) trait Logs: 'static {
    /// The plugin whose lines these are.
    fn plugin(&self) -> &str;
    fn log_quota(&mut self) -> &mut LogQuota;
    /// Keep the call's last error-level line.
    fn set_last_error(&mut self, message: String);
}

/// Longest log message or field value kept, in bytes.
const LOG_MESSAGE_MAX: usize = 4 << 10;
/// Fields of one log call kept; the rest are counted, never read.
const LOG_FIELDS_MAX: usize = 32;
/// What a field costs against [`Limits::log_bytes`] beyond its key and
/// value, so that empty fields are not free.
const LOG_FIELD_OVERHEAD: usize = 8;
/// `text` cut to at most `max` bytes, on a character boundary.
fn clipped(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

/// Link `kubeplug:plugin/log` by hand rather than through the generated
/// bindings: those copy every string and field out of the guest before the
/// host sees the call, so one call with millions of empty fields would cost
/// the host hundreds of MiB. Here the message and fields stay in guest
/// memory and only what the call's log budget allows is read.
pub(super) fn add_to_linker<T: Logs>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.instance("kubeplug:plugin/log@0.1.0")?.func_wrap(
        "log",
        |mut store: StoreContextMut<'_, T>,
         (level, message, fields): (log::Level, WasmStr, WasmList<(WasmStr, WasmStr)>)| {
            let line = read_log(&mut store, &message, &fields)?;
            if let Some((message, fields)) = line {
                emit_log(store.data().plugin(), level, &message, &fields);
                if matches!(level, log::Level::Error) {
                    store.data_mut().set_last_error(message);
                }
            }
            Ok(())
        },
    )
}

/// The part of one log call the budget allows, copied out of the guest;
/// `None` once the budget is spent.
fn read_log<T: Logs>(
    store: &mut StoreContextMut<'_, T>,
    message: &WasmStr,
    fields: &WasmList<(WasmStr, WasmStr)>,
) -> wasmtime::Result<Option<(String, String)>> {
    let quota = store.data_mut().log_quota();
    let (budget, mut bytes) = (quota.calls, quota.bytes);
    if budget == 0 || bytes == 0 {
        return Ok(None);
    }
    let message = clipped(&message.to_str(&*store)?, LOG_MESSAGE_MAX.min(bytes)).to_string();
    bytes -= message.len();
    let mut shown = Vec::new();
    let mut read = 0;
    let kept = fields
        .iter(&mut *store)?
        .take(LOG_FIELDS_MAX)
        .collect::<wasmtime::Result<Vec<_>>>()?;
    for (k, v) in kept {
        let cost = LOG_FIELD_OVERHEAD.min(bytes);
        bytes -= cost;
        if bytes == 0 {
            break;
        }
        read += 1;
        let k = k.to_str(&*store)?;
        let k = clipped(&k, bytes).to_string();
        bytes -= k.len();
        let v = v.to_str(&*store)?;
        let v = clipped(&v, LOG_MESSAGE_MAX.min(bytes)).to_string();
        bytes -= v.len();
        shown.push(format!("{k}={v}"));
    }
    if read < fields.len() {
        shown.push(format!("({} more fields dropped)", fields.len() - read));
    }
    if bytes == 0 {
        shown.push("(log quota of this call reached; the rest is dropped)".into());
    }
    let quota = store.data_mut().log_quota();
    quota.calls -= 1;
    quota.bytes = bytes;
    Ok(Some((message, shown.join(" "))))
}

fn emit_log(plugin: &str, level: log::Level, message: &str, fields: &str) {
    match level {
        log::Level::Trace => tracing::trace!(target: "plugin", plugin, fields, "{message}"),
        log::Level::Debug => tracing::debug!(target: "plugin", plugin, fields, "{message}"),
        log::Level::Info => tracing::info!(target: "plugin", plugin, fields, "{message}"),
        log::Level::Warn => tracing::warn!(target: "plugin", plugin, fields, "{message}"),
        log::Level::Error => tracing::error!(target: "plugin", plugin, fields, "{message}"),
    }
}
