//! Where an object lives within its resource: the key caches, work queues
//! and indexes are kept by.

use std::fmt;

/// An object's namespace (empty for a cluster-scoped object) and name.
/// Ordered by namespace, then name, as a relist delivers them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object: how kubectl
/// and the host's logs spell it.
impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reads_as_kubectl_spells_it() {
        assert_eq!(ObjectKey::new("ns", "db").to_string(), "ns/db");
        assert_eq!(ObjectKey::new("", "node-1").to_string(), "node-1");
    }
}
