//! Scale out: one plugin's parents shared across replicas by shard (grant
//! `shards: N`), on the local control plane with real host processes. Each
//! replica owns about its share of the shards (a Lease each), reconciles and
//! caches only their parents and children, and a killed, stopped or new
//! replica moves only the shards it must, with no parent written by two
//! replicas at once (the API server's audit log).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kubeplug_e2e::*;

const TIMEOUT: Duration = Duration::from_secs(180);
const SHARDS: u16 = 6;

/// The seed grant of `database`, sharded (its related Pods too: they are
/// its StatefulSets'), in the test's namespace only (the Databases other
/// tests leave behind are not this test's to shard).
fn policy(dir: &PluginDir, namespace: &str) -> String {
    let path = dir.path.with_extension("policy.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: kubeplug.io/v1alpha1\nkind: PluginPolicy\nstrict: true\nidentityNamespace: kubeplug-system\nplugins:\n  database:\n    parent: [Database.example.com]\n    children: [StatefulSet.apps, Service, Secret]\n    related: [Pod]\n    admission: [validate]\n    conversion: true\n    namespaces: [{namespace}]\n    shards: {SHARDS}\n    shardPods: true\n"
        ),
    )
    .expect("write policy");
    path.display().to_string()
}

struct Replicas {
    dir: PluginDir,
    policy: String,
    ns: Namespace,
    hosts: Vec<Host>,
}

impl Replicas {
    fn start(prefix: &str, count: usize) -> Replicas {
        install_crds();
        let ns = Namespace::new(prefix);
        let dir = PluginDir::with(&["database"]);
        let policy = policy(&dir, &ns.name);
        let mut replicas = Replicas {
            dir,
            policy,
            ns,
            hosts: Vec::new(),
        };
        for _ in 0..count {
            replicas.add();
        }
        replicas
    }

    fn add(&mut self) {
        let n = self.ns.name.clone();
        let mut args = vec![
            "--leader-elect",
            "--lease-namespace",
            &n,
            "--policy",
            &self.policy,
        ];
        args.extend(LEASE);
        let host = Host::start_with(&self.dir, &args);
        self.hosts.push(host);
    }

    fn n(&self) -> &str {
        &self.ns.name
    }

    /// shard → holder, for the shards whose Lease is held.
    fn owners(&self) -> BTreeMap<u16, String> {
        lease_holders(self.n())
            .into_iter()
            .filter_map(|(unit, holder)| {
                let shard = unit.strip_prefix("database.shard-")?.parse().ok()?;
                Some((shard, holder))
            })
            .collect()
    }

    /// Index of the host holding `identity`.
    fn index_of(&self, identity: &str) -> usize {
        self.hosts
            .iter()
            .position(|h| h.is(identity))
            .unwrap_or_else(|| panic!("no host is {identity}"))
    }

    /// Wait until every shard is held by a live host, each holding its
    /// share (counts differing by one at most), and stays so for a lease.
    fn balanced(&self) -> BTreeMap<u16, String> {
        let even = || {
            let owners = self.owners();
            let live = |h: &String| self.hosts.iter().any(|host| host.is(h));
            if owners.len() != SHARDS as usize || !owners.values().all(live) {
                return None;
            }
            let loads: Vec<usize> = self
                .hosts
                .iter()
                .map(|h| owners.values().filter(|o| h.is(o)).count())
                .collect();
            let (min, max) = (loads.iter().min()?, loads.iter().max()?);
            (max - min <= 1).then_some(owners)
        };
        let owners = eventually("the shards to be shared evenly", TIMEOUT, even);
        std::thread::sleep(LEASE_DURATION);
        eventually("the shares to be stable", TIMEOUT, || {
            even().filter(|now| *now == owners)
        })
    }
}

fn databases(prefix: &str, count: usize) -> String {
    (0..count)
        .map(|i| {
            format!(
                "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: {prefix}-{i}\nspec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Each Database of `ns`: name → (shard label, phase).
fn parents(ns: &str) -> BTreeMap<String, (Option<u16>, String)> {
    let Some(list) = get_json(ns, "databases") else {
        return BTreeMap::new();
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| {
            let name = d["metadata"]["name"].as_str()?.to_string();
            let shard = d["metadata"]["labels"]["kubeplug.io/shard"]
                .as_str()
                .and_then(|s| s.parse().ok());
            let phase = d["status"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            Some((name, (shard, phase)))
        })
        .collect()
}

fn all_running(ns: &str, count: usize) -> BTreeMap<String, (Option<u16>, String)> {
    eventually("every database to run", TIMEOUT, || {
        let parents = parents(ns);
        (parents.len() == count
            && parents
                .values()
                .all(|(shard, phase)| shard.is_some() && phase == "Running"))
        .then_some(parents)
    })
}

/// The parent a write in the audit log was for (the Database itself, or a
/// child named after it).
fn parent_of(
    write: &AuditedWrite,
    parents: &BTreeMap<String, (Option<u16>, String)>,
) -> Option<String> {
    let name = write.name.trim_end_matches("-credentials");
    parents.contains_key(name).then(|| name.to_string())
}

/// Writes in `ns` since `since` by each host (by its User-Agent's pid),
/// Leases and Events left out.
fn writes(r: &Replicas, since: &str) -> Vec<(usize, AuditedWrite)> {
    audited_writes()
        .into_iter()
        .filter(|w| w.namespace == r.n() && w.received.as_str() >= since)
        .filter(|w| w.resource != "leases" && w.resource != "events")
        .filter_map(|w| {
            let i = r
                .hosts
                .iter()
                .position(|h| w.user_agent.ends_with(&format!("-{})", h.pid())))?;
            Some((i, w))
        })
        .collect()
}

/// Parents of each shard cached by `host`: the Database watches it runs.
fn cached_parents(host: &Host) -> f64 {
    host.series("kubeplug_cached_objects")
        .into_iter()
        .filter(|(labels, _)| {
            labels.starts_with("resource=\"Database.example.com/v1 ")
                && labels.contains(" with kubeplug.io/shard=")
        })
        .map(|(_, v)| v)
        .sum()
}

/// Related Pods cached by `host`: the Pod watches it runs per shard. A Pod
/// watch without the shard label (every replica caching every Pod) counts
/// as a failure.
fn cached_pods(host: &Host) -> f64 {
    let pods: Vec<(String, f64)> = host
        .series("kubeplug_cached_objects")
        .into_iter()
        .filter(|(labels, _)| labels.starts_with("resource=\"Pod.v1"))
        .collect();
    assert!(
        pods.iter()
            .all(|(labels, _)| labels.contains("kubeplug.io/shard=")),
        "Pods are watched per shard only: {pods:?}"
    );
    pods.iter().map(|(_, v)| v).sum()
}

/// Each Database Pod of `ns`: pod name → (its parent, its shard label).
fn pods(ns: &str) -> BTreeMap<String, (String, Option<u16>)> {
    let Some(list) = get_json(ns, "pods") else {
        return BTreeMap::new();
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let labels = &p["metadata"]["labels"];
            let parent = labels["app.kubernetes.io/instance"].as_str()?.to_string();
            let shard = labels["kubeplug.io/shard"]
                .as_str()
                .and_then(|s| s.parse().ok());
            Some((p["metadata"]["name"].as_str()?.to_string(), (parent, shard)))
        })
        .collect()
}

/// The shard the host gives `namespace/name`: FNV-1a 64 modulo the count,
/// written out again here as an independent check of the host's.
fn hashed(namespace: &str, name: &str) -> u16 {
    let hash = format!("{namespace}/{name}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    (hash % u64::from(SHARDS)) as u16
}

#[test]
fn three_replicas_each_reconcile_and_cache_only_their_shards() {
    let r = Replicas::start("shards", 3);
    let n = r.n().to_string();
    let owners = r.balanced();
    let since = audit_now();
    // One labelled by hand, in range but not where its name hashes.
    let wrong = (hashed(&n, "by-hand") + 1) % SHARDS;
    let count = 31;
    apply(
        &n,
        &format!(
            "{}---\napiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: by-hand\n  labels: {{kubeplug.io/shard: \"{wrong}\"}}\nspec:\n  engine: postgresql\n  version: 16.4.0\n  replicas: 1\n",
            databases("db", count - 1)
        ),
    );
    let parents = all_running(&n, count);
    assert_eq!(r.owners(), owners, "no shard moved meanwhile");
    for (name, (shard, _)) in &parents {
        assert_eq!(*shard, Some(hashed(&n, name)), "{name}'s label is its hash");
        for child in [format!("statefulset/{name}"), format!("service/{name}")] {
            let child = get_json(&n, &child).expect("child");
            assert_eq!(
                child["metadata"]["labels"]["kubeplug.io/shard"],
                shard.unwrap().to_string(),
                "{name}'s children carry its shard"
            );
        }
    }

    // Their Pods carry it too (from the StatefulSets' pod templates), so
    // the owner of a parent's shard sees them: each parent ran above.
    let pods = pods(&n);
    assert_eq!(pods.len(), count, "one Pod per Database: {pods:?}");
    for (pod, (parent, shard)) in &pods {
        assert_eq!(*shard, parents[parent].0, "{pod} carries {parent}'s shard");
    }
    let mut per_shard: BTreeMap<u16, usize> = BTreeMap::new();
    for (shard, _) in parents.values() {
        *per_shard.entry(shard.expect("labelled")).or_default() += 1;
    }
    println!("FIGURE parents_per_shard {per_shard:?}");
    for (i, host) in r.hosts.iter().enumerate() {
        let mine: BTreeSet<u16> = owners
            .iter()
            .filter(|(_, h)| host.is(h))
            .map(|(s, _)| *s)
            .collect();
        assert!(
            (1..=3).contains(&mine.len()),
            "replica {i} owns about a third: {mine:?}"
        );
        // Reconciles: of its own shards only.
        for (labels, value) in host.series("kubeplug_shard_reconciles_total") {
            let shard: u16 = labels
                .split("shard=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .and_then(|s| s.parse().ok())
                .expect("a shard label");
            assert!(
                value == 0.0 || mine.contains(&shard),
                "replica {i} reconciled shard {shard} it does not own ({mine:?})"
            );
        }
        // Queue depth per shard it owns (sampled each second).
        let depths: BTreeSet<String> = host
            .series("kubeplug_shard_queue_depth")
            .into_iter()
            .filter_map(|(labels, _)| {
                labels
                    .split("shard=\"")
                    .nth(1)?
                    .split('"')
                    .next()
                    .map(String::from)
            })
            .collect();
        assert_eq!(
            depths.len(),
            SHARDS as usize,
            "a queue depth per shard: {depths:?}"
        );
        // Caches: its shards' parents and no more.
        let expected: usize = mine
            .iter()
            .map(|s| per_shard.get(s).copied().unwrap_or(0))
            .sum();
        eventually("each replica to cache its shards' parents", TIMEOUT, || {
            (cached_parents(host) as usize == expected).then_some(())
        });
        // Related Pods: its shards' too, and no more.
        let expected: usize = pods
            .values()
            .filter(|(_, shard)| shard.is_some_and(|s| mine.contains(&s)))
            .count();
        eventually("each replica to cache its shards' Pods", TIMEOUT, || {
            (cached_pods(host) as usize == expected).then_some(())
        });
        let plugin = host.plugin("database").expect("database on /plugins");
        assert_eq!(plugin["shards"]["count"], SHARDS, "{plugin}");
        let owned: BTreeSet<u16> = plugin["shards"]["owned"]
            .as_array()
            .expect("owned shards")
            .iter()
            .map(|s| s.as_u64().unwrap() as u16)
            .collect();
        assert_eq!(owned, mine, "/plugins names the shards it owns");
    }
    // Writes: each parent's by the owner of its shard only (and the
    // relabelling of the one labelled by hand, by the owner of the shard it
    // sat in).
    for (i, write) in writes(&r, &since) {
        let Some(parent) = parent_of(&write, &parents) else {
            continue;
        };
        let relabel = parent == "by-hand" && write.resource == "databases" && write.verb == "patch";
        if relabel && r.hosts[i].is(&owners[&wrong]) {
            continue;
        }
        let shard = parents[&parent].0.expect("labelled");
        assert!(
            r.hosts[i].is(&owners[&shard]),
            "replica {i} wrote {write:?} of shard {shard}, owned by {}",
            owners[&shard]
        );
    }
}

/// No parent is written by two replicas in interleaved turns: each
/// parent's writes, in time order, change hands at most `handovers` times.
fn assert_no_double_writes(
    r: &Replicas,
    since: &str,
    parents: &BTreeMap<String, (Option<u16>, String)>,
) {
    let mut by_parent: BTreeMap<String, Vec<(String, usize)>> = BTreeMap::new();
    for (i, write) in writes(r, since) {
        if let Some(parent) = parent_of(&write, parents) {
            by_parent
                .entry(parent)
                .or_default()
                .push((write.received.clone(), i));
        }
    }
    for (parent, mut list) in by_parent {
        list.sort();
        let mut runs: Vec<usize> = Vec::new();
        for (_, i) in list {
            if runs.last() != Some(&i) {
                runs.push(i);
            }
        }
        let distinct: BTreeSet<&usize> = runs.iter().collect();
        assert_eq!(
            runs.len(),
            distinct.len(),
            "{parent} was written by replicas in turns {runs:?}: two wrote it in one term"
        );
    }
}

#[test]
fn a_killed_replica_s_shards_move_within_the_lease_and_a_new_one_takes_its_share() {
    let mut r = Replicas::start("shards-kill", 3);
    let n = r.n().to_string();
    let owners = r.balanced();
    let since = audit_now();
    apply(&n, &databases("db", 18));
    all_running(&n, 18);

    // SIGKILL: no release; its shards expire and are taken.
    let victim_id = owners[&0].clone();
    let victim = r.hosts.remove(r.index_of(&victim_id));
    let victim_shards: BTreeSet<u16> = owners
        .iter()
        .filter(|(_, h)| **h == victim_id)
        .map(|(s, _)| *s)
        .collect();
    victim.stop();
    let killed = Instant::now();
    eventually("the dead replica's shards to move", TIMEOUT, || {
        let now = r.owners();
        victim_shards
            .iter()
            .all(|s| now.get(s).is_some_and(|h| *h != victim_id))
            .then_some(())
    });
    let took = killed.elapsed();
    println!(
        "FIGURE shard_takeover_after_kill_seconds {:.1}",
        took.as_secs_f64()
    );
    assert!(
        took < LEASE_DURATION + Duration::from_secs(5),
        "took {took:?}"
    );
    let moved: Vec<u16> = owners
        .iter()
        .filter(|(s, h)| **h != victim_id && r.owners().get(s) != Some(h))
        .map(|(s, _)| *s)
        .collect();
    assert!(
        moved.is_empty(),
        "only the dead replica's shards moved: {moved:?}"
    );
    apply(&n, &databases("after-kill", 6));
    all_running(&n, 24);

    // A replica that joins takes its share; the others give it up. The
    // survivors settle their own share first (the takeover may have left
    // one holding more, which they even out): a move between them is not
    // the joiner's doing.
    let before_join = r.balanced();
    r.add();
    let after_join = r.balanced();
    let joiner = r.hosts.last().unwrap();
    let taken: Vec<u16> = after_join
        .iter()
        .filter(|(_, h)| joiner.is(h))
        .map(|(s, _)| *s)
        .collect();
    let moved = after_join
        .iter()
        .filter(|(s, h)| before_join.get(s) != Some(h))
        .count();
    println!("FIGURE shards_moved_on_join {moved} of {SHARDS}");
    assert!(!taken.is_empty(), "the new replica took shards");
    assert_eq!(
        moved,
        taken.len(),
        "only the shards the new replica took moved"
    );
    apply(&n, &databases("after-join", 6));
    let parents = all_running(&n, 30);
    assert_no_double_writes(&r, &since, &parents);
}

#[test]
fn sigterm_hands_a_replica_s_shards_over_at_once() {
    let mut r = Replicas::start("shards-term", 2);
    let n = r.n().to_string();
    let owners = r.balanced();
    apply(&n, &databases("db", 8));
    all_running(&n, 8);
    let leaving_id = owners[&0].clone();
    let leaving = r.hosts.remove(r.index_of(&leaving_id));
    let stopped = Instant::now();
    assert!(leaving.terminate(), "a clean exit");
    eventually("its shards to be taken", TIMEOUT, || {
        let now = r.owners();
        (now.len() == SHARDS as usize && now.values().all(|h| *h != leaving_id)).then_some(())
    });
    let took = stopped.elapsed();
    println!(
        "FIGURE shard_handover_after_sigterm_seconds {:.1}",
        took.as_secs_f64()
    );
    assert!(
        took < LEASE_DURATION,
        "handed over at once, not after the lease: {took:?}"
    );
    apply(&n, &databases("after", 4));
    all_running(&n, 12);
}
