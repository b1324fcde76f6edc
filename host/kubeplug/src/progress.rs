//! Saying that a component is compiling: the one step of loading a plugin
//! that takes seconds (10-30 s for a Python or JavaScript guest, whose
//! interpreter is compiled with it), and the one a user should not sit
//! through in silence. Loads from the compile cache say nothing.

use std::io::{IsTerminal as _, Write};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use kubeplug_runtime::{CompileWatch, Runtime};

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

/// `runtime` (an offline command's, which shows a compile on a terminal)
/// with [`Plain`] lines on stderr when stderr is not a terminal, so that a
/// CI log says why the first `kubeplug test` of a Python plugin sits there
/// for seconds. `cached`: compiles are kept in the compile cache.
pub fn unattended(runtime: Runtime, cached: bool) -> Runtime {
    if std::io::stderr().is_terminal() {
        runtime
    } else {
        runtime.with_compile_watch(Arc::new(Plain::stderr(cached)))
    }
}

/// Offline commands when stderr is not a terminal (CI logs, scripts): a
/// plain line as a compile starts and one as it ends, nothing erased or
/// rewritten; nothing for a compile over within [`Terminal::GRACE`].
pub struct Plain {
    cached: bool,
    out: Arc<Mutex<dyn Write + Send>>,
}

impl Plain {
    /// Lines on this process's stderr.
    pub fn stderr(cached: bool) -> Self {
        Plain::to(cached, Arc::new(Mutex::new(std::io::stderr())))
    }

    /// Lines on `out`.
    pub fn to(cached: bool, out: Arc<Mutex<dyn Write + Send>>) -> Self {
        Plain { cached, out }
    }

    /// The line a compile starts with.
    pub fn starting(label: &str, bytes: usize, cached: bool) -> String {
        let mib = bytes as f64 / (1 << 20) as f64;
        let kept = if cached {
            "; cached for next time"
        } else {
            "; not cached: --no-cache"
        };
        format!("compiling {label} ({mib:.1} MiB{kept})...")
    }

    /// The line a compile ends with.
    pub fn finished(label: &str, took: Duration) -> String {
        format!("compiled {label} in {:.1} s", took.as_secs_f64())
    }
}

impl CompileWatch for Plain {
    fn compiling(&self, label: &str, bytes: usize) -> Box<dyn Send> {
        let (done, finished) = mpsc::channel::<()>();
        let (label, cached, out) = (label.to_string(), self.cached, self.out.clone());
        let started = Instant::now();
        let line = move |text: String| {
            let mut out = out.lock();
            let _ = writeln!(out, "{text}");
            let _ = out.flush();
        };
        let ticker = std::thread::spawn(move || {
            if finished.recv_timeout(Terminal::GRACE) != Err(RecvTimeoutError::Timeout) {
                return;
            }
            line(Plain::starting(&label, bytes, cached));
            // Until the compile ends (the sender is dropped).
            let _ = finished.recv();
            line(Plain::finished(&label, started.elapsed()));
        });
        Box::new(Ticking {
            done: Some(done),
            ticker: Some(ticker),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a [`Plain`] watch wrote.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().clone()).unwrap()
        }
    }

    #[test]
    fn a_long_compile_off_a_terminal_says_so_as_it_starts_and_ends() {
        let out = Shared::default();
        let watch = Plain::to(true, Arc::new(Mutex::new(out.clone())));
        let compiling = watch.compiling("dist/x.wasm", 19_084_083);
        std::thread::sleep(Terminal::GRACE + Duration::from_millis(300));
        assert_eq!(
            out.text(),
            "compiling dist/x.wasm (18.2 MiB; cached for next time)...\n",
            "the first line is out while it compiles"
        );
        drop(compiling);
        let text = out.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[1].starts_with("compiled dist/x.wasm in "), "{text}");
        assert!(lines[1].ends_with(" s"), "{text}");
        assert!(
            !text.contains('\r') && !text.contains('\x1b'),
            "plain lines: {text:?}"
        );
    }

    #[test]
    fn a_short_compile_says_nothing() {
        let out = Shared::default();
        let watch = Plain::to(false, Arc::new(Mutex::new(out.clone())));
        drop(watch.compiling("dist/small.wasm", 200_000));
        assert_eq!(out.text(), "");
    }

    #[test]
    fn the_lines_say_size_caching_and_time() {
        assert_eq!(
            Plain::starting("a.wasm", 3 << 20, false),
            "compiling a.wasm (3.0 MiB; not cached: --no-cache)..."
        );
        assert_eq!(
            Plain::finished("a.wasm", Duration::from_millis(11_840)),
            "compiled a.wasm in 11.8 s"
        );
    }
}
