//! Harness for acceptance tests against the real local control plane.
//!
//! Run through `make e2e`, which starts a cluster (`tests/cluster/up`), exports
//! `KUBECONFIG` and `KUBECTL`, builds the host and plugins, and runs these
//! tests one at a time (each test starts its own host process: two hosts on
//! one cluster would both reconcile every parent).
//!
//! Each test gets a fresh namespace; on failure the namespace's objects and
//! the tail of the host's log are printed (linkerd's policy-test habit).

#![forbid(unsafe_code)]

pub mod chart;
pub mod hook;
pub mod pod;
pub mod registry;
pub mod spans;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::Value;

/// The repository root. Read at run time (`cargo test` sets
/// `CARGO_MANIFEST_DIR`): a test binary built in another clone sharing the
/// same target directory must not point back at that clone.
pub fn repo() -> PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    dir.join("../..")
}

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run these tests through `make e2e`, which starts a cluster")
    })
}

/// Run kubectl against the test cluster.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(required_env("KUBECTL"));
    cmd.args(args)
        .env("KUBECONFIG", required_env("KUBECONFIG"))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(input.as_bytes())
            .expect("write kubectl stdin");
    }
    child.wait_with_output().expect("kubectl finishes")
}

/// kubectl that must succeed; returns stdout.
pub fn kubectl_ok(args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl(args, stdin);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl get -o json`, or `None` if the object does not exist.
pub fn get_json(namespace: &str, what: &str) -> Option<Value> {
    let out = kubectl(&["get", "-n", namespace, what, "-o", "json"], None);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Apply a YAML document in `namespace`.
pub fn apply(namespace: &str, yaml: &str) {
    kubectl_ok(&["apply", "-n", namespace, "-f", "-"], Some(yaml));
}

/// Poll `check` until it returns `Some`, or fail after `timeout` with the
/// last observation.
pub fn eventually<T>(what: &str, timeout: Duration, check: impl FnMut() -> Option<T>) -> T {
    eventually_every(what, timeout, Duration::from_millis(250), check)
}

/// [`eventually`], polling every `interval`: for a moment that passes fast
/// (a cheap check, e.g. a local file, not a request).
pub fn eventually_every<T>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        if started.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(interval);
    }
}

/// Write `policy` beside `dir` and return the `--policy` value that adds it
/// to the seed plugins' grants (in place of the test guests' defaults).
pub fn with_policy(dir: &PluginDir, policy: &str) -> String {
    let path = dir.path.with_extension("policy.yaml");
    std::fs::write(&path, policy).expect("write policy");
    format!(
        "{},{}",
        repo().join("deploy/base/policy.yaml").display(),
        path.display()
    )
}

/// The policy files every test host runs with unless a test passes its own
/// `--policy`: the seed plugins' grants and the test guests'.
pub fn default_policy() -> String {
    let root = repo();
    format!(
        "{},{}",
        root.join("deploy/base/policy.yaml").display(),
        root.join("tests/e2e/manifests/policy.yaml").display()
    )
}

/// Install the CRDs the tests use and the plugins' identities (their
/// ServiceAccounts and roles), idempotently.
pub fn install_crds() {
    let root = repo();
    for file in [
        root.join("deploy/base/namespace.yaml"),
        root.join("crds/databases.example.com.yaml"),
        root.join("crds/myapps.example.com.yaml"),
        root.join("tests/e2e/manifests/hostiles.test.kubeplug.io.yaml"),
        root.join("deploy/base/plugin-rbac.yaml"),
        root.join("tests/e2e/manifests/plugin-rbac.yaml"),
    ] {
        kubectl_ok(&["apply", "-f", file.to_str().expect("utf-8 path")], None);
    }
    for crd in [
        "databases.example.com",
        "myapps.example.com",
        "hostiles.test.kubeplug.io",
    ] {
        kubectl_ok(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{crd}"),
            ],
            None,
        );
    }
}

/// A namespace for one test, deleted when dropped. On a panic, prints its
/// objects first.
pub struct Namespace {
    pub name: String,
}

impl Namespace {
    pub fn new(prefix: &str) -> Self {
        let name = format!("{prefix}-{:06x}", rand::random::<u32>() & 0xffffff);
        kubectl_ok(&["create", "namespace", &name], None);
        Namespace { name }
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let dump = kubectl(
                &[
                    "get",
                    "-n",
                    &self.name,
                    "all,secrets,databases,myapps,hostiles,events",
                    "-o",
                    "wide",
                ],
                None,
            );
            eprintln!(
                "--- state of namespace {} ---\n{}{}",
                self.name,
                String::from_utf8_lossy(&dump.stdout),
                String::from_utf8_lossy(&dump.stderr)
            );
        }
        let _ = kubectl(&["delete", "namespace", &self.name, "--wait=false"], None);
    }
}

/// A plugin directory the host watches, populated from the built plugins.
pub struct PluginDir {
    pub path: PathBuf,
}

/// The items of `kubectl get ARGS -o json` (a list of objects).
pub fn items(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend(["-o", "json"]);
    let list: Value = serde_json::from_str(&kubectl_ok(&all, None)).expect("kubectl prints JSON");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// `openssl ARGS` in `dir`, or a panic with what it printed.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A file's SHA-256 in hex, as `/plugins` and `kubectl get plugins` give a
/// plugin's digest.
pub fn sha256_of(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum runs");
    assert!(out.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("sha256sum prints a digest")
        .to_string()
}

/// A built plugin: `target/plugins/<name>.wasm` or `target/test-plugins/`.
pub fn built(name: &str) -> PathBuf {
    let root = repo();
    let shipped = root.join("target/plugins").join(format!("{name}.wasm"));
    if shipped.exists() {
        return shipped;
    }
    let test = root
        .join("target/test-plugins")
        .join(format!("{name}.wasm"));
    assert!(
        test.exists(),
        "{} missing: run `make plugins` first",
        test.display()
    );
    test
}

impl PluginDir {
    /// A fresh directory holding the given built plugins plus their
    /// settings from `deploy/base/settings/` where present.
    pub fn with(plugins: &[&str]) -> Self {
        let path = std::env::temp_dir().join(format!("kubeplug-e2e-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&path).expect("create plugin dir");
        let dir = PluginDir { path };
        for p in plugins {
            dir.install(p, p);
        }
        dir
    }

    /// Copy built plugin `built_name` in as `<as_name>.wasm`, with settings.
    /// Written to a temporary name first and renamed: an atomic replace.
    pub fn install(&self, built_name: &str, as_name: &str) {
        let settings = repo()
            .join("deploy/base/settings")
            .join(format!("{as_name}.yaml"));
        if settings.exists() {
            std::fs::copy(&settings, self.path.join(format!("{as_name}.yaml")))
                .expect("copy settings");
        }
        self.put(
            as_name,
            &std::fs::read(built(built_name)).expect("read built plugin"),
        );
    }

    /// Write `bytes` as `<name>.wasm` atomically.
    pub fn put(&self, name: &str, bytes: &[u8]) {
        let tmp = self.path.join(format!(".{name}.wasm.tmp"));
        std::fs::write(&tmp, bytes).expect("write plugin");
        std::fs::rename(&tmp, self.path.join(format!("{name}.wasm"))).expect("rename plugin");
    }

    /// Write a settings file `<name>.yaml`.
    pub fn settings(&self, name: &str, yaml: &str) {
        std::fs::write(self.path.join(format!("{name}.yaml")), yaml).expect("write settings");
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.path.join(format!("{name}.wasm"))).expect("remove plugin");
    }
}

impl Drop for PluginDir {
    /// Removes the directory, and, unless the test failed, the files named
    /// after it beside it (host logs, policies, certificates): a failed
    /// test's are kept to read.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        if std::thread::panicking() {
            return;
        }
        let (Some(parent), Some(name)) = (self.path.parent(), self.path.file_name()) else {
            return;
        };
        let prefix = format!("{}.", name.to_string_lossy());
        for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let path = entry.path();
                let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
            }
        }
    }
}

/// A free loopback port (free now; bound by whoever asks next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// An address of this machine that is not loopback (`hostname -I`), if it
/// has one: a client connecting to it from this machine comes from it.
pub fn non_loopback_address() -> Option<String> {
    let out = Command::new("hostname").arg("-I").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find(|a| a.parse::<Ipv4Addr>().is_ok_and(|ip| !ip.is_loopback()))
        .map(String::from)
}

/// A running `kubeplug run` process, killed when dropped.
pub struct Host {
    child: Child,
    /// The admin listener's port (`--listen`).
    pub port: u16,
    /// The admin listener's address: loopback unless the test passed its
    /// own `--listen`.
    listen: IpAddr,
    pub log: PathBuf,
}

/// The built host binary.
pub fn host_binary() -> PathBuf {
    built_host("kubeplug", "host")
}

/// `target/bin/kubeplug`, which `make host` builds: the static binary the
/// image ships (with traces, a default feature).
fn built_host(name: &str, target: &str) -> PathBuf {
    let bin = repo().join("target/bin").join(name);
    assert!(
        bin.exists(),
        "{} missing: run `make {target}` first",
        bin.display()
    );
    bin
}

impl Host {
    /// Start a host on `dir` and wait until it is ready.
    pub fn start(dir: &PluginDir) -> Self {
        Self::start_with(dir, &[])
    }

    pub fn start_with(dir: &PluginDir, extra: &[&str]) -> Self {
        Self::start_as(dir, extra, Path::new(&required_env("KUBECONFIG")))
    }

    /// Start a host that authenticates with `kubeconfig` (e.g. a
    /// ServiceAccount token) instead of the admin one.
    pub fn start_as(dir: &PluginDir, extra: &[&str], kubeconfig: &Path) -> Self {
        Self::spawn(dir, extra, kubeconfig, None, &host_binary(), &[])
    }

    /// Start the host with `env` (the `OTEL_*` variables that turn its
    /// traces on) added to its environment.
    pub fn start_otel(dir: &PluginDir, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let kubeconfig = required_env("KUBECONFIG");
        Self::spawn(
            dir,
            extra,
            Path::new(&kubeconfig),
            None,
            &host_binary(),
            env,
        )
    }

    /// Start a host that enters the cgroup whose `cgroup.procs` is `procs`
    /// before it execs, so that it runs under that cgroup's limits from its
    /// first instruction (as in a pod).
    pub fn start_in_cgroup(dir: &PluginDir, extra: &[&str], procs: &Path) -> Self {
        Self::start_in_cgroup_with_env(dir, extra, procs, &[])
    }

    /// [`Host::start_in_cgroup`] with `env` added to the host's
    /// environment (e.g. [`spans::Receiver::env`]).
    pub fn start_in_cgroup_with_env(
        dir: &PluginDir,
        extra: &[&str],
        procs: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawn(
            dir,
            extra,
            Path::new(&required_env("KUBECONFIG")),
            Some(procs),
            &host_binary(),
            env,
        )
    }

    fn spawn(
        dir: &PluginDir,
        extra: &[&str],
        kubeconfig: &Path,
        procs: Option<&Path>,
        binary: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        // The admin listener: the test's `--listen`, or a free loopback port.
        let given = listen_flag(extra);
        let listen = given.unwrap_or_else(|| SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())));
        let port = listen.port();
        let log = dir.path.with_extension(format!("host-{port}.log"));
        let file = std::fs::File::create(&log).expect("create host log");
        let policy = if extra.iter().any(|a| a.starts_with("--policy")) {
            Vec::new()
        } else {
            vec!["--policy".to_string(), default_policy()]
        };
        let listen_args = match given {
            Some(_) => Vec::new(),
            None => vec!["--listen".to_string(), listen.to_string()],
        };
        let mut command = match procs {
            None => Command::new(binary),
            Some(procs) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(r#"echo $$ > "$0" && exec "$@""#)
                    .arg(procs)
                    .arg(binary);
                sh
            }
        };
        let child = command
            .args(["run", "--plugins", dir.path.to_str().expect("utf-8 path")])
            .args(listen_args)
            .args(["--rescan-seconds", "2"])
            .args(policy)
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("KUBEPLUG_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start kubeplug run");
        let mut host = Host {
            child,
            port,
            listen: listen.ip(),
            log,
        };
        host.wait_ready();
        host
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The host's user + system CPU time so far (`/proc/<pid>/stat`).
    pub fn cpu(&self) -> Duration {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("read /proc stat");
        // Fields after the command name (which may hold spaces): state is 3rd.
        let rest = &stat[stat.rfind(')').expect("stat has a command") + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // CLK_TCK is 100 on Linux.
        Duration::from_millis(ticks * 10)
    }

    /// Reconciles of `plugin` that succeeded so far.
    pub fn reconciles(&self, plugin: &str) -> f64 {
        self.metric(
            "kubeplug_reconciles_total",
            &format!("plugin=\"{plugin}\",result=\"ok\""),
        )
    }

    /// Wait until `plugin`'s reconcile count stops moving for 2 s.
    pub fn quiet(&self, plugin: &str, timeout: Duration) {
        eventually(&format!("{plugin} to go quiet"), timeout, || {
            let before = self.reconciles(plugin);
            std::thread::sleep(Duration::from_secs(2));
            (self.reconciles(plugin) == before).then_some(())
        });
    }

    fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("host exited early ({status}):\n{}", self.log_tail());
            }
            if self.get("/readyz").is_ok_and(|(code, _)| code == 200) {
                return;
            }
            if started.elapsed() > Duration::from_secs(60) {
                panic!("host not ready after 60 s:\n{}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A host started by the caller (e.g. from its image, as in a pod),
    /// serving on `port`, logging to `log`; returns once it is ready.
    pub fn adopt(child: Child, port: u16, log: PathBuf) -> Self {
        let mut host = Host {
            child,
            port,
            listen: Ipv4Addr::LOCALHOST.into(),
            log,
        };
        host.wait_ready();
        host
    }

    /// GET a path on the host's HTTP endpoint as a loopback client (which
    /// sees more of `/plugins` than others), wherever its listener is:
    /// (status code, body).
    pub fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        if self.listen.is_loopback() || self.listen.is_unspecified() {
            return self.get_at("127.0.0.1", path);
        }
        // A listener on another address: bound to loopback, then connected.
        let to = SocketAddr::new(self.listen, self.port);
        let from: IpAddr = match to {
            SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        };
        let stream = connect_from(from, to)
            .with_context(|| format!("connect to host port {to} from {from}"))?;
        Self::request(stream, path)
    }

    /// GET a path through the host's address `ip`: a client connecting to
    /// one of this machine's addresses comes from that address (so from
    /// [`non_loopback_address`], it is not a loopback client).
    pub fn get_at(&self, ip: &str, path: &str) -> anyhow::Result<(u16, String)> {
        let stream = TcpStream::connect((ip, self.port))
            .with_context(|| format!("connect to host port {ip}:{}", self.port))?;
        Self::request(stream, path)
    }

    fn request(stream: TcpStream, path: &str) -> anyhow::Result<(u16, String)> {
        http_exchange(
            stream,
            Duration::from_secs(5),
            &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"),
        )
    }

    /// The value of a metric series (summed over matching lines), 0 if absent.
    /// `selector` is a substring of the series' labels, e.g. `plugin="database"`.
    pub fn metric(&self, name: &str, selector: &str) -> f64 {
        let (_, body) = self.get("/metrics").expect("metrics endpoint");
        body.lines()
            .filter(|l| {
                l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(selector)
            })
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum()
    }

    /// Every series of metric `name`: (the text between its braces, value).
    /// For selections [`Host::metric`] cannot express, e.g. `result!="ok"`.
    pub fn series(&self, name: &str) -> Vec<(String, f64)> {
        let (_, body) = self.get("/metrics").expect("metrics endpoint");
        body.lines()
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
            .filter_map(|rest| {
                let (labels, value) = rest.rsplit_once("} ")?;
                Some((labels.to_string(), value.parse().ok()?))
            })
            .collect()
    }

    /// API writes the host made for `plugin`.
    pub fn writes(&self, plugin: &str) -> u64 {
        self.metric("kubeplug_api_writes_total", &format!("plugin=\"{plugin}\"")) as u64
    }

    /// `/plugins` as JSON.
    pub fn plugins(&self) -> Value {
        let (_, body) = self.get("/plugins").expect("plugins endpoint");
        serde_json::from_str(&body).expect("plugins endpoint returns JSON")
    }

    /// The `/plugins` row of the plugin named `name`.
    pub fn plugin(&self, name: &str) -> Option<Value> {
        self.plugins()
            .as_array()?
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
    }

    /// The `/plugins` row of the file named `file_name` (e.g. `x.wasm`):
    /// a file that failed to load has no plugin name.
    pub fn plugin_file(&self, file_name: &str) -> Option<Value> {
        self.plugins()
            .as_array()?
            .iter()
            .find(|p| {
                p["file"]
                    .as_str()
                    .is_some_and(|f| Path::new(f).file_name() == Some(file_name.as_ref()))
            })
            .cloned()
    }

    /// True while the host process has not exited.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How many lines the host has logged so far that contain `needle`.
    pub fn logged(&self, needle: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|text| text.lines().filter(|l| l.contains(needle)).count())
            .unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Stop the host as Kubernetes does (SIGTERM) and wait for it to exit;
    /// returns whether it exited successfully.
    pub fn terminate(mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            if started.elapsed() > Duration::from_secs(30) {
                panic!("host ignored SIGTERM for 30 s:\n{}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Send a signal (`STOP`, `CONT`, `KILL`, ...) to the host process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.child.id());
    }

    /// True if a Lease holder identity is this host's (`<host name>-<pid>`).
    pub fn is(&self, identity: &str) -> bool {
        identity.ends_with(&format!("-{}", self.child.id()))
    }

    /// Stop the host (SIGKILL: a crash is the harsher restart).
    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- host log tail ---\n{}", self.log_tail());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address of a `--listen` flag in `extra` (`--listen ADDR` or
/// `--listen=ADDR`), if there is one.
fn listen_flag(extra: &[&str]) -> Option<SocketAddr> {
    let value =
        extra
            .iter()
            .enumerate()
            .find_map(|(i, arg)| match arg.strip_prefix("--listen")? {
                "" => extra.get(i + 1).copied(),
                rest => rest.strip_prefix('='),
            })?;
    Some(
        value
            .parse()
            .unwrap_or_else(|e| panic!("--listen {value}: {e}")),
    )
}

/// A TCP connection to `to` from the address `from` (bound before it
/// connects, so the server sees that peer).
fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(to),
        socket2::Type::STREAM,
        None,
    )?;
    socket.bind(&SocketAddr::new(from, 0).into())?;
    socket.connect_timeout(&to.into(), Duration::from_secs(5))?;
    Ok(socket.into())
}

/// Decode a chunked HTTP/1.1 body (hyper chunks larger responses).
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((size_line, after)) = rest.split_once("\r\n") else {
            return body.to_string();
        };
        let Ok(size) = usize::from_str_radix(size_line.trim(), 16) else {
            return body.to_string();
        };
        if size == 0 {
            return out;
        }
        if after.len() < size {
            return body.to_string();
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
}

/// Events recorded on an object: (type, reason, note) of events.k8s.io/v1.
pub fn events_for(namespace: &str, kind: &str, name: &str) -> Vec<(String, String, String)> {
    let Some(list) = get_json(namespace, "events.events.k8s.io") else {
        return Vec::new();
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["regarding"]["kind"] == kind && e["regarding"]["name"] == name)
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_string(),
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["note"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The resourceVersion of each object, keyed by `kind/name`.
pub fn resource_versions(ns: &str, objects: &[&str]) -> std::collections::BTreeMap<String, String> {
    objects
        .iter()
        .map(|what| {
            let object = get_json(ns, what).unwrap_or_else(|| panic!("{what} exists"));
            let rv = object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (what.to_string(), rv)
        })
        .collect()
}

/// Holder of each plugin Lease (`kubeplug-<plugin>`) in `ns`: plugin → holder.
/// Released Leases (no holder) are left out.
pub fn lease_holders(ns: &str) -> std::collections::BTreeMap<String, String> {
    let Some(list) = get_json(ns, "leases") else {
        return Default::default();
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["metadata"]["labels"]["kubeplug.io/replica"].is_null())
        .filter_map(|l| {
            let plugin = l["metadata"]["name"].as_str()?.strip_prefix("kubeplug-")?;
            let holder = l["spec"]["holderIdentity"]
                .as_str()
                .filter(|h| !h.is_empty())?;
            Some((plugin.to_string(), holder.to_string()))
        })
        .collect()
}

/// Short leader-election timing for tests with several replicas, so they
/// wait seconds, not minutes: client-go's ratios (15 s / 10 s / 2 s).
pub const LEASE: [&str; 6] = [
    "--lease-duration",
    "6",
    "--renew-deadline",
    "4",
    "--retry-period",
    "1",
];
pub const LEASE_DURATION: Duration = Duration::from_secs(6);

/// The directory of the running control plane (`tests/cluster/up` output).
pub fn cluster_dir() -> PathBuf {
    PathBuf::from(required_env("CLUSTER_DIR"))
}

/// One write the API server recorded in its audit log.
#[derive(Debug, Clone)]
pub struct AuditedWrite {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
    pub user_agent: String,
    /// RFC 3339 with microseconds, as the API server writes it.
    pub received: String,
    /// When its answer was complete (the object stored, for a write that
    /// succeeded), written as `received`.
    pub completed: String,
}

/// Every write (create, update, patch, delete) in the API server's audit
/// log (`$CLUSTER_DIR/audit.log`, see tests/cluster/README.md).
pub fn audited_writes() -> Vec<AuditedWrite> {
    let path = cluster_dir().join("audit.log");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read the audit log {}: {e}", path.display()));
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete" | "deletecollection")
            )
        })
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            AuditedWrite {
                verb: s(&e["verb"]),
                resource: s(&e["objectRef"]["resource"]),
                subresource: s(&e["objectRef"]["subresource"]),
                namespace: s(&e["objectRef"]["namespace"]),
                name: s(&e["objectRef"]["name"]),
                code: e["responseStatus"]["code"].as_u64().unwrap_or_default() as u16,
                user_agent: s(&e["userAgent"]),
                received: s(&e["requestReceivedTimestamp"]),
                completed: s(&e["stageTimestamp"]),
            }
        })
        .collect()
}

/// An audited time (RFC 3339 UTC, e.g. `2026-12-06T03:10:37.123456Z`) in
/// nanoseconds since the Unix epoch, as spans give theirs
/// ([`spans::Span::start`]); `None` if it is not one.
pub fn audit_nanos(time: &str) -> Option<u128> {
    let (date, clock) = time.strip_suffix('Z')?.split_once('T')?;
    let mut ymd = date.splitn(3, '-').map(|n| n.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, "0"));
    let mut parts = hms.splitn(3, ':').map(|n| n.parse::<i64>().ok());
    let (hour, minute, second) = (parts.next()??, parts.next()??, parts.next()??);
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
    // days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    let digits = fraction.get(..fraction.len().min(9))?;
    let nanos: u128 = format!("{digits:0<9}").parse().ok()?;
    Some(u128::try_from(seconds).ok()? * 1_000_000_000 + nanos)
}

/// Now, as the audit log writes times (RFC 3339 UTC, microseconds), so that
/// audited times compare as strings.
pub fn audit_now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.%6NZ"])
        .output()
        .expect("run date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The control plane stopped with its data kept (`tests/cluster/down
/// --keep`) until [`Outage::end`]. A test that fails during the outage
/// starts it again when the guard drops, so that the tests after it do not
/// all fail on a dead API server.
pub struct Outage {
    ended: bool,
}

impl Outage {
    pub fn begin() -> Self {
        cluster_script("down", &["--keep"]);
        Self { ended: false }
    }

    /// Start the control plane again on the same data and address
    /// (`tests/cluster/up DIR`); returns once it is ready.
    pub fn end(mut self) {
        self.ended = true;
        cluster_script("up", &[]);
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        if !self.ended {
            // Not `cluster_script`: a second panic while unwinding aborts
            // the whole test binary.
            if let Err(e) = try_cluster_script("up", &[]) {
                eprintln!("could not start the control plane again after a failed test: {e}");
            }
        }
    }
}

fn cluster_script(script: &str, args: &[&str]) -> String {
    try_cluster_script(script, args).unwrap_or_else(|e| panic!("{e}"))
}

/// `tests/cluster/SCRIPT ARGS... $CLUSTER_DIR`: its stdout, or why it failed.
fn try_cluster_script(script: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(repo().join("tests/cluster").join(script))
        .args(args)
        .arg(cluster_dir())
        .output()
        .map_err(|e| format!("run tests/cluster/{script}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "tests/cluster/{script} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A fault-injecting proxy in front of the API server (`tests/cluster/proxy`),
/// stopped when dropped.
pub struct Proxy {
    name: String,
    /// A kubeconfig whose server is the proxy.
    pub kubeconfig: PathBuf,
    control: String,
}

impl Proxy {
    pub fn start() -> Self {
        let name = format!("proxy-{:06x}", rand::random::<u32>() & 0xffffff);
        let out = cluster_script("proxy", &["--name", &name]);
        let line = |key: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("proxy printed no {key}: {out}"))
                .to_string()
        };
        Proxy {
            kubeconfig: PathBuf::from(line("PROXY_KUBECONFIG")),
            control: line("PROXY_CONTROL"),
            name,
        }
    }

    fn request(&self, method: &str, path: &str) -> Value {
        use std::io::{Read, Write};
        let address = self.control.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).expect("connect to proxy control");
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .expect("write to proxy control");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .expect("read proxy control");
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_default();
        serde_json::from_str(&dechunk(body))
            .unwrap_or_else(|e| panic!("proxy control {method} {path}: {e}: {response}"))
    }

    /// Set faults, e.g. `latency=200ms&reject429=0.3&retryAfter=1`.
    pub fn faults(&self, query: &str) -> Value {
        self.request("POST", &format!("/faults?{query}"))
    }

    /// The proxy's counters (see tests/cluster/README.md, "Fault proxy").
    pub fn stats(&self) -> Value {
        self.request("GET", "/stats")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("tests/cluster/proxy"))
            .args(["--stop", "--name", &self.name])
            .arg(cluster_dir())
            .output();
    }
}

/// How long the fence tests wait for a plugin to load or a parent to
/// converge.
pub const FENCE_WAIT: Duration = Duration::from_secs(120);

/// A host on `dir` with the seed grants and `policy` (YAML) for the rest.
pub fn host_with_policy(dir: &PluginDir, policy: &str) -> Host {
    Host::start_with(dir, &["--policy", &with_policy(dir, policy)])
}

/// Install the built hostile guest as `<name>.wasm` with `config` (YAML,
/// under `config:`, its `name` set to `name`).
pub fn hostile_as(dir: &PluginDir, name: &str, config: &str) {
    hostile_with(dir, name, config, "");
}

/// [`hostile_as`] with more settings after `config:` (e.g. `limits:`).
pub fn hostile_with(dir: &PluginDir, name: &str, config: &str, more: &str) {
    dir.settings(name, &hostile_settings(name, config, more));
    dir.install("hostile", name);
}

/// Place the built hostile guest as the candidate of plugin `name`
/// (`<name>.next.wasm`, which starts a shadow and a what-if) with `config`:
/// the serving version's, a `behave:` line added, say.
pub fn hostile_candidate(dir: &PluginDir, name: &str, config: &str) {
    let next = format!("{name}.next");
    dir.settings(&next, &hostile_settings(name, config, ""));
    dir.put(
        &next,
        &std::fs::read(built("hostile")).expect("read built plugin"),
    );
}

fn hostile_settings(name: &str, config: &str, more: &str) -> String {
    let indented: String = config.lines().map(|l| format!("  {l}\n")).collect();
    format!("config:\n  name: {name}\n{indented}{more}")
}

/// A `Hostile` parent that does `behave` (see plugins/hostile), with more
/// `spec` lines in `extra` (indented by two spaces).
pub fn hostile(name: &str, behave: &str, extra: &str) -> String {
    format!(
        "apiVersion: test.kubeplug.io/v1\nkind: Hostile\nmetadata:\n  name: {name}\nspec:\n  behave: {behave}\n{extra}"
    )
}

/// A one-replica PostgreSQL `Database`.
pub fn database(name: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n"
    )
}

/// Wait until plugin `name` serves.
pub fn running(host: &Host, name: &str) {
    eventually(&format!("{name} to load"), FENCE_WAIT, || {
        host.plugin(name).filter(|p| p["state"] == "running")
    });
}

/// Wait until Database `name` is Running.
pub fn database_runs(ns: &str, name: &str) {
    eventually(&format!("database {name} to run"), FENCE_WAIT, || {
        let db = get_json(ns, &format!("database/{name}"))?;
        (db["status"]["phase"] == "Running").then_some(())
    });
}

/// A user bound in `ns` to `rules` (a Role and its RoleBinding, named
/// after the user).
pub fn role(ns: &str, user: &str, rules: &str) {
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: {user}\n  namespace: {ns}\nrules:\n{rules}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {user}\n  namespace: {ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {user}\nsubjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: {user}\n"
        )),
    );
}

/// A user bound cluster-wide to one of the ClusterRoles for readers of
/// `plugins` that deploy/ ships (deploy/components/aggregated-api/rbac.yaml:
/// `kubeplug-plugin-viewer`, `kubeplug-plugin-details-viewer`), by a
/// ClusterRoleBinding of the user's name, deleted when dropped.
pub struct PluginReader {
    pub name: String,
}

impl PluginReader {
    pub fn new(prefix: &str, cluster_role: &str) -> Self {
        let rbac = repo().join("deploy/components/aggregated-api/rbac.yaml");
        kubectl_ok(&["apply", "-f", rbac.to_str().expect("utf-8 path")], None);
        let name = format!("{prefix}-{}", std::process::id());
        kubectl_ok(
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {name}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {cluster_role}\nsubjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: {name}\n"
            )),
        );
        PluginReader { name }
    }

    /// The `Plugin` `plugin` as this user sees it through the aggregator
    /// (JSON), `None` while that fails (RBAC not yet seen, say).
    pub fn plugin(&self, plugin: &str) -> Option<Value> {
        let out = kubectl(
            &["get", "plugin", plugin, "-o", "json", "--as", &self.name],
            None,
        );
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    }
}

impl Drop for PluginReader {
    fn drop(&mut self) {
        let _ = kubectl(
            &[
                "delete",
                "clusterrolebinding",
                &self.name,
                "--ignore-not-found",
            ],
            None,
        );
    }
}

/// The APIService `v1alpha1.kubeplug.io`.
pub const APISERVICE: &str = "apiservice/v1alpha1.kubeplug.io";

/// The APIService registered for a test, removed at the end: a registered
/// group whose server is gone degrades discovery for everyone.
pub struct Registration;

impl Registration {
    pub fn new(port: u16, ca: &Path) -> Self {
        deploy_script(
            "deploy/apiservice/register-loopback",
            &[&port.to_string(), ca.to_str().expect("utf-8 path")],
        );
        Registration
    }
}

/// Run one of the project's deploy scripts (`rel` from the repository
/// root) with `args`; it must succeed.
pub fn deploy_script(rel: &str, args: &[&str]) {
    let out = Command::new(repo().join(rel))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{rel} runs: {e}"));
    assert!(
        out.status.success(),
        "{rel}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Drop for Registration {
    fn drop(&mut self) {
        kubectl(&["delete", APISERVICE, "--ignore-not-found"], None);
    }
}

/// A host serving the aggregated API on a free port with fresh
/// certificates, registered as the APIService for the test.
pub struct ApiHost {
    // Dropped first: the APIService goes before its server.
    _registration: Option<Registration>,
    pub host: Host,
    pub port: u16,
    /// `ca.crt`, `tls.crt`, `tls.key` ([`certificates`]).
    pub certs: PathBuf,
}

impl ApiHost {
    pub fn start(dir: &PluginDir, extra: &[&str]) -> Self {
        let mut api = Self::unregistered(dir, extra);
        api._registration = Some(Registration::new(api.port, &api.certs.join("ca.crt")));
        api
    }

    /// The same, not registered: reached only straight at its port.
    pub fn unregistered(dir: &PluginDir, extra: &[&str]) -> Self {
        let certs = certificates(&dir.path);
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let (cert, key) = (certs.join("tls.crt"), certs.join("tls.key"));
        let mut args = vec![
            "--api-listen",
            &listen,
            "--api-cert",
            cert.to_str().expect("utf-8 path"),
            "--api-key",
            key.to_str().expect("utf-8 path"),
        ];
        args.extend_from_slice(extra);
        let host = Host::start_with(dir, &args);
        ApiHost {
            _registration: None,
            host,
            port,
            certs,
        }
    }
}

/// The host's flags to serve the webhooks on loopback `port` with the
/// serving certificate in `certs` ([`certificates`]).
pub fn webhook_flags(certs: &Path, port: u16) -> Vec<String> {
    let path = |file: &str| certs.join(file).to_str().expect("utf-8 path").to_string();
    vec![
        "--webhook-listen".into(),
        format!("127.0.0.1:{port}"),
        "--webhook-cert".into(),
        path("tls.crt"),
        "--webhook-key".into(),
        path("tls.key"),
    ]
}

/// `ca` as a webhook configuration's `caBundle` (base64).
pub fn ca_bundle(ca: &Path) -> String {
    let out = Command::new("base64")
        .arg("-w0")
        .arg(ca)
        .output()
        .expect("base64 runs");
    String::from_utf8(out.stdout).expect("base64 is ASCII")
}

/// `kubectl proxy` on a loopback port, stopped when dropped: requests to
/// the API server as the tests' admin, many at once, without a kubectl
/// process (and its start-up's CPU and time) for each.
pub struct ApiProxy {
    child: Child,
    port: u16,
}

impl ApiProxy {
    pub fn start() -> Self {
        let port = free_port();
        let child = Command::new(required_env("KUBECTL"))
            .args(["proxy", "--address", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .env("KUBECONFIG", required_env("KUBECONFIG"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kubectl proxy");
        let proxy = ApiProxy { child, port };
        eventually("kubectl proxy to serve", Duration::from_secs(60), || {
            proxy
                .request("GET", "/version", "")
                .ok()
                .filter(|(code, _)| *code == 200)
        });
        proxy
    }

    /// POST the JSON `body` to `path` (`/apis/...`): (HTTP status, body);
    /// status 0 and the reason if no answer came.
    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        self.request("POST", path, body)
            .unwrap_or_else(|e| (0, format!("{e:#}")))
    }

    fn request(&self, method: &str, path: &str, body: &str) -> anyhow::Result<(u16, String)> {
        let stream =
            TcpStream::connect(("127.0.0.1", self.port)).context("connect to kubectl proxy")?;
        http_exchange(
            stream,
            Duration::from_secs(60),
            &format!(
                "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    }
}

/// A listener on a loopback port that hands each connection, on a thread
/// of its own, to `serve` with `state` (a receiver of the host's traces,
/// say): its port.
pub fn loopback_server<S, F>(state: S, serve: F) -> u16
where
    S: Clone + Send + 'static,
    F: Fn(TcpStream, &S) + Clone + Send + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("bound").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (state, serve) = (state.clone(), serve.clone());
            std::thread::spawn(move || serve(stream, &state));
        }
    });
    port
}

/// Answer the OTLP/HTTP trace exports of one connection (the exporter keeps
/// it open): the body of each `POST /v1/traces` sent as `content_type` goes
/// to `keep`, which says whether it could read it (200, with `reply` as the
/// body, in that type); anything else is answered 400.
pub fn serve_trace_exports(
    stream: TcpStream,
    content_type: &str,
    reply: &str,
    mut keep: impl FnMut(&[u8]) -> bool,
) -> std::io::Result<()> {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let (mut length, mut sent_as) = (0, String::new());
        loop {
            let mut header = String::new();
            reader.read_line(&mut header)?;
            let Some((name, value)) = header.trim_end().split_once(':') else {
                break;
            };
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "content-type" => sent_as = value.trim().to_string(),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let read = request_line.starts_with("POST /v1/traces ")
            && sent_as.starts_with(content_type)
            && keep(&body);
        if !read {
            eprintln!("trace receiver: unexpected {request_line:?} ({sent_as})");
        }
        let (status, reply) = if read {
            ("200 OK", reply)
        } else {
            ("400 Bad Request", "")
        };
        write!(
            writer,
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{reply}",
            reply.len()
        )?;
    }
}

/// Send `request` (HTTP/1.1, `Connection: close`) on `stream` and read the
/// whole answer within `timeout`: (status, body, de-chunked if it came so).
fn http_exchange(
    mut stream: TcpStream,
    timeout: Duration,
    request: &str,
) -> anyhow::Result<(u16, String)> {
    use std::io::{Read, Write};
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code: u16 = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("malformed HTTP response")?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((code, if chunked { dechunk(body) } else { body.into() }))
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA and a serving certificate (deploy/apiservice/gen-cert) in
/// `dir/api-certs`.
pub fn certificates(dir: &Path) -> PathBuf {
    let certs = dir.join("api-certs");
    deploy_script(
        "deploy/apiservice/gen-cert",
        &[certs.to_str().expect("utf-8 path")],
    );
    certs
}

/// A kubeconfig that authenticates as the `kubeplug` ServiceAccount only.
pub fn service_account_kubeconfig(dir: &PluginDir) -> std::path::PathBuf {
    install_crds();
    let rbac = repo().join("deploy/base/rbac.yaml");
    kubectl_ok(&["apply", "-f", rbac.to_str().expect("utf-8 path")], None);
    let token = kubectl_ok(
        &[
            "create",
            "token",
            "kubeplug",
            "-n",
            "kubeplug-system",
            "--duration=1h",
        ],
        None,
    );
    let admin: serde_json::Value = serde_json::from_str(&kubectl_ok(
        &["config", "view", "--raw", "--minify", "-o", "json"],
        None,
    ))
    .expect("kubeconfig as JSON");
    let cluster = &admin["clusters"][0]["cluster"];
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": "kubeplug", "user": {"token": token.trim()}}],
        "contexts": [{"name": "kubeplug", "context": {"cluster": "local", "user": "kubeplug"}}],
        "current-context": "kubeplug",
    });
    let path = dir.path.with_extension("sa.kubeconfig");
    std::fs::write(&path, kubeconfig.to_string()).expect("write kubeconfig");
    path
}

/// `helm ARGS` as an operator types it; its stdout, or a panic with both.
pub fn helm(args: &[&str]) -> String {
    let helm = std::env::var("HELM").expect("HELM (tests/e2e/run sets it)");
    let out = Command::new(&helm)
        .args(args)
        .arg("--color=never")
        .output()
        .expect("run helm");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "helm {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Ship (or upgrade) plugin `name` from `file` as its team does under the
/// chart, which holds no plugin: its own ConfigMap in `kubeplug-system`,
/// applied server-side.
pub fn ship_plugin(name: &str, file: &Path) {
    let configmap = kubectl_ok(
        &[
            "create",
            "configmap",
            &format!("kubeplug-plugin-{name}"),
            "-n",
            "kubeplug-system",
            &format!("--from-file={name}.wasm={}", file.display()),
            "--dry-run=client",
            "-o",
            "yaml",
        ],
        None,
    );
    kubectl_ok(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&configmap),
    );
}

/// `helm upgrade --install` of the chart `deploy/chart` as release
/// `kubeplug` in `kubeplug-system`, with `args` after the chart's own:
/// server-side, adopting what other tests applied with kubectl
/// (`--take-ownership`) and taking back the fields they changed
/// (`--force-conflicts`). Its stdout.
pub fn helm_install(args: &[&str]) -> String {
    let chart = repo().join("deploy/chart");
    let mut all = vec![
        "upgrade",
        "--install",
        "kubeplug",
        chart.to_str().expect("utf-8 path"),
        "--namespace",
        "kubeplug-system",
        "--create-namespace",
        "--server-side=true",
        "--force-conflicts",
        "--take-ownership",
    ];
    all.extend_from_slice(args);
    helm(&all)
}
