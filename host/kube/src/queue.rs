//! A de-duplicating work queue, one per plugin.
//!
//! Guarantees:
//! - a key waiting in the queue is there once, however often it is added;
//! - a key is never handed to two workers at once: a key added while it is
//!   being reconciled is queued again when the worker calls [`Queue::done`];
//! - [`Queue::add_after`] keeps the earliest of several delays for a key.
//!
//! Backoff and resync policies live in the controller; this is only the queue.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

struct State<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    active: HashSet<K>,
    /// Keys added while active: queued again on `done`.
    dirty: HashSet<K>,
    /// Pending delayed adds, earliest deadline per key.
    scheduled: HashMap<K, Instant>,
    closed: bool,
}

pub struct Queue<K> {
    state: Mutex<State<K>>,
    notify: Notify,
}

impl<K: Clone + Eq + Hash + Send + 'static> Queue<K> {
    pub fn new() -> Arc<Self> {
        Arc::new(Queue {
            state: Mutex::new(State {
                ready: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashSet::new(),
                scheduled: HashMap::new(),
                closed: false,
            }),
            notify: Notify::new(),
        })
    }

    /// Queue `key` now.
    pub fn add(&self, key: K) {
        let mut s = self.state.lock().expect("queue lock");
        if s.closed {
            return;
        }
        if s.active.contains(&key) {
            s.dirty.insert(key);
        } else if s.queued.insert(key.clone()) {
            s.ready.push_back(key);
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Queue `key` after `delay`, unless an earlier add is already scheduled.
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        let at = Instant::now() + delay;
        {
            let mut s = self.state.lock().expect("queue lock");
            match s.scheduled.get(&key) {
                Some(existing) if *existing <= at => return,
                _ => {
                    s.scheduled.insert(key.clone(), at);
                }
            }
        }
        let queue = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let Some(queue) = queue.upgrade() else { return };
            let due = {
                let mut s = queue.state.lock().expect("queue lock");
                // A later, earlier-scheduled add replaced ours: let it fire.
                if s.scheduled.get(&key) == Some(&at) {
                    s.scheduled.remove(&key);
                    true
                } else {
                    false
                }
            };
            if due {
                queue.add(key);
            }
        });
    }

    /// The next key to work on; `None` once the queue is closed.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.state.lock().expect("queue lock");
                if s.closed {
                    return None;
                }
                if let Some(key) = s.ready.pop_front() {
                    s.queued.remove(&key);
                    s.active.insert(key.clone());
                    let more = !s.ready.is_empty();
                    drop(s);
                    if more {
                        // Wake another worker for the rest.
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// The worker is finished with `key`.
    pub fn done(&self, key: &K) {
        let requeue = {
            let mut s = self.state.lock().expect("queue lock");
            s.active.remove(key);
            s.dirty.remove(key)
        };
        if requeue {
            self.add(key.clone());
        }
    }

    /// Stop handing out keys; workers waiting in `next` return `None`.
    pub fn close(&self) {
        self.state.lock().expect("queue lock").closed = true;
        self.notify.notify_waiters();
    }

    /// Keys waiting (not counting active or scheduled ones).
    pub fn len(&self) -> usize {
        self.state.lock().expect("queue lock").ready.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_added_twice_is_handed_out_once() {
        let q = Queue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(q.next().await, Some("b"));
    }

    #[tokio::test]
    async fn a_key_added_while_active_is_requeued_only_when_done() {
        let q = Queue::new();
        q.add("a");
        let k = q.next().await.unwrap();
        q.add("a");
        assert_eq!(q.len(), 0, "never two workers on one key");
        q.done(&k);
        assert_eq!(q.next().await, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_keeps_the_earliest_deadline() {
        let q = Queue::new();
        q.add_after("a", Duration::from_secs(60));
        q.add_after("a", Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.next().await, Some("a"));
        q.done(&"a");
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(q.len(), 0, "the superseded 60 s add must not fire");
    }

    #[tokio::test]
    async fn close_releases_waiting_workers() {
        let q: Arc<Queue<&str>> = Queue::new();
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.next().await });
        tokio::task::yield_now().await;
        q.close();
        assert_eq!(waiter.await.unwrap(), None);
    }
}
