//! Saying that a component is compiling: the one step of loading a plugin
//! that takes seconds (10-30 s for a Python or JavaScript guest, whose
//! interpreter is compiled with it), and the one a user should not sit
//! through in silence. Loads from the compile cache say nothing.

use std::io::{IsTerminal as _, Write as _};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use kubeplug_runtime::CompileWatch;

/// `run`: a log line as a compile starts and one as it ends.
pub struct LogLines;

impl CompileWatch for LogLines {
    fn compiling(&self, label: &str, bytes: usize) -> Box<dyn Send> {
        tracing::info!(
            plugin = label,
            bytes,
            "compiling a component (not in the compile cache; a Python or JavaScript guest takes 10-30 s)"
        );
        Box::new(Compiled {
            label: label.to_string(),
            started: Instant::now(),
        })
    }
}

struct Compiled {
    label: String,
    started: Instant,
}

impl Drop for Compiled {
    fn drop(&mut self) {
        tracing::info!(
            plugin = self.label,
            seconds = self.started.elapsed().as_secs_f64(),
            "compiled"
        );
    }
}

/// Offline commands on a terminal: a line counting the seconds, erased
/// when the compile ends. Nothing when stderr is not a terminal (scripts,
/// CI logs), nothing for a compile over within [`Terminal::GRACE`].
pub struct Terminal;

impl Terminal {
    /// A compile shorter than this (a small Rust guest) shows nothing.
    const GRACE: Duration = Duration::from_millis(700);
    const TICK: Duration = Duration::from_millis(250);

    /// The watch for this process's stderr, if it is a terminal.
    pub fn if_attended() -> Option<Terminal> {
        std::io::stderr().is_terminal().then_some(Terminal)
    }
}

impl CompileWatch for Terminal {
    fn compiling(&self, label: &str, bytes: usize) -> Box<dyn Send> {
        let (done, finished) = mpsc::channel::<()>();
        let label = label.to_string();
        let started = Instant::now();
        let ticker = std::thread::spawn(move || {
            if finished.recv_timeout(Terminal::GRACE) != Err(RecvTimeoutError::Timeout) {
                return;
            }
            let mib = bytes as f64 / (1 << 20) as f64;
            let mut stderr = std::io::stderr();
            loop {
                let _ = write!(
                    stderr,
                    "\r\x1b[2Kcompiling {label} ({mib:.1} MiB) {}s ...",
                    started.elapsed().as_secs()
                );
                let _ = stderr.flush();
                if finished.recv_timeout(Terminal::TICK) != Err(RecvTimeoutError::Timeout) {
                    break;
                }
            }
            let _ = write!(stderr, "\r\x1b[2K");
            let _ = stderr.flush();
        });
        Box::new(Ticking {
            done: Some(done),
            ticker: Some(ticker),
        })
    }
}

struct Ticking {
    done: Option<mpsc::Sender<()>>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Ticking {
    /// Stop the line and wait until it is erased, so that the command's
    /// own output never lands behind it.
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}
