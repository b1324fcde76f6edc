//! The `kubeplug` binary: see [`crate::cli`].

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    kubeplug::cli::main()
}
