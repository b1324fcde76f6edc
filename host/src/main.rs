//! The `kubeplug` binary: see [`kubeplug::cli`].

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    kubeplug::cli::main()
}
