//! Events per parent per minute: a plugin cannot flood the API server with
//! events, however often its parents are reconciled.

use std::time::{Duration, Instant};

use dashmap::DashMap;

use kubeplug_kube::informers::ObjectKey;

/// The window the budget is counted over.
const WINDOW: Duration = Duration::from_secs(60);

/// A fixed-window counter of events per parent.
pub struct EventBudget {
    per_window: u32,
    /// Shared by every worker of the plugin: one shard locked per parent.
    used: DashMap<ObjectKey, (Instant, u32)>,
}

impl EventBudget {
    pub fn new(per_minute: u32) -> Self {
        EventBudget {
            per_window: per_minute,
            used: DashMap::new(),
        }
    }

    /// Take up to `wanted` events for the parent at `key`; returns how many
    /// may be recorded now.
    pub fn take(&self, key: &ObjectKey, wanted: usize) -> usize {
        self.take_at(key, wanted, Instant::now())
    }

    fn take_at(&self, key: &ObjectKey, wanted: usize, now: Instant) -> usize {
        if wanted == 0 {
            return 0;
        }
        // Forget parents whose window ended, so the map stays as small as
        // the set of recently active parents.
        if self.used.len() > 1024 {
            self.used
                .retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
        }
        let mut entry = self.used.entry(key.clone()).or_insert((now, 0));
        if now.duration_since(entry.0) >= WINDOW {
            *entry = (now, 0);
        }
        let left = self.per_window.saturating_sub(entry.1) as usize;
        let granted = wanted.min(left);
        entry.1 += granted as u32;
        granted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    #[test]
    fn a_parent_gets_its_budget_per_minute_and_no_more() {
        let budget = EventBudget::new(30);
        let start = Instant::now();
        assert_eq!(budget.take_at(&key("a"), 1000, start), 30);
        assert_eq!(
            budget.take_at(&key("a"), 1, start + Duration::from_secs(59)),
            0
        );
        assert_eq!(
            budget.take_at(&key("a"), 5, start + Duration::from_secs(60)),
            5
        );
    }

    #[test]
    fn parents_have_budgets_of_their_own() {
        let budget = EventBudget::new(2);
        let now = Instant::now();
        assert_eq!(budget.take_at(&key("a"), 3, now), 2);
        assert_eq!(budget.take_at(&key("b"), 3, now), 2);
    }
}
