//! The OCI content of a packaged plugin, built in memory: pure, no file
//! system and no network (`kubeplug package` writes it, `kubeplug push`
//! uploads it).
//!
//! Two manifests, each read by other consumers, because no single manifest
//! serves both (see docs/install.md, "Plugins as OCI artifacts"):
//!
//! - **The Wasm artifact** (tag `<tag>`): the CNCF TAG-Runtime "Wasm OCI
//!   Artifact" layout. Config `application/vnd.wasm.config.v0+json`
//!   (`created`, `architecture: wasm`, `os: wasip2`, `layerDigests`,
//!   `component: {exports, imports, target}`), one layer
//!   `application/wasm` holding the component's bytes as they are, titled
//!   `<name>.wasm`. Read by wkg (wasm-pkg-tools, through `oci-wasm`),
//!   Spin and Kubewarden, and by CRI-O ≥ 1.33 image volumes, which mount an
//!   artifact's layers as files named by their `org.opencontainers.image.title`
//!   annotation (so `/plugins/<name>/<name>.wasm`).
//! - **The image-volume image** (tag `<tag>-volume`): an image index of one
//!   image manifest per Linux architecture, all sharing one uncompressed
//!   tar layer holding `/<name>.wasm` (0444, owner 0, fixed time).
//!   containerd (≤ 2.2) mounts only runnable images in image volumes: tar
//!   layers, an image config whose `rootfs.diff_ids` list them, and an
//!   `os`/`architecture` equal to the node's (its unpacker skips other
//!   platforms), so a platform-neutral image cannot be mounted there. The
//!   layer itself is the same bytes for every architecture; only the
//!   ~250-byte configs differ.
//!
//! Guarantees: the same plugin bytes, manifest and `created` give the same
//! blobs and digests (no clock, no map ordering, fixed tar headers).
//! Caveats: the settings schema of the Wasm layout has nothing to carry:
//! plugins declare none (their configuration is validated by the plugin
//! itself at load).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
pub const WASM_LAYER: &str = "application/wasm";
pub const IMAGE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Uncompressed: a `.wasm` barely compresses through gzip once the
/// registry's transport compresses, and an uncompressed layer's digest is
/// its diff ID, so the config needs no second hash.
pub const TAR_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub const TITLE: &str = "org.opencontainers.image.title";
pub const VERSION: &str = "org.opencontainers.image.version";
pub const CREATED: &str = "org.opencontainers.image.created";
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The suffix of the image-volume tag.
pub const VOLUME_SUFFIX: &str = "-volume";
/// The Linux architectures Kubernetes nodes run (the kubelet's supported
/// platforms); containerd needs one config per architecture.
pub const ARCHITECTURES: &[&str] = &["amd64", "arm64", "ppc64le", "s390x"];

/// What a package is made from.
#[derive(Debug, Clone)]
pub struct Plugin<'a> {
    /// The manifest's `name`: the file is `<name>.wasm`.
    pub name: &'a str,
    /// The manifest's `version`: the tag.
    pub version: &'a str,
    pub wasm: &'a [u8],
    /// RFC 3339, e.g. from `SOURCE_DATE_EPOCH`.
    pub created: &'a str,
    /// The component's top-level imports and exports (its world).
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    /// The world it targets (the host's contract).
    pub target: &'a str,
}

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub media_type: &'static str,
    pub digest: String,
    pub size: u64,
}

impl Descriptor {
    fn of(media_type: &'static str, bytes: &[u8]) -> Self {
        Descriptor {
            media_type,
            digest: digest(bytes),
            size: bytes.len() as u64,
        }
    }

    fn json(&self) -> Value {
        json!({"mediaType": self.media_type, "digest": self.digest, "size": self.size})
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A package: its blobs by digest, and the two tagged roots.
#[derive(Debug, Clone)]
pub struct Package {
    pub blobs: BTreeMap<String, Vec<u8>>,
    /// The Wasm artifact manifest (tag `<version>`).
    pub wasm: Descriptor,
    /// The per-architecture image manifests, then the index over them (tag
    /// `<version>-volume`).
    pub volume_manifests: Vec<Descriptor>,
    pub volume: Descriptor,
    pub version: String,
}

impl Package {
    fn add(&mut self, media_type: &'static str, bytes: Vec<u8>) -> Descriptor {
        let descriptor = Descriptor::of(media_type, &bytes);
        self.blobs.insert(descriptor.digest.clone(), bytes);
        descriptor
    }

    /// The blobs a registry needs before the manifests, in upload order
    /// (every blob that is not a manifest or index).
    pub fn layers_and_configs(&self) -> impl Iterator<Item = (&str, &[u8])> {
        let roots: Vec<&str> = self
            .volume_manifests
            .iter()
            .chain([&self.wasm, &self.volume])
            .map(|d| d.digest.as_str())
            .collect();
        self.blobs
            .iter()
            .filter(move |(d, _)| !roots.contains(&d.as_str()))
            .map(|(d, b)| (d.as_str(), b.as_slice()))
    }

    /// The layout's `index.json`: both roots, named by tag.
    pub fn index_json(&self) -> Vec<u8> {
        let entry = |d: &Descriptor, tag: String| {
            let mut e = d.json();
            e["annotations"] = json!({ REF_NAME: tag });
            e
        };
        to_bytes(&json!({
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [
                entry(&self.wasm, self.version.clone()),
                entry(&self.volume, format!("{}{VOLUME_SUFFIX}", self.version)),
            ],
        }))
    }
}

/// Compact JSON: serde_json's maps are ordered (no `preserve_order`), so the
/// same value is the same bytes.
fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("JSON values serialize")
}

/// Build the package of `plugin`.
pub fn build(plugin: &Plugin<'_>) -> Package {
    let mut package = Package {
        blobs: BTreeMap::new(),
        wasm: Descriptor::of(MANIFEST, b""),
        volume_manifests: Vec::new(),
        volume: Descriptor::of(INDEX, b""),
        version: plugin.version.to_string(),
    };
    let file = format!("{}.wasm", plugin.name);
    let annotations = json!({
        TITLE: plugin.name,
        VERSION: plugin.version,
        CREATED: plugin.created,
    });

    // The Wasm artifact.
    let layer = package.add(WASM_LAYER, plugin.wasm.to_vec());
    let config = package.add(
        WASM_CONFIG,
        to_bytes(&json!({
            "created": plugin.created,
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer.digest],
            "component": {
                "exports": plugin.exports,
                "imports": plugin.imports,
                "target": plugin.target,
            },
        })),
    );
    let mut layer_json = layer.json();
    layer_json["annotations"] = json!({ TITLE: file });
    package.wasm = package.add(
        MANIFEST,
        to_bytes(&json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "artifactType": WASM_CONFIG,
            "config": config.json(),
            "layers": [layer_json],
            "annotations": annotations,
        })),
    );

    // The image-volume image: one tar layer, one config and manifest per
    // architecture, an index over them.
    let tar = package.add(TAR_LAYER, tar_one_file(&file, plugin.wasm));
    let mut entries = Vec::new();
    for arch in ARCHITECTURES {
        let config = package.add(
            IMAGE_CONFIG,
            to_bytes(&json!({
                "created": plugin.created,
                "architecture": arch,
                "os": "linux",
                "config": { "Labels": annotations },
                "rootfs": { "type": "layers", "diff_ids": [tar.digest] },
                "history": [{ "created": plugin.created, "created_by": "kubeplug package" }],
            })),
        );
        let manifest = package.add(
            MANIFEST,
            to_bytes(&json!({
                "schemaVersion": 2,
                "mediaType": MANIFEST,
                "config": config.json(),
                "layers": [tar.json()],
                "annotations": annotations,
            })),
        );
        let mut entry = manifest.json();
        entry["platform"] = json!({ "architecture": arch, "os": "linux" });
        entries.push(entry);
        package.volume_manifests.push(manifest);
    }
    package.volume = package.add(
        INDEX,
        to_bytes(&json!({
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": entries,
            "annotations": annotations,
        })),
    );
    package
}

/// A POSIX ustar archive holding one regular file `name` (read-only, owner
/// 0, mtime 0) with `bytes`. Written by hand: one header is all it takes,
/// and a fixed header is what makes the layer reproducible.
pub fn tar_one_file(name: &str, bytes: &[u8]) -> Vec<u8> {
    assert!(name.len() < 100, "a plugin's file name fits a ustar name");
    let mut header = [0u8; 512];
    let field = |header: &mut [u8; 512], at: usize, value: &[u8]| {
        header[at..at + value.len()].copy_from_slice(value);
    };
    let octal = |width: usize, value: u64| format!("{value:0w$o}\0", w = width - 1);
    field(&mut header, 0, name.as_bytes());
    field(&mut header, 100, octal(8, 0o444).as_bytes()); // mode
    field(&mut header, 108, octal(8, 0).as_bytes()); // uid
    field(&mut header, 116, octal(8, 0).as_bytes()); // gid
    field(&mut header, 124, octal(12, bytes.len() as u64).as_bytes()); // size
    field(&mut header, 136, octal(12, 0).as_bytes()); // mtime
    field(&mut header, 148, b"        "); // checksum, counted as spaces
    header[156] = b'0'; // a regular file
    field(&mut header, 257, b"ustar\x0000"); // magic and version
    let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
    field(&mut header, 148, format!("{sum:06o}\0 ").as_bytes());
    let mut out = header.to_vec();
    out.extend_from_slice(bytes);
    out.resize(out.len().div_ceil(512) * 512, 0);
    // The end of the archive: two zero blocks.
    out.resize(out.len() + 1024, 0);
    out
}

/// The top-level imports and exports of a component (its world), as
/// `wasm-tools component wit` names them.
pub fn world(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>), wasmparser::BinaryReaderError> {
    use wasmparser::{Parser, Payload};
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if depth == 0 => {
                for import in reader {
                    imports.push(import?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(reader) if depth == 0 => {
                for export in reader {
                    exports.push(export?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok((imports, exports))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(created: &str) -> Plugin<'_> {
        Plugin {
            name: "database",
            version: "0.1.0",
            wasm: b"\0asm\x0d\0\x01\0not really a component",
            created,
            imports: vec!["wasi:io/streams@0.2.0".into()],
            exports: vec!["kubeplug:plugin/reconciler@0.1.0".into()],
            target: "kubeplug:plugin@0.1.0",
        }
    }

    fn json_of(package: &Package, d: &Descriptor) -> Value {
        serde_json::from_slice(&package.blobs[&d.digest]).unwrap()
    }

    #[test]
    fn every_blob_is_stored_under_its_own_digest_and_size() {
        let package = build(&plugin("1970-01-01T00:00:00Z"));
        for (d, bytes) in &package.blobs {
            assert_eq!(&digest(bytes), d);
        }
        for d in package
            .volume_manifests
            .iter()
            .chain([&package.wasm, &package.volume])
        {
            assert_eq!(package.blobs[&d.digest].len() as u64, d.size);
        }
    }

    #[test]
    fn the_wasm_artifact_follows_the_tag_runtime_layout() {
        let p = plugin("2024-01-02T03:04:05Z");
        let package = build(&p);
        let manifest = json_of(&package, &package.wasm);
        assert_eq!(manifest["mediaType"], MANIFEST);
        assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG);
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0]["mediaType"], WASM_LAYER);
        assert_eq!(layers[0]["digest"], digest(p.wasm));
        assert_eq!(layers[0]["annotations"][TITLE], "database.wasm");
        assert_eq!(
            package.blobs[&digest(p.wasm)],
            p.wasm,
            "the layer is the file"
        );
        assert_eq!(manifest["annotations"][TITLE], "database");
        assert_eq!(manifest["annotations"][VERSION], "0.1.0");
        assert_eq!(manifest["annotations"][CREATED], "2024-01-02T03:04:05Z");

        let config: Value =
            serde_json::from_slice(&package.blobs[manifest["config"]["digest"].as_str().unwrap()])
                .unwrap();
        assert_eq!(config["architecture"], "wasm");
        assert_eq!(config["os"], "wasip2");
        assert_eq!(config["created"], "2024-01-02T03:04:05Z");
        assert_eq!(config["layerDigests"], json!([digest(p.wasm)]));
        assert_eq!(config["component"]["exports"], json!(p.exports));
        assert_eq!(config["component"]["imports"], json!(p.imports));
        assert_eq!(config["component"]["target"], "kubeplug:plugin@0.1.0");
    }

    #[test]
    fn the_volume_image_is_one_tar_layer_holding_the_file_for_every_architecture() {
        let p = plugin("1970-01-01T00:00:00Z");
        let package = build(&p);
        let index = json_of(&package, &package.volume);
        assert_eq!(index["mediaType"], INDEX);
        let entries = index["manifests"].as_array().unwrap();
        let arches: Vec<_> = entries
            .iter()
            .map(|e| e["platform"]["architecture"].clone())
            .collect();
        assert_eq!(
            arches,
            ARCHITECTURES.iter().map(|a| json!(a)).collect::<Vec<_>>()
        );
        let mut layers = std::collections::BTreeSet::new();
        for (entry, d) in entries.iter().zip(&package.volume_manifests) {
            assert_eq!(entry["digest"], d.digest.as_str());
            assert_eq!(entry["platform"]["os"], "linux");
            let manifest = json_of(&package, d);
            assert_eq!(manifest["config"]["mediaType"], IMAGE_CONFIG);
            let layer = &manifest["layers"][0];
            assert_eq!(layer["mediaType"], TAR_LAYER);
            layers.insert(layer["digest"].as_str().unwrap().to_string());
            let config: Value = serde_json::from_slice(
                &package.blobs[manifest["config"]["digest"].as_str().unwrap()],
            )
            .unwrap();
            assert_eq!(config["rootfs"]["diff_ids"], json!([layer["digest"]]));
            assert_eq!(config["architecture"], entry["platform"]["architecture"]);
        }
        assert_eq!(layers.len(), 1, "one layer shared by every architecture");
        let tar = &package.blobs[layers.first().unwrap()];
        assert_eq!(&tar[..13], b"database.wasm");
        assert_eq!(&tar[512..512 + p.wasm.len()], p.wasm);
        assert_eq!(tar.len() % 512, 0);
    }

    #[test]
    fn the_tar_header_checksum_is_what_tar_computes() {
        let tar = tar_one_file("a.wasm", b"xyz");
        let mut header = tar[..512].to_vec();
        let stored =
            u32::from_str_radix(std::str::from_utf8(&header[148..154]).unwrap(), 8).unwrap();
        header[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, header.iter().map(|&b| u32::from(b)).sum::<u32>());
        assert_eq!(tar.len(), 512 + 512 + 1024);
    }

    #[test]
    fn the_same_plugin_and_time_give_the_same_digests_and_another_time_others() {
        let a = build(&plugin("1970-01-01T00:00:10Z"));
        let b = build(&plugin("1970-01-01T00:00:10Z"));
        assert_eq!(a.blobs, b.blobs);
        assert_eq!(a.index_json(), b.index_json());
        let c = build(&plugin("1970-01-01T00:00:11Z"));
        assert_ne!(a.wasm.digest, c.wasm.digest);
        // The file's layers do not depend on the time.
        assert!(c.blobs.contains_key(&digest(plugin("").wasm)));
    }

    #[test]
    fn the_layout_index_names_both_tags() {
        let package = build(&plugin("1970-01-01T00:00:00Z"));
        let index: Value = serde_json::from_slice(&package.index_json()).unwrap();
        let names: Vec<_> = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["annotations"][REF_NAME].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["0.1.0", "0.1.0-volume"]);
        assert_eq!(
            index["manifests"][0]["digest"],
            package.wasm.digest.as_str()
        );
    }

    #[test]
    fn uploads_hold_every_blob_but_the_manifests() {
        let package = build(&plugin("1970-01-01T00:00:00Z"));
        let uploads: Vec<_> = package
            .layers_and_configs()
            .map(|(d, _)| d.to_string())
            .collect();
        // The wasm layer and its config, the tar, one config per architecture.
        assert_eq!(uploads.len(), 3 + ARCHITECTURES.len());
        assert!(!uploads.contains(&package.wasm.digest));
    }
}
