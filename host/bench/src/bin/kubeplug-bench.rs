//! `kubeplug-bench [DIR]`: what loading and calling each plugin in `DIR`
//! (default `target/plugins`) costs, printed as a table. Run by `make bench`;
//! the figures and how to read them are in `docs/benchmarks/runtime.md`.
//!
//! One file of ~910 lines on purpose: a benchmark reads best as one flow,
//! top to bottom, measurement by measurement, as its table prints them.
//!
//! For every `*.wasm` in `DIR`:
//! - compile: in-memory compilation, no cache (median of `--compiles` runs);
//! - cold load: `Runtime::load` with an empty cache dir: compile, write the
//!   artefact, link, call `manifest()`;
//! - cached load: `Runtime::load` from the artefact (median of 20);
//! - reconcile p50/p99/mean over `--calls` calls with a realistic request
//!   (fresh instance and Store per call, as the operator does), with
//!   instances mapped on demand (offline commands) and from the pooling
//!   allocator (`kubeplug run`'s default), p50 of each;
//! - host memory of a plugin: VmRSS growth from loading it (from the cache)
//!   and calling it once, i.e. what one more distinct plugin costs the host;
//! - memory per extra copy: VmRSS growth per further load of the same bytes
//!   with other settings (`--copies` of them), which share the compiled code
//!   (a settings change, a shadow candidate).
//!
//! The language column says what built the component (componentize-py,
//! componentize-js or Rust), read from its producer strings.
//!
//! The peer figures put the reconcile latency in proportion within the same
//! run: `database` called natively (the plugin crate is also an rlib), and a
//! serde_json parse + print of the same request as the floor any
//! JSON-in/JSON-out design pays.

#![forbid(unsafe_code)]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use kubeplug_core::plan;
use kubeplug_runtime::{Allocation, Origin, Plugin, PluginOptions, Request, Runtime};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(about = "Benchmark loading and calling kubeplug plugins")]
struct Args {
    /// Directory holding the plugin components (`*.wasm`).
    #[arg(default_value = "target/plugins")]
    dir: PathBuf,
    /// Reconcile calls timed per plugin.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Copies of each plugin loaded to measure memory per plugin.
    #[arg(long, default_value_t = 20)]
    copies: usize,
    /// Compilations (and cold loads) timed per plugin; the median is shown.
    #[arg(long, default_value_t = 3)]
    compiles: usize,
    /// Instead of the table: p50 of each stage of a pooled call (slot,
    /// budget, Store, instantiate, export, call, Store drop) for
    /// pod-annotator, database, myapp-py and myapp-ts, from `DIR` and
    /// `DIR/../test-plugins`. Needs `--features breakdown`.
    #[arg(long)]
    breakdown: bool,
    /// With `--breakdown`: the pool tunings to time, comma-separated
    /// (`default`, `no-scan`, `keep-1m`, ...; see `tuning`).
    #[arg(long, default_value = "default")]
    tunings: String,
    /// With `--breakdown`: time only these of its plugins, comma-separated
    /// (for a profile of one guest under `perf record`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

/// Calls made before timing, so that lazily initialised state (page faults
/// in code, allocator arenas) does not count.
const WARMUP_CALLS: usize = 100;
/// Cached loads timed per plugin.
const CACHED_LOADS: usize = 20;
const NOW: &str = "2026-11-29T18:00:00Z";

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&args.dir)
        .with_context(|| {
            format!(
                "cannot read {}: run `make plugins` first",
                args.dir.display()
            )
        })?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.retain(|p| p.extension().is_some_and(|e| e == "wasm"));
    paths.sort();
    if paths.is_empty() {
        bail!(
            "no *.wasm in {}: run `make plugins` first",
            args.dir.display()
        );
    }

    let scratch = std::env::temp_dir().join(format!("kubeplug-bench-{}", std::process::id()));
    print_machine(&args);
    if args.breakdown {
        return breakdown(&args);
    }
    let mut rows = Vec::new();
    let mut peers = Vec::new();
    let mut fixed = Vec::new();
    for path in &paths {
        let result = bench_plugin(path, &args, &scratch);
        let _ = std::fs::remove_dir_all(&scratch);
        let bench = result.with_context(|| format!("benchmarking {}", path.display()))?;
        rows.push(bench.row);
        peers.extend(bench.peer);
        fixed.extend(bench.fixed);
    }
    print_table(&rows);
    for peer in &peers {
        peer.print();
    }
    for f in &fixed {
        println!();
        println!(
            "fixed cost of a call ({}): p50 {} / p99 {} (CPU {} per call) on demand, \
             p50 {} / p99 {} (CPU {} per call) pooled",
            f.what,
            fmt_duration(f.latency.p50),
            fmt_duration(f.latency.p99),
            fmt_duration(f.latency.cpu),
            fmt_duration(f.pooled.p50),
            fmt_duration(f.pooled.p99),
            fmt_duration(f.pooled.cpu)
        );
    }
    Ok(())
}

struct Row {
    name: String,
    language: &'static str,
    wasm_bytes: usize,
    artefact_bytes: u64,
    compile: Duration,
    cold_load: Duration,
    cached_load: Duration,
    latency: Option<Latency>,
    /// The same calls on a runtime with the instance pool.
    pooled: Option<Latency>,
    rss_first: Option<i64>,
    rss_per_copy: Option<i64>,
    /// VmRSS growth from a pooled runtime, loading and the timed calls.
    rss_pooled: Option<i64>,
}

#[derive(Clone, Copy)]
struct Latency {
    p50: Duration,
    p99: Duration,
    mean: Duration,
    /// The process's CPU time over the timed calls divided by the calls:
    /// every thread's, so work moved off a call's path (the reaper's
    /// resets, the epoch ticker) still counts.
    cpu: Duration,
}

impl Latency {
    fn of(timed: Timed) -> Self {
        let mut samples = timed.samples;
        samples.sort();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Latency {
            p50: at(0.50),
            p99: at(0.99),
            mean: samples.iter().sum::<Duration>() / samples.len() as u32,
            cpu: timed.cpu / samples.len() as u32,
        }
    }
}

/// What [`time_calls`] measured: each call's wall-clock time, and the
/// process's CPU time over all of them.
struct Timed {
    samples: Vec<Duration>,
    cpu: Duration,
}

/// CPU time of the whole process (all threads, live and ended).
fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

struct Peer {
    plugin: String,
    wasm: Latency,
    /// The same calls with wasmtime's pooling allocator.
    pooled: Latency,
    native: Latency,
    floor: Latency,
}

/// The smallest call a plugin can answer, to show what every call costs
/// before the plugin does any work.
struct FixedCost {
    what: &'static str,
    latency: Latency,
    pooled: Latency,
}

impl Peer {
    fn print(&self) {
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        println!();
        println!(
            "{} reconcile, same request, same run (p50 / p99):",
            self.plugin
        );
        println!(
            "  wasm plugin (instantiate + call)     {:>9} / {:>9}",
            fmt_duration(self.wasm.p50),
            fmt_duration(self.wasm.p99)
        );
        println!(
            "  wasm, pooling allocator              {:>9} / {:>9}   {:.2}x on-demand (p50), CPU {} per call",
            fmt_duration(self.pooled.p50),
            fmt_duration(self.pooled.p99),
            ratio(self.pooled.p50, self.wasm.p50),
            fmt_duration(self.pooled.cpu)
        );
        // Pooled first: it is how `kubeplug run` calls plugins.
        println!(
            "  same logic, native                   {:>9} / {:>9}   pooled wasm is {:.2}x native, on demand {:.1}x (p50)",
            fmt_duration(self.native.p50),
            fmt_duration(self.native.p99),
            ratio(self.pooled.p50, self.native.p50),
            ratio(self.wasm.p50, self.native.p50)
        );
        println!(
            "  floor: serde_json parse+print        {:>9} / {:>9}   pooled wasm is {:.2}x the floor, on demand {:.1}x (p50)",
            fmt_duration(self.floor.p50),
            fmt_duration(self.floor.p99),
            ratio(self.pooled.p50, self.floor.p50),
            ratio(self.wasm.p50, self.floor.p50)
        );
    }
}

fn options(config: Option<Value>) -> PluginOptions {
    PluginOptions {
        config,
        ..Default::default()
    }
}

/// A configuration the plugin accepts; `copy` makes each copy's distinct.
fn config_for(name: &str, copy: usize) -> Value {
    match name {
        "pod-annotator" | "pod-labeler" => {
            json!({"namespaces": ["team-a", format!("bench-{copy}")]})
        }
        // The database refuses unknown keys; copy 0 (the timed one) pulls
        // from Docker Hub like a default install.
        "database" | "database-go" if copy == 0 => json!({}),
        "database" | "database-go" => json!({"imageRegistry": format!("bench-{copy}.example.com")}),
        _ => json!({"benchCopy": copy}),
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

struct Bench {
    row: Row,
    peer: Option<Peer>,
    fixed: Option<FixedCost>,
}

/// The medians of a plugin's loads, and the size of its compiled artefact.
struct LoadTimes {
    compile: Duration,
    cold: Duration,
    cached: Duration,
    artefact_bytes: u64,
}

/// Compiles in memory, cold loads (each into an empty cache dir under
/// `scratch`, the first kept as `cold-0`) and loads from the artefact.
fn load_times(bytes: &[u8], name: &str, args: &Args, scratch: &Path) -> anyhow::Result<LoadTimes> {
    // Compile in memory: the runtime's own measurement of that step.
    let in_memory = Runtime::new(None)?;
    let mut compiles = Vec::new();
    for _ in 0..args.compiles.max(1) {
        let plugin = in_memory.load(bytes, options(Some(config_for(name, 0))))?;
        compiles.push(plugin.load_time());
    }
    drop(in_memory);

    // Cold loads, each into an empty cache dir; then loads from the artefact.
    let mut cold = Vec::new();
    for run in 0..args.compiles.max(1) {
        let runtime = Runtime::new(Some(scratch.join(format!("cold-{run}"))))?;
        let started = Instant::now();
        let plugin = runtime.load(bytes, options(Some(config_for(name, 0))))?;
        cold.push(started.elapsed());
        assert_eq!(plugin.origin(), Origin::Compiled);
    }
    let cache_dir = scratch.join("cold-0");
    let runtime = Runtime::new(Some(cache_dir.clone()))?;
    let mut cached = Vec::new();
    for _ in 0..CACHED_LOADS {
        let started = Instant::now();
        let plugin = runtime.load(bytes, options(Some(config_for(name, 0))))?;
        cached.push(started.elapsed());
        assert_eq!(plugin.origin(), Origin::Cached);
    }
    let artefact_bytes = std::fs::read_dir(&cache_dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();

    Ok(LoadTimes {
        compile: median(compiles),
        cold: median(cold),
        cached: median(cached),
        artefact_bytes,
    })
}

fn bench_plugin(path: &Path, args: &Args, scratch: &Path) -> anyhow::Result<Bench> {
    let bytes = std::fs::read(path)?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("?")
        .to_string();
    eprintln!("benchmarking {name} ...");

    let loads = load_times(&bytes, &name, args, scratch)?;
    let cache_dir = scratch.join("cold-0");
    let runtime = Runtime::new(Some(cache_dir.clone()))?;

    let before = vm_rss_bytes();
    let plugin = runtime.load(&bytes, options(Some(config_for(&name, 0))))?;
    let realistic = realistic_request(&name, &plugin)?;
    let rss_first = before.zip(vm_rss_bytes()).map(|(b, a)| a - b);
    let latency = realistic.as_ref().map(|request| {
        Latency::of(time_calls(args.calls, || {
            black_box(
                plugin
                    .reconcile(request)
                    .expect("the benchmark request is valid"),
            );
        }))
    });
    // The same plugin from a pool of the size a 512 MiB pod gets.
    let before_pool = vm_rss_bytes();
    let pooled_runtime = Runtime::with_allocation(
        Some(cache_dir.clone()),
        Allocation::Pooling {
            instances: kubeplug_runtime::pool::slots_for(192 << 20),
        },
    )?;
    let pooled_plugin = pooled_runtime.load(&bytes, options(Some(config_for(&name, 0))))?;
    let pooled = realistic.as_ref().map(|request| {
        Latency::of(time_calls(args.calls, || {
            black_box(
                pooled_plugin
                    .reconcile(request)
                    .expect("the benchmark request is valid"),
            );
        }))
    });
    let peer = match (&realistic, &latency, &pooled, name.as_str()) {
        (Some(request), Some(wasm), Some(pooled), "database") => Some(Peer {
            plugin: name.clone(),
            wasm: *wasm,
            pooled: *pooled,
            native: Latency::of(time_calls(args.calls, || {
                black_box(native_database(request));
            })),
            floor: Latency::of(time_calls(args.calls, || {
                black_box(json_round_trip(request));
            })),
        }),
        _ => None,
    };
    let fixed = (name == "pod-annotator").then(|| {
        let mut elsewhere = pod();
        elsewhere["metadata"]["namespace"] = "kube-system".into();
        let ignored = request(&elsewhere, &[], &[]);
        FixedCost {
            what: "pod-annotator on a pod outside its namespaces",
            latency: Latency::of(time_calls(args.calls, || {
                black_box(plugin.reconcile(&ignored).expect("an ignored pod is fine"));
            })),
            pooled: Latency::of(time_calls(args.calls, || {
                black_box(
                    pooled_plugin
                        .reconcile(&ignored)
                        .expect("an ignored pod is fine"),
                );
            })),
        }
    });
    // What the pool holds resident once its slots were used: the runtime,
    // the plugin and the slots its calls dirtied, kept for the next ones.
    let rss_pooled = before_pool.zip(vm_rss_bytes()).map(|(b, a)| a - b);
    drop(pooled_plugin);
    drop(pooled_runtime);
    let rss_per_copy = rss_per_copy(&runtime, &bytes, &name, realistic.as_ref(), args.copies)?;

    Ok(Bench {
        row: Row {
            name,
            language: language(&bytes),
            wasm_bytes: bytes.len(),
            artefact_bytes: loads.artefact_bytes,
            compile: loads.compile,
            cold_load: loads.cold,
            cached_load: loads.cached,
            latency,
            pooled,
            rss_first,
            rss_per_copy,
            rss_pooled,
        },
        peer,
        fixed,
    })
}

/// The plugins `--breakdown` times, each with its request: the fixed cost
/// (an ignored pod), a Rust reconcile, and the interpreters' guests.
#[cfg(feature = "breakdown")]
const BREAKDOWN: [(&str, &str); 4] = [
    ("plugins", "pod-annotator"),
    ("plugins", "database"),
    ("test-plugins", "myapp-py"),
    ("test-plugins", "myapp-ts"),
];

/// `--breakdown`: where a pooled call's time goes, stage by stage (see
/// `kubeplug_runtime::timings`), for each pool tuning of `--tunings`, each
/// plugin in a runtime of its own. Compiled artefacts are cached in the temp
/// dir across runs, since only calls are timed here. Besides the stages:
/// the whole call's p50, the process's CPU time per call (the reaper's
/// resets included), and what one warm memory slot keeps resident after the
/// calls (what its reset copies back).
#[cfg(feature = "breakdown")]
fn breakdown(args: &Args) -> anyhow::Result<()> {
    use kubeplug_runtime::timings::{self, Stage};
    let root = args.dir.parent().unwrap_or(Path::new("."));
    let cache = std::env::temp_dir().join("kubeplug-bench-breakdown-cache");
    let tunings = args
        .tunings
        .split(',')
        .map(|name| tuning(name.trim()).map(|t| (name.trim(), t)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    print!("{:<14} {:<10}", "p50 (µs)", "tuning");
    for stage in Stage::ALL {
        print!(" {:>11}", stage.name());
    }
    println!(
        " {:>11} {:>9} {:>12}",
        "whole call", "CPU/call", "kept/slot"
    );
    for (dir, name) in BREAKDOWN {
        if !args.only.is_empty() && !args.only.iter().any(|o| o == name) {
            continue;
        }
        let path = root.join(dir).join(format!("{name}.wasm"));
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        for (tuning_name, tuning) in &tunings {
            let runtime = Runtime::with_pool_tuning(
                Some(cache.clone()),
                Allocation::Pooling {
                    instances: kubeplug_runtime::pool::slots_for(192 << 20),
                },
                *tuning,
            )?;
            let plugin = runtime.load(&bytes, options(Some(config_for(name, 0))))?;
            let request = if name == "pod-annotator" {
                let mut elsewhere = pod();
                elsewhere["metadata"]["namespace"] = "kube-system".into();
                request(&elsewhere, &[], &[])
            } else {
                realistic_request(name, &plugin)?.context("a request for the plugin")?
            };
            timings::take();
            timings::take_off_path();
            let whole = Latency::of(time_calls(args.calls, || {
                black_box(
                    plugin
                        .reconcile(&request)
                        .expect("the benchmark request is valid"),
                );
            }));
            // The last calls' Stores reset, so the pool is at rest.
            let slots = runtime.slots().expect("a pooled runtime").clone();
            while slots.used() > 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut samples = timings::take();
            samples.extend(timings::take_off_path());
            print!("{name:<14} {tuning_name:<10}");
            for stage in Stage::ALL {
                // The warm-up calls' stages are in `samples` too: skip them.
                let mut of: Vec<Duration> = samples
                    .iter()
                    .filter(|(s, _)| *s == stage)
                    .map(|(_, d)| *d)
                    .collect();
                of.drain(..of.len().saturating_sub(args.calls.max(1)));
                if of.is_empty() {
                    // No such stage in this tuning (no reset off the path).
                    print!(" {:>11}", "-");
                } else {
                    print!(" {:>11.1}", median(of).as_secs_f64() * 1e6);
                }
            }
            let kept = runtime
                .pool_resident()
                .filter(|r| r.warm_memories > 0)
                .map_or("-".into(), |r| {
                    fmt_bytes((r.memory_bytes / r.warm_memories as usize) as i64)
                });
            println!(
                " {:>11.1} {:>9.1} {:>12}",
                whole.p50.as_secs_f64() * 1e6,
                whole.cpu.as_secs_f64() * 1e6,
                kept
            );
        }
    }
    Ok(())
}

/// The pool tunings `--tunings` names: the host's default and one change
/// from it each.
#[cfg(feature = "breakdown")]
fn tuning(name: &str) -> anyhow::Result<kubeplug_runtime::pool::Tuning> {
    let mut t = kubeplug_runtime::pool::Tuning::default();
    match name {
        "default" => {}
        "no-scan" => t.pagemap_scan = false,
        "scan" => t.pagemap_scan = true,
        "keep-0" => t.memory_keep_resident = 0,
        "keep-1m" => t.memory_keep_resident = 1 << 20,
        "keep-4m" => t.memory_keep_resident = 4 << 20,
        "keep-64m" => t.memory_keep_resident = 64 << 20,
        "table-0" => t.table_keep_resident = 0,
        "stack-0" => t.stack_keep_resident = 0,
        "warm-0" => t.max_unused_warm_slots = 0,
        "batch-16" => t.decommit_batch_size = 16,
        "inline" => t.reset_off_path = false,
        "off-path" => t.reset_off_path = true,
        // The pool before the reaper and the scan: what a call paid before.
        "before" => {
            t.reset_off_path = false;
            t.pagemap_scan = false;
        }
        other => bail!(
            "unknown tuning {other:?}: default, no-scan, scan, keep-0, keep-1m, keep-4m, \
             keep-64m, table-0, stack-0, warm-0, batch-16, inline, off-path, before"
        ),
    }
    Ok(t)
}

#[cfg(not(feature = "breakdown"))]
fn breakdown(args: &Args) -> anyhow::Result<()> {
    bail!(
        "--breakdown (tunings {}) needs the runtime's timings: build with `--features breakdown`",
        args.tunings
    )
}

fn time_calls(calls: usize, mut call: impl FnMut()) -> Timed {
    for _ in 0..WARMUP_CALLS {
        call();
    }
    let cpu = process_cpu();
    let samples = (0..calls.max(1))
        .map(|_| {
            let started = Instant::now();
            call();
            started.elapsed()
        })
        .collect();
    Timed {
        samples,
        cpu: process_cpu().saturating_sub(cpu),
    }
}

/// What built a component, from the producer strings toolchains leave in it.
fn language(bytes: &[u8]) -> &'static str {
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if has(b"componentize-py") {
        "Python"
    } else if has(b"StarlingMonkey") || has(b"starlingmonkey") {
        "JS/TS"
    } else if has(b"kubeplug-go-shim") {
        "Go"
    } else if has(b"rustc") {
        "Rust"
    } else {
        "?"
    }
}

/// Host memory per further load of the same bytes: load `copies` copies
/// while the first is loaded (each with its own configuration; they share
/// the compiled code), call each once, and divide the growth of the
/// resident set by `copies`.
fn rss_per_copy(
    runtime: &Runtime,
    bytes: &[u8],
    name: &str,
    request: Option<&Request>,
    copies: usize,
) -> anyhow::Result<Option<i64>> {
    let copies = copies.max(1);
    let Some(before) = vm_rss_bytes() else {
        return Ok(None);
    };
    let mut loaded: Vec<Plugin> = Vec::with_capacity(copies);
    for copy in 0..copies {
        let plugin = runtime.load(bytes, options(Some(config_for(name, copy + 1))))?;
        if let Some(request) = request {
            plugin.reconcile(request)?;
        }
        loaded.push(plugin);
    }
    let after = vm_rss_bytes().unwrap_or(before);
    drop(loaded);
    Ok(Some((after - before) / copies as i64))
}

fn vm_rss_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

// Requests.

/// A request like the operator sends in steady state, or `None` for a plugin
/// this benchmark has no fixture for.
fn realistic_request(name: &str, plugin: &Plugin) -> anyhow::Result<Option<Request>> {
    let request = match name {
        // database-go is database's port to Go: the same requests.
        "database" | "database-go" => steady_state(plugin, database_parent(), database_pods())?,
        // Ports of myapp to other languages answer the same requests.
        "myapp" | "myapp-py" | "myapp-ts" => steady_state(plugin, myapp_parent(), Vec::new())?,
        "pod-annotator" | "pod-labeler" => request(&pod(), &[], &[]),
        _ => return Ok(None),
    };
    Ok(Some(request))
}

fn request(parent: &Value, observed: &[Value], related: &[Value]) -> Request {
    Request {
        parent: parent.to_string().into(),
        observed: observed.iter().map(|o| o.to_string().into()).collect(),
        related: related.iter().map(|o| o.to_string().into()).collect(),
        now: NOW.into(),
        entropy: (0..32).collect(),
    }
}

/// The request after the plugin's children exist: reconcile once, store the
/// prepared children as the API server would and pass them back as observed,
/// with the status written to the parent.
fn steady_state(
    plugin: &Plugin,
    mut parent: Value,
    related: Vec<Value>,
) -> anyhow::Result<Request> {
    let first = plugin.reconcile(&request(&parent, &[], &related))?;
    let observed: Vec<Value> = plan::children(plugin.manifest(), &parent, &first.children)?
        .into_iter()
        .enumerate()
        .map(|(i, mut child)| {
            child["metadata"]["uid"] = format!("00000000-0000-4000-8000-00000000010{i}").into();
            child["metadata"]["resourceVersion"] = "1000".into();
            let replicas = child["spec"]["replicas"].clone();
            if !replicas.is_null() {
                child["status"] = json!({
                    "replicas": replicas,
                    "readyReplicas": replicas,
                    "availableReplicas": replicas,
                });
            }
            child
        })
        .collect();
    if let Some(status) = first.status {
        parent["status"] = status;
    }
    Ok(request(&parent, &observed, &related))
}

fn database_parent() -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {
            "name": "orders",
            "namespace": "shop",
            "uid": "0b9ff2a4-7a10-4c5e-9d2e-000000000001",
            "generation": 1,
            "resourceVersion": "900",
        },
        "spec": {"engine": "postgresql", "version": "16.2.0", "replicas": 3},
    })
}

fn database_pods() -> Vec<Value> {
    (0..3)
        .map(|i| {
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": format!("orders-{i}"),
                    "namespace": "shop",
                    "uid": format!("00000000-0000-4000-8000-00000000020{i}"),
                    "labels": {
                        "app.kubernetes.io/name": "database",
                        "app.kubernetes.io/instance": "orders",
                    },
                },
                "spec": {"containers": [{"name": "postgresql", "image": "postgres:16.2.0"}]},
                "status": {
                    "phase": "Running",
                    "podIP": format!("10.244.0.{}", 10 + i),
                    "conditions": [
                        {"type": "Initialized", "status": "True"},
                        {"type": "Ready", "status": "True"},
                        {"type": "ContainersReady", "status": "True"},
                        {"type": "PodScheduled", "status": "True"},
                    ],
                },
            })
        })
        .collect()
}

fn myapp_parent() -> Value {
    json!({
        "apiVersion": "example.com/v1alpha1",
        "kind": "MyApp",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "uid": "0b9ff2a4-7a10-4c5e-9d2e-000000000002",
            "generation": 1,
        },
        "spec": {"replicas": 3, "image": "nginx:1.27"},
    })
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "team-a",
            "uid": "0b9ff2a4-7a10-4c5e-9d2e-000000000003",
            "labels": {"app": "web"},
        },
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
    })
}

// Peers.

/// The `database` plugin's logic called natively on the same request: parse
/// the JSON texts (as the guest does), reconcile, serialize the children (the
/// SDK does that inside `reconcile`).
fn native_database(request: &Request) -> kubeplug_sdk::Response {
    use kubeplug_sdk::Plugin as _;
    let parse = |text: &str| serde_json::from_str::<Value>(text).expect("benchmark JSON");
    let ctx = kubeplug_sdk::Context {
        parent: parse(&request.parent),
        observed: request.observed.iter().map(|o| parse(o)).collect(),
        related: request.related.iter().map(|o| parse(o)).collect(),
        config: database::Config::default(),
        now: request.now.clone(),
        entropy: request.entropy.clone(),
    };
    database::DatabasePlugin::reconcile(&ctx).expect("the benchmark request is valid")
}

/// Parse every object of the request and print it again: the least a
/// JSON-in/JSON-out call can cost.
fn json_round_trip(request: &Request) -> usize {
    std::iter::once(&request.parent)
        .chain(&request.observed)
        .chain(&request.related)
        .map(|text| {
            let value: Value = serde_json::from_str(text).expect("benchmark JSON");
            value.to_string().len()
        })
        .sum()
}

// Output.

fn print_machine(args: &Args) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("kubeplug-bench: {cpu}, {cores} cores, wasmtime 48.0.8");
    println!(
        "plugins from {}; {} calls per latency figure, {} copies for memory, \
         median of {} compiles",
        args.dir.display(),
        args.calls,
        args.copies,
        args.compiles
    );
    println!();
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<14} {:<7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "plugin",
        "lang",
        "wasm",
        "cwasm",
        "compile",
        "cold",
        "cached",
        "p50",
        "p99",
        "mean",
        "pooled p50",
        "pooled CPU",
        "RSS/plugin",
        "RSS/copy",
        "RSS/pool"
    );
    for r in rows {
        let (p50, p99, mean) = match &r.latency {
            Some(l) => (
                fmt_duration(l.p50),
                fmt_duration(l.p99),
                fmt_duration(l.mean),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        println!(
            "{:<14} {:<7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
            r.name,
            r.language,
            fmt_bytes(r.wasm_bytes as i64),
            fmt_bytes(r.artefact_bytes as i64),
            fmt_duration(r.compile),
            fmt_duration(r.cold_load),
            fmt_duration(r.cached_load),
            p50,
            p99,
            mean,
            r.pooled.map_or("-".into(), |l| fmt_duration(l.p50)),
            r.pooled.map_or("-".into(), |l| fmt_duration(l.cpu)),
            r.rss_first.map_or("-".into(), fmt_bytes),
            r.rss_per_copy.map_or("-".into(), fmt_bytes),
            r.rss_pooled.map_or("-".into(), fmt_bytes),
        );
    }
}

fn fmt_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1_000.0 {
        format!("{us:.0} µs")
    } else if us < 1_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

fn fmt_bytes(bytes: i64) -> String {
    let b = bytes as f64;
    if b.abs() < 1024.0 * 1024.0 {
        format!("{:.0} KiB", b / 1024.0)
    } else {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    }
}
