use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, ImageVolumeSource, KeyToPath, ObjectFieldSelector, PodSpec, PodTemplateSpec,
    ProjectedVolumeSource, SecurityContext, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::cache_volume::{cache_volume, quantity_bytes};
use super::config_maps::{value, volume_files};
use super::host::*;
use kubeplug_doctor::report::Status;

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(true),
        ..Default::default()
    }
}

fn config_map(volume: &str, name: &str) -> Volume {
    Volume {
        name: volume.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: name.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn projected(volume: &str, maps: &[&str]) -> Volume {
    Volume {
        name: volume.into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(
                maps.iter()
                    .map(|m| VolumeProjection {
                        config_map: Some(ConfigMapProjection {
                            name: m.to_string(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn empty_dir(volume: &str, limit: Option<&str>) -> Volume {
    Volume {
        name: volume.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: limit.map(|l| Quantity(l.into())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn image(volume: &str, reference: &str) -> Volume {
    Volume {
        name: volume.into(),
        image: Some(ImageVolumeSource {
            reference: Some(reference.into()),
            pull_policy: Some("IfNotPresent".into()),
        }),
        ..Default::default()
    }
}

fn deployment(args: &[&str], mounts: Vec<VolumeMount>, volumes: Vec<Volume>) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("kubeplug".into()),
            namespace: Some("kubeplug-system".into()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    service_account_name: Some("kubeplug".into()),
                    containers: vec![
                        Container {
                            name: "sidecar".into(),
                            args: Some(vec!["--plugins=/elsewhere".into()]),
                            ..Default::default()
                        },
                        Container {
                            name: "kubeplug".into(),
                            args: Some(args.iter().map(|a| a.to_string()).collect()),
                            env: Some(vec![EnvVar {
                                name: "POD_NAMESPACE".into(),
                                value_from: Some(EnvVarSource {
                                    field_ref: Some(ObjectFieldSelector {
                                        field_path: "metadata.namespace".into(),
                                        ..Default::default()
                                    }),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }]),
                            volume_mounts: Some(mounts),
                            security_context: Some(SecurityContext {
                                read_only_root_filesystem: Some(true),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                    ],
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// deploy/base/deployment.yaml with overlays/configmaps.
fn base() -> Deployment {
    deployment(
        &[
            "run",
            "--plugins=/plugins",
            "--settings=/etc/kubeplug/settings",
            "--policy=/etc/kubeplug/policy/policy.yaml",
            "--cache-dir=/var/cache/kubeplug",
            "--compile-cache-bytes=768Mi",
            "--listen=0.0.0.0:8080",
            "--leader-elect",
            "--log-format=json",
        ],
        vec![
            mount("plugins", "/plugins"),
            mount("settings", "/etc/kubeplug/settings"),
            mount("policy", "/etc/kubeplug/policy"),
            VolumeMount {
                read_only: None,
                ..mount("cache", "/var/cache/kubeplug")
            },
        ],
        vec![
            projected(
                "plugins",
                &[
                    "kubeplug-plugin-database",
                    "kubeplug-plugin-myapp",
                    "kubeplug-plugin-pod-annotator",
                ],
            ),
            config_map("settings", "kubeplug-plugin-settings"),
            config_map("policy", "kubeplug-policy"),
            empty_dir("cache", Some("1Gi")),
        ],
    )
}

#[test]
fn the_base_deployment_reads_as_its_flags_service_account_and_mounts() {
    let host = Host::from_deployment(&base()).unwrap();
    assert_eq!(host.deployment, "kubeplug-system/kubeplug");
    assert_eq!(host.service_account, "kubeplug");
    assert_eq!(host.container, "kubeplug", "the host's container, by name");
    assert_eq!(
        host.args,
        HostArgs {
            plugins: Some("/plugins".into()),
            policy: vec!["/etc/kubeplug/policy/policy.yaml".into()],
            settings: Some("/etc/kubeplug/settings".into()),
            namespaces: Vec::new(),
            leader_elect: true,
            // POD_NAMESPACE from the downward API.
            lease_namespace: "kubeplug-system".into(),
            cache_dir: Some("/var/cache/kubeplug".into()),
            no_cache: false,
            compile_cache_bytes: Some("768Mi".into()),
            plugin_artifacts: None,
            max_plugin_bytes: None,
        }
    );
    assert!(host.read_only_root);
    assert_eq!(
        host.file("/etc/kubeplug/policy/policy.yaml"),
        FileSource::Keys(vec![KeyAt {
            volume: "policy".into(),
            config_map: "kubeplug-policy".into(),
            key: "policy.yaml".into(),
            optional: false,
        }])
    );
    let parts = host.directory("/plugins");
    assert_eq!(parts.len(), 1);
    assert_eq!((parts[0].inside.as_str(), parts[0].at.as_str()), ("", ""));
    assert_eq!(
        parts[0].place("database.wasm").as_deref(),
        Some("database.wasm"),
        "a key at the volume's root, at the directory's"
    );
    assert_eq!(parts[0].place("../x"), None);
    let maps: Vec<String> = parts[0]
        .mount
        .backings
        .iter()
        .map(|b| match b {
            Backing::ConfigMap { name, .. } => name.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        maps,
        [
            "kubeplug-plugin-database",
            "kubeplug-plugin-myapp",
            "kubeplug-plugin-pod-annotator"
        ]
    );
    assert_eq!(cache_volume(&host).status, Status::Ok);
}

#[test]
fn separate_values_comma_lists_and_environment_variables_are_read_as_run_reads_them() {
    let mut d = deployment(
        &[
            "run",
            "--plugins",
            "/p",
            "--policy",
            "/a/one.yaml,/b/two.yaml",
            "--policy=/c/three.yaml",
            "--namespaces=team-a,team-b",
            "--lease-namespace",
            "leases",
        ],
        Vec::new(),
        Vec::new(),
    );
    let container = &mut d
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[1];
    container.env = Some(vec![
        EnvVar {
            name: "KUBEPLUG_SETTINGS".into(),
            value: Some("/s".into()),
            ..Default::default()
        },
        EnvVar {
            name: "KUBEPLUG_LEADER_ELECT".into(),
            value: Some("true".into()),
            ..Default::default()
        },
        EnvVar {
            name: "KUBEPLUG_PLUGINS".into(),
            value: Some("/not-this".into()),
            ..Default::default()
        },
    ]);
    let args = Host::from_deployment(&d).unwrap().args;
    assert_eq!(args.plugins.as_deref(), Some("/p"), "the flag wins");
    assert_eq!(
        args.policy,
        ["/a/one.yaml", "/b/two.yaml", "/c/three.yaml"],
        "repeated and comma-separated"
    );
    assert_eq!(args.settings.as_deref(), Some("/s"));
    assert_eq!(args.namespaces, ["team-a", "team-b"]);
    assert_eq!(args.lease_namespace, "leases");
    assert!(args.leader_elect);
    assert!(args.cache_dir.is_none());
    // No cache dir on a read-only root: a warning naming the fix.
    let check = cache_volume(&Host::from_deployment(&d).unwrap());
    assert_eq!(check.status, Status::Warn);
    assert!(check.detail.contains("--cache-dir"), "{}", check.detail);
}

#[test]
fn image_volumes_below_the_plugins_path_show_where_the_pod_mounts_them() {
    let d = deployment(
        &["run", "--plugins=/plugins", "--policy=/etc/p/policy.yaml"],
        vec![
            mount("plugin-database", "/plugins/database"),
            mount("plugin-myapp", "/plugins/myapp/"),
            VolumeMount {
                sub_path: Some("policy.yaml".into()),
                ..mount("policy", "/etc/p/policy.yaml")
            },
        ],
        vec![
            image("plugin-database", "kubeplug-plugin-database:0.1.0"),
            image("plugin-myapp", "kubeplug-plugin-myapp:0.1.0"),
            Volume {
                config_map: Some(ConfigMapVolumeSource {
                    name: "grants".into(),
                    items: Some(vec![KeyToPath {
                        key: "all.yaml".into(),
                        path: "policy.yaml".into(),
                        mode: None,
                    }]),
                    optional: None,
                    default_mode: None,
                }),
                ..config_map("policy", "grants")
            },
        ],
    );
    let host = Host::from_deployment(&d).unwrap();
    let parts: Vec<(String, String, Backing)> = host
        .directory("/plugins")
        .into_iter()
        .map(|p| (p.at, p.inside, p.mount.backings[0].clone()))
        .collect();
    assert_eq!(
        parts,
        [
            (
                "database".to_string(),
                String::new(),
                Backing::Image {
                    reference: "kubeplug-plugin-database:0.1.0".into()
                }
            ),
            (
                "myapp".to_string(),
                String::new(),
                Backing::Image {
                    reference: "kubeplug-plugin-myapp:0.1.0".into()
                }
            ),
        ]
    );
    let part = &host.directory("/plugins")[0];
    assert_eq!(
        part.place("database.wasm").as_deref(),
        Some("database/database.wasm")
    );
    // A directory below a mount: what of the volume shows there.
    let settings = DirPart {
        mount: part.mount.clone(),
        inside: "conf".into(),
        at: String::new(),
    };
    assert_eq!(settings.place("conf/a.yaml").as_deref(), Some("a.yaml"));
    assert_eq!(settings.place("other/a.yaml"), None);
    assert_eq!(
        host.directory("/plugins/database")[0].inside,
        "",
        "the image volume holds it"
    );
    // A subPath mount of one item: the file is that item's key.
    assert_eq!(
        host.file("/etc/p/policy.yaml"),
        FileSource::Keys(vec![KeyAt {
            volume: "policy".into(),
            config_map: "grants".into(),
            key: "all.yaml".into(),
            optional: false,
        }])
    );
    // A path on no volume, and one deeper than a ConfigMap's keys go.
    assert_eq!(host.file("/etc/other.yaml"), FileSource::Image);
}

#[test]
fn a_cache_budget_not_below_the_volumes_size_limit_fails_with_the_fix() {
    let mut d = base();
    let spec = d.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    spec.volumes.as_mut().unwrap()[3] = empty_dir("cache", Some("512Mi"));
    let check = cache_volume(&Host::from_deployment(&d).unwrap());
    assert_eq!(check.status, Status::Fail, "{}", check.detail);
    assert!(
        check.detail.contains("sizeLimit 512Mi") && check.detail.contains("--compile-cache-bytes"),
        "{}",
        check.detail
    );
    assert_eq!(quantity_bytes("1Gi"), Some(1 << 30));
    assert_eq!(quantity_bytes("1.5Gi"), Some(3 << 29));
    assert_eq!(quantity_bytes("500M"), Some(500_000_000));
    assert_eq!(quantity_bytes("lots"), None);
}

#[test]
fn a_configmaps_files_are_its_keys_or_its_items() {
    let map = ConfigMap {
        data: Some(BTreeMap::from([("a.yaml".to_string(), "a".to_string())])),
        binary_data: Some(BTreeMap::from([(
            "db.wasm".to_string(),
            ByteString(b"\0asm".to_vec()),
        )])),
        ..Default::default()
    };
    assert_eq!(
        volume_files(&map, &None),
        [
            ("a.yaml".to_string(), "a.yaml".to_string()),
            ("db.wasm".to_string(), "db.wasm".to_string())
        ]
    );
    assert_eq!(
        volume_files(
            &map,
            &Some(vec![
                ("db.wasm".into(), "db/db.wasm".into()),
                ("gone".into(), "x".into())
            ])
        ),
        [("db/db.wasm".to_string(), "db.wasm".to_string())]
    );
    assert_eq!(value(&map, "db.wasm").unwrap(), b"\0asm");
    assert!(plain("db/db.wasm") && !plain("../x") && !plain("/etc/x"));
}
