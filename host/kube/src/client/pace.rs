//! How fast one client may send: not at all paced by default, backing off
//! only when the API server says it is overloaded.
//!
//! A fixed client-side limit (client-go's 5–100 QPS token bucket) paces a
//! healthy burst for nothing: the API server's priority and fairness already
//! protects it and answers 429 with `Retry-After` when a client sends more
//! than its share. So the default is adaptive, the way TCP finds a window:
//! no pacing while the server answers; on a throttling answer (429, or 503
//! with `Retry-After`) the limit drops to half the rate this client was
//! sending, at most once per [`DECREASE_HOLD`] (one overload answers many
//! requests in flight at once); every second without throttling it grows by
//! [`RECOVER_STEP`], and after [`LIFT_AFTER`] without throttling pacing ends.
//! A platform that wants a hard ceiling sets a fixed rate instead.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// A client's rate limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateLimit {
    /// No pacing until the API server throttles, then back off and recover
    /// (see the module doc). The default.
    Adaptive,
    /// Never paced, even when throttled (the retries still wait the
    /// server's `Retry-After`).
    Unlimited,
    /// A token bucket: `qps` sustained, `burst` above it.
    Fixed { qps: f64, burst: u32 },
}

/// An adaptive limit never goes below this many requests per second: a
/// client this slow cannot be what overloads a server.
const MIN_QPS: f64 = 5.0;

/// Throttling answers within this long of a decrease are the same overload
/// (the requests that were in flight when the server began refusing).
const DECREASE_HOLD: Duration = Duration::from_secs(1);

/// How much the adaptive limit grows per second without throttling.
const RECOVER_STEP: f64 = 10.0;

/// After this long without throttling, the adaptive limit is lifted: the
/// overload is over and the server's fairness protects it again.
const LIFT_AFTER: Duration = Duration::from_secs(30);

/// The window the sending rate is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(1);

/// The pacing of one client, shared by its requests. Reservations are taken
/// in arrival order (like Go's `rate.Limiter.Reserve`): a request waits for
/// its own token and never starves.
pub(crate) struct Pace {
    limit: RateLimit,
    state: Mutex<State>,
}

struct State {
    /// Tokens left and when they were counted.
    tokens: f64,
    counted: Instant,
    /// The adaptive limit in force (`None`: not paced).
    adaptive: Option<f64>,
    /// When the adaptive limit last decreased, and last grew.
    decreased: Instant,
    grown: Instant,
    /// Requests sent in the current window, its start, and the rate of the
    /// last full window.
    sent: u32,
    window: Instant,
    rate: f64,
}

impl Pace {
    pub(crate) fn new(limit: RateLimit) -> Self {
        let now = Instant::now();
        let tokens = match limit {
            RateLimit::Fixed { burst, .. } => f64::from(burst.max(1)),
            _ => 1.0,
        };
        Pace {
            limit,
            state: Mutex::new(State {
                tokens,
                counted: now,
                adaptive: None,
                decreased: now,
                grown: now,
                sent: 0,
                window: now,
                rate: 0.0,
            }),
        }
    }

    /// How long the caller must wait before sending (zero if it may now).
    pub(crate) fn reserve(&self) -> Duration {
        let (qps, burst) = match self.limit {
            RateLimit::Unlimited => return Duration::ZERO,
            RateLimit::Fixed { qps, .. } if qps <= 0.0 => return Duration::ZERO,
            RateLimit::Fixed { qps, burst } => (qps, f64::from(burst.max(1))),
            RateLimit::Adaptive => {
                let mut state = self.state.lock();
                let now = Instant::now();
                state.count(now);
                state.recover(now);
                match state.adaptive {
                    None => return Duration::ZERO,
                    // Paced evenly: a throttled client has no burst.
                    Some(qps) => return state.take(now, qps, 1.0),
                }
            }
        };
        let mut state = self.state.lock();
        state.take(Instant::now(), qps, burst)
    }

    /// The API server throttled a request of this client.
    pub(crate) fn throttled(&self) {
        if self.limit != RateLimit::Adaptive {
            return;
        }
        let mut state = self.state.lock();
        let now = Instant::now();
        state.recover(now);
        if state.adaptive.is_some() && now.duration_since(state.decreased) < DECREASE_HOLD {
            return;
        }
        let sending = state.sending(now);
        let from = state.adaptive.map_or(sending, |limit| limit.min(sending));
        let limit = (from / 2.0).max(MIN_QPS);
        if state.adaptive.is_none() {
            // Start paced from now, with no saved-up tokens.
            state.tokens = 0.0;
            state.counted = now;
        }
        tracing::debug!(
            limit,
            sending,
            "the API server throttles: pacing this client"
        );
        state.adaptive = Some(limit);
        state.decreased = now;
        state.grown = now;
    }

    /// The adaptive limit in force, if any (for tests and logs).
    #[cfg(test)]
    pub(crate) fn adaptive_limit(&self) -> Option<f64> {
        let mut state = self.state.lock();
        state.recover(Instant::now());
        state.adaptive
    }
}

impl State {
    /// Take a token of a bucket of `qps` and `burst`; how long to wait for it.
    fn take(&mut self, now: Instant, qps: f64, burst: f64) -> Duration {
        let tokens =
            (self.tokens + now.duration_since(self.counted).as_secs_f64() * qps).min(burst) - 1.0;
        self.tokens = tokens;
        self.counted = now;
        if tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-tokens / qps)
        }
    }

    /// Count one request sent now.
    fn count(&mut self, now: Instant) {
        let elapsed = now.duration_since(self.window);
        if elapsed >= RATE_WINDOW {
            self.rate = f64::from(self.sent) / elapsed.as_secs_f64();
            self.sent = 0;
            self.window = now;
        }
        self.sent += 1;
    }

    /// The rate this client sends at: the last full window's, or the
    /// current one's if it is already higher.
    fn sending(&self, now: Instant) -> f64 {
        let elapsed = now.duration_since(self.window).max(RATE_WINDOW);
        self.rate.max(f64::from(self.sent) / elapsed.as_secs_f64())
    }

    /// Grow the adaptive limit for the whole seconds since it last changed,
    /// and lift it once throttling has stopped long enough.
    fn recover(&mut self, now: Instant) {
        let Some(limit) = self.adaptive else {
            return;
        };
        if now.duration_since(self.decreased) >= LIFT_AFTER {
            tracing::debug!("no throttling for a while: this client is no longer paced");
            self.adaptive = None;
            return;
        }
        let seconds = now.duration_since(self.grown).as_secs();
        if seconds > 0 {
            self.adaptive = Some(limit + RECOVER_STEP * seconds as f64);
            self.grown += Duration::from_secs(seconds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within a microsecond (the bucket counts in floating point).
    fn about(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) < Duration::from_micros(1)
    }

    /// Reserve `n` times in a row, sending each as soon as it may; the
    /// total wait.
    async fn send(pace: &Pace, n: usize) -> Duration {
        let mut waited = Duration::ZERO;
        for _ in 0..n {
            let wait = pace.reserve();
            tokio::time::advance(wait).await;
            waited += wait;
        }
        waited
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_rate_allows_its_burst_then_the_sustained_rate() {
        let pace = Pace::new(RateLimit::Fixed {
            qps: 10.0,
            burst: 3,
        });
        for _ in 0..3 {
            assert_eq!(pace.reserve(), Duration::ZERO);
        }
        // Tokens are reserved in order: the 4th waits 0.1 s, the 5th 0.2 s.
        assert_eq!(pace.reserve(), Duration::from_millis(100));
        assert_eq!(pace.reserve(), Duration::from_millis(200));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(pace.reserve(), Duration::ZERO, "refilled, capped at burst");
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_rate_is_honoured_over_time_and_not_changed_by_throttling() {
        let pace = Pace::new(RateLimit::Fixed {
            qps: 50.0,
            burst: 1,
        });
        pace.throttled();
        let waited = send(&pace, 501).await;
        assert!(
            about(waited, Duration::from_secs(10)),
            "500 requests after the first at 50/s: {waited:?}"
        );
    }

    #[test]
    fn a_zero_fixed_rate_and_unlimited_never_wait() {
        for limit in [
            RateLimit::Fixed { qps: 0.0, burst: 1 },
            RateLimit::Unlimited,
        ] {
            let pace = Pace::new(limit);
            for _ in 0..100 {
                assert_eq!(pace.reserve(), Duration::ZERO);
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_ignores_throttling() {
        let pace = Pace::new(RateLimit::Unlimited);
        pace.throttled();
        assert_eq!(send(&pace, 1000).await, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn adaptive_does_not_pace_a_healthy_burst() {
        let pace = Pace::new(RateLimit::Adaptive);
        assert_eq!(send(&pace, 10_000).await, Duration::ZERO);
        assert_eq!(pace.adaptive_limit(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn adaptive_backs_off_to_half_the_sending_rate_on_throttling() {
        let pace = Pace::new(RateLimit::Adaptive);
        // 400 requests/s for two seconds, then the server throttles.
        for _ in 0..800 {
            pace.reserve();
            tokio::time::advance(Duration::from_micros(2500)).await;
        }
        pace.throttled();
        assert_eq!(pace.adaptive_limit(), Some(200.0));
        // The requests in flight are throttled too: one decrease only.
        pace.throttled();
        pace.throttled();
        assert_eq!(pace.adaptive_limit(), Some(200.0));
        // Paced evenly at 200/s from now: 100 requests take 0.5 s.
        let waited = send(&pace, 100).await;
        assert!(about(waited, Duration::from_millis(500)), "{waited:?}");
        // Still throttled a second after the decrease: half of what it was
        // allowed by then (200, grown one step).
        tokio::time::advance(Duration::from_millis(500)).await;
        pace.throttled();
        assert_eq!(pace.adaptive_limit(), Some((200.0 + RECOVER_STEP) / 2.0));
    }

    #[tokio::test(start_paused = true)]
    async fn adaptive_never_goes_below_its_floor() {
        let pace = Pace::new(RateLimit::Adaptive);
        for _ in 0..10 {
            pace.throttled();
            tokio::time::advance(DECREASE_HOLD).await;
        }
        // Grown by one step per second since the last decrease (1 s ago).
        assert_eq!(pace.adaptive_limit(), Some(MIN_QPS + RECOVER_STEP));
    }

    #[tokio::test(start_paused = true)]
    async fn adaptive_recovers_additively_then_lifts_the_limit() {
        let pace = Pace::new(RateLimit::Adaptive);
        for _ in 0..100 {
            pace.reserve();
        }
        pace.throttled();
        assert_eq!(pace.adaptive_limit(), Some(50.0));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(pace.adaptive_limit(), Some(50.0 + 5.0 * RECOVER_STEP));
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(
            pace.adaptive_limit(),
            Some(50.0 + 5.0 * RECOVER_STEP),
            "whole seconds only"
        );
        tokio::time::advance(LIFT_AFTER).await;
        assert_eq!(pace.adaptive_limit(), None);
        assert_eq!(
            send(&pace, 1000).await,
            Duration::ZERO,
            "not paced any more"
        );
    }
}
