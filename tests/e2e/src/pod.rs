//! A pod run as the kubelet would run it, with real parts and no container
//! runtime (none runs here, and kwok's simulated nodes run nothing): the
//! host image's root filesystem unpacked from the OCI archive `make image`
//! built, read-only, entered with `chroot` as the pod's user in a private
//! mount namespace; the container's args, env and volume mounts taken from
//! the pod spec as the API server stored it; configMap and projected
//! volumes laid out and kept up to date by the kubelet's own code
//! (`tests/cluster` `volume`); emptyDirs owned by the pod's user; the
//! kubelet's `/etc/hosts`; a ServiceAccount token from the TokenRequest API
//! at the in-cluster path, with `KUBERNETES_SERVICE_HOST`/`PORT`.
//!
//! The network namespace is this machine's: a listener binds the loopback
//! and every address, as a pod's would its own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::{kubectl_ok, repo};

/// The image's user (deploy/image/build, deploy/base/deployment.yaml).
pub const UID: u32 = 65532;

/// A pod laid out and ready to start: its volumes stay in sync until it
/// is dropped.
pub struct Pod {
    /// Scratch: the unpacked image, the volumes, the token.
    pub work: tempfile::TempDir,
    rootfs: PathBuf,
    volumes: Vec<Child>,
    mounts: Vec<(PathBuf, String, bool)>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    user: String,
    command: String,
}

impl Drop for Pod {
    fn drop(&mut self) {
        for child in &mut self.volumes {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Pod {
    /// Lay out container `container` of pod spec `spec` in `namespace`, as
    /// pod `pod_name`; `arg` rewrites each argument (a free port in place of
    /// one this machine may have taken).
    pub fn prepare(
        namespace: &str,
        spec: &Value,
        container: usize,
        pod_name: &str,
        arg: impl Fn(String) -> String,
    ) -> Pod {
        let work = tempfile::tempdir().expect("temp dir");
        let rootfs = unpack_image(work.path());
        managed_hosts_file(&rootfs, pod_name);
        let container = &spec["containers"][container];
        let mut pod = Pod {
            rootfs,
            volumes: Vec::new(),
            mounts: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            user: String::new(),
            command: container["command"][0]
                .as_str()
                .unwrap_or("/kubeplug")
                .to_string(),
            work,
        };
        let dir = pod.work.path().to_path_buf();
        pod.lay_out_volumes(namespace, spec, container, &dir);
        pod.service_account(namespace, spec, &dir);
        pod.args = container["command"]
            .as_array()
            .map(|c| c.iter().skip(1).cloned().collect::<Vec<_>>())
            .unwrap_or_default()
            .iter()
            .chain(container["args"].as_array().into_iter().flatten())
            .map(|a| arg(a.as_str().expect("a string argument").to_string()))
            .collect();
        pod.environment(namespace, container, pod_name);
        let context = &spec["securityContext"];
        pod.user = format!("{}:{}", context["runAsUser"], context["runAsGroup"]);
        pod
    }

    /// The arguments the container starts with (after the rewrite).
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// The pod's user, `uid:gid`.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The command that enters the pod and runs its entrypoint: `chroot`
    /// and `sh` exec, so the child's pid is the container's process.
    pub fn command(&self) -> Command {
        let r = path_str(&self.rootfs).to_string();
        let mut script = format!(
            "set -e\nmount --bind {r} {r}\nmkdir -p {r}/proc {r}/dev\nmount -t proc proc {r}/proc\nmount --rbind /dev {r}/dev\n"
        );
        for (dir, at, read_only) in &self.mounts {
            script += &format!("mkdir -p {r}{at}\nmount --bind {} {r}{at}\n", dir.display());
            if *read_only {
                script += &format!("mount -o remount,bind,ro {r}{at}\n");
            }
        }
        script += &format!(
            "mount -o remount,bind,ro {r}\nexec chroot --userspec={} {r} {} \"$@\"\n",
            self.user, self.command
        );
        let mut command = Command::new("unshare");
        command
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                &script,
                "pod",
            ])
            .args(&self.args)
            .env_clear()
            .envs(self.env.iter().cloned());
        command
    }

    /// Volumes: configMap and projected ones from the kubelet's writer,
    /// emptyDirs as empty directories owned by the pod's user.
    fn lay_out_volumes(&mut self, namespace: &str, spec: &Value, container: &Value, work: &Path) {
        let mounts = container["volumeMounts"].as_array().cloned();
        for mount in mounts.into_iter().flatten() {
            let name = mount["name"].as_str().expect("mount name");
            let volume = spec["volumes"]
                .as_array()
                .and_then(|v| v.iter().find(|v| v["name"] == name))
                .unwrap_or_else(|| panic!("volume {name}"));
            let dir = work.join(format!("volume-{name}"));
            // The volume tool's name for a source: `name?` when optional
            // (skipped while it does not exist, as by the kubelet).
            let source = |cm: &Value| {
                let name = cm["name"].as_str()?;
                Some(if cm["optional"] == true {
                    format!("{name}?")
                } else {
                    name.to_string()
                })
            };
            if let Some(cm) = source(&volume["configMap"]) {
                self.volumes.push(configmap_volume(namespace, &[cm], &dir));
            } else if let Some(sources) = volume["projected"]["sources"].as_array() {
                let names: Vec<String> = sources
                    .iter()
                    .filter_map(|s| source(&s["configMap"]))
                    .collect();
                self.volumes.push(configmap_volume(namespace, &names, &dir));
            } else if volume["emptyDir"].is_object() {
                std::fs::create_dir_all(&dir).unwrap();
                chown_to_image_user(&dir);
            } else {
                panic!("volume {name}: a kind this harness cannot lay out: {volume}");
            }
            let read_only = mount["readOnly"].as_bool().unwrap_or(false);
            self.mounts.push((
                dir,
                mount["mountPath"].as_str().unwrap().to_string(),
                read_only,
            ));
        }
    }

    /// The ServiceAccount's projected token, CA and namespace, at the
    /// in-cluster path.
    fn service_account(&mut self, namespace: &str, spec: &Value, work: &Path) {
        let account = spec["serviceAccountName"].as_str().unwrap_or("default");
        let sa = work.join("serviceaccount");
        std::fs::create_dir_all(&sa).unwrap();
        let token = kubectl_ok(
            &["create", "token", account, "-n", namespace, "--duration=1h"],
            None,
        );
        std::fs::write(sa.join("token"), token.trim()).unwrap();
        std::fs::write(sa.join("namespace"), namespace).unwrap();
        let (ca, _, _) = api_server();
        std::fs::write(sa.join("ca.crt"), ca).unwrap();
        self.mounts.push((
            sa,
            "/var/run/secrets/kubernetes.io/serviceaccount".into(),
            true,
        ));
    }

    /// The kubelet's environment: the API server's address, the hostname,
    /// and the container's env with its field references resolved.
    fn environment(&mut self, namespace: &str, container: &Value, pod_name: &str) {
        let (_, host_ip, port) = api_server();
        self.env = vec![
            (
                "PATH".into(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            ),
            ("KUBERNETES_SERVICE_HOST".into(), host_ip),
            ("KUBERNETES_SERVICE_PORT".into(), port),
            ("HOSTNAME".into(), pod_name.into()),
        ];
        for var in container["env"].as_array().into_iter().flatten() {
            let name = var["name"].as_str().unwrap().to_string();
            let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => pod_name.to_string(),
                Some("metadata.namespace") => namespace.to_string(),
                Some(other) => panic!("env {name}: unexpected fieldRef {other}"),
                None if var["valueFrom"]["resourceFieldRef"].is_object() => {
                    // The kubelet's resolution: the container's limit over the divisor.
                    let field = &var["valueFrom"]["resourceFieldRef"];
                    assert_eq!(field["resource"], "limits.memory", "env {name}");
                    assert_eq!(field["divisor"], "1Mi", "env {name}");
                    let limit = container["resources"]["limits"]["memory"]
                        .as_str()
                        .expect("a memory limit");
                    let mib: u64 = match limit.split_at(limit.len() - 2) {
                        (n, "Mi") => n.parse().expect("MiB"),
                        (n, "Gi") => n.parse::<u64>().expect("GiB") * 1024,
                        _ => panic!("unexpected memory limit {limit}"),
                    };
                    mib.to_string()
                }
                None => var["value"].as_str().expect("env value").to_string(),
            };
            self.env.push((name, value));
        }
    }
}

/// The API server's CA (PEM), host and port, from the admin kubeconfig.
fn api_server() -> (Vec<u8>, String, String) {
    let admin: Value = serde_json::from_str(&kubectl_ok(
        &["config", "view", "--raw", "--minify", "-o", "json"],
        None,
    ))
    .expect("kubeconfig");
    let cluster = &admin["clusters"][0]["cluster"];
    let ca = match cluster["certificate-authority-data"].as_str() {
        Some(data) => decode_base64(data),
        None => std::fs::read(cluster["certificate-authority"].as_str().expect("a CA"))
            .expect("read the CA"),
    };
    let server = cluster["server"].as_str().expect("server");
    let (host, port) = server
        .trim_start_matches("https://")
        .rsplit_once(':')
        .expect("server host:port");
    (ca, host.to_string(), port.to_string())
}

/// Base64 as bytes (in process: piping a plugin's worth through `base64
/// -d` fills its output pipe before its input is written, and both wait).
pub fn decode_base64(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    let text: String = text.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64")
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn kubectl_path() -> PathBuf {
    PathBuf::from(std::env::var("KUBECTL").expect("KUBECTL (tests/e2e/run sets it)"))
}

/// The `kubeplug-cluster` binary (beside the kubectl link).
fn cluster_binary() -> PathBuf {
    let kubectl = kubectl_path();
    std::fs::canonicalize(&kubectl)
        .unwrap_or(kubectl)
        .with_file_name("kubeplug-cluster")
}

/// The host image's root filesystem, unpacked from `make image`'s archive.
fn unpack_image(into: &Path) -> PathBuf {
    let version = std::fs::read_to_string(repo().join("host/kubeplug/Cargo.toml"))
        .expect("host/kubeplug/Cargo.toml")
        .lines()
        .find_map(|l| {
            l.strip_prefix("version = \"")?
                .strip_suffix('"')
                .map(String::from)
        })
        .expect("host version");
    let archive = repo().join(format!("target/images/kubeplug-{version}.oci.tar"));
    assert!(
        archive.exists(),
        "{} is missing: run `make image` (make test does)",
        archive.display()
    );
    let layout = into.join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    run_ok(Command::new("tar").args(["-xf", path_str(&archive), "-C", path_str(&layout)]));
    let bundle = into.join("bundle");
    run_ok(Command::new("umoci").args([
        "unpack",
        "--image",
        &format!("{}:{version}", layout.display()),
        path_str(&bundle),
    ]));
    bundle.join("rootfs")
}

/// The `/etc/hosts` the kubelet mounts into every container
/// (`managedHostsFileContent` in the kubelet): without it a `FROM scratch`
/// image cannot resolve `localhost`. The pod's own line names the loopback,
/// its network being this machine's. No `/etc/resolv.conf`: there is no
/// cluster DNS here.
fn managed_hosts_file(rootfs: &Path, pod_name: &str) {
    let etc = rootfs.join("etc");
    std::fs::create_dir_all(&etc).expect("/etc in the image");
    std::fs::write(
        etc.join("hosts"),
        format!(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n127.0.0.1\t{pod_name}\n"
        ),
    )
    .expect("write /etc/hosts");
}

fn run_ok(command: &mut Command) {
    let out = command.output().expect("run a command");
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A volume the kubelet would lay out from `configmaps`, in `dir`.
fn configmap_volume(namespace: &str, configmaps: &[String], dir: &Path) -> Child {
    let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG (tests/e2e/run sets it)");
    let mut child = Command::new(cluster_binary())
        .args(["volume", "--namespace", namespace, "--period", "1s"])
        .args(["--configmaps", &configmaps.join(",")])
        .args(["--dir", path_str(dir)])
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the configMap volume");
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("stdout");
    let mut first = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut first)
        .expect("volume output");
    assert!(first.starts_with("VOLUME_READY="), "volume: {first}");
    child
}

fn chown_to_image_user(path: &Path) {
    run_ok(Command::new("chown").args(["-R", &format!("{UID}:{UID}"), path_str(path)]));
}
