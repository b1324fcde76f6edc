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
//!
//! Signatures (`push --sign-key`, `verify`) are checked in cosign's layout
//! and by `kubeplug verify`, with keys openssl makes; cosign itself does not
//! run here (docs/install.md says what it was tried with). Credentials are
//! checked against the registry with `htpasswd` auth: a docker
//! `config.json` entry and a credential helper on PATH.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use kubeplug_e2e::chart::{ChartHost, SYSTEM, get_plugin, remove_deployment};
use kubeplug_e2e::registry::Registry;
use kubeplug_e2e::*;

const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const SIGNATURE: &str = "dev.cosignproject.cosign/signature";

/// The one user of the registry with `htpasswd` auth, and its bcrypt line
/// (`golang.org/x/crypto/bcrypt`, cost 4, of [`PASSWORD`]: fixed, since
/// generating one would need a bcrypt crate or a Go build for a test-only
/// secret of a loopback registry).
const USER: &str = "kubeplug";
const PASSWORD: &str = "registry-test-password";
const HTPASSWD: &str = "kubeplug:$2a$04$RF.ya1GKnsvZzG5ciWAd5ez/aBuFj8RE8ni6.UgqjGI4bB.txf5um";

/// Asking for [`USER`] and [`PASSWORD`] (Basic, as Distribution's
/// `htpasswd` auth does).
fn registry_with_htpasswd() -> Registry {
    Registry::start_with(|dir| {
        let file = dir.join("htpasswd");
        std::fs::write(&file, format!("{HTPASSWD}\n")).unwrap();
        format!(
            "auth:\n  htpasswd:\n    realm: kubeplug-e2e\n    path: {}\n",
            file.display()
        )
    })
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

#[test]
fn a_signed_push_is_verified_by_its_key_only_and_an_unsigned_or_copied_one_is_refused() {
    let registry = Registry::start();
    let repo = "plugins/database";
    let name = format!("127.0.0.1:{}/{repo}", registry.port);
    let dir = tempfile::tempdir().unwrap();
    let key = Keys::pkcs8(dir.path(), "key");
    let other = Keys::sec1(dir.path(), "other");

    let out = kubeplug(dir.path())
        .args(["push", wasm(), &format!("{name}:0.1.0"), "--sign-key"])
        .arg(&key.private)
        .output()
        .unwrap();
    let stdout = succeeded("push --sign-key", &out);
    let digest = digest_of(&stdout, &format!("{name}:0.1.0@"));
    let sig_tag = format!("sha256-{}.sig", &digest[7..]);
    assert!(stdout.contains(&format!("{name}:{sig_tag}")), "{stdout}");

    // The signature is where and what cosign reads.
    let signatures = registry.json(repo, "manifests", &sig_tag, MANIFEST);
    let layers = signatures["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], SIMPLE_SIGNING);
    assert!(
        layers[0]["annotations"][SIGNATURE].is_string(),
        "{signatures}"
    );
    let payload = registry.json(repo, "blobs", layers[0]["digest"].as_str().unwrap(), "*/*");
    assert_eq!(
        payload["critical"]["image"]["docker-manifest-digest"],
        digest.as_str()
    );
    assert_eq!(
        payload["critical"]["type"],
        "cosign container image signature"
    );
    assert_eq!(
        payload["critical"]["identity"]["docker-reference"],
        name.as_str()
    );

    // Both tags verify with the key, neither with another.
    for tag in ["0.1.0", "0.1.0-volume"] {
        let reference = format!("{name}:{tag}");
        let stdout = succeeded("verify", &verify(dir.path(), &reference, &key.public));
        assert!(stdout.contains("signed by"), "{stdout}");
        let stderr = failed(
            "verify with another key",
            &verify(dir.path(), &reference, &other.public),
        );
        assert!(
            stderr.contains("none of its 1 signature(s) is by this key"),
            "{stderr}"
        );
    }

    // Signing again with the key adds nothing; another key's signature
    // joins the first, and each key verifies its own.
    let push_signed = |key: &Path| {
        let out = kubeplug(dir.path())
            .args(["push", wasm(), &format!("{name}:0.1.0"), "--sign-key"])
            .arg(key)
            .output()
            .unwrap();
        succeeded("push --sign-key", &out);
        let signatures = registry.json(repo, "manifests", &sig_tag, MANIFEST);
        signatures["layers"].as_array().map_or(0, Vec::len)
    };
    assert_eq!(push_signed(&key.private), 1);
    assert_eq!(push_signed(&other.private), 2);
    for keys in [&key, &other] {
        succeeded(
            "verify",
            &verify(dir.path(), &format!("{name}:0.1.0"), &keys.public),
        );
    }
    // By digest too.
    succeeded(
        "verify by digest",
        &verify(dir.path(), &format!("{name}@{digest}"), &key.public),
    );

    // An unsigned push (another time, so other digests) is refused.
    let out = kubeplug(dir.path())
        .env("SOURCE_DATE_EPOCH", "1")
        .args(["push", wasm(), &format!("{name}:0.2.0")])
        .output()
        .unwrap();
    let unsigned = digest_of(&succeeded("push", &out), &format!("{name}:0.2.0@"));
    assert_ne!(unsigned, digest);
    let stderr = failed(
        "verify unsigned",
        &verify(dir.path(), &format!("{name}:0.2.0"), &key.public),
    );
    assert!(stderr.contains("it is not signed"), "{stderr}");

    // A signature copied from the signed manifest names that manifest.
    let (_, copied) = registry.fetch(repo, "manifests", &sig_tag, MANIFEST);
    let path = format!("/v2/{repo}/manifests/sha256-{}.sig", &unsigned[7..]);
    let (status, _, body) = registry
        .request("PUT", &path, &format!("Content-Type: {MANIFEST}"), &copied)
        .unwrap();
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let stderr = failed(
        "verify a copied signature",
        &verify(dir.path(), &format!("{name}:0.2.0"), &key.public),
    );
    assert!(
        stderr.contains(&format!(
            "a signature by this key names {digest}, not this manifest"
        )),
        "{stderr}"
    );
}

#[test]
fn a_registry_asking_for_credentials_gets_them_from_docker_config_or_a_credential_helper() {
    use base64::Engine as _;
    let registry = registry_with_htpasswd();
    let name = format!("127.0.0.1:{}/plugins/database", registry.port);
    let reference = format!("{name}:0.1.0");
    let dir = tempfile::tempdir().unwrap();
    let key = Keys::pkcs8(dir.path(), "key");
    let push = |config: &Path, path: Option<&std::ffi::OsStr>| {
        let mut command = kubeplug(config);
        if let Some(path) = path {
            command.env("PATH", path);
        }
        command
            .args(["push", wasm(), &reference, "--sign-key"])
            .arg(&key.private)
            .output()
            .unwrap()
    };
    let config = |name: &str, json: String| {
        let config = dir.path().join(name);
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(config.join("config.json"), json).unwrap();
        config
    };
    let host = format!("127.0.0.1:{}", registry.port);
    let auth = |password: &str| {
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"))
    };

    // Anonymous: refused, saying what would do.
    let anonymous = dir.path().join("anonymous");
    std::fs::create_dir_all(&anonymous).unwrap();
    let stderr = failed("an anonymous push", &push(&anonymous, None));
    assert!(stderr.contains("asks for credentials"), "{stderr}");

    // A wrong password: refused, and not shown.
    let wrong = config(
        "wrong",
        format!(
            r#"{{"auths": {{"{host}": {{"auth": "{}"}}}}}}"#,
            auth("not-the-password")
        ),
    );
    let stderr = failed("a push with a wrong password", &push(&wrong, None));
    assert!(stderr.contains("401"), "{stderr}");
    assert!(
        !stderr.contains("not-the-password") && !stderr.contains(&auth("not-the-password")),
        "{stderr}"
    );

    // `docker login`'s entry, under a key with a scheme and a path.
    let docker = config(
        "docker",
        format!(
            r#"{{"auths": {{"http://{host}/v1/": {{"auth": "{}"}}}}}}"#,
            auth(PASSWORD)
        ),
    );
    let out = push(&docker, None);
    assert!(!String::from_utf8_lossy(&out.stderr).contains(PASSWORD));
    succeeded("a push with config.json credentials", &out);
    succeeded(
        "verify with config.json credentials",
        &verify(&docker, &reference, &key.public),
    );

    // A credential helper named for the registry, found on PATH.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let asked = dir.path().join("asked");
    let helper = bin.join("docker-credential-e2e");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 2\nread -r server\necho \"$server\" >> {asked}\n\
             if [ \"$server\" = {host} ]; then\n  printf '{{\"ServerURL\":\"%s\",\"Username\":\"{USER}\",\"Secret\":\"{PASSWORD}\"}}' \"$server\"\n\
             else\n  echo 'credentials not found in native keychain'; exit 1\nfi\n",
            asked = asked.display(),
        ),
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&helper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&helper, permissions).unwrap();
    let helped = config(
        "helped",
        format!(r#"{{"auths": {{"{host}": {{}}}}, "credHelpers": {{"{host}": "e2e"}}}}"#),
    );
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let out = push(&helped, Some(&path));
    succeeded("a push with a credential helper", &out);
    assert!(!String::from_utf8_lossy(&out.stdout).contains(PASSWORD));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(PASSWORD));
    let asked = std::fs::read_to_string(&asked).unwrap();
    assert!(
        asked.lines().all(|l| l == host) && !asked.is_empty(),
        "{asked}"
    );
}

/// An ECDSA P-256 key pair made by openssl, as a user would make one.
struct Keys {
    private: PathBuf,
    public: PathBuf,
}

impl Keys {
    /// `-----BEGIN PRIVATE KEY-----` (PKCS#8).
    fn pkcs8(dir: &Path, name: &str) -> Self {
        let keys = Keys::named(dir, name);
        openssl(
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
            ],
            &keys.private,
        );
        keys.public_from_private()
    }

    /// `-----BEGIN EC PRIVATE KEY-----` (SEC1).
    fn sec1(dir: &Path, name: &str) -> Self {
        let keys = Keys::named(dir, name);
        openssl(
            &[
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
            ],
            &keys.private,
        );
        keys.public_from_private()
    }

    fn named(dir: &Path, name: &str) -> Self {
        Keys {
            private: dir.join(format!("{name}.pem")),
            public: dir.join(format!("{name}.pub")),
        }
    }

    fn public_from_private(self) -> Self {
        let out = Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&self.private)
            .arg("-out")
            .arg(&self.public)
            .output()
            .expect("run openssl");
        succeeded("openssl pkey -pubout", &out);
        self
    }
}

fn openssl(args: &[&str], out: &Path) {
    let output = Command::new("openssl")
        .args(args)
        .arg(out)
        .output()
        .expect("run openssl");
    succeeded("openssl", &output);
}

fn wasm() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| built("database").to_str().unwrap().to_string())
}

/// `kubeplug`, with `auth` as the only place credentials come from (not the
/// user's own files or variables).
fn kubeplug(auth: &Path) -> Command {
    let mut command = Command::new(host_binary());
    command
        .env("SOURCE_DATE_EPOCH", "0")
        .env("DOCKER_CONFIG", auth)
        .env("XDG_RUNTIME_DIR", auth)
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("KUBEPLUG_REGISTRY_USERNAME")
        .env_remove("KUBEPLUG_REGISTRY_PASSWORD")
        .env_remove("KUBEPLUG_SIGN_KEY");
    command
}

fn verify(auth: &Path, reference: &str, key: &Path) -> Output {
    kubeplug(auth)
        .args(["verify", reference, "--key"])
        .arg(key)
        .output()
        .expect("run kubeplug verify")
}

/// Its stdout, after checking it succeeded.
fn succeeded(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Its stderr, after checking it failed.
fn failed(what: &str, out: &Output) -> String {
    assert!(
        !out.status.success(),
        "{what} succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The digest `push` printed after `prefix`.
fn digest_of(stdout: &str, prefix: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {stdout}"))
        .to_string()
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

/// The platform names a plugin's artifact by digest in the chart's values
/// (`plugins.source: artifacts`) and its grant asks for the team's
/// signature (`signedBy`). The host, run from its image as the kubelet
/// would run the Deployment's pod (its args, its ServiceAccount, the
/// chart's ConfigMap as a volume), pulls the artifact from a real
/// registry, verifies it and serves it; one changed value upgrades it
/// without a restart; an artifact the key did not sign is refused while
/// the version on disk serves on, with the reason on its row; a routine
/// `helm upgrade` keeps the digest the platform named.
#[test]
fn a_plugin_named_by_digest_in_the_charts_values_is_pulled_verified_and_upgraded_by_one_value() {
    install_crds();
    let registry = Registry::start();
    let name = format!("127.0.0.1:{}/team-a/database", registry.port);
    let dir = tempfile::tempdir().unwrap();
    let key = Keys::pkcs8(dir.path(), "team-a");
    let stranger = Keys::sec1(dir.path(), "stranger");
    let push_signed = |wasm: &Path, tag: &str, key: &Keys| {
        let reference = format!("{name}:{tag}");
        let out = kubeplug(dir.path())
            .arg("push")
            .arg(wasm)
            .arg(&reference)
            .arg("--sign-key")
            .arg(&key.private)
            .output()
            .unwrap();
        let stdout = succeeded("push --sign-key", &out);
        format!("{name}@{}", digest_of(&stdout, &format!("{reference}@")))
    };
    let v1 = push_signed(&built("database"), "0.1.0", &key);
    let v2 = push_signed(
        &repo_path("target/test-plugins/database-v2.wasm"),
        "0.2.0",
        &key,
    );
    // Another build under the team's name, signed by someone else.
    let forged = push_signed(&built("myapp"), "forged", &stranger);

    let public = std::fs::read_to_string(&key.public).unwrap();
    let values = dir.path().join("values.yaml");
    let indented: String = public.lines().map(|l| format!("          {l}\n")).collect();
    std::fs::write(
        &values,
        format!(
            "plugins:\n  source: artifacts\n  artifacts:\n    database: {v1}\npolicy:\n  plugins:\n    database:\n      signedBy:\n        - |\n{indented}"
        ),
    )
    .unwrap();
    let out = helm_install(&["-f", values.to_str().unwrap()]);
    assert!(out.contains("STATUS: deployed"), "{out}");
    let chart = ChartHost::start("kubeplug-5f7d8-art01");
    let host = chart.host();
    assert!(
        chart
            .pod
            .args()
            .iter()
            .any(|a| a == "--plugin-artifacts=/etc/kubeplug/artifacts/artifacts.yaml"),
        "{:?}",
        chart.pod.args()
    );
    let digest = |reference: &str| -> String {
        // The manifest's digest names the artifact; the row shows the
        // `.wasm`'s, which the registry's manifest names as its layer.
        let manifest = registry.json(
            "team-a/database",
            "manifests",
            reference.rsplit_once('@').unwrap().1,
            MANIFEST,
        );
        manifest["layers"][0]["digest"].as_str().unwrap()[7..].to_string()
    };

    let served = eventually(
        "the pulled database plugin to serve",
        Duration::from_secs(120),
        || {
            host.plugin("database")
                .filter(|row| row["state"] == "running")
        },
    );
    assert_eq!(served["digest"], digest(&v1).as_str(), "{served}");
    assert_eq!(served["file"], "/plugins/database.wasm", "{served}");
    let namespace = Namespace::new("pulled");
    let ns = namespace.name.as_str();
    apply(ns, &database("pulled"));
    database_runs(ns, "pulled");

    // One value changed: the platform's upgrade.
    let out = helm_install(&[
        "--reuse-values",
        "--set",
        &format!("plugins.artifacts.database={v2}"),
    ]);
    assert!(out.contains("STATUS: deployed"), "{out}");
    remove_deployment();
    let upgraded = eventually(
        "the host to pull and serve v2",
        Duration::from_secs(120),
        || {
            host.plugin("database")
                .filter(|row| row["digest"] == digest(&v2).as_str() && row["state"] == "running")
        },
    );
    assert_ne!(upgraded["version"], served["version"], "{upgraded}");
    eventually(
        "the StatefulSet to carry v2's label",
        Duration::from_secs(120),
        || {
            let sts = get_json(ns, "statefulset/pulled")?;
            (sts["metadata"]["labels"]["example.com/plugin-revision"] == "v2").then_some(())
        },
    );
    // `kubectl get plugins` on the default install: the host made its own
    // serving certificate and put its CA into the chart's APIService; the
    // API server reaches this process through the Service once it points
    // at loopback (nothing serves a ClusterIP here).
    chart.route_api();
    let listed = eventually(
        "kubectl get plugins to show v2",
        Duration::from_secs(120),
        || get_plugin("database").filter(|p| p["status"]["version"] == upgraded["version"]),
    );
    assert_eq!(listed["status"]["state"], "running", "{listed}");
    assert_eq!(listed["status"]["digest"], digest(&v2).as_str(), "{listed}");

    // An artifact the grant's key did not sign: never written, v2 serves
    // on, and the row says why.
    let out = helm_install(&[
        "--reuse-values",
        "--set",
        &format!("plugins.artifacts.database={forged}"),
    ]);
    assert!(out.contains("STATUS: deployed"), "{out}");
    remove_deployment();
    let refused = eventually(
        "the forged artifact to be refused",
        Duration::from_secs(120),
        || {
            host.plugin("database")
                .filter(|row| row["state"] == "degraded")
        },
    );
    assert_eq!(
        refused["digest"],
        digest(&v2).as_str(),
        "v2 serves on: {refused}"
    );
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("none verifies") && reason.contains(&forged),
        "{refused}"
    );
    let on_disk =
        std::fs::read(chart.pod.work.path().join("volume-plugins/database.wasm")).unwrap();
    assert_eq!(
        on_disk,
        std::fs::read(repo_path("target/test-plugins/database-v2.wasm")).unwrap(),
        "the forged artifact is never written"
    );

    // Back to v2, then a routine upgrade of something else keeps it.
    helm_install(&[
        "--reuse-values",
        "--set",
        &format!("plugins.artifacts.database={v2}"),
    ]);
    eventually(
        "v2 to serve cleanly again",
        Duration::from_secs(120),
        || {
            host.plugin("database")
                .filter(|row| row["state"] == "running")
        },
    );
    helm_install(&["--reuse-values", "--set", "logLevel=debug"]);
    remove_deployment();
    let configmap = get_json(SYSTEM, "configmap/kubeplug-plugin-artifacts").unwrap();
    assert!(
        configmap["data"]["artifacts.yaml"]
            .as_str()
            .unwrap()
            .contains(&v2),
        "{configmap}"
    );
    let row = host.plugin("database").unwrap();
    assert_eq!(row["digest"], digest(&v2).as_str(), "{row}");
    chart.route_api();
    let listed = eventually(
        "kubectl get plugins after the routine upgrade",
        Duration::from_secs(120),
        || get_plugin("database"),
    );
    assert_eq!(listed["status"]["digest"], digest(&v2).as_str(), "{listed}");
    assert!(chart.stop(), "a clean exit");

    // What the other files expect: no release, the seeds' identities.
    helm(&["uninstall", "kubeplug", "--namespace", SYSTEM, "--wait"]);
    install_crds();
}
