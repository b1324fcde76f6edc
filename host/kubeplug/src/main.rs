//! The `kubeplug` binary: see [`crate::cli`].

#![forbid(unsafe_code)]

/// The static (musl) build's allocator: musl's own serializes every thread
/// on one lock, which a host of many workers and plugin calls feels.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    kubeplug::cli::main()
}
