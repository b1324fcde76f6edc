//! The compile cache, so that restarts load precompiled components instead
//! of compiling every plugin again (a Python guest: ~17 s): in local-files
//! mode the directory exists (or can be made) and takes a file ([`check`]);
//! in installation mode the pod's volume under `--cache-dir` is writable and
//! its `sizeLimit` above `--compile-cache-bytes` (`install::cache_volume`).

use std::path::Path;

use kubeplug_doctor::report::Check;

const CHECK: &str = "cache directory";

/// Make `dir` if it is missing, then write and remove a file in it.
pub fn check(dir: &Path) -> Check {
    let shown = dir.display();
    let fix = "give --cache-dir (KUBEPLUG_CACHE_DIR) a writable directory, e.g. an emptyDir";
    let existed = dir.is_dir();
    if let Err(error) = std::fs::create_dir_all(dir) {
        return Check::fail(CHECK, format!("cannot create {shown}: {error}: {fix}"));
    }
    let probe = dir.join(format!(".kubeplug-doctor-{}", std::process::id()));
    if let Err(error) = std::fs::write(&probe, b"probe") {
        return Check::fail(CHECK, format!("cannot write in {shown}: {error}: {fix}"));
    }
    if let Err(error) = std::fs::remove_file(&probe) {
        return Check::fail(
            CHECK,
            format!(
                "wrote {} but cannot remove it: {error}: {fix}",
                probe.display()
            ),
        );
    }
    let how = if existed {
        "writable"
    } else {
        "created, writable"
    };
    Check::ok(CHECK, format!("{shown} ({how})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeplug_doctor::report::Status;

    #[test]
    fn a_missing_directory_is_created_and_left_empty() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        let check = check(&dir);
        assert_eq!(check.status, Status::Ok, "{}", check.detail);
        assert!(check.detail.ends_with("(created, writable)"));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert!(super::check(&dir).detail.ends_with("(writable)"));
    }

    #[test]
    fn a_file_in_the_way_fails_with_the_fix() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("cache");
        std::fs::write(&file, "").unwrap();
        let check = check(&file);
        assert_eq!(check.status, Status::Fail);
        assert!(check.detail.contains("--cache-dir"), "{}", check.detail);
    }
}
