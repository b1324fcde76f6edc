//! Leader election's metrics: which plugins (or plugin shards) this replica
//! leads, as `leading{plugin}` and, for the dashboards and alerts made for
//! client-go's leader election, as `leader_election_master_status{name}`
//! (`name`: the Lease's name, see [`super::lease_name`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

/// `leading` per plugin and client-go's `leader_election_master_status`
/// per Lease. Cheap to clone.
#[derive(Clone, Default)]
pub struct LeaderMetrics {
    leading: Family<PluginLabels, Gauge>,
    master_status: Family<LeaseLabels, Gauge>,
}

impl LeaderMetrics {
    /// The families: kubeplug's in `own`, client-go's in `standard` (a
    /// registry without prefix).
    pub fn register(own: &mut Registry, standard: &mut Registry) -> Self {
        let metrics = Self::default();
        own.register(
            "leading",
            "1 while this replica holds the plugin's Lease and may write",
            metrics.leading.clone(),
        );
        standard.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name",
            metrics.master_status.clone(),
        );
        metrics
    }

    /// Whether this replica leads `plugin` (a plugin or a plugin shard: the
    /// unit a Lease is for).
    pub fn leading(&self, plugin: &str, leading: bool) {
        self.leading
            .get_or_create(&PluginLabels {
                plugin: plugin.into(),
            })
            .set(i64::from(leading));
        self.master_status
            .get_or_create(&LeaseLabels {
                name: super::lease_name(plugin),
            })
            .set(i64::from(leading));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_a_plugin_is_the_master_status_of_its_lease() {
        let (mut own, mut standard) = (Registry::default(), Registry::default());
        let metrics = LeaderMetrics::register(&mut own, &mut standard);
        metrics.leading("database", true);
        metrics.leading("myapp", true);
        metrics.leading("myapp", false);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &standard).unwrap();
        assert!(
            text.contains("leader_election_master_status{name=\"kubeplug-database\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("leader_election_master_status{name=\"kubeplug-myapp\"} 0\n"),
            "{text}"
        );
    }
}
