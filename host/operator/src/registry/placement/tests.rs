//! Unit tests of placement: which file may be which plugin, its settings,
//! symlinks, sizes, and refusals that quote nothing.

use std::io::Write as _;
use std::time::SystemTime;

use super::*;

/// The start of a component: magic, version 0xd, layer 1.
const WASM: &[u8] = b"\0asm\x0d\0\x01\0";

fn write_old(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    let old = SystemTime::now() - SETTLE * 2;
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

fn policy(yaml: &str) -> Policy {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(yaml.as_bytes()).unwrap();
    Policy::load(&[file.path()]).unwrap()
}

fn layout(dir: &Path, settings: Option<&Path>) -> Layout {
    Layout {
        root: Root::new(dir),
        settings: settings.map(Root::new),
        max_plugin_bytes: MAX_PLUGIN_BYTES,
    }
}

/// `(file relative to dir, its place or the refusal)` of a scan.
fn scanned(layout: &Layout, policy: &Policy) -> Vec<(String, Result<Place, String>)> {
    let (placed, fresh) = layout.scan(policy).unwrap();
    assert!(!fresh);
    placed
        .into_iter()
        .map(|(p, place)| {
            let place = place.map_err(|e| e.to_string());
            (layout.root.rel(&p).display().to_string(), place)
        })
        .collect()
}

fn live(name: &str) -> Result<Place, String> {
    Ok(Place::Live(name.into()))
}

/// The kubelet's layout of a ConfigMap volume: the files live in a
/// timestamped directory, `..data` links to it, and each key is a link
/// through `..data`. All inside the volume: they load.
#[test]
fn files_of_a_configmap_volume_and_of_image_volumes_are_placed_by_their_name() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let stamp = dir.join("..2026_11_30_06_00_00.000000001");
    write_old(&stamp.join("database.wasm"), WASM);
    write_old(&stamp.join("database.yaml"), b"config: {}");
    std::os::unix::fs::symlink("..2026_11_30_06_00_00.000000001", dir.join("..data")).unwrap();
    for key in ["database.wasm", "database.yaml"] {
        std::os::unix::fs::symlink(format!("..data/{key}"), dir.join(key)).unwrap();
    }
    // An image volume mounted at DIR/myapp.
    write_old(&dir.join("myapp/myapp.wasm"), WASM);
    // Ignored: temporaries, other files, two levels down.
    write_old(&dir.join(".tmp.wasm"), WASM);
    write_old(&dir.join("notes.txt"), b"x");
    write_old(&dir.join("a/b/deep.wasm"), WASM);

    let layout = layout(dir, None);
    let policy = Policy::default();
    assert_eq!(
        scanned(&layout, &policy),
        vec![
            ("database.wasm".into(), live("database")),
            ("myapp/myapp.wasm".into(), live("myapp")),
        ]
    );
    let read = layout
        .read(&dir.join("database.wasm"), &Place::Live("database".into()))
        .unwrap();
    assert_eq!(read.bound, "database");
    assert_eq!(read.bytes, WASM);
    assert_eq!(read.settings.config, Some(serde_json::json!({})));

    // A fresh file waits for the next scan.
    std::fs::write(dir.join("new.wasm"), WASM).unwrap();
    let (placed, fresh) = layout.scan(&policy).unwrap();
    assert!(fresh);
    assert_eq!(placed.len(), 2);
}

#[test]
fn a_file_in_a_teams_folder_is_no_plugin_whatever_it_is_called() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    for file in [
        "database.wasm",
        "team-a/database.wasm",
        "team-a/pod-labeler.wasm",
        "team-a/team-a.wasm",
    ] {
        write_old(&dir.join(file), WASM);
    }
    let placed = scanned(&layout(dir, None), &Policy::default());
    assert_eq!(placed[0], ("database.wasm".into(), live("database")));
    let refusal = placed[1].1.clone().unwrap_err();
    assert_eq!(
        refusal,
        "no plugin is placed at team-a/database.wasm: plugin database's file is database.wasm or database/database.wasm (or where its grant's path: says); a file elsewhere is never served"
    );
    assert!(
        placed[2].1.clone().unwrap_err().contains(
            "plugin pod-labeler's file is pod-labeler.wasm or pod-labeler/pod-labeler.wasm"
        )
    );
    // A folder named like its one plugin is that plugin's image volume.
    assert_eq!(placed[3].1, live("team-a"));
}

#[test]
fn a_grant_with_a_path_binds_that_file_or_that_folder_and_nothing_else() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    for file in [
        "database.wasm",
        "database/database.wasm",
        "team-a/engine.wasm",
        "team-b/cache.wasm",
        "team-b/queue.wasm",
        "team-b/database.wasm",
        "cache.wasm",
    ] {
        write_old(&dir.join(file), WASM);
    }
    let policy = policy(
        "plugins:
  database: {path: team-a/engine.wasm}
  cache: {path: team-b/}
  queue: {path: team-b/}
",
    );
    let placed: BTreeMap<String, Result<Place, String>> =
        scanned(&layout(dir, None), &policy).into_iter().collect();
    assert_eq!(placed["team-a/engine.wasm"], live("database"));
    assert_eq!(placed["team-b/cache.wasm"], live("cache"));
    assert_eq!(placed["team-b/queue.wasm"], live("queue"));
    for elsewhere in [
        "database.wasm",
        "database/database.wasm",
        "team-b/database.wasm",
    ] {
        assert_eq!(
            placed[elsewhere].clone().unwrap_err(),
            format!(
                "no plugin is placed at {elsewhere}: plugin database's file is team-a/engine.wasm (its grant's path:); a file elsewhere is never served"
            )
        );
    }
    assert!(
        placed["cache.wasm"]
            .clone()
            .unwrap_err()
            .contains("plugin cache's file is team-b/cache.wasm")
    );
}

#[test]
fn of_a_plugins_two_default_locations_the_top_one_serves_and_the_other_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    write_old(&dir.join("database.wasm"), WASM);
    write_old(&dir.join("database/database.wasm"), WASM);
    let placed: BTreeMap<String, Result<Place, String>> =
        scanned(&layout(dir, None), &Policy::default())
            .into_iter()
            .collect();
    assert_eq!(placed["database.wasm"], live("database"));
    assert!(
        placed["database/database.wasm"]
            .clone()
            .unwrap_err()
            .starts_with("plugin database is served from database.wasm: both of its default locations hold a file")
    );
}

#[test]
fn a_candidate_is_a_version_only_of_the_plugin_whose_file_stands_in_its_folder() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    for file in [
        "database.wasm",
        "database.next.wasm",
        "team-a/database.next.wasm",
        "myapp/myapp.wasm",
        "myapp/myapp.next.wasm",
        "database-next/database.next.wasm",
    ] {
        write_old(&dir.join(file), WASM);
    }
    let placed: BTreeMap<String, Result<Place, String>> =
        scanned(&layout(dir, None), &Policy::default())
            .into_iter()
            .collect();
    assert_eq!(
        placed["database.next.wasm"],
        Ok(Place::Candidate("database".into()))
    );
    assert_eq!(
        placed["myapp/myapp.next.wasm"],
        Ok(Place::Candidate("myapp".into()))
    );
    for elsewhere in [
        "team-a/database.next.wasm",
        "database-next/database.next.wasm",
    ] {
        assert_eq!(
            placed[elsewhere].clone().unwrap_err(),
            format!(
                "{elsewhere} is not beside plugin database's file (database.wasm or database/database.wasm): a candidate stands in the same folder as the live file it would replace; it is never shadowed or previewed"
            )
        );
    }
    // Pairing: the live file of that plugin in the candidate's folder only.
    let live = [
        (dir.join("database.wasm"), "database".to_string()),
        (dir.join("myapp/myapp.wasm"), "myapp".to_string()),
    ];
    assert_eq!(
        pair_of(&dir.join("database.next.wasm"), "database", &live),
        Some(dir.join("database.wasm"))
    );
    assert_eq!(
        pair_of(&dir.join("myapp/myapp.next.wasm"), "myapp", &live),
        Some(dir.join("myapp/myapp.wasm"))
    );
    assert_eq!(
        pair_of(&dir.join("database/database.next.wasm"), "database", &live),
        None,
        "in another folder than the live file"
    );
    assert_eq!(pair_of(&dir.join("myapp.next.wasm"), "myapp", &live), None);
}

#[test]
fn settings_are_those_of_the_plugin_bound_to_the_file_never_of_the_file_name() {
    let root = tempfile::tempdir().unwrap();
    let (plugins, settings) = (root.path().join("plugins"), root.path().join("settings"));
    write_old(&plugins.join("team-a/engine.wasm"), WASM);
    write_old(&plugins.join("team-a/engine.yaml"), b"config: {engine: 1}");
    write_old(
        &plugins.join("team-a/database.yaml"),
        b"config: {database: 1}",
    );
    write_old(
        &plugins.join("team-a/database.next.yaml"),
        b"config: {next: 1}",
    );
    write_old(&settings.join("database.yml"), b"config: {from: dir}");
    write_old(&settings.join("engine.yaml"), b"config: {engine: dir}");
    let wasm = plugins.join("team-a/engine.wasm");
    assert_eq!(
        settings_file(&wasm, "database", false, None),
        Some(plugins.join("team-a/database.yaml"))
    );
    assert_eq!(
        settings_file(&wasm, "database", true, None),
        Some(plugins.join("team-a/database.next.yaml"))
    );
    assert_eq!(
        settings_file(&wasm, "database", false, Some(&settings)),
        Some(settings.join("database.yml"))
    );
    assert_eq!(settings_file(&wasm, "myapp", false, Some(&settings)), None);

    let policy = policy("plugins:\n  database: {path: team-a/engine.wasm}\n");
    let layout = layout(&plugins, Some(&settings));
    let placed = layout.scan(&policy).unwrap().0;
    assert_eq!(
        placed,
        vec![(wasm.clone(), Ok(Place::Live("database".into())))]
    );
    let read = layout.read(&wasm, &Place::Live("database".into())).unwrap();
    assert_eq!(
        read.settings.config,
        Some(serde_json::json!({"from": "dir"}))
    );

    // A fresh settings file holds its plugin back, as a fresh .wasm does.
    std::fs::write(settings.join("database.yml"), "config: {a: 1}").unwrap();
    let (placed, fresh) = layout.scan(&policy).unwrap();
    assert!(fresh && placed.is_empty());
}

#[test]
fn symlinks_out_of_the_plugin_or_the_settings_directory_are_refused_unread() {
    let root = tempfile::tempdir().unwrap();
    let (plugins, settings) = (root.path().join("plugins"), root.path().join("settings"));
    let token = root.path().join("secrets/token");
    write_old(&token, b"eyJhbGciOiJSUzI1NiJ9.very-secret-token");
    write_old(&root.path().join("elsewhere/x.wasm"), WASM);
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&settings).unwrap();
    // A plugin linked in from outside, a folder linked in from outside.
    std::os::unix::fs::symlink(root.path().join("elsewhere/x.wasm"), plugins.join("x.wasm"))
        .unwrap();
    std::os::unix::fs::symlink(root.path().join("elsewhere"), plugins.join("elsewhere")).unwrap();
    // A plugin of its own, with settings linked to the token.
    write_old(&plugins.join("database.wasm"), WASM);
    std::os::unix::fs::symlink(&token, plugins.join("database.yaml")).unwrap();
    std::os::unix::fs::symlink(&token, settings.join("myapp.yaml")).unwrap();
    write_old(&plugins.join("myapp.wasm"), WASM);

    let beside = layout(&plugins, None);
    for (file, name) in [("x.wasm", "x"), ("elsewhere/x.wasm", "x")] {
        let error = beside
            .read(&plugins.join(file), &Place::Live(name.into()))
            .err()
            .unwrap();
        assert_eq!(
            error,
            format!(
                "{file} is a symlink that resolves outside {}: refused, not read",
                plugins.display()
            )
        );
    }
    let error = beside
        .read(
            &plugins.join("database.wasm"),
            &Place::Live("database".into()),
        )
        .err()
        .unwrap();
    assert!(
        error.contains("database.yaml is a symlink that resolves outside"),
        "{error}"
    );
    let in_dir = layout(&plugins, Some(&settings));
    let error = in_dir
        .read(&plugins.join("myapp.wasm"), &Place::Live("myapp".into()))
        .err()
        .unwrap();
    assert!(
        error.contains(&format!("resolves outside {}", settings.display())),
        "{error}"
    );
    assert!(
        !error.contains("secret") && !error.contains("eyJ"),
        "{error}"
    );
}

/// A team's folder holds links to settings the platform wrote for other
/// plugins: none is handed to the team's plugin. A ConfigMap's own links
/// (name kept, inside the volume) load, as the first test shows.
#[test]
fn a_settings_link_to_another_plugins_settings_is_refused_with_the_reason() {
    let root = tempfile::tempdir().unwrap();
    let (plugins, settings) = (root.path().join("plugins"), root.path().join("settings"));
    write_old(&plugins.join("database.wasm"), WASM);
    write_old(
        &plugins.join("database.yaml"),
        b"config: {password: platform-only}",
    );
    write_old(&plugins.join("team-a/team-a.wasm"), WASM);
    write_old(&plugins.join("team-a/other.yaml"), b"config: {}");
    write_old(&settings.join("database.yaml"), b"config: {}");
    let beside = layout(&plugins, None);
    for (link, target, to) in [
        // Out of the team's folder, to the platform's settings of database.
        ("team-a/team-a.yaml", "../database.yaml", "database.yaml"),
        // Inside the folder, but another file than its own.
        ("team-a/team-a.yaml", "other.yaml", "team-a/other.yaml"),
    ] {
        let _ = std::fs::remove_file(plugins.join(link));
        std::os::unix::fs::symlink(target, plugins.join(link)).unwrap();
        let error = beside
            .read(
                &plugins.join("team-a/team-a.wasm"),
                &Place::Live("team-a".into()),
            )
            .err()
            .unwrap_or_else(|| panic!("{link} -> {target} was read"));
        assert_eq!(
            error,
            format!(
                "{link} is a symlink to {to}: a plugin's settings are read only from its own file in its own folder (another plugin's settings are not handed to it): refused, not read"
            )
        );
        assert!(!error.contains("platform-only"), "{error}");
    }
    // The same in a settings directory: myapp.yaml -> database.yaml.
    std::os::unix::fs::symlink("database.yaml", settings.join("myapp.yaml")).unwrap();
    let in_dir = layout(&plugins, Some(&settings));
    write_old(&plugins.join("myapp.wasm"), WASM);
    let error = in_dir
        .read(&plugins.join("myapp.wasm"), &Place::Live("myapp".into()))
        .err()
        .unwrap();
    assert!(
        error.starts_with("myapp.yaml is a symlink to database.yaml"),
        "{error}"
    );
}

#[test]
fn settings_that_do_not_parse_are_refused_without_a_word_of_their_content() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    write_old(&dir.join("x.wasm"), WASM);
    let layout = layout(dir, None);
    let place = Place::Live("x".into());
    for content in [
        "eyJhbGciOiJSUzI1NiJ9.very-secret-token",
        "very-secret-key: 1",
        "config: {}\nlimits: {timeoutMs: very-secret}\n",
        "{{{{ very-secret",
        "- very-secret\n",
    ] {
        write_old(&dir.join("x.yaml"), content.as_bytes());
        let error = layout.read(&dir.join("x.wasm"), &place).err().unwrap();
        assert!(
            error.starts_with(&format!(
                "invalid settings {}",
                dir.join("x.yaml").display()
            )),
            "{error}"
        );
        assert!(error.ends_with("(its content is not shown)"), "{error}");
        assert!(
            !error.contains("secret") && !error.contains("eyJ"),
            "{error}"
        );
    }
    write_old(&dir.join("x.yaml"), b"rollback:\n  maxErrorRate: 2\n");
    let error = layout.read(&dir.join("x.wasm"), &place).err().unwrap();
    assert!(
        error.contains("x.yaml") && error.contains("maxErrorRate must be between 0 and 1"),
        "{error}"
    );
    write_old(&dir.join("x.yaml"), &[0xff, 0xfe, b's']);
    let error = layout.read(&dir.join("x.wasm"), &place).err().unwrap();
    assert!(error.contains("not UTF-8 text"), "{error}");
}

#[test]
fn a_plugin_file_over_the_size_limit_or_not_webassembly_is_refused_unquoted() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let mut layout = layout(dir, None);
    layout.max_plugin_bytes = 64;
    let place = Place::Live("big".into());
    let mut big = WASM.to_vec();
    big.resize(65, 0);
    write_old(&dir.join("big.wasm"), &big);
    assert_eq!(
        layout.read(&dir.join("big.wasm"), &place).err().unwrap(),
        "big.wasm is 65 bytes, over the limit of 64 bytes the host reads (kubeplug run --max-plugin-bytes): refused, not read"
    );
    big.truncate(64);
    write_old(&dir.join("big.wasm"), &big);
    assert!(layout.read(&dir.join("big.wasm"), &place).is_ok());

    write_old(&dir.join("big.wasm"), b"very-secret-token");
    let error = layout.read(&dir.join("big.wasm"), &place).err().unwrap();
    assert_eq!(
        error,
        "big.wasm is not a valid WebAssembly component: it does not begin with \\0asm (its content is not shown)"
    );
    assert_eq!(MAX_PLUGIN_BYTES, 64 * 1024 * 1024);
}

use std::collections::BTreeMap;
