//! Plugins as OCI artifacts: `kubeplug push` to a real registry (CNCF
//! Distribution, built by `tests/registry/build`, started here on loopback
//! with its storage in a temporary directory), the pushed content read back
//! over the distribution API as other tools read it, and the host run on
//! the plugin taken from the image-volume image.
//!
//! What this proves and what it does not: the registry accepts the content
//! and hands back the same bytes; the Wasm artifact has the media types Wasm
//! tools look for; the image-volume image's tar layer, unpacked as a
//! container runtime unpacks a layer (`tar -x`), is a directory the host
//! serves. No container runtime pulls anything here (kwok's nodes run
//! nothing), so containerd's and CRI-O's own handling of these manifests is
//! not exercised.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kubeplug_e2e::*;
use serde_json::Value;

const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// A running registry, stopped when dropped.
struct Registry {
    child: Child,
    port: u16,
    _storage: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    fn start() -> Self {
        let bin = std::env::var("REGISTRY").expect("REGISTRY (tests/e2e/run sets it)");
        let storage = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let config = storage.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                storage.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the registry");
        let registry = Registry {
            child,
            port,
            _storage: storage,
        };
        eventually("the registry to answer", Duration::from_secs(30), || {
            let (status, _, _) = registry.get("/v2/", "*/*").ok()?;
            (status == 200).then_some(())
        });
        registry
    }

    /// GET `path`: status, content type, body.
    fn get(&self, path: &str, accept: &str) -> std::io::Result<(u16, String, Vec<u8>)> {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\nAccept: {accept}\r\n\r\n",
            self.port
        )?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| std::io::Error::other("no end of headers"))?;
        let head = String::from_utf8_lossy(&answer[..split]).to_string();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let content_type = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        Ok((status, content_type, answer[split + 4..].to_vec()))
    }

    fn fetch(&self, repo: &str, kind: &str, reference: &str, accept: &str) -> (String, Vec<u8>) {
        let path = format!("/v2/{repo}/{kind}/{reference}");
        let (status, content_type, body) = self.get(&path, accept).expect("GET from the registry");
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
        (content_type, body)
    }

    fn json(&self, repo: &str, kind: &str, reference: &str, accept: &str) -> Value {
        serde_json::from_slice(&self.fetch(repo, kind, reference, accept).1).expect("JSON")
    }
}

fn push(reference: &str) -> String {
    let out = Command::new(host_binary())
        .args(["push", built("database").to_str().unwrap(), reference])
        .env("SOURCE_DATE_EPOCH", "0")
        .output()
        .expect("run kubeplug push");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubeplug push: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_pushed_plugin_is_a_wasm_artifact_and_an_image_the_host_serves_from() {
    let registry = Registry::start();
    let repo = "plugins/database";
    let out = push(&format!("127.0.0.1:{}/{repo}:0.1.0", registry.port));
    assert!(out.contains(":0.1.0@sha256:"), "{out}");
    let wasm = std::fs::read(built("database")).unwrap();

    // The tag is the Wasm OCI artifact, as wkg and Spin fetch it.
    let (content_type, _) = registry.fetch(repo, "manifests", "0.1.0", MANIFEST);
    assert_eq!(content_type, MANIFEST);
    let manifest = registry.json(repo, "manifests", "0.1.0", MANIFEST);
    assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG);
    assert_eq!(manifest["layers"].as_array().map(Vec::len), Some(1));
    let layer = &manifest["layers"][0];
    assert_eq!(layer["mediaType"], "application/wasm");
    assert_eq!(
        layer["annotations"]["org.opencontainers.image.title"],
        "database.wasm"
    );
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.title"],
        "database"
    );
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.created"],
        "1970-01-01T00:00:00Z"
    );
    let (_, bytes) = registry.fetch(repo, "blobs", layer["digest"].as_str().unwrap(), "*/*");
    assert!(bytes == wasm, "the layer is the .wasm, byte for byte");
    let config = registry.json(
        repo,
        "blobs",
        manifest["config"]["digest"].as_str().unwrap(),
        "*/*",
    );
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    assert_eq!(config["layerDigests"][0], layer["digest"]);
    assert!(
        config["component"]["exports"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e
                .as_str()
                .is_some_and(|e| e.starts_with("kubeplug:plugin/reconciler")))),
        "{config}"
    );

    // Pushing again changes nothing: the same digests.
    let again = push(&format!("127.0.0.1:{}/{repo}:0.1.0", registry.port));
    assert_eq!(out, again);

    // The `-volume` tag is an index of images; take this machine's
    // architecture as a kubelet would, and unpack its layer as the runtime
    // unpacks a layer, into the image volume's directory.
    let index = registry.json(repo, "manifests", "0.1.0-volume", INDEX);
    assert_eq!(index["mediaType"], INDEX);
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let entry = index["manifests"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["platform"]["architecture"] == arch))
        .unwrap_or_else(|| panic!("no {arch} image in {index}"));
    let image = registry.json(
        repo,
        "manifests",
        entry["digest"].as_str().unwrap(),
        MANIFEST,
    );
    assert_eq!(
        image["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let tar_layer = &image["layers"][0];
    assert_eq!(
        tar_layer["mediaType"],
        "application/vnd.oci.image.layer.v1.tar"
    );
    let (_, tar) = registry.fetch(repo, "blobs", tar_layer["digest"].as_str().unwrap(), "*/*");

    let dir = PluginDir::with(&[]);
    let volume = dir.path.join("database");
    std::fs::create_dir_all(&volume).unwrap();
    unpack(&tar, &volume);
    assert!(std::fs::read(volume.join("database.wasm")).unwrap() == wasm);
    // Its settings as the overlay gives them (beside the file; an image
    // volume would take them from `--settings`).
    let settings = repo_path("deploy/base/settings/database.yaml");
    if settings.exists() {
        std::fs::copy(&settings, volume.join("database.yaml")).unwrap();
    }

    // The seed scenario, on the plugin from the image.
    install_crds();
    let ns = Namespace::new("artifacts");
    let host = Host::start(&dir);
    running(&host, "database");
    let file = host.plugin("database").expect("the database plugin");
    assert!(
        file["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("database/database.wasm")),
        "served from the image volume's place: {file}"
    );
    apply(&ns.name, &database("orders"));
    database_runs(&ns.name, "orders");
}

fn repo_path(rel: &str) -> std::path::PathBuf {
    repo().join(rel)
}

/// `tar -x` of a layer into `dir`, as a runtime unpacks one.
fn unpack(tar: &[u8], dir: &Path) {
    let file = dir.with_extension("layer.tar");
    std::fs::write(&file, tar).unwrap();
    let out = Command::new("tar")
        .arg("-xf")
        .arg(&file)
        .arg("-C")
        .arg(dir)
        .output()
        .expect("run tar");
    assert!(
        out.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&file).unwrap();
}
