//! The balancing rule run for many shards and replicas, round by round, as
//! the elector runs it (no API server: one Lease table, each replica's
//! round applied in turn, as optimistic concurrency serialises them). It
//! answers what no test cluster can: with 100,000 parents over 3, 10 and 50
//! replicas, how even the shares are and how many parents move when a
//! replica joins or is killed.
//!
//! `cargo test -p kubeplug-kube --lib simulation -- --nocapture` prints the
//! table recorded in `docs/benchmarks/scale-out.md`.

use super::{Crowd, share, surplus, takes};
use kubeplug_core::shard::shard_of;

/// Rounds a released Lease stays with the others (2 × lease duration /
/// retry period, with client-go's 15 s and 2 s).
const COOLDOWN: usize = 15;
/// Rounds until a killed replica's Leases expire (15 s / 2 s).
const EXPIRY: usize = 8;

struct Cluster {
    /// Parents per shard.
    parents: Vec<usize>,
    owner: Vec<Option<usize>>,
    /// The round since which a shard's Lease has been free.
    free_since: Vec<usize>,
    /// Per replica and shard: no taking back before this round.
    cooldown: Vec<Vec<usize>>,
    live: Vec<bool>,
    round: usize,
}

impl Cluster {
    fn new(parents: usize, shards: u16, replicas: usize) -> Cluster {
        let mut per_shard = vec![0; shards as usize];
        for i in 0..parents {
            let namespace = format!("team-{}", i % 37);
            per_shard[shard_of(&namespace, &format!("db-{i}"), shards) as usize] += 1;
        }
        Cluster {
            parents: per_shard,
            owner: vec![None; shards as usize],
            free_since: vec![0; shards as usize],
            cooldown: vec![vec![0; shards as usize]; replicas],
            live: vec![true; replicas],
            round: 0,
        }
    }

    fn members(&self) -> Vec<usize> {
        (0..self.live.len()).filter(|r| self.live[*r]).collect()
    }

    fn load(&self, replica: usize) -> usize {
        self.owner.iter().filter(|o| **o == Some(replica)).count()
    }

    /// One round of every live replica, in an order that changes per round.
    fn round(&mut self) {
        let members = self.members();
        for i in 0..members.len() {
            let me = members[(self.round + i) % members.len()];
            self.replica_round(me, members.len());
        }
        self.round += 1;
    }

    fn replica_round(&mut self, me: usize, members: usize) {
        let least = self
            .members()
            .iter()
            .map(|m| self.load(*m))
            .min()
            .unwrap_or(0);
        let most = self
            .members()
            .iter()
            .map(|m| self.load(*m))
            .max()
            .unwrap_or(0);
        let mut mine = self.load(me);
        let mut released = false;
        let fair = share(self.owner.len(), members);
        for shard in 0..self.owner.len() {
            if self.owner[shard] == Some(me) {
                let free = self.owner.iter().filter(|o| o.is_none()).count();
                let crowd = Crowd {
                    share: fair,
                    free,
                    most,
                };
                if surplus(mine, least, Some(crowd), members, released) {
                    self.owner[shard] = None;
                    self.free_since[shard] = self.round;
                    self.cooldown[me][shard] = self.round + COOLDOWN;
                    released = true;
                    mine -= 1;
                }
                continue;
            }
            if self.owner[shard].is_some() {
                continue;
            }
            let waited = self.round >= self.free_since[shard] + 2;
            let cooling = self.round < self.cooldown[me][shard] && members > 1;
            if takes(mine, least, Some(fair), waited, cooling) {
                self.owner[shard] = Some(me);
                mine += 1;
            }
        }
    }

    /// Rounds until nothing moves for a cooldown's length (bounded).
    fn settle(&mut self) -> usize {
        let start = self.round;
        let mut quiet = 0;
        while quiet < COOLDOWN + 2 && self.round < start + 2000 {
            let before = self.owner.clone();
            self.round();
            quiet = if before == self.owner { quiet + 1 } else { 0 };
        }
        self.round - start - quiet
    }

    fn join(&mut self) {
        self.live.push(true);
        self.cooldown.push(vec![0; self.owner.len()]);
    }

    /// SIGKILL: its Leases stay held until they expire, then are free.
    fn kill(&mut self, replica: usize) {
        self.live[replica] = false;
        for _ in 0..EXPIRY {
            self.round();
        }
        for shard in 0..self.owner.len() {
            if self.owner[shard] == Some(replica) {
                self.owner[shard] = None;
                self.free_since[shard] = self.round;
            }
        }
    }

    /// Parents each live replica owns.
    fn shares(&self) -> Vec<usize> {
        self.members()
            .iter()
            .map(|m| {
                (0..self.owner.len())
                    .filter(|s| self.owner[*s] == Some(*m))
                    .map(|s| self.parents[s])
                    .sum()
            })
            .collect()
    }

    /// max / mean of the live replicas' parents.
    fn balance(&self) -> f64 {
        let shares = self.shares();
        let mean = shares.iter().sum::<usize>() as f64 / shares.len() as f64;
        *shares.iter().max().expect("members") as f64 / mean
    }

    fn moved(&self, before: &[Option<usize>]) -> usize {
        (0..self.owner.len())
            .filter(|s| before[*s] != self.owner[*s])
            .map(|s| self.parents[s])
            .sum()
    }
}

struct Row {
    balance: f64,
    join_moved: f64,
    join_ideal: f64,
    join_rounds: usize,
    kill_moved: f64,
    kill_ideal: f64,
    kill_rounds: usize,
}

fn scenario(parents: usize, shards: u16, replicas: usize) -> Row {
    let mut cluster = Cluster::new(parents, shards, replicas);
    cluster.settle();
    assert!(
        cluster.owner.iter().all(Option::is_some),
        "every shard owned"
    );
    let loads: Vec<usize> = cluster.members().iter().map(|m| cluster.load(*m)).collect();
    let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
    assert!(max - min <= 1, "shards even to one: {loads:?}");
    let balance = cluster.balance();

    let before = cluster.owner.clone();
    cluster.join();
    let join_rounds = cluster.settle();
    let join_moved = cluster.moved(&before);
    let joiner = replicas;
    let taken: usize = (0..cluster.owner.len())
        .filter(|s| cluster.owner[*s] == Some(joiner))
        .map(|s| cluster.parents[s])
        .sum();
    assert_eq!(join_moved, taken, "only shards the joiner took moved");

    let before = cluster.owner.clone();
    cluster.kill(0);
    let kill_rounds = cluster.settle() + EXPIRY;
    let kill_moved = cluster.moved(&before);
    let killed: usize = (0..before.len())
        .filter(|s| before[*s] == Some(0))
        .map(|s| cluster.parents[s])
        .sum();
    assert!(cluster.owner.iter().all(|o| o.is_some_and(|o| o != 0)));
    // The killed replica's shards move, and the rebalance after may move a
    // few more (a survivor two above the least gives one up).
    assert!(kill_moved >= killed);

    Row {
        balance,
        join_moved: join_moved as f64 / parents as f64,
        join_ideal: 1.0 / (replicas + 1) as f64,
        join_rounds,
        kill_moved: kill_moved as f64 / parents as f64,
        kill_ideal: 1.0 / (replicas + 1) as f64,
        kill_rounds,
    }
}

#[test]
fn shards_spread_evenly_and_move_only_as_much_as_a_join_or_a_kill_needs() {
    let parents = 100_000;
    println!(
        "| shards | replicas | max/mean parents | moved on join (ideal) | rounds | moved on kill (ideal) | rounds |"
    );
    println!("|---|---|---|---|---|---|---|");
    for shards in [64u16, 256] {
        for replicas in [3, 10, 50] {
            let row = scenario(parents, shards, replicas);
            println!(
                "| {shards} | {replicas} | {:.2} | {:.1} % ({:.1} %) | {} | {:.1} % ({:.1} %) | {} |",
                row.balance,
                row.join_moved * 100.0,
                row.join_ideal * 100.0,
                row.join_rounds,
                row.kill_moved * 100.0,
                row.kill_ideal * 100.0,
                row.kill_rounds,
            );
            // A join moves about its share: at most one shard's worth per
            // replica more than the ideal, never a reshuffle.
            let shard_share = 1.0 / shards as f64;
            assert!(
                row.join_moved <= row.join_ideal + 2.0 * shard_share * 1.2,
                "join moved {:.3}",
                row.join_moved
            );
            if shards as usize >= 4 * replicas {
                assert!(row.balance < 1.35, "balance {:.2}", row.balance);
            }
        }
    }
}
