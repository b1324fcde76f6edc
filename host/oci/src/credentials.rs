//! Registry credentials where docker, podman and crane keep them, so that
//! a `docker login` (or `podman login`, or a credential helper) is enough
//! for `kubeplug push` and `kubeplug verify`.
//!
//! Explicit credentials (`--username`/`--password` or their variables) win.
//! Otherwise the auth files are searched in order and the first that has
//! something for the registry answers: `$REGISTRY_AUTH_FILE` (else
//! `$XDG_RUNTIME_DIR/containers/auth.json`), as podman; then
//! `$DOCKER_CONFIG/config.json` (else `~/.docker/config.json`), as docker.
//! In a file, as docker does: a helper named for the registry in
//! `credHelpers`, else the `credsStore` helper, is asked first
//! (`docker-credential-NAME get`, the server on stdin); its "credentials
//! not found" falls back to the `auths` entry (`auth`, the base64 of
//! `user:password`; or `username`/`password`; `identitytoken` wins, an
//! OAuth2 refresh token for the registry's token service).
//!
//! Keys match as docker matches them: `https://` and `http://` prefixes and
//! any path (`/v1/`) are ignored, so `https://ghcr.io/v1/` is `ghcr.io`;
//! docker.io, index.docker.io and registry-1.docker.io are all docker's
//! index key, `https://index.docker.io/v1/`, which is also the server a
//! helper is asked about.
//!
//! Guarantees: the lookup runs on the registry's first challenge only (an
//! anonymous registry never starts a helper); no credential is logged or
//! put in an error, only where it came from (the file and its entry).

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use serde::Deserialize;

use crate::error::{Context as _, Result, bail};

/// Docker Hub's key in auth files and the server its helpers know.
const DOCKER_INDEX: &str = "https://index.docker.io/v1/";
/// The names docker.io answers under.
const DOCKER_HUB: &[&str] = &["docker.io", "index.docker.io", "registry-1.docker.io"];

/// What authenticates to a registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A user and a password (or an access token used as one).
    Basic { username: String, password: String },
    /// An OAuth2 refresh token (docker's `identitytoken`, or a helper's
    /// `<token>` user), traded at the registry's token service.
    IdentityToken(String),
}

/// Never the secrets, so that a `{:?}` cannot leak them.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .finish_non_exhaustive(),
            Credentials::IdentityToken(_) => f.write_str("IdentityToken(..)"),
        }
    }
}

/// The credentials of one registry: the explicit ones, else the auth
/// files', looked up once, when the registry first asks for them.
pub struct Login {
    registry: String,
    explicit: Option<Credentials>,
    found: Option<Option<Credentials>>,
}

impl Login {
    pub fn new(registry: &str, explicit: Option<Credentials>) -> Self {
        Login {
            registry: registry.to_string(),
            explicit,
            found: None,
        }
    }

    pub fn credentials(&mut self) -> Result<Option<&Credentials>> {
        if self.explicit.is_some() {
            return Ok(self.explicit.as_ref());
        }
        if self.found.is_none() {
            let files = files(|name| std::env::var(name).ok());
            self.found = Some(lookup(&self.registry, &files, &helper)?);
        }
        Ok(self.found.as_ref().and_then(Option::as_ref))
    }
}

/// The auth files to search, in order, from the environment (`var`).
fn files(var: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let var = |name| var(name).filter(|v| !v.is_empty());
    let mut files = Vec::new();
    match (var("REGISTRY_AUTH_FILE"), var("XDG_RUNTIME_DIR")) {
        (Some(file), _) => files.push(PathBuf::from(file)),
        (None, Some(run)) => files.push(Path::new(&run).join("containers/auth.json")),
        (None, None) => {}
    }
    match (var("DOCKER_CONFIG"), var("HOME")) {
        (Some(dir), _) => files.push(Path::new(&dir).join("config.json")),
        (None, Some(home)) => files.push(Path::new(&home).join(".docker/config.json")),
        (None, None) => {}
    }
    files
}

/// What a registry is called in auth files and by helpers.
fn server(registry: &str) -> &str {
    if DOCKER_HUB.contains(&registry) {
        DOCKER_INDEX
    } else {
        registry
    }
}

/// An auth-file key as docker compares it: `host[:port]`.
fn hostname(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

/// docker's `config.json` and podman's `auth.json`, the parts read here.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuthFile {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
    creds_store: Option<String>,
}

/// One `auths` entry.
#[derive(Debug, Default, Deserialize)]
struct Entry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
}

/// The helper that asks a credential store: the helper's name and the
/// server, giving the credentials or None when it has none.
type Helper<'a> = dyn Fn(&str, &str) -> Result<Option<Credentials>> + 'a;

/// The credentials `files` hold for `registry`: the first file that has
/// some answers.
fn lookup(registry: &str, files: &[PathBuf], helper: &Helper<'_>) -> Result<Option<Credentials>> {
    let server = server(registry);
    for path in files {
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => {
                return Err(error).with_context(|| format!("failed to read {}", path.display()));
            }
        };
        let file: AuthFile = serde_json::from_slice(&text)
            .with_context(|| format!("{}: not a registry auth file", path.display()))?;
        if let Some((credentials, entry)) = in_file(&file, server, helper)
            .with_context(|| format!("{}: the credentials of {server}", path.display()))?
        {
            tracing::debug!(%registry, file = %path.display(), %entry, "registry credentials");
            return Ok(Some(credentials));
        }
    }
    Ok(None)
}

/// What `file` holds for `server`, and the entry that held it.
fn in_file(
    file: &AuthFile,
    server: &str,
    helper: &Helper<'_>,
) -> Result<Option<(Credentials, String)>> {
    let host = hostname(server);
    let named = file
        .cred_helpers
        .iter()
        .find(|(key, _)| hostname(key) == host)
        .map(|(key, name)| (format!("credHelpers[{key:?}]"), name));
    let store = file
        .creds_store
        .as_ref()
        .filter(|name| !name.is_empty())
        .map(|name| ("credsStore".to_string(), name));
    if let Some((entry, name)) = named.or(store) {
        match helper(name, server).with_context(|| format!("{entry}: docker-credential-{name}"))? {
            Some(credentials) => return Ok(Some((credentials, entry))),
            None => tracing::debug!(%server, %entry, "the credential helper has none"),
        }
    }
    let found = file
        .auths
        .get_key_value(server)
        .or_else(|| file.auths.iter().find(|(key, _)| hostname(key) == host));
    let Some((key, entry)) = found else {
        return Ok(None);
    };
    let name = format!("auths[{key:?}]");
    Ok(entry
        .credentials()
        .with_context(|| name.clone())?
        .map(|credentials| (credentials, name)))
}

impl Entry {
    /// None for an empty entry, as `docker login` leaves one when a
    /// helper holds the secret.
    fn credentials(&self) -> Result<Option<Credentials>> {
        let some = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        if let Some(token) = some(&self.identitytoken) {
            return Ok(Some(Credentials::IdentityToken(token)));
        }
        if let Some(auth) = some(&self.auth) {
            let engine = base64::engine::GeneralPurpose::new(
                &base64::alphabet::STANDARD,
                base64::engine::GeneralPurposeConfig::new()
                    .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
            );
            // The decoding error would show where the text is wrong, so
            // it is left out.
            let Ok(decoded) = engine.decode(auth.trim()) else {
                bail!("`auth` is not base64");
            };
            let Some((username, password)) = String::from_utf8(decoded).ok().and_then(|d| {
                d.split_once(':')
                    .map(|(u, p)| (u.to_string(), p.to_string()))
            }) else {
                bail!("`auth` is not the base64 of USER:PASSWORD");
            };
            return Ok(Some(Credentials::Basic { username, password }));
        }
        Ok(some(&self.username)
            .zip(some(&self.password))
            .map(|(username, password)| Credentials::Basic { username, password }))
    }
}

/// `docker-credential-NAME get`, `server` on its stdin (the credential
/// helpers protocol).
fn helper(name: &str, server: &str) -> Result<Option<Credentials>> {
    let program = format!("docker-credential-{name}");
    let mut child = Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("failed to run {program} (is it on PATH?)"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(server.as_bytes())
            .with_context(|| format!("failed to write to {program}"))?;
    }
    let out = child
        .wait_with_output()
        .with_context(|| format!("{program} failed"))?;
    if !out.status.success() {
        // A failing helper prints its reason; it has no credential to print.
        let said = String::from_utf8_lossy(if out.stdout.is_empty() {
            &out.stderr
        } else {
            &out.stdout
        })
        .trim()
        .chars()
        .take(200)
        .collect::<String>();
        if said.contains("credentials not found") {
            return Ok(None);
        }
        bail!("{program} get: {}: {said}", out.status);
    }
    parse_helper(&out.stdout).map(Some)
}

/// A helper's answer: `{"ServerURL", "Username", "Secret"}`; the user
/// `<token>` marks an identity token.
fn parse_helper(out: &[u8]) -> Result<Credentials> {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Answer {
        #[serde(default)]
        username: String,
        #[serde(default)]
        secret: String,
    }
    // serde's error could quote the answer, secret included.
    let Ok(answer) = serde_json::from_slice::<Answer>(out) else {
        bail!("the helper's answer is not its JSON");
    };
    if answer.secret.is_empty() {
        bail!("the helper answered without a secret");
    }
    Ok(if answer.username == "<token>" {
        Credentials::IdentityToken(answer.secret)
    } else {
        Credentials::Basic {
            username: answer.username,
            password: answer.secret,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(username: &str, password: &str) -> Credentials {
        Credentials::Basic {
            username: username.into(),
            password: password.into(),
        }
    }

    fn no_helper(name: &str, _: &str) -> Result<Option<Credentials>> {
        panic!("no helper expected, {name} asked");
    }

    /// `files` written into a temporary directory, in order.
    fn write(files: &[&str]) -> (tempfile::TempDir, Vec<PathBuf>) {
        let dir = tempfile::tempdir().unwrap();
        let paths = files
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let path = dir.path().join(format!("{i}.json"));
                std::fs::write(&path, text).unwrap();
                path
            })
            .collect();
        (dir, paths)
    }

    #[test]
    fn keys_match_by_host_and_port_whatever_their_scheme_and_path() {
        assert_eq!(hostname("https://localhost:5000/v1/"), "localhost:5000");
        assert_eq!(hostname("http://ghcr.io"), "ghcr.io");
        assert_eq!(hostname("quay.io/acme"), "quay.io");
        assert_eq!(hostname("127.0.0.1:5000"), "127.0.0.1:5000");
        for hub in ["docker.io", "index.docker.io", "registry-1.docker.io"] {
            assert_eq!(server(hub), "https://index.docker.io/v1/");
        }
        assert_eq!(server("ghcr.io"), "ghcr.io");
    }

    #[test]
    fn the_files_are_podmans_then_dockers_each_overridden_by_its_variable() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            files(env(&[
                ("HOME", "/home/u"),
                ("XDG_RUNTIME_DIR", "/run/user/1")
            ])),
            [
                PathBuf::from("/run/user/1/containers/auth.json"),
                PathBuf::from("/home/u/.docker/config.json")
            ]
        );
        assert_eq!(
            files(env(&[
                ("HOME", "/home/u"),
                ("XDG_RUNTIME_DIR", "/run/user/1"),
                ("REGISTRY_AUTH_FILE", "/etc/auth.json"),
                ("DOCKER_CONFIG", "/ci/docker"),
            ])),
            [
                PathBuf::from("/etc/auth.json"),
                PathBuf::from("/ci/docker/config.json")
            ]
        );
        assert_eq!(
            files(env(&[("DOCKER_CONFIG", ""), ("HOME", "/h")])),
            [PathBuf::from("/h/.docker/config.json")]
        );
    }

    #[test]
    fn auths_entries_give_basic_credentials_or_an_identity_token() {
        // "user:pa:ss" and "ci:" in base64; the second without padding.
        let (_dir, files) = write(&[r#"{"auths": {
            "https://localhost:5000/v1/": {"auth": "dXNlcjpwYTpzcw=="},
            "ghcr.io": {"auth": "Y2k6"},
            "quay.io": {"username": "robot", "password": "pw"},
            "example.com": {"auth": "dXNlcjpwYTpzcw==", "identitytoken": "refresh"},
            "empty.example": {}
        }}"#]);
        let get = |registry| lookup(registry, &files, &no_helper).unwrap();
        assert_eq!(get("localhost:5000"), Some(basic("user", "pa:ss")));
        assert_eq!(get("ghcr.io"), Some(basic("ci", "")));
        assert_eq!(get("quay.io"), Some(basic("robot", "pw")));
        assert_eq!(
            get("example.com"),
            Some(Credentials::IdentityToken("refresh".into()))
        );
        assert_eq!(get("empty.example"), None);
        assert_eq!(get("elsewhere.example"), None);
    }

    #[test]
    fn docker_hub_is_found_under_the_index_key() {
        let (_dir, files) =
            write(&[r#"{"auths": {"https://index.docker.io/v1/": {"auth": "YTpi"}}}"#]);
        for hub in ["docker.io", "registry-1.docker.io"] {
            assert_eq!(
                lookup(hub, &files, &no_helper).unwrap(),
                Some(basic("a", "b"))
            );
        }
    }

    #[test]
    fn the_first_file_with_an_entry_answers() {
        let (_dir, mut files) = write(&[
            r#"{"auths": {"ghcr.io": {"auth": "YTpi"}}}"#,
            r#"{"auths": {"ghcr.io": {"auth": "Yzpk"}, "quay.io": {"auth": "Yzpk"}}}"#,
        ]);
        files.insert(0, PathBuf::from("/nonexistent/auth.json"));
        assert_eq!(
            lookup("ghcr.io", &files, &no_helper).unwrap(),
            Some(basic("a", "b"))
        );
        assert_eq!(
            lookup("quay.io", &files, &no_helper).unwrap(),
            Some(basic("c", "d"))
        );
    }

    #[test]
    fn a_registry_helper_comes_before_the_store_and_the_store_before_auths() {
        let (_dir, files) = write(&[r#"{
            "auths": {"ghcr.io": {"auth": "YTpi"}, "quay.io": {"auth": "YTpi"}},
            "credHelpers": {"https://ghcr.io": "gh"},
            "credsStore": "desktop"
        }"#]);
        let asked = std::cell::RefCell::new(Vec::new());
        let helper = |name: &str, server: &str| {
            asked.borrow_mut().push(format!("{name} {server}"));
            Ok(match name {
                "gh" => Some(Credentials::IdentityToken("t".into())),
                _ => None, // "credentials not found"
            })
        };
        assert_eq!(
            lookup("ghcr.io", &files, &helper).unwrap(),
            Some(Credentials::IdentityToken("t".into()))
        );
        // The store has none: the inline entry answers.
        assert_eq!(
            lookup("quay.io", &files, &helper).unwrap(),
            Some(basic("a", "b"))
        );
        assert_eq!(*asked.borrow(), ["gh ghcr.io", "desktop quay.io"]);
    }

    #[test]
    fn errors_name_the_file_and_the_entry_but_never_the_secret() {
        let (_dir, files) = write(&[r#"{"auths": {"ghcr.io": {"auth": "c2VjcmV0"}}}"#]);
        let error = crate::error::chain(&lookup("ghcr.io", &files, &no_helper).unwrap_err());
        assert!(error.contains(&files[0].display().to_string()), "{error}");
        assert!(error.contains(r#"auths["ghcr.io"]"#), "{error}");
        assert!(error.contains("USER:PASSWORD"), "{error}");
        assert!(
            !error.contains("secret") && !error.contains("c2VjcmV0"),
            "{error}"
        );

        let (_dir, files) = write(&[r#"{"credHelpers": {"ghcr.io": "broken"}}"#]);
        let failing = |_: &str, _: &str| -> Result<Option<Credentials>> {
            bail!("exit status: 1: no keychain")
        };
        let error = crate::error::chain(&lookup("ghcr.io", &files, &failing).unwrap_err());
        assert!(error.contains(r#"credHelpers["ghcr.io"]"#), "{error}");
        assert!(error.contains("docker-credential-broken"), "{error}");

        let (_dir, files) = write(&["{not json"]);
        let error = crate::error::chain(&lookup("ghcr.io", &files, &no_helper).unwrap_err());
        assert!(error.contains("not a registry auth file"), "{error}");
    }

    #[test]
    fn helper_answers_give_a_user_or_an_identity_token() {
        assert_eq!(
            parse_helper(br#"{"ServerURL":"ghcr.io","Username":"me","Secret":"pw"}"#).unwrap(),
            basic("me", "pw")
        );
        assert_eq!(
            parse_helper(br#"{"ServerURL":"x","Username":"<token>","Secret":"rt"}"#).unwrap(),
            Credentials::IdentityToken("rt".into())
        );
        let error = parse_helper(br#"{"Username":"me","Secret":"pw""#).unwrap_err();
        assert!(!error.to_string().contains("pw"), "{error}");
    }

    #[test]
    fn debug_output_shows_no_secret() {
        let shown = format!(
            "{:?} {:?}",
            basic("me", "hunter2"),
            Credentials::IdentityToken("refresh-me".into())
        );
        assert!(
            !shown.contains("hunter2") && !shown.contains("refresh-me"),
            "{shown}"
        );
    }
}
