//! `kubeplug new`: a plugin project from the templates embedded at build
//! time (see `host/kit/build.rs`). Placeholders, in file contents and paths:
//! `{{name}}` (the plugin's name), `{{crate}}` (the name with `_` for `-`)
//! and `{{sdk}}` (the absolute path of the language's SDK).

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

/// Languages `kubeplug new` knows the SDK of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Ts,
}

impl Lang {
    /// The template's directory under `plugins/templates/`.
    pub fn dir(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Ts => "ts",
        }
    }

    /// The SDK's directory under `plugins/`.
    pub fn sdk_dir(self) -> &'static str {
        match self {
            Lang::Rust => "sdk",
            Lang::Python => "sdk-python",
            Lang::Ts => "sdk-ts",
        }
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
    #[error("cannot find the {lang} SDK (looked for {looked}); pass --sdk PATH")]
    NoSdk { lang: &'static str, looked: String },
    #[error("the SDK path {path} does not exist")]
    SdkMissing {
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

/// The SDK of `lang` in the source tree this binary was built from, if it
/// is still there.
pub fn default_sdk(lang: Lang) -> Result<PathBuf, ScaffoldError> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugins")
        .join(lang.sdk_dir());
    path.canonicalize().map_err(|_| ScaffoldError::NoSdk {
        lang: lang.dir(),
        looked: path.display().to_string(),
    })
}

/// Write `lang`'s template for plugin `name` into `parent/name/` and
/// return that directory. Files named `build` or `test` are made
/// executable. Nothing is left behind on failure.
pub fn scaffold(
    lang: Lang,
    name: &str,
    parent: &Path,
    sdk: Option<&Path>,
) -> Result<PathBuf, ScaffoldError> {
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
    let sdk = match sdk {
        Some(path) => path
            .canonicalize()
            .map_err(|source| ScaffoldError::SdkMissing {
                path: path.display().to_string(),
                source,
            })?,
        None => default_sdk(lang)?,
    };
    let sdk = sdk.to_string_lossy().into_owned();
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{sdk}}", &sdk)
    };
    let written = files.iter().try_for_each(|file| {
        let path = dir.join(fill(file.path));
        let bytes = match std::str::from_utf8(file.bytes) {
            Ok(text) => fill(text).into_bytes(),
            Err(_) => file.bytes.to_vec(),
        };
        write(&path, &bytes).map_err(|source| ScaffoldError::Write {
            path: path.display().to_string(),
            source,
        })
    });
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

    #[test]
    fn scaffolding_fills_placeholders_and_refuses_what_it_should() {
        let tmp = tempfile::tempdir().unwrap();
        let sdk = tmp.path().join("sdk");
        std::fs::create_dir(&sdk).unwrap();
        let dir = scaffold(Lang::Rust, "hello-world", tmp.path(), Some(&sdk)).unwrap();
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("name = \"hello-world\""), "{cargo}");
        assert!(cargo.contains(&sdk.canonicalize().unwrap().display().to_string()));
        assert!(!cargo.contains("{{"), "{cargo}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.join("build"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o111, 0o111, "build is executable");
        }
        assert!(matches!(
            scaffold(Lang::Rust, "hello-world", tmp.path(), Some(&sdk)),
            Err(ScaffoldError::Exists(_))
        ));
        assert!(matches!(
            scaffold(Lang::Rust, "Hello", tmp.path(), Some(&sdk)),
            Err(ScaffoldError::BadName(_))
        ));
        assert!(matches!(
            scaffold(
                Lang::Rust,
                "other",
                tmp.path(),
                Some(&tmp.path().join("nope"))
            ),
            Err(ScaffoldError::SdkMissing { .. })
        ));
        assert!(!tmp.path().join("other").exists());
    }
}
