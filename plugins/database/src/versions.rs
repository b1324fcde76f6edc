//! The engine versions a `Database` may ask for: the release lines each
//! engine's official image ships that this plugin runs.
//!
//! The schema only checks that `spec.version` looks like `x.y.z`; a version
//! the image does not ship leaves the StatefulSet pulling a tag that does not
//! exist, so admission refuses it up front. A line is what the project
//! releases patches for: a major version for PostgreSQL (13, 14, ...), a
//! major.minor for MySQL (8.0 and 8.4 are separate lines) and MongoDB.
//! Add a line here when its image is published.

use crate::Engine;

/// The supported lines of `engine`, oldest first.
pub fn lines(engine: Engine) -> &'static [&'static str] {
    match engine {
        // 5.7 and 8.0 for existing data; 8.4 is the current LTS line.
        // Innovation releases (9.x) are left out: each lives one quarter.
        Engine::Mysql => &["5.7", "8.0", "8.4"],
        Engine::Postgresql => &["13", "14", "15", "16", "17", "18"],
        Engine::Mongodb => &["5.0", "6.0", "7.0", "8.0"],
    }
}

/// Why `engine` cannot run `version`, if it cannot.
pub fn check(engine: Engine, version: &str) -> Result<(), String> {
    let Some(numbers) = numbers(version) else {
        return Err(format!("must look like x.y.z, got {version:?}"));
    };
    let lines = lines(engine);
    let shipped = lines.iter().any(|line| {
        let line = numbers_of(line);
        numbers.starts_with(&line)
    });
    if shipped {
        return Ok(());
    }
    Err(format!(
        "{} {version} is not shipped by the {} image this plugin supports: supported lines {}",
        engine.as_str(),
        engine.image(),
        lines.join(", ")
    ))
}

/// `x.y.z` as numbers.
fn numbers(version: &str) -> Option<Vec<u64>> {
    let parts: Vec<&str> = version.split('.').collect();
    let numeric = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if parts.len() != 3 || !parts.iter().all(numeric) {
        return None;
    }
    parts.iter().map(|p| p.parse().ok()).collect()
}

fn numbers_of(line: &str) -> Vec<u64> {
    line.split('.').filter_map(|p| p.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_versions_the_repository_uses_are_supported() {
        // examples/, tests/, host/ and the fixtures.
        for (engine, version) in [
            (Engine::Mysql, "8.0.26"),
            (Engine::Mysql, "8.0.27"),
            (Engine::Mysql, "8.4.3"),
            (Engine::Postgresql, "16.2.0"),
            (Engine::Postgresql, "16.4.0"),
            (Engine::Mongodb, "7.0.5"),
            (Engine::Mongodb, "7.0.14"),
        ] {
            assert_eq!(check(engine, version), Ok(()), "{engine:?} {version}");
        }
    }

    #[test]
    fn every_line_accepts_its_patches_and_nothing_else() {
        assert_eq!(check(Engine::Mysql, "5.7.44"), Ok(()));
        assert_eq!(check(Engine::Postgresql, "13.0.0"), Ok(()));
        assert_eq!(check(Engine::Postgresql, "18.1.0"), Ok(()));
        assert_eq!(check(Engine::Mongodb, "8.0.0"), Ok(()));
        for (engine, version) in [
            (Engine::Mysql, "8.1.0"),
            (Engine::Mysql, "9.1.0"),
            (Engine::Mysql, "5.6.51"),
            (Engine::Postgresql, "12.1.0"),
            (Engine::Postgresql, "160.0.0"),
            (Engine::Mongodb, "7.1.0"),
            (Engine::Mongodb, "4.4.29"),
        ] {
            assert!(check(engine, version).is_err(), "{engine:?} {version}");
        }
    }

    #[test]
    fn a_refusal_names_the_image_and_its_lines() {
        assert_eq!(
            check(Engine::Postgresql, "12.1.0"),
            Err(
                "postgresql 12.1.0 is not shipped by the postgres image this plugin supports: \
                 supported lines 13, 14, 15, 16, 17, 18"
                    .into()
            )
        );
        assert_eq!(
            check(Engine::Mongodb, "4.4.0"),
            Err(
                "mongodb 4.4.0 is not shipped by the mongo image this plugin supports: \
                 supported lines 5.0, 6.0, 7.0, 8.0"
                    .into()
            )
        );
    }

    #[test]
    fn a_version_that_is_not_x_y_z_is_refused_as_such() {
        for bad in ["8.4", "8.4.3.1", "8.4.x", "", "99999999999999999999999.0.0"] {
            assert!(
                check(Engine::Mysql, bad)
                    .unwrap_err()
                    .starts_with("must look like x.y.z"),
                "{bad}"
            );
        }
    }
}
