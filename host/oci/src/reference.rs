//! What names a repository: `HOST[:PORT]/REPOSITORY[:TAG]`, with the
//! registry always named (there is no default registry).

use crate::error::{Error, Result, bail};

/// `HOST[:PORT]/REPOSITORY[:TAG]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
}

impl Reference {
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || Error::msg(format!("{text}: expected HOST[:PORT]/REPOSITORY[:TAG]"));
        let (registry, rest) = text.split_once('/').ok_or_else(bad)?;
        if registry.is_empty() || !(registry.contains(['.', ':']) || registry == "localhost") {
            bail!(
                "{text}: name the registry (HOST[:PORT]/REPOSITORY[:TAG]); there is no default registry"
            );
        }
        if rest.contains('@') {
            bail!("{text}: push to a tag, not a digest");
        }
        let (repository, tag) = match rest.rsplit_once(':') {
            Some((repo, tag)) => (repo, Some(tag.to_string())),
            None => (rest, None),
        };
        let valid = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b))
        };
        if !valid(repository)
            || tag
                .as_deref()
                .is_some_and(|t| t.is_empty() || t.len() > 128)
        {
            return Err(bad());
        }
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag,
        })
    }

    /// `HOST[:PORT]/REPOSITORY`: cosign's `docker-reference`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// Plain HTTP for loopback registries (as docker and containerd do).
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.split_once(']') {
            Some((v6, _)) => &self.registry[..=v6.len()],
            None => self.registry.split(':').next().unwrap_or_default(),
        };
        matches!(host, "localhost" | "[::1]") || host.starts_with("127.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_a_registry_a_repository_and_maybe_a_tag() {
        let r = Reference::parse("localhost:5000/plugins/database:0.1.0").unwrap();
        assert_eq!(r.registry, "localhost:5000");
        assert_eq!(r.repository, "plugins/database");
        assert_eq!(r.tag.as_deref(), Some("0.1.0"));
        assert!(r.is_loopback());
        let r = Reference::parse("ghcr.io/acme/database").unwrap();
        assert_eq!(r.tag, None);
        assert!(!r.is_loopback());
        assert!(
            Reference::parse("127.0.0.1:5000/p/d:1")
                .unwrap()
                .is_loopback()
        );
        assert!(
            Reference::parse("database:0.1.0").is_err(),
            "no default registry"
        );
        assert!(Reference::parse("plugins/database").is_err());
        assert!(Reference::parse("ghcr.io/acme/Database").is_err());
        assert!(Reference::parse("ghcr.io/acme/db@sha256:00").is_err());
    }
}
