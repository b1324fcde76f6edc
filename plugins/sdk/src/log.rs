//! Structured logging through the host (the plugin's only import).

use crate::bindings::kubeplug::plugin::log::{Level, log};

fn emit(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    log(level, message, &fields);
}

/// Log at debug level.
pub fn debug(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Debug, message, fields)
}

/// Log at info level.
pub fn info(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Info, message, fields)
}

/// Log at warn level.
pub fn warn(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Warn, message, fields)
}

/// Log at error level. The host adds a call's last error line to the
/// report when the call traps (where a panic's message goes without WASI).
pub fn error(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Error, message, fields)
}
