//! The process metrics every Prometheus client library exports (Go's
//! process collector, Python's `ProcessCollector`), under their names, read
//! from `/proc` at each scrape:
//!
//! | family | from |
//! |---|---|
//! | `process_cpu_seconds_total` | `/proc/self/stat`: user + system time |
//! | `process_resident_memory_bytes` | `/proc/self/status`: `VmRSS` |
//! | `process_virtual_memory_bytes` | `/proc/self/stat`: `vsize` |
//! | `process_open_fds` | the entries of `/proc/self/fd` |
//! | `process_max_fds` | `/proc/self/limits`: the soft limit of open files |
//! | `process_start_time_seconds` | `/proc/self/stat`'s start time after `/proc/stat`'s `btime` |
//!
//! Linux only: a family whose source cannot be read (another OS, no `/proc`)
//! is left out of the scrape rather than reported as 0. The resident size
//! is `VmRSS` (the same counters as `stat`'s `rss`, in KiB), so no page size
//! is needed, nor `libc`.

use std::fmt;
use std::path::PathBuf;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second of `/proc`'s times: `USER_HZ`, 100 on every
/// Linux architecture's ABI (the Prometheus Go client's `procfs` fixes it
/// at 100 too).
const USER_HZ: f64 = 100.0;

/// The process metrics of the process reading them (see the module doc).
#[derive(Debug)]
pub struct ProcessCollector {
    /// Where procfs is mounted: `/proc`, or a fixture's directory.
    proc: PathBuf,
}

impl ProcessCollector {
    pub fn new() -> Self {
        Self::at("/proc")
    }

    /// Read `<proc>/self/...` and `<proc>/stat` instead of `/proc`'s.
    fn at(proc: impl Into<PathBuf>) -> Self {
        ProcessCollector { proc: proc.into() }
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.proc.join(path)).ok()
    }

    /// What `/proc` says now; `None` where it cannot be read.
    fn sample(&self) -> Sample {
        let stat = self.read("self/stat").as_deref().and_then(parse_stat);
        let boot = self.read("stat").as_deref().and_then(parse_boot_time);
        Sample {
            cpu_seconds: stat.map(|s| (s.utime + s.stime) as f64 / USER_HZ),
            resident_bytes: self
                .read("self/status")
                .as_deref()
                .and_then(parse_resident_bytes),
            virtual_bytes: stat.map(|s| s.vsize),
            open_fds: std::fs::read_dir(self.proc.join("self/fd"))
                .ok()
                .map(|dir| dir.count() as u64),
            max_fds: self
                .read("self/limits")
                .as_deref()
                .and_then(parse_max_open_files),
            start_time_seconds: stat
                .zip(boot)
                .map(|(s, boot)| boot as f64 + s.starttime as f64 / USER_HZ),
        }
    }
}

impl Default for ProcessCollector {
    fn default() -> Self {
        Self::new()
    }
}

/// One scrape's values.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Sample {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    virtual_bytes: Option<u64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
    start_time_seconds: Option<f64>,
}

/// The fields of `/proc/<pid>/stat` read here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// User time, in [`USER_HZ`] ticks.
    utime: u64,
    /// System time, in ticks.
    stime: u64,
    /// When the process started, in ticks after boot.
    starttime: u64,
    /// Virtual memory size, bytes.
    vsize: u64,
}

/// `/proc/<pid>/stat`: fields 14, 15, 22 and 23 (proc(5)), counted after
/// the command name, which is in parentheses and may hold spaces and
/// parentheses itself.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    // `rest` starts at field 3 (state).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
        vsize: field(23)?,
    })
}

/// `VmRSS:   1234 kB` of `/proc/<pid>/status`, in bytes.
fn parse_resident_bytes(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// `btime <seconds>` of `/proc/stat`: when the machine booted, in Unix time.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits`; `None` when
/// unlimited.
fn parse_max_open_files(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The descriptor and value of one family, if its value could be read.
fn encode_one<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: Option<M>,
) -> fmt::Result {
    let Some(metric) = metric else {
        return Ok(());
    };
    let metric_encoder = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(metric_encoder)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let s = self.sample();
        // The Prometheus Go client's names and help texts. A counter's
        // `_total` is added by the encoder.
        encode_one(
            &mut encoder,
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            s.cpu_seconds.map(ConstCounter::new),
        )?;
        encode_one(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            s.resident_bytes.map(ConstGauge::new),
        )?;
        encode_one(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            s.virtual_bytes.map(ConstGauge::new),
        )?;
        encode_one(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors.",
            s.open_fds.map(ConstGauge::new),
        )?;
        encode_one(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            s.max_fds.map(ConstGauge::new),
        )?;
        encode_one(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            s.start_time_seconds.map(ConstGauge::new),
        )
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;

    use super::*;

    /// A `stat` line whose command name holds a space and parentheses.
    const STAT: &str = "4242 (kube plug (x)) S 1 4242 4242 0 -1 4194560 2000 0 0 0 \
        250 125 0 0 20 0 9 0 360000 123456789 5000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

    const STATUS: &str = "Name:\tkubeplug\nVmPeak:\t  200000 kB\nVmSize:\t  120560 kB\nVmRSS:\t   20480 kB\nThreads:\t9\n";

    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units     \n\
        Max cpu time              unlimited            unlimited            seconds   \n\
        Max open files            1024                 524288               files     \n";

    const PROC_STAT: &str = "cpu  1 2 3 4\nintr 1 2\nbtime 1700000000\nprocesses 99\n";

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        assert_eq!(
            parse_stat(STAT),
            Some(Stat {
                utime: 250,
                stime: 125,
                starttime: 360000,
                vsize: 123456789,
            })
        );
        assert_eq!(parse_stat("4242 (truncated) S 1 2"), None);
    }

    #[test]
    fn status_limits_and_boot_time_are_read() {
        assert_eq!(parse_resident_bytes(STATUS), Some(20480 * 1024));
        assert_eq!(parse_resident_bytes("Name:\tkthreadd\n"), None, "no memory");
        assert_eq!(parse_max_open_files(LIMITS), Some(1024));
        assert_eq!(
            parse_max_open_files(&LIMITS.replace("1024 ", "unlimited ")),
            None
        );
        assert_eq!(parse_boot_time(PROC_STAT), Some(1_700_000_000));
    }

    /// A procfs in a directory: `self/{stat,status,limits,fd/}` and `stat`.
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("self");
        std::fs::create_dir_all(own.join("fd")).unwrap();
        for fd in ["0", "1", "2"] {
            std::fs::write(own.join("fd").join(fd), "").unwrap();
        }
        std::fs::write(own.join("stat"), STAT).unwrap();
        std::fs::write(own.join("status"), STATUS).unwrap();
        std::fs::write(own.join("limits"), LIMITS).unwrap();
        std::fs::write(dir.path().join("stat"), PROC_STAT).unwrap();
        dir
    }

    #[test]
    fn a_scrape_reports_every_family_as_the_client_libraries_name_it() {
        let proc = fixture();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector::at(proc.path())));
        let text = crate::admin::encode(&[registry]);
        for line in [
            "# TYPE process_cpu_seconds counter",
            "process_cpu_seconds_total 3.75",
            "process_resident_memory_bytes 20971520",
            "process_virtual_memory_bytes 123456789",
            "process_open_fds 3",
            "process_max_fds 1024",
            "process_start_time_seconds 1700003600.0",
            "# HELP process_open_fds Number of open file descriptors.",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }

    #[test]
    fn what_cannot_be_read_is_left_out() {
        let proc = tempfile::tempdir().unwrap();
        let collector = ProcessCollector::at(proc.path());
        assert_eq!(collector.sample(), Sample::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(collector));
        assert_eq!(crate::admin::encode(&[registry]), "# EOF\n");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_read_from_proc() {
        let s = ProcessCollector::new().sample();
        assert!(s.resident_bytes.is_some_and(|b| b > 0), "{s:?}");
        assert!(s.virtual_bytes >= s.resident_bytes, "{s:?}");
        assert!(s.open_fds.is_some_and(|n| n >= 3), "{s:?}");
        assert!(s.max_fds >= s.open_fds, "{s:?}");
        assert!(s.cpu_seconds.is_some(), "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = s.start_time_seconds.unwrap();
        // Boot time is whole seconds; the start, ticks after it.
        assert!(started <= now + 1.0 && started > now - 3600.0, "{s:?}");
    }
}
