//! `kubeplug new` and `kubeplug build`'s project: a plugin project from
//! the templates embedded at build time, and the SDK it builds against,
//! embedded too (see `host/kit/build.rs`).
//!
//! Placeholders, in template contents and paths: `{{name}}` (the plugin's
//! name), `{{crate}}` (the name with `_` for `-`), `{{sdk_version}}` (the
//! SDK version the project pins: this kit's) and `{{sdk_crate_version}}`
//! (the Rust SDK crate's version).
//!
//! A project records what it pins in [`PROJECT_FILE`] (name, language, SDK
//! version). The SDK and the WIT are unpacked into
//! `.kubeplug/sdk/<version>/` inside the project with the repository's
//! layout (`wit/`, `plugins/sdk/`, `plugins/sdk-python/`, ...), so no file
//! of a project names a path outside it: the Rust template's `Cargo.toml`
//! names the SDK by relative path and exact version, the Python and
//! TypeScript build scripts find it relatively.

use std::path::{Path, PathBuf};

/// One file of a template.
#[derive(Debug)]
pub struct Template {
    pub lang: &'static str,
    /// Relative, `/`-separated.
    pub path: &'static str,
    pub bytes: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/templates.rs"));

/// One file of an SDK bundle: `wit` (every language) or a language's
/// [`Lang::dir`].
#[derive(Debug)]
pub struct SdkFile {
    pub bundle: &'static str,
    /// From the repository's root, `/`-separated (`plugins/sdk/src/lib.rs`).
    pub path: &'static str,
    pub executable: bool,
    pub bytes: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/sdk.rs"));

/// The SDK version this build of kubeplug carries and new projects pin:
/// kubeplug's own version.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The project file `kubeplug new` writes and `kubeplug build` reads.
pub const PROJECT_FILE: &str = "kubeplug.toml";

/// Where a project's SDKs are unpacked, one directory per version.
pub const UNPACK_DIR: &str = ".kubeplug/sdk";

/// Languages `kubeplug new` knows the SDK of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Ts,
    Go,
}

impl Lang {
    /// The template's directory under `plugins/templates/`, the SDK
    /// bundle's name and the project file's `lang`.
    pub fn dir(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Ts => "ts",
            Lang::Go => "go",
        }
    }

    /// The SDK's directory under `plugins/`.
    pub fn sdk_dir(self) -> &'static str {
        match self {
            Lang::Rust => "sdk",
            Lang::Python => "sdk-python",
            Lang::Ts => "sdk-ts",
            Lang::Go => "sdk-go",
        }
    }

    fn from_dir(dir: &str) -> Option<Lang> {
        [Lang::Rust, Lang::Python, Lang::Ts, Lang::Go]
            .into_iter()
            .find(|l| l.dir() == dir)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error("no template for {0} in this build of kubeplug")]
    NoTemplate(&'static str),
    #[error(
        "{0:?} is not a valid plugin name: use a DNS label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)"
    )]
    BadName(String),
    #[error("{0} already exists; kubeplug new never overwrites")]
    Exists(String),
    #[error(
        "{path} not found: not a kubeplug project (`kubeplug new` writes that file, naming the plugin, its language and the SDK version it pins)"
    )]
    NoProject { path: String },
    #[error("{path}:{line}: {reason}")]
    BadProject {
        path: String,
        line: usize,
        reason: String,
    },
    #[error(
        "this project pins kubeplug SDK {pinned} ({PROJECT_FILE}: sdk = \"{pinned}\") but this kubeplug carries SDK {carried}: \
         build it with kubeplug {pinned}, or move it to {carried} (set sdk = \"{carried}\" in {PROJECT_FILE}{rust}, \
         then run kubeplug build and its tests)",
        rust = rust_note(*.lang)
    )]
    VersionMismatch {
        pinned: String,
        carried: &'static str,
        lang: Lang,
    },
    #[error(
        "{file} does not depend on the SDK {PROJECT_FILE} pins: its kubeplug-sdk must be {{ version = \"={crate_version}\", path = \"{UNPACK_DIR}/{version}/plugins/sdk\" }}"
    )]
    StalePin {
        file: String,
        version: String,
        crate_version: &'static str,
    },
    #[error(
        "{file} does not use the SDK {PROJECT_FILE} pins: it must say `replace kubeplug/sdk => {want}`"
    )]
    StaleGoPin { file: String, want: String },
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn rust_note(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => ", and the kubeplug-sdk path and version in Cargo.toml",
        Lang::Go => ", and the kubeplug/sdk replace path in go.mod",
        Lang::Python | Lang::Ts => "",
    }
}

/// True for an RFC 1123 label: what Kubernetes accepts as a name part.
pub fn is_dns_label(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| alnum(c) || c == '-')
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

/// The embedded files of `lang`'s template.
pub fn template(lang: Lang) -> impl Iterator<Item = &'static Template> {
    TEMPLATES.iter().filter(move |t| t.lang == lang.dir())
}

/// The embedded SDK files a `lang` project unpacks: the WIT and its SDK.
pub fn sdk_files(lang: Lang) -> impl Iterator<Item = &'static SdkFile> {
    SDK_FILES
        .iter()
        .filter(move |f| f.bundle == "wit" || f.bundle == lang.dir())
}

/// A plugin project: its directory and what its [`PROJECT_FILE`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    pub dir: PathBuf,
    pub name: String,
    pub lang: Lang,
    /// The SDK version it pins.
    pub sdk: String,
}

impl Project {
    /// Read `dir`'s [`PROJECT_FILE`].
    pub fn load(dir: &Path) -> Result<Project, ScaffoldError> {
        let path = dir.join(PROJECT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ScaffoldError::NoProject {
                    path: path.display().to_string(),
                });
            }
            Err(source) => {
                return Err(ScaffoldError::Read {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        Project::parse(dir, &text, &path.display().to_string())
    }

    /// A project file's contents: `key = "value"` lines (TOML, top-level
    /// strings only), comments and blank lines. Unknown keys are ignored,
    /// so that a newer kubeplug's files still read.
    fn parse(dir: &Path, text: &str, path: &str) -> Result<Project, ScaffoldError> {
        let bad = |line: usize, reason: String| ScaffoldError::BadProject {
            path: path.to_string(),
            line,
            reason,
        };
        let (mut name, mut lang, mut sdk) = (None, None, None);
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(bad(
                    n + 1,
                    format!("expected key = \"value\", found {line:?}"),
                ));
            };
            let key = key.trim();
            let value = value.trim();
            // A trailing comment after the closing quote.
            let value = match value.strip_prefix('"').and_then(|v| v.split_once('"')) {
                Some((value, rest)) if rest.trim().is_empty() || rest.trim().starts_with('#') => {
                    value.to_string()
                }
                _ => {
                    return Err(bad(
                        n + 1,
                        format!("{key}: expected a quoted string, found {value}"),
                    ));
                }
            };
            match key {
                "name" => name = Some((n + 1, value)),
                "lang" => lang = Some((n + 1, value)),
                "sdk" => sdk = Some((n + 1, value)),
                _ => {}
            }
        }
        let end = text.lines().count().max(1);
        let (at, name) = name.ok_or_else(|| bad(end, "no name = \"...\"".into()))?;
        if !is_dns_label(&name) {
            return Err(bad(at, ScaffoldError::BadName(name).to_string()));
        }
        let (at, lang) = lang.ok_or_else(|| bad(end, "no lang = \"...\"".into()))?;
        let lang = Lang::from_dir(&lang).ok_or_else(|| {
            bad(
                at,
                format!("lang = {lang:?}: this kubeplug builds rust, python, ts and go"),
            )
        })?;
        let (_, sdk) = sdk.ok_or_else(|| bad(end, "no sdk = \"...\" (the SDK version)".into()))?;
        Ok(Project {
            dir: dir.to_path_buf(),
            name,
            lang,
            sdk,
        })
    }

    /// Where this project's SDK version is unpacked: the root of the
    /// repository layout (`wit/`, `plugins/...`).
    pub fn sdk_root(&self) -> PathBuf {
        self.dir.join(UNPACK_DIR).join(&self.sdk)
    }

    /// The unpacked SDK of the project's language.
    pub fn sdk_dir(&self) -> PathBuf {
        self.sdk_root().join("plugins").join(self.lang.sdk_dir())
    }

    /// What the build leaves, where `kubeplug test .` looks.
    pub fn wasm(&self) -> PathBuf {
        self.dir.join("dist").join(format!("{}.wasm", self.name))
    }

    /// The project pins the SDK this binary carries, and (Rust) its
    /// `Cargo.toml` depends on that one.
    pub fn check_pins(&self) -> Result<(), ScaffoldError> {
        if self.sdk != SDK_VERSION {
            return Err(ScaffoldError::VersionMismatch {
                pinned: self.sdk.clone(),
                carried: SDK_VERSION,
                lang: self.lang,
            });
        }
        if self.lang == Lang::Rust {
            let path = self.dir.join("Cargo.toml");
            let cargo = std::fs::read_to_string(&path).map_err(|source| ScaffoldError::Read {
                path: path.display().to_string(),
                source,
            })?;
            let want = format!("{UNPACK_DIR}/{}/plugins/sdk", self.sdk);
            let pinned = cargo
                .lines()
                .filter(|l| l.trim_start().starts_with("kubeplug-sdk"))
                .any(|l| {
                    l.contains(&want) && l.contains(&format!("\"={RUST_SDK_CRATE_VERSION}\""))
                });
            if !pinned {
                return Err(ScaffoldError::StalePin {
                    file: path.display().to_string(),
                    version: self.sdk.clone(),
                    crate_version: RUST_SDK_CRATE_VERSION,
                });
            }
        }
        if self.lang == Lang::Go {
            let path = self.dir.join("go.mod");
            let go_mod = std::fs::read_to_string(&path).map_err(|source| ScaffoldError::Read {
                path: path.display().to_string(),
                source,
            })?;
            let want = format!("./{UNPACK_DIR}/{}/plugins/sdk-go", self.sdk);
            let pinned = go_mod.lines().any(|l| {
                let l = l.trim();
                l.starts_with("replace kubeplug/sdk ") && l.ends_with(&format!("=> {want}"))
            });
            if !pinned {
                return Err(ScaffoldError::StaleGoPin {
                    file: path.display().to_string(),
                    want,
                });
            }
        }
        Ok(())
    }

    /// [`unpack`] this project's SDK, after [`Project::check_pins`].
    pub fn unpack(&self) -> Result<Unpacked, ScaffoldError> {
        self.check_pins()?;
        unpack(&self.dir, self.lang)
    }
}

/// The project file of a new project.
pub fn project_file(name: &str, lang: Lang) -> String {
    format!(
        "# A kubeplug plugin project: `kubeplug build` reads this file.\n\
         name = \"{name}\"\n\
         lang = \"{lang}\"\n\
         # The kubeplug SDK and WIT contract the plugin builds against: the\n\
         # version of the kubeplug that builds it, which carries them.\n\
         # `kubeplug build` unpacks them into {UNPACK_DIR}/<sdk>/ (not\n\
         # committed). To move to another version, change it here{rust}\n\
         # and build with that kubeplug.\n\
         sdk = \"{SDK_VERSION}\"\n",
        lang = lang.dir(),
        rust = if lang == Lang::Rust {
            "\n# and in Cargo.toml (kubeplug-sdk's path and version)"
        } else {
            ""
        },
    )
}

/// What [`unpack`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpacked {
    /// `<project>/.kubeplug/sdk/<version>`.
    pub root: PathBuf,
    /// Files (re)written: missing, or different from the embedded ones.
    pub written: usize,
    pub files: usize,
}

/// Unpack the WIT and `lang`'s SDK this binary carries into
/// `project/.kubeplug/sdk/<SDK_VERSION>/`, in the repository's layout.
/// Idempotent: a file already there with the right contents (and mode) is
/// left alone, so its mtime does not trigger rebuilds; a missing or changed
/// one is written again. `.kubeplug/` gets a `.gitignore` of `*`.
pub fn unpack(project: &Path, lang: Lang) -> Result<Unpacked, ScaffoldError> {
    let top = project.join(".kubeplug");
    let root = project.join(UNPACK_DIR).join(SDK_VERSION);
    let mut written = 0;
    let mut files = 0;
    let mut put = |path: PathBuf, bytes: &[u8], executable: bool| {
        files += 1;
        let wrong_mode = executable && !is_executable(&path);
        let same = std::fs::read(&path).is_ok_and(|on_disk| on_disk == bytes);
        if same && !wrong_mode {
            return Ok(());
        }
        written += 1;
        write_atomically(&path, bytes, executable).map_err(|source| ScaffoldError::Write {
            path: path.display().to_string(),
            source,
        })
    };
    put(
        top.join(".gitignore"),
        b"# Unpacked by kubeplug (the SDK a project pins): never committed.\n*\n",
        false,
    )?;
    for file in sdk_files(lang) {
        put(root.join(file.path), file.bytes, file.executable)?;
    }
    Ok(Unpacked {
        root,
        written,
        files,
    })
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o100 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        true
    }
}

/// Write through a temporary file and a rename, so that an interrupted
/// unpack never leaves a half-written file that looks unpacked.
fn write_atomically(path: &Path, bytes: &[u8], executable: bool) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let tmp = tempfile::NamedTempFile::new_in(parent)?;
    std::fs::write(tmp.path(), bytes)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = if executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode))?;
    }
    #[cfg(not(unix))]
    let _ = executable;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Write `lang`'s template for plugin `name` into `parent/name/`, with its
/// [`PROJECT_FILE`], unpack its SDK there and return that directory. Files
/// named `build` or `test` are made executable. Nothing is left behind on
/// failure.
pub fn scaffold(lang: Lang, name: &str, parent: &Path) -> Result<PathBuf, ScaffoldError> {
    let files: Vec<&Template> = template(lang).collect();
    if files.is_empty() {
        return Err(ScaffoldError::NoTemplate(lang.dir()));
    }
    if !is_dns_label(name) {
        return Err(ScaffoldError::BadName(name.into()));
    }
    let dir = parent.join(name);
    if dir.exists() {
        return Err(ScaffoldError::Exists(dir.display().to_string()));
    }
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{sdk_version}}", SDK_VERSION)
            .replace("{{sdk_crate_version}}", RUST_SDK_CRATE_VERSION)
    };
    let written = files
        .iter()
        .try_for_each(|file| {
            let path = dir.join(fill(file.path));
            let bytes = match std::str::from_utf8(file.bytes) {
                Ok(text) => fill(text).into_bytes(),
                Err(_) => file.bytes.to_vec(),
            };
            write(&path, &bytes).map_err(|source| ScaffoldError::Write {
                path: path.display().to_string(),
                source,
            })
        })
        .and_then(|()| {
            let path = dir.join(PROJECT_FILE);
            write(&path, project_file(name, lang).as_bytes()).map_err(|source| {
                ScaffoldError::Write {
                    path: path.display().to_string(),
                    source,
                }
            })
        })
        .and_then(|()| unpack(&dir, lang).map(drop));
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    written.map(|()| dir)
}

fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, bytes)?;
    let executable = path
        .file_name()
        .is_some_and(|n| n == "build" || n == "test");
    #[cfg(unix)]
    if executable {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    #[cfg(not(unix))]
    let _ = executable;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_are_dns_labels() {
        for good in ["greeting", "my-app", "a", "x1", &"a".repeat(63)] {
            assert!(is_dns_label(good), "{good}");
        }
        for bad in [
            "",
            "My-App",
            "-app",
            "app-",
            "my_app",
            "my.app",
            &"a".repeat(64),
        ] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn the_rust_template_is_embedded() {
        let paths: Vec<&str> = template(Lang::Rust).map(|t| t.path).collect();
        for want in [
            "Cargo.toml",
            "src/lib.rs",
            "fixtures/example.yaml",
            "build",
            "README.md",
        ] {
            assert!(paths.contains(&want), "{want} in {paths:?}");
        }
    }

    /// Every text file under `dir`, by path relative to it.
    fn text_files(dir: &Path) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(at) = stack.pop() {
            for entry in std::fs::read_dir(&at).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if let Ok(text) = std::fs::read_to_string(&path) {
                    let relative = path.strip_prefix(dir).unwrap().display().to_string();
                    out.push((relative, text));
                }
            }
        }
        out
    }

    #[test]
    fn scaffolding_fills_placeholders_and_refuses_what_it_should() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = scaffold(Lang::Rust, "hello-world", tmp.path()).unwrap();
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("name = \"hello-world\""), "{cargo}");
        let dependency = format!(
            "kubeplug-sdk = {{ version = \"={RUST_SDK_CRATE_VERSION}\", path = \".kubeplug/sdk/{SDK_VERSION}/plugins/sdk\" }}"
        );
        assert!(cargo.contains(&dependency), "{cargo}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode();
            assert_eq!(
                mode(&dir.join("build")) & 0o111,
                0o111,
                "build is executable"
            );
        }
        assert!(matches!(
            scaffold(Lang::Rust, "hello-world", tmp.path()),
            Err(ScaffoldError::Exists(_))
        ));
        assert!(matches!(
            scaffold(Lang::Rust, "Hello", tmp.path()),
            Err(ScaffoldError::BadName(_))
        ));
        assert!(!tmp.path().join("Hello").exists());
    }

    #[test]
    fn no_generated_file_names_an_absolute_path_or_a_placeholder() {
        let tmp = tempfile::tempdir().unwrap();
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .unwrap();
        for lang in [Lang::Rust, Lang::Python, Lang::Ts, Lang::Go] {
            let dir = scaffold(lang, &format!("p-{}", lang.dir()), tmp.path()).unwrap();
            let files = text_files(&dir);
            assert!(files.len() > 5, "{files:?}");
            for (path, text) in files {
                for needle in [
                    checkout.to_str().unwrap(),
                    tmp.path().to_str().unwrap(),
                    "/work/main",
                    "/home/",
                    "/root/",
                    "{{",
                ] {
                    // `${{ ... }}`: GitHub Actions expressions.
                    let hits = text.matches(needle).count()
                        - text.matches("${{").count() * usize::from(needle == "{{");
                    assert_eq!(hits, 0, "{needle:?} in {}/{path}", lang.dir());
                }
            }
            for want in [".gitignore", "README.md", "build", PROJECT_FILE] {
                assert!(dir.join(want).is_file(), "{want} in {}", lang.dir());
            }
        }
    }

    #[test]
    fn the_project_file_names_the_plugin_its_language_and_the_sdk_it_pins() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = scaffold(Lang::Python, "labeler", tmp.path()).unwrap();
        let text = std::fs::read_to_string(dir.join(PROJECT_FILE)).unwrap();
        assert!(text.contains("name = \"labeler\"\n"), "{text}");
        assert!(text.contains("lang = \"python\"\n"), "{text}");
        assert!(
            text.contains(&format!("sdk = \"{SDK_VERSION}\"\n")),
            "{text}"
        );
        let project = Project::load(&dir).unwrap();
        assert_eq!(
            project,
            Project {
                dir: dir.clone(),
                name: "labeler".into(),
                lang: Lang::Python,
                sdk: SDK_VERSION.into(),
            }
        );
        assert_eq!(project.wasm(), dir.join("dist/labeler.wasm"));
        assert!(project.sdk_dir().join("build").is_file());
        assert!(project.sdk_root().join("wit/plugin.wit").is_file());
        project.check_pins().unwrap();

        let parse = |text: &str| Project::parse(&dir, text, "kubeplug.toml");
        let bad = parse("name = \"x\"\nlang = \"cobol\"\nsdk = \"1\"\n").unwrap_err();
        assert_eq!(
            bad.to_string(),
            "kubeplug.toml:2: lang = \"cobol\": this kubeplug builds rust, python, ts and go"
        );
        assert!(matches!(
            parse("name = x\n"),
            Err(ScaffoldError::BadProject { line: 1, .. })
        ));
        assert!(matches!(
            parse("name = \"x\"\nlang = \"ts\"\n"),
            Err(ScaffoldError::BadProject { .. })
        ));
        // Comments, unknown keys (a newer kubeplug's) and trailing comments.
        let project =
            parse("# hi\nname = \"x\" # the plugin\nlang = \"ts\"\nsdk = \"9.9.9\"\nnew = \"?\"\n")
                .unwrap();
        assert_eq!(project.sdk, "9.9.9");
        assert!(matches!(
            Project::load(&tmp.path().join("nowhere")),
            Err(ScaffoldError::NoProject { .. })
        ));
    }

    #[test]
    fn a_version_this_binary_does_not_carry_is_refused_naming_both() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = scaffold(Lang::Rust, "old", tmp.path()).unwrap();
        let file = dir.join(PROJECT_FILE);
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(
            &file,
            text.replace(&format!("sdk = \"{SDK_VERSION}\""), "sdk = \"0.0.1-old\""),
        )
        .unwrap();
        let error = Project::load(&dir).unwrap().unpack().unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, ScaffoldError::VersionMismatch { .. }));
        assert!(message.contains("pins kubeplug SDK 0.0.1-old"), "{message}");
        assert!(
            message.contains(&format!("carries SDK {SDK_VERSION}")),
            "{message}"
        );
        assert!(
            message.contains("build it with kubeplug 0.0.1-old"),
            "{message}"
        );
        assert!(message.contains("Cargo.toml"), "{message}");
        assert!(!dir.join(".kubeplug/sdk/0.0.1-old").exists());

        // The right version, but Cargo.toml still names another SDK.
        std::fs::write(&file, text).unwrap();
        let cargo = dir.join("Cargo.toml");
        let manifest = std::fs::read_to_string(&cargo).unwrap();
        std::fs::write(
            &cargo,
            manifest.replace(&format!("sdk/{SDK_VERSION}/"), "sdk/0.0.1-old/"),
        )
        .unwrap();
        let stale = Project::load(&dir).unwrap().unpack().unwrap_err();
        assert!(matches!(stale, ScaffoldError::StalePin { .. }), "{stale}");
    }

    #[test]
    fn unpacking_is_idempotent_and_repairs_what_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = scaffold(Lang::Rust, "again", tmp.path()).unwrap();
        let project = Project::load(&dir).unwrap();
        let first = project.unpack().unwrap();
        assert_eq!(first.written, 0, "scaffold unpacked already");
        assert_eq!(first.root, dir.join(".kubeplug/sdk").join(SDK_VERSION));
        let lib = first.root.join("plugins/sdk/src/lib.rs");
        let mtime = std::fs::metadata(&lib).unwrap().modified().unwrap();
        assert_eq!(project.unpack().unwrap(), first);
        assert_eq!(std::fs::metadata(&lib).unwrap().modified().unwrap(), mtime);

        std::fs::write(&lib, "// edited\n").unwrap();
        std::fs::remove_file(first.root.join("wit/plugin.wit")).unwrap();
        let repaired = project.unpack().unwrap();
        assert_eq!(repaired.written, 2);
        assert!(
            std::fs::read_to_string(&lib)
                .unwrap()
                .contains("wit_bindgen")
        );
        assert!(first.root.join("wit/plugin.wit").is_file());
        // Only the WIT and this language's SDK.
        assert!(!first.root.join("plugins/sdk-python").exists());
        assert!(!first.root.join("plugins/sdk-ts").exists());
        assert_eq!(
            std::fs::read_to_string(dir.join(".kubeplug/.gitignore"))
                .unwrap()
                .lines()
                .last(),
            Some("*")
        );
    }

    #[test]
    fn the_embedded_rust_sdk_manifest_is_standalone() {
        let manifest = sdk_files(Lang::Rust)
            .find(|f| f.path == "plugins/sdk/Cargo.toml")
            .expect("embedded");
        let text = std::str::from_utf8(manifest.bytes).unwrap();
        let code: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect();
        assert!(code.iter().all(|l| !l.contains("workspace")), "{text}");
        for want in [
            "edition = \"2024\"",
            "publish = false",
            "serde = {",
            "k8s-openapi = {",
            "[lints.clippy]",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        // The TypeScript toolchain's npm project names only the SDK.
        for path in ["plugins/package.json", "plugins/package-lock.json"] {
            let file = sdk_files(Lang::Ts).find(|f| f.path == path).unwrap();
            let text = std::str::from_utf8(file.bytes).unwrap();
            assert!(
                text.contains("sdk-ts") && !text.contains("myapp-ts"),
                "{path}"
            );
        }
        let build = sdk_files(Lang::Python)
            .find(|f| f.path == "plugins/sdk-python/build")
            .unwrap();
        assert!(build.executable);
        assert!(sdk_files(Lang::Python).all(|f| !f.path.contains("tests/")));
    }
}
