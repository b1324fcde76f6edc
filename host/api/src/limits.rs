//! How much one user may ask of previews: a rate and a number in flight per
//! user, and a number in flight for everyone. Checked before anything a
//! preview costs (the body, a SubjectAccessReview, a candidate's admission,
//! a plugin call), so a flood of previews with new parent names costs a few
//! reviews a second per user, never an unbounded queue on the API server.
//!
//! Over a limit, the answer is 429 with `Retry-After`, as kube-apiserver's
//! own flow control answers; kubectl retries it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The limits (flags of `kubeplug run`).
#[derive(Debug, Clone)]
pub struct PreviewLimits {
    /// Previews per second per user, sustained.
    pub per_user_rate: f64,
    /// Previews a user may start at once above the sustained rate.
    pub per_user_burst: u32,
    /// Previews of one user running at once.
    pub per_user_in_flight: usize,
    /// Previews running at once, all users together.
    pub in_flight: usize,
}

impl Default for PreviewLimits {
    fn default() -> Self {
        PreviewLimits {
            per_user_rate: 2.0,
            per_user_burst: 10,
            per_user_in_flight: 2,
            in_flight: 4,
        }
    }
}

/// Users tracked at most; past it, idle users are forgotten (a user can
/// only gain a fresh burst by that, and users are authenticated by the API
/// server, not chosen freely).
const MAX_USERS: usize = 10_000;

struct User {
    tokens: f64,
    last: Instant,
    in_flight: usize,
}

pub struct Limiter {
    limits: PreviewLimits,
    users: Mutex<HashMap<String, User>>,
    all: Arc<Semaphore>,
}

/// Why a preview was not admitted, and when to try again.
#[derive(Debug, PartialEq)]
pub struct Refused {
    pub why: String,
    pub retry_after: Duration,
}

/// A preview admitted: holds its places until dropped.
pub struct Permit {
    limiter: Arc<Limiter>,
    user: String,
    _all: OwnedSemaphorePermit,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut users = self.limiter.users.lock();
        if let Some(user) = users.get_mut(&self.user) {
            user.in_flight = user.in_flight.saturating_sub(1);
        }
    }
}

impl Limiter {
    pub fn new(limits: PreviewLimits) -> Arc<Self> {
        Arc::new(Limiter {
            all: Arc::new(Semaphore::new(limits.in_flight.max(1))),
            limits,
            users: Mutex::new(HashMap::new()),
        })
    }

    /// Admit one preview of `user` now, or say why not.
    pub fn admit(self: &Arc<Self>, user: &str) -> Result<Permit, Refused> {
        let limits = &self.limits;
        let burst = f64::from(limits.per_user_burst.max(1));
        let now = Instant::now();
        let mut users = self.users.lock();
        if users.len() >= MAX_USERS && !users.contains_key(user) {
            users.retain(|_, u| u.in_flight > 0);
        }
        let entry = users.entry(user.to_string()).or_insert(User {
            tokens: burst,
            last: now,
            in_flight: 0,
        });
        if limits.per_user_rate > 0.0 {
            entry.tokens = (entry.tokens
                + now.duration_since(entry.last).as_secs_f64() * limits.per_user_rate)
                .min(burst);
        }
        entry.last = now;
        if entry.in_flight >= limits.per_user_in_flight.max(1) {
            return Err(Refused {
                why: format!(
                    "{user} has {} previews running (at most {})",
                    entry.in_flight, limits.per_user_in_flight
                ),
                retry_after: Duration::from_secs(1),
            });
        }
        if limits.per_user_rate > 0.0 && entry.tokens < 1.0 {
            let wait = (1.0 - entry.tokens) / limits.per_user_rate;
            return Err(Refused {
                why: format!(
                    "{user} may start {} previews a second (burst {})",
                    limits.per_user_rate, limits.per_user_burst
                ),
                retry_after: Duration::from_secs_f64(wait.ceil().max(1.0)),
            });
        }
        let Ok(all) = self.all.clone().try_acquire_owned() else {
            return Err(Refused {
                why: format!(
                    "{} previews are running, as many as the host runs at once",
                    limits.in_flight
                ),
                retry_after: Duration::from_secs(1),
            });
        };
        if limits.per_user_rate > 0.0 {
            entry.tokens -= 1.0;
        }
        entry.in_flight += 1;
        Ok(Permit {
            limiter: self.clone(),
            user: user.to_string(),
            _all: all,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rate: f64, burst: u32, per_user: usize, all: usize) -> Arc<Limiter> {
        Limiter::new(PreviewLimits {
            per_user_rate: rate,
            per_user_burst: burst,
            per_user_in_flight: per_user,
            in_flight: all,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_user_gets_a_burst_then_the_sustained_rate() {
        let limiter = limiter(2.0, 3, 10, 10);
        for _ in 0..3 {
            drop(limiter.admit("alice").expect("within the burst"));
        }
        let refused = limiter.admit("alice").err().expect("over the burst");
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        // Another user is not held back by alice.
        assert!(limiter.admit("bob").is_ok());
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(limiter.admit("alice").is_ok(), "one token back after 0.5 s");
        assert!(limiter.admit("alice").is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn previews_in_flight_are_bounded_per_user_and_in_total() {
        let limiter = limiter(100.0, 100, 2, 3);
        let a1 = limiter.admit("alice").unwrap();
        let _a2 = limiter.admit("alice").unwrap();
        assert!(limiter.admit("alice").is_err(), "two of alice's at once");
        let _b1 = limiter.admit("bob").unwrap();
        let refused = limiter.admit("carol").err().expect("three in total");
        assert!(refused.why.contains("at once"), "{}", refused.why);
        drop(a1);
        assert!(limiter.admit("carol").is_ok(), "a place freed");
    }
}
