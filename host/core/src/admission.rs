//! One admission for every path that loads a plugin: `run` (the registry),
//! `render`, `inspect` and `kubeplug test` decide here, and only here,
//! whether the live host would serve a plugin and as what.
//!
//! A plugin's manifest is a request. Admission binds it to a grant of the
//! platform's [`Policy`], replaces every plural and scope it claims with
//! what the API server serves ([`Served`]: live discovery in
//! [`kubeplug_kube::discovery`], CRD files offline in [`offline`]), checks it
//! against the grant and narrows it to the namespaces the grant and the
//! host allow. The answer is [`Admitted`] or an [`AdmitError`] that says
//! whether trying the same file again may succeed ([`AdmitError::retryable`]).
//!
//! Pure: no cluster, no Wasm engine. The compiled plugin reaches it as plain
//! data (its manifest and digest).

pub mod offline;

use std::path::Path;

use crate::contract::{LimitSettings, Limits};
use crate::manifest::{ApiResource, BoundError, Manifest, Mode};
use crate::policy::{Effective, Policy, Quotas, Refusal};

pub use offline::Offline;

/// What a source of scopes knows about one kind a manifest names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Served under this plural, namespaced or not.
    Served { plural: String, namespaced: bool },
    /// Not served (its CustomResourceDefinition may be installed later).
    Absent,
    /// This source cannot tell (offline, no CRD given): the plugin's own
    /// claim stands, and the admission says so in a note.
    Unknown,
}

/// Where admission learns what the API server serves.
pub trait Served {
    /// The scope of `resource`'s group, version and kind.
    fn scope(&self, resource: &ApiResource) -> Scope;
}

/// Why a plugin is not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    /// Strict policy, no entry for the plugin.
    #[error(
        "plugin {plugin} has no grant in the policy, which is strict: ask the platform team to add one"
    )]
    NoGrant { plugin: String },
    /// The policy pins the plugin to other digests.
    #[error("digest sha256:{digest} is not pinned for plugin {plugin} by the policy")]
    NotPinned { plugin: String, digest: String },
    /// The grant asks for a signature the file does not carry.
    #[error(
        "plugin {plugin}'s grant asks for a signature by one of its keys (signedBy), and this file carries none: ship it as an OCI artifact signed with `kubeplug push --sign-key` and name it in the host's --plugin-artifacts, which verifies the signature when it pulls; a file put in the directory any other way is not loaded"
    )]
    Unsigned { plugin: String },
    /// The file sits where another plugin is placed.
    #[error(
        "{at} is where plugin {bound} is placed, but the file declares plugin {declared} (whose file is {location}): refused, it runs as nobody"
    )]
    Misnamed {
        at: String,
        bound: String,
        declared: String,
        location: String,
    },
    /// Kinds the API server does not serve (yet).
    #[error("plugin {plugin} refused: {}", .kinds.join("; "))]
    NotServed { plugin: String, kinds: Vec<String> },
    /// The manifest asks for more than the grant gives.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The grant shards a decorator, whose parents are other owners'
    /// objects: the host does not label them with a shard, so no replica's
    /// filtered watch would see them.
    #[error(
        "plugin {plugin} refused: its grant splits its parents into {shards} shards, but it is a decorator, whose parents are other owners' objects that the host does not label (grant it shards: 1)"
    )]
    Unshardable { plugin: String, shards: u16 },
    /// The grant says the plugin's related Pods are its own children's
    /// (`shardPods: true`), but no related Pod selector names the parent:
    /// its Pods could not be placed in a shard, so the grant asserts nothing.
    #[error(
        "plugin {plugin} refused: its grant has shardPods: true, but it reads no related Pods by a label naming the parent, so no Pod it reads can be placed in its parent's shard (remove shardPods)"
    )]
    NoShardPods { plugin: String },
    /// The manifest's namespaces are outside the host's `--namespaces`.
    #[error("plugin {plugin} refused: {reason}")]
    Namespaces { plugin: String, reason: BoundError },
}

impl AdmitError {
    /// Worth trying the same file again without a change: a kind not
    /// served now may be once its CRD is installed. Every other refusal
    /// stands until the file or the policy changes.
    pub fn retryable(&self) -> bool {
        matches!(self, AdmitError::NotServed { .. })
    }
}

/// A plugin as the live host would serve it.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The manifest with real plurals and scopes, narrowed to the grant's
    /// and the host's namespaces.
    pub manifest: Manifest,
    pub grant: Effective,
    /// The limits asked for, within the grant's quotas.
    pub limits: Limits,
    /// What an offline admission took on trust (the plugin's claimed scope
    /// of a kind it could not look up).
    pub notes: Vec<String>,
}

/// Where the platform placed a file: the plugin bound to that location,
/// which the file's manifest must name.
#[derive(Debug, Clone, Copy)]
pub struct Placed<'a> {
    pub name: &'a str,
    /// The file, relative to the plugin directory.
    pub rel: &'a Path,
}

/// Two PEM texts of one key: the same once whitespace is set aside (a
/// YAML block may re-wrap or indent it).
fn same_key(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

/// One admission under one policy.
#[derive(Debug, Clone, Copy)]
pub struct Admission<'a> {
    policy: &'a Policy,
    placed: Option<Placed<'a>>,
    namespaces: Option<&'a [String]>,
    /// The key (PEM) whose signature the host verified on the file when
    /// it pulled it.
    signed_by: Option<&'a str>,
}

impl<'a> Admission<'a> {
    /// Admit under `policy`, by the name the manifest declares (offline:
    /// no location binds the file).
    pub fn new(policy: &'a Policy) -> Self {
        Admission {
            policy,
            placed: None,
            namespaces: None,
            signed_by: None,
        }
    }

    /// The file sits at `placed`'s location: the grant and pins are that
    /// plugin's, and the manifest must declare it.
    pub fn placed(self, placed: Placed<'a>) -> Self {
        Admission {
            placed: Some(placed),
            ..self
        }
    }

    /// The host verified the file's signature by `key` (PEM) when it pulled
    /// it (see [`Grant::signed_by`](crate::policy::Grant::signed_by)).
    pub fn signed_by(self, key: Option<&'a str>) -> Self {
        Admission {
            signed_by: key,
            ..self
        }
    }

    /// The host serves only `namespaces` (`--namespaces`).
    pub fn within(self, namespaces: Option<&'a [String]>) -> Self {
        Admission { namespaces, ..self }
    }

    /// What can be decided before compiling, so that a file that may not
    /// serve costs nothing: a placed plugin's grant under a strict policy
    /// and its pins. Returns the quotas to compile within (those of the
    /// plugin named `stem` when the file is not placed).
    pub fn before_compile(&self, stem: &str, digest: &str) -> Result<Quotas, AdmitError> {
        let Some(placed) = self.placed else {
            return Ok(self.policy.quotas_for_file(stem));
        };
        let bound = placed.name;
        if self.policy.strict && self.policy.grant(bound).is_none() {
            return Err(AdmitError::NoGrant {
                plugin: bound.into(),
            });
        }
        let pins = self.policy.pins_for_file(bound);
        if !pins.is_empty() && !pins.iter().any(|p| p == digest) {
            return Err(AdmitError::NotPinned {
                plugin: bound.into(),
                digest: digest.into(),
            });
        }
        let signers = self.policy.signers_for_file(bound);
        let signed = |key: &str| signers.iter().any(|s| same_key(s, key));
        if !signers.is_empty() && !self.signed_by.is_some_and(signed) {
            return Err(AdmitError::Unsigned {
                plugin: bound.into(),
            });
        }
        Ok(self.policy.quotas_for_file(bound))
    }

    /// The grant of the plugin `manifest` declares, if the file may serve
    /// as that plugin (and as its mode allows: a decorator is never
    /// sharded): what can be decided before asking anyone about its kinds.
    pub fn grant(&self, manifest: &Manifest) -> Result<Effective, AdmitError> {
        let name = manifest.name.as_str();
        if let Some(placed) = self.placed
            && placed.name != name
        {
            return Err(AdmitError::Misnamed {
                at: placed.rel.display().to_string(),
                bound: placed.name.into(),
                declared: name.into(),
                location: self.policy.location(name).describe(name),
            });
        }
        let grant = self.policy.grant(name).ok_or_else(|| AdmitError::NoGrant {
            plugin: name.into(),
        })?;
        if manifest.mode == Mode::Decorator && grant.grant.shards > 1 {
            return Err(AdmitError::Unshardable {
                plugin: name.into(),
                shards: grant.grant.shards,
            });
        }
        if grant.grant.shard_pods
            && !manifest
                .related
                .iter()
                .any(|r| crate::shard::narrows(&grant.grant, r))
        {
            return Err(AdmitError::NoShardPods {
                plugin: name.into(),
            });
        }
        Ok(grant)
    }

    /// Admit the compiled plugin whose manifest is `manifest` (as it
    /// declared it) and whose component has `digest`, with the limits
    /// `asked` for, resolving its kinds through `served`.
    pub fn admit(
        &self,
        manifest: &Manifest,
        digest: &str,
        asked: LimitSettings,
        served: &impl Served,
    ) -> Result<Admitted, AdmitError> {
        let name = manifest.name.as_str();
        let grant = self.grant(manifest)?;
        let notes = std::cell::RefCell::new(Vec::new());
        let resolved = manifest
            .resolve(|r| match served.scope(r) {
                Scope::Served { plural, namespaced } => Some((plural, namespaced)),
                Scope::Absent => None,
                Scope::Unknown => {
                    notes.borrow_mut().push(format!(
                        "the scope of {r} is the plugin's own claim (the live host asks the API server; pass --crd to check it here)"
                    ));
                    Some((r.plural.clone(), r.namespaced))
                }
            })
            .map_err(|kinds| AdmitError::NotServed {
                plugin: name.into(),
                kinds,
            })?;
        let admitted = grant.admit(&resolved, digest)?;
        let admitted = match self.namespaces {
            Some(bound) => admitted
                .bound_to(bound)
                .map_err(|reason| AdmitError::Namespaces {
                    plugin: name.into(),
                    reason,
                })?,
            None => admitted,
        };
        let limits = asked.within(grant.quotas.limits());
        Ok(Admitted {
            manifest: admitted,
            grant,
            limits,
            notes: notes.into_inner(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind served as claimed.
    struct AsClaimed;
    impl Served for AsClaimed {
        fn scope(&self, r: &ApiResource) -> Scope {
            Scope::Served {
                plural: r.plural.clone(),
                namespaced: r.namespaced,
            }
        }
    }

    /// Nothing served.
    struct Nothing;
    impl Served for Nothing {
        fn scope(&self, _: &ApiResource) -> Scope {
            Scope::Absent
        }
    }

    fn manifest(name: &str, children: Vec<ApiResource>) -> Manifest {
        Manifest {
            children,
            ..Manifest::new(
                name,
                "0.1.0",
                ApiResource::new("example.com", "v1", "Database", "databases", true),
                Mode::Composite,
            )
        }
    }

    fn policy(yaml: &str) -> Policy {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, yaml).unwrap();
        Policy::load(&[path]).unwrap()
    }

    fn asked() -> LimitSettings {
        LimitSettings::default()
    }

    #[test]
    fn a_plugin_within_its_grant_is_admitted_with_the_served_scopes() {
        let policy = Policy::default();
        let m = manifest(
            "db",
            vec![ApiResource::new("", "v1", "ConfigMap", "cms", false)],
        );
        let admitted = Admission::new(&policy)
            .admit(&m, "ab", asked(), &Offline::from_crds(&[]))
            .expect("admitted");
        assert_eq!(admitted.manifest.children[0].plural, "configmaps");
        assert!(admitted.manifest.children[0].namespaced);
        assert_eq!(admitted.notes.len(), 1, "the parent's scope is a claim");
        assert!(
            admitted.notes[0].contains("Database"),
            "{:?}",
            admitted.notes
        );
    }

    #[test]
    fn a_kind_not_served_is_refused_and_worth_retrying() {
        let policy = Policy::default();
        let error = Admission::new(&policy)
            .admit(&manifest("db", vec![]), "ab", asked(), &Nothing)
            .unwrap_err();
        assert!(error.retryable(), "{error}");
        assert!(error.to_string().starts_with("plugin db refused: kind "));
    }

    #[test]
    fn a_grant_refusal_is_final() {
        let policy = Policy::default();
        let secret = ApiResource::new("", "v1", "Secret", "secrets", true);
        let error = Admission::new(&policy)
            .admit(&manifest("db", vec![secret]), "ab", asked(), &AsClaimed)
            .unwrap_err();
        assert!(matches!(error, AdmitError::Refused(_)), "{error}");
        assert!(!error.retryable());
        assert!(error.to_string().contains("child kind Secret"), "{error}");
    }

    #[test]
    fn a_strict_policy_refuses_a_placed_plugin_without_a_grant_before_compiling() {
        let policy = policy("strict: true\n");
        let placed = Placed {
            name: "db",
            rel: Path::new("db.wasm"),
        };
        let error = Admission::new(&policy)
            .placed(placed)
            .before_compile("db", "ab")
            .unwrap_err();
        assert_eq!(
            error,
            AdmitError::NoGrant {
                plugin: "db".into()
            }
        );
        assert!(!error.retryable());
    }

    #[test]
    fn pins_are_checked_before_compiling() {
        let (pinned, other) = ("cd".repeat(32), "ab".repeat(32));
        let policy = policy(&format!("plugins:\n  db:\n    sha256: [{pinned}]\n"));
        let admission = Admission::new(&policy).placed(Placed {
            name: "db",
            rel: Path::new("db.wasm"),
        });
        assert!(matches!(
            admission.before_compile("db", &other),
            Err(AdmitError::NotPinned { .. })
        ));
        assert!(admission.before_compile("db", &pinned).is_ok());
    }

    #[test]
    fn a_grant_that_asks_for_a_signature_admits_only_a_file_verified_by_one_of_its_keys() {
        let key = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----";
        let other = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAF\n-----END PUBLIC KEY-----";
        let policy = policy(&format!(
            "plugins:\n  db:\n    signedBy:\n      - |\n        {}\n",
            key.replace('\n', "\n        ")
        ));
        let placed = Placed {
            name: "db",
            rel: Path::new("db.wasm"),
        };
        let admission = Admission::new(&policy).placed(placed);
        let unsigned = admission.before_compile("db", "ab").unwrap_err();
        assert!(
            matches!(unsigned, AdmitError::Unsigned { .. }),
            "{unsigned}"
        );
        assert!(
            unsigned.to_string().contains("--plugin-artifacts"),
            "{unsigned}"
        );
        assert!(matches!(
            admission.signed_by(Some(other)).before_compile("db", "ab"),
            Err(AdmitError::Unsigned { .. })
        ));
        // The same key, wrapped and indented otherwise.
        let rewrapped = key.replace('\n', "\n  ");
        assert!(
            admission
                .signed_by(Some(&rewrapped))
                .before_compile("db", "ab")
                .is_ok()
        );
        // A plugin whose grant asks for none is not asked.
        let open = Admission::new(&policy).placed(Placed {
            name: "web",
            rel: Path::new("web.wasm"),
        });
        assert!(open.before_compile("web", "ab").is_ok());
    }

    #[test]
    fn a_signed_by_entry_that_is_not_one_public_key_is_refused_with_its_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, "plugins:\n  db:\n    signedBy: [\"not a key\"]\n").unwrap();
        let error = Policy::load(&[path]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("signedBy[0] is not one PEM public key"),
            "{error}"
        );
    }

    #[test]
    fn a_declared_name_other_than_the_bound_one_is_refused_naming_both_locations() {
        let policy = policy("plugins:\n  pod-labeler: {path: team-b/}\n");
        let error = Admission::new(&policy)
            .placed(Placed {
                name: "myapp",
                rel: Path::new("myapp.wasm"),
            })
            .admit(&manifest("pod-labeler", vec![]), "ab", asked(), &AsClaimed)
            .unwrap_err();
        assert!(matches!(error, AdmitError::Misnamed { .. }), "{error}");
        assert_eq!(
            error.to_string(),
            "myapp.wasm is where plugin myapp is placed, but the file declares plugin pod-labeler (whose file is team-b/pod-labeler.wasm): refused, it runs as nobody"
        );
    }

    #[test]
    fn a_sharded_grant_admits_a_composite_and_refuses_a_decorator_before_discovery() {
        let policy = policy(
            "plugins:\n  db: {parent: [Database.example.com], shards: 4}\n  tagger: {parent: [Pod], shards: 4}\n  plain: {parent: [Pod]}\n",
        );
        let admission = Admission::new(&policy);
        let composite = manifest("db", vec![]);
        let admitted = admission
            .admit(&composite, "ab", asked(), &AsClaimed)
            .expect("a composite may be sharded");
        assert_eq!(admitted.grant.grant.shards, 4);
        let decorator = |name: &str| Manifest {
            mode: Mode::Decorator,
            parent: ApiResource::new("", "v1", "Pod", "pods", true),
            ..manifest(name, vec![])
        };
        let error = admission.grant(&decorator("tagger")).unwrap_err();
        assert_eq!(
            error,
            AdmitError::Unshardable {
                plugin: "tagger".into(),
                shards: 4
            }
        );
        assert!(!error.retryable());
        assert!(
            error.to_string().contains("it is a decorator")
                && error.to_string().contains("shards: 1"),
            "{error}"
        );
        assert_eq!(
            admission
                .admit(&decorator("tagger"), "ab", asked(), &AsClaimed)
                .unwrap_err(),
            error
        );
        assert!(
            admission
                .admit(&decorator("plain"), "ab", asked(), &AsClaimed)
                .is_ok()
        );
    }

    #[test]
    fn shard_pods_is_admitted_only_for_related_pods_named_after_their_parent() {
        use crate::manifest::{LabelValue, Related};
        let policy = policy(
            "plugins:\n  db: {parent: [Database.example.com], related: [Pod], shards: 4, shardPods: true}\n",
        );
        let admission = Admission::new(&policy);
        let reading = |value: LabelValue| Manifest {
            related: vec![Related {
                resource: ApiResource::new("", "v1", "Pod", "pods", true),
                match_labels: vec![("instance".into(), value)],
            }],
            ..manifest("db", vec![])
        };
        let admitted = admission
            .admit(&reading(LabelValue::ParentName), "ab", asked(), &AsClaimed)
            .expect("its Pods are named after their parent");
        assert!(admitted.grant.grant.shard_pods);
        for unplaceable in [
            reading(LabelValue::Literal("db".into())),
            manifest("db", vec![]),
        ] {
            let error = admission.grant(&unplaceable).unwrap_err();
            assert_eq!(
                error,
                AdmitError::NoShardPods {
                    plugin: "db".into()
                }
            );
            assert!(error.to_string().contains("remove shardPods"), "{error}");
        }
    }

    #[test]
    fn the_hosts_namespaces_bound_what_is_admitted() {
        let policy = Policy::default();
        let namespaces = vec!["shop".to_string()];
        let admitted = Admission::new(&policy)
            .within(Some(&namespaces))
            .admit(&manifest("db", vec![]), "ab", asked(), &AsClaimed)
            .expect("admitted");
        assert_eq!(admitted.manifest.namespaces, namespaces);
    }
}
