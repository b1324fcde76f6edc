//! The balancing rule of an election round, kept pure so that the same rule
//! runs in the [`super::Elector`] and in the simulation below (thousands of
//! shards over many replicas, which no test cluster can hold).
//!
//! Leases are balanced per *group*: the shards of one sharded plugin form a
//! group (so that each replica holds its share of that plugin's parents and
//! caches), and every unsharded plugin's Lease is in one group together, as
//! before shards existed.

/// The part of a unit's name after the plugin that marks a shard.
const SHARD_SEPARATOR: &str = ".shard-";

/// What a replica campaigns for: a whole plugin (`database`) or one shard of
/// a sharded plugin (`database.shard-3`). The Lease is
/// [`super::lease_name`] of it.
pub fn unit(plugin: &str, shard: Option<u16>) -> String {
    match shard {
        None => plugin.to_string(),
        Some(shard) => format!("{plugin}{SHARD_SEPARATOR}{shard}"),
    }
}

/// The plugin and the shard (if any) of a unit named by [`unit`].
pub fn split(unit: &str) -> (&str, Option<u16>) {
    match unit.rsplit_once(SHARD_SEPARATOR) {
        Some((plugin, shard)) => match shard.parse() {
            Ok(shard) => (plugin, Some(shard)),
            Err(_) => (unit, None),
        },
        None => (unit, None),
    }
}

/// The group a unit is balanced within: its plugin for a shard, `""` for
/// a whole plugin.
pub fn group(unit: &str) -> &str {
    match split(unit) {
        (plugin, Some(_)) => plugin,
        (_, None) => "",
    }
}

/// Whether a replica holding `mine` Leases of a group, where the least
/// loaded live member holds `least`, gives one up this round (one per group
/// per round, so a joiner is not flooded and movement stays minimal).
///
/// For shards ([`Crowd`]: the group's share per live replica, its Leases
/// free now, the most any replica holds), three more conditions keep a
/// join's movement to what the joiner takes: only the most loaded give up,
/// never below their share rounded down, and only while fewer Leases are
/// free than the least loaded replica lacks (one at a time when it lacks
/// none). Without them every replica gives one up in the same
/// round, more are free than the joiner takes, and the rest go to whoever
/// is quickest and move again (the simulation measured twice the movement
/// needed at 10 replicas).
pub fn surplus(
    mine: usize,
    least: usize,
    crowd: Option<Crowd>,
    members: usize,
    released: bool,
) -> bool {
    let needed = |c: Crowd| {
        mine >= c.most
            && mine > c.share.floor
            && c.free < c.share.floor.saturating_sub(least).max(1)
    };
    members > 1 && !released && mine >= least + 2 && crowd.is_none_or(needed)
}

/// What a replica sees of a sharded plugin's group in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crowd {
    pub share: Share,
    /// Leases of the group free now.
    pub free: usize,
    /// The most Leases of the group any live replica holds.
    pub most: usize,
}

/// A group's fair share of Leases per live replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub floor: usize,
    pub ceil: usize,
}

/// The share of `units` Leases over `members` live replicas.
pub fn share(units: usize, members: usize) -> Share {
    let members = members.max(1);
    Share {
        floor: units / members,
        ceil: units.div_ceil(members),
    }
}

/// Whether a replica takes a free Lease of a group: at once when it is among
/// the least loaded, or below its fair share (`fair`: the group's Leases
/// over the live members, rounded up; shards only), or from anyone after
/// the Lease stayed free for two rounds (`waited`), so a free Lease never
/// stays free because the least loaded replica is slow; never while the
/// replica is cooling down from releasing it.
///
/// The fair share is what keeps a join's movement minimal: without it a
/// joiner takes one Lease per round while every other replica releases
/// one, the rest wait two rounds and go to whoever is quickest, and those
/// move again (the simulation measured 36 % of the parents moving where 25 %
/// must).
pub fn takes(mine: usize, least: usize, fair: Option<Share>, waited: bool, cooling: bool) -> bool {
    !cooling && (mine <= least || fair.is_some_and(|f| mine < f.floor) || waited)
}

#[cfg(test)]
mod simulation;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_name_a_plugin_or_one_of_its_shards() {
        assert_eq!(unit("database", None), "database");
        assert_eq!(unit("database", Some(3)), "database.shard-3");
        assert_eq!(split("database.shard-3"), ("database", Some(3)));
        assert_eq!(split("database"), ("database", None));
        assert_eq!(split("database.shard-x"), ("database.shard-x", None));
        assert_eq!(group("database.shard-3"), "database");
        assert_eq!(group("myapp"), "");
    }

    #[test]
    fn a_replica_two_above_the_least_loaded_releases_one_per_round() {
        assert!(surplus(3, 1, None, 2, false));
        assert!(!surplus(3, 1, None, 2, true), "one per round");
        assert!(!surplus(2, 1, None, 2, false), "one above is balanced");
        assert!(!surplus(5, 0, None, 1, false), "alone: keeps all");
        let crowd = |share, free, most| Some(Crowd { share, free, most });
        let quarter = share(64, 4);
        assert!(surplus(17, 0, crowd(quarter, 0, 17), 4, false));
        assert!(
            !surplus(17, 0, crowd(quarter, 0, 18), 4, false),
            "the most loaded first"
        );
        assert!(
            !surplus(16, 0, crowd(quarter, 0, 16), 4, false),
            "never below its share"
        );
        assert!(
            !surplus(17, 0, crowd(quarter, 16, 17), 4, false),
            "no more free than the least loaded lacks"
        );
        assert!(
            surplus(5, 3, crowd(share(11, 3), 0, 5), 3, false),
            "one at a time when it lacks none"
        );
    }

    #[test]
    fn a_free_lease_goes_to_the_least_loaded_first() {
        assert!(takes(1, 1, None, false, false));
        assert!(!takes(2, 1, None, false, false));
        assert!(takes(2, 1, None, true, false), "after two rounds, anyone");
        assert!(!takes(0, 0, None, true, true), "not while cooling down");
    }

    #[test]
    fn a_replica_below_its_fair_share_of_shards_takes_at_once() {
        assert_eq!(
            share(64, 4),
            Share {
                floor: 16,
                ceil: 16
            }
        );
        assert_eq!(share(10, 3), Share { floor: 3, ceil: 4 });
        let share = share(64, 4);
        assert!(takes(5, 0, Some(share), false, false), "a joiner fills up");
        assert!(
            !takes(16, 0, Some(share), false, false),
            "and stops at its share"
        );
    }
}
