//! The `kubeplug` binary: see [`kubeplug::cli`].

fn main() -> std::process::ExitCode {
    kubeplug::cli::main()
}
