//! Leader election: one Lease per plugin, balanced across replicas, with
//! client-go's timing and a fencing token that stops writes in time.
//!
//! Every replica keeps its caches warm; only the holder of a plugin's Lease
//! (`kubeplug-<plugin>`) reconciles that plugin's parents. One [`Elector`]
//! per host runs a round every `retry` period (with jitter):
//!
//! 1. renew its own membership Lease (`kubeplug-replica.<identity>`,
//!    labelled [`MEMBER_LABEL`]) and list the Leases of the namespace: live
//!    members and who holds which plugin;
//! 2. renew the plugin Leases it holds; a renew that has not succeeded for
//!    `renew_deadline` ends its leadership *locally* (the [`Leadership`]
//!    token turns false by itself, without waiting for the API server), so
//!    writes stop before the Lease (`duration` > `renew_deadline`) can expire
//!    and be taken elsewhere;
//! 3. balance ([`balance`]): a replica holding at least two Leases of a
//!    group more than the least loaded live member releases one; a free
//!    (released or expired) Lease is taken at once by a least-loaded
//!    replica, and by any other after it has stayed free for two rounds.
//!
//! What a replica campaigns for is a *unit*: a whole plugin, or one shard of
//! a sharded plugin (Lease `kubeplug-<plugin>.shard-<i>`, see
//! [`balance::unit`]). Units are balanced per group: each sharded plugin's
//! shards on their own, every unsharded plugin together.
//!
//! As client-go does, expiry is judged by the time *this* replica last saw a
//! Lease change (its resourceVersion), never by comparing the Lease's
//! `renewTime` with the local clock, so clock skew between nodes is harmless.
//!
//! Writes are gated on [`Leadership::is_leader`], checked just before each
//! request is sent, and reconciles in flight are cancelled on
//! [`Leadership::lost`] (see `controller` and `apply`).
//!
//! One file of ~890 lines on purpose: the [`Elector`]'s round (membership,
//! renewals, balance, handover on shutdown) is one state machine over one
//! private `State`; its steps read and change the same fields in the same
//! round, and split apart each would need all of it.

pub mod balance;
pub mod metrics;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::metrics::LeaderMetrics;

/// Label on membership Leases.
pub const MEMBER_LABEL: &str = "kubeplug.io/replica";

/// Lease timing, as client-go's leader election names it.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub namespace: String,
    /// Who this replica is (pod name, or host name and pid).
    pub identity: String,
    /// How long a Lease lasts without renewal (client-go: 15 s).
    pub duration: Duration,
    /// How long the holder keeps leading without a successful renewal
    /// (client-go: 10 s). Must be shorter than `duration`: the margin covers
    /// a write sent just before the deadline.
    pub renew_deadline: Duration,
    /// Time between rounds (client-go: 2 s).
    pub retry: Duration,
}

impl LeaseSettings {
    pub fn new(namespace: String, identity: String) -> Self {
        LeaseSettings {
            namespace,
            identity,
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }

    /// client-go's own checks: `duration > renew_deadline > 1.2 × retry`.
    pub fn validate(&self) -> Result<(), LeaseTimingError> {
        if self.duration <= self.renew_deadline {
            return Err(LeaseTimingError::DurationWithinDeadline {
                duration: self.duration,
                renew_deadline: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry.mul_f64(1.2) {
            return Err(LeaseTimingError::DeadlineWithinRetries {
                renew_deadline: self.renew_deadline,
                retry: self.retry,
            });
        }
        if self.duration.as_secs() < 1 {
            return Err(LeaseTimingError::DurationUnderASecond);
        }
        Ok(())
    }
}

/// Leader election timings client-go would refuse ([`LeaseSettings::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseTimingError {
    #[error(
        "the lease duration ({duration:?}) must be longer than the renew deadline ({renew_deadline:?})"
    )]
    DurationWithinDeadline {
        duration: Duration,
        renew_deadline: Duration,
    },
    #[error(
        "the renew deadline ({renew_deadline:?}) must be longer than 1.2 × the retry period ({retry:?})"
    )]
    DeadlineWithinRetries {
        renew_deadline: Duration,
        retry: Duration,
    },
    #[error("the lease duration must be at least 1 s")]
    DurationUnderASecond,
}

/// One term of leadership: leading until `until` unless renewed.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Term {
    leading: bool,
    until: Instant,
}

impl Term {
    fn follower() -> Term {
        Term {
            leading: false,
            until: Instant::now(),
        }
    }

    fn valid(&self) -> bool {
        self.leading && Instant::now() < self.until
    }
}

/// Whether this replica may write for a plugin: a fencing token checked just
/// before every write. It expires by itself at the renew deadline.
#[derive(Clone)]
pub struct Leadership {
    rx: watch::Receiver<Term>,
}

impl Leadership {
    /// Always leader (single replica, leader election off).
    pub fn always() -> Self {
        let far = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        let (tx, rx) = watch::channel(Term {
            leading: true,
            until: far,
        });
        // Keep the sender alive forever: the value never changes.
        std::mem::forget(tx);
        Leadership { rx }
    }

    /// Never leader: a replica standing by in tests, and a sharded plugin's
    /// plugin-wide token (each of its shards has its own).
    pub fn never() -> Self {
        let (tx, rx) = watch::channel(Term::follower());
        std::mem::forget(tx);
        Leadership { rx }
    }

    pub fn is_leader(&self) -> bool {
        self.rx.borrow().valid()
    }

    /// Wait until this replica leads.
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        loop {
            if rx.borrow_and_update().valid() {
                return;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Wait until this replica no longer leads: the term ended or its renew
    /// deadline passed without renewal.
    pub async fn lost(&self) {
        let mut rx = self.rx.clone();
        loop {
            let term = *rx.borrow_and_update();
            if !term.valid() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(term.until) => {}
                changed = rx.changed() => if changed.is_err() {
                    tokio::time::sleep_until(term.until).await;
                    return;
                }
            }
        }
    }
}

/// A plugin this replica campaigns for.
struct Slot {
    tx: watch::Sender<Term>,
    /// False once the plugin's controller stopped: release at next round.
    wanted: bool,
    /// Not before: a Lease this replica released to balance stays with the
    /// others for a while.
    cooldown: Option<Instant>,
}

/// What a round saw of a Lease: its resourceVersion and when it last changed.
struct Seen {
    version: String,
    at: Instant,
    /// When this replica first saw the Lease, and whether it has seen it
    /// change since: a membership Lease that never changes belongs to a
    /// replica that is gone.
    first: Instant,
    changed: bool,
}

struct State {
    slots: BTreeMap<String, Slot>,
    seen: HashMap<String, Seen>,
    /// Plugin Leases that do not exist yet, since when.
    missing: HashMap<String, Instant>,
}

/// Campaigns for every plugin of this host; see the module doc.
pub struct Elector {
    api: Api<Lease>,
    /// When this replica started campaigning: it gives nothing up to
    /// balance before it has seen who is alive ([`Elector::confirm`]).
    started: Instant,
    settings: LeaseSettings,
    metrics: LeaderMetrics,
    state: Mutex<State>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn micro_now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// The Lease name of a plugin.
pub fn lease_name(plugin: &str) -> String {
    format!("kubeplug-{plugin}")
}

/// The unit (plugin, or plugin shard: [`balance::split`]) a Lease named by
/// [`lease_name`] is for; `None` for membership Leases and others.
pub fn plugin_of_lease(name: &str) -> Option<&str> {
    name.strip_prefix("kubeplug-")
        .filter(|rest| !rest.starts_with("replica."))
}

/// A DNS-subdomain-safe membership Lease name for `identity`.
fn member_name(identity: &str) -> String {
    let safe: String = identity
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut name = format!("kubeplug-replica.{}", safe.trim_matches(['-', '.']));
    name.truncate(253);
    name
}

fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// A replica's membership Lease (not a plugin's).
fn is_member(lease: &Lease) -> bool {
    lease
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(MEMBER_LABEL))
}

/// Leases held per (group, live member) this round (see [`balance`]).
#[derive(Default, Clone)]
struct Loads(HashMap<(String, String), usize>);

impl Loads {
    fn of(&self, group: &str, member: &str) -> usize {
        self.0
            .get(&(group.to_string(), member.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// The least any live member holds of `group`.
    fn least(&self, group: &str, members: &[String]) -> usize {
        members.iter().map(|m| self.of(group, m)).min().unwrap_or(0)
    }

    /// The most any live member holds of `group`.
    fn most(&self, group: &str, members: &[String]) -> usize {
        members.iter().map(|m| self.of(group, m)).max().unwrap_or(0)
    }

    fn add(&mut self, group: &str, member: &str, by: isize) {
        let load = self
            .0
            .entry((group.to_string(), member.to_string()))
            .or_default();
        *load = load.saturating_add_signed(by);
    }
}

/// A membership Lease whose `renewTime` is older than a lease duration by
/// this replica's clock. Only a hint, for balancing (who is there to share
/// with), never for who may write: a replica that just started cannot wait
/// to see a Lease go unrenewed before it counts its members, and a killed
/// replica's membership stays until it is collected. Clock skew between
/// nodes only delays or hastens a rebalance.
fn long_unrenewed(lease: &Lease, duration: Duration) -> bool {
    let Some(renewed) = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()) else {
        return false;
    };
    let age = Timestamp::now().duration_since(renewed.0);
    age.as_secs_f64() > duration.as_secs_f64() * 2.0
}

fn jittered(period: Duration) -> Duration {
    period.mul_f64(1.0 + rand::random::<f64>() * 0.2)
}

impl Elector {
    /// Start campaigning (for no plugin yet; see [`Elector::join`]).
    pub fn start(client: Client, settings: LeaseSettings, metrics: LeaderMetrics) -> Arc<Elector> {
        let elector = Arc::new(Elector {
            api: Api::namespaced(client, &settings.namespace),
            started: Instant::now(),
            settings,
            metrics,
            state: Mutex::new(State {
                slots: BTreeMap::new(),
                seen: HashMap::new(),
                missing: HashMap::new(),
            }),
            task: Mutex::new(None),
        });
        let weak = Arc::downgrade(&elector);
        let task = tokio::spawn(async move {
            loop {
                let Some(elector) = weak.upgrade() else {
                    return;
                };
                let period = elector.settings.retry;
                elector.round().await;
                drop(elector);
                tokio::time::sleep(jittered(period)).await;
            }
        });
        *elector.task.lock() = Some(task);
        elector
    }

    pub fn identity(&self) -> &str {
        &self.settings.identity
    }

    /// How long a membership Lease may go unrenewed, as first seen, before
    /// this replica no longer counts its holder as alive: a few rounds.
    fn confirm(&self) -> Duration {
        self.settings.retry * 2 + self.settings.retry / 2
    }

    /// Campaign for a unit's Lease (a plugin, or one shard of it: see
    /// [`balance::unit`]); the token follows its leadership.
    pub fn join(&self, plugin: &str) -> Leadership {
        let mut state = self.state.lock();
        let slot = state
            .slots
            .entry(plugin.to_string())
            .or_insert_with(|| Slot {
                tx: watch::Sender::new(Term::follower()),
                wanted: true,
                cooldown: None,
            });
        slot.wanted = true;
        Leadership {
            rx: slot.tx.subscribe(),
        }
    }

    /// Stop campaigning for `plugin`: its token turns false now and the
    /// Lease, if held, is released at the next round.
    pub fn leave(&self, plugin: &str) {
        let mut state = self.state.lock();
        if let Some(slot) = state.slots.get_mut(plugin) {
            slot.wanted = false;
            slot.tx.send_modify(|t| t.leading = false);
        }
    }

    /// Stop campaigning, give up every Lease this replica holds (so others
    /// take over at once, client-go's `ReleaseOnCancel`) and leave the
    /// membership.
    pub async fn shutdown(&self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
        let plugins: Vec<String> = {
            let state = self.state.lock();
            for slot in state.slots.values() {
                slot.tx.send_modify(|t| t.leading = false);
            }
            state.slots.keys().cloned().collect()
        };
        for plugin in plugins {
            let name = lease_name(&plugin);
            if let Ok(Ok(Some(lease))) =
                tokio::time::timeout(self.settings.retry, self.api.get_opt(&name)).await
                && holder(&lease) == Some(self.identity())
            {
                self.release(&name, lease).await;
            }
        }
        let member = member_name(self.identity());
        let _ = tokio::time::timeout(
            self.settings.retry,
            self.api.delete(&member, &DeleteParams::default()),
        )
        .await;
    }

    /// One round; see the module doc.
    async fn round(&self) {
        self.renew_membership().await;
        let Some(leases) = self.list_leases().await else {
            self.expire_lapsed();
            return;
        };
        let now = Instant::now();
        let (members, mut loads, free_since) = self.observe(&leases, now);
        // The least loaded member's load is the one seen at the start of the
        // round: taking a free Lease does not make this replica "least
        // loaded" again within the round.
        let seen = loads.clone();
        let me = self.identity().to_string();
        // Groups that released a Lease this round (one each at most).
        let mut released: Vec<String> = Vec::new();

        let units: Vec<(String, bool, Option<Instant>)> = {
            let state = self.state.lock();
            state
                .slots
                .iter()
                .map(|(u, s)| (u.clone(), s.wanted, s.cooldown))
                .collect()
        };
        let (group_sizes, mut free) = count_groups(&units, &leases, &free_since);
        for (unit, wanted, cooldown) in units {
            let name = lease_name(&unit);
            let group = balance::group(&unit).to_string();
            let lease = leases.get(&name).cloned();
            let mine = lease.as_ref().and_then(holder) == Some(me.as_str());
            if !wanted {
                if mine {
                    self.release(&name, lease.expect("held")).await;
                }
                let mut state = self.state.lock();
                if state.slots.get(&unit).is_some_and(|s| !s.wanted) {
                    state.slots.remove(&unit);
                }
                continue;
            }
            let my_load = loads.of(&group, &me);
            let least = seen.least(&group, &members);
            // Shards only: whole plugins keep the rule they always had.
            let fair = (!group.is_empty()).then(|| {
                balance::share(group_sizes.get(&group).copied().unwrap_or(0), members.len())
            });
            if mine {
                let released_here = released.contains(&group);
                let crowd = fair.map(|share| balance::Crowd {
                    share,
                    free: free.get(&group).copied().unwrap_or(0),
                    most: seen.most(&group, &members),
                });
                let warming = now < self.started + self.confirm();
                if !warming && balance::surplus(my_load, least, crowd, members.len(), released_here)
                {
                    tracing::info!(unit = %unit, load = my_load, min_load = least, "releasing a lease to balance replicas");
                    self.set_term(
                        &unit,
                        Term::follower(),
                        Some(now + self.settings.duration * 2),
                    );
                    self.release(&name, lease.expect("held")).await;
                    released.push(group.clone());
                    loads.add(&group, &me, -1);
                    *free.entry(group.clone()).or_default() += 1;
                } else {
                    self.renew(&unit, &name, lease.expect("held")).await;
                }
                continue;
            }
            self.expire_lapsed_one(&unit);
            let since = if lease.is_none() {
                let mut state = self.state.lock();
                *state.missing.entry(name.clone()).or_insert(now)
            } else {
                self.state.lock().missing.remove(&name);
                match free_since.get(&name) {
                    Some(since) => *since,
                    None => continue, // held by a live replica
                }
            };
            let cooling = cooldown.is_some_and(|c| now < c) && members.len() > 1;
            let waited = now.duration_since(since) >= self.settings.retry * 2;
            if balance::takes(my_load, least, fair, waited, cooling)
                && self.acquire(&unit, &name, lease).await
            {
                loads.add(&group, &me, 1);
                if let Some(n) = free.get_mut(&group) {
                    *n = n.saturating_sub(1);
                }
            }
        }
    }

    /// The plugin Leases by name, or `None` (logged) when they cannot be
    /// listed within the retry interval.
    async fn list_leases(&self) -> Option<BTreeMap<String, Lease>> {
        let listed =
            tokio::time::timeout(self.settings.retry, self.api.list(&ListParams::default())).await;
        match listed {
            Ok(Ok(list)) => Some(
                list.items
                    .into_iter()
                    .filter_map(|l| Some((l.metadata.name.clone()?, l)))
                    .collect(),
            ),
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot list leases; leadership lapses at the renew deadline");
                None
            }
            Err(_) => {
                tracing::warn!("listing leases timed out; leadership lapses at the renew deadline");
                None
            }
        }
    }

    /// Record what this round saw: live members, plugin Leases held per live
    /// member, and since when each free plugin Lease has been free.
    fn observe(
        &self,
        leases: &BTreeMap<String, Lease>,
        now: Instant,
    ) -> (Vec<String>, Loads, HashMap<String, Instant>) {
        let me = self.identity().to_string();
        let mut state = self.state.lock();
        state.seen.retain(|name, _| leases.contains_key(name));
        let mut expiry = |name: &str, lease: &Lease| -> Instant {
            let version = lease.metadata.resource_version.clone().unwrap_or_default();
            let seen = state.seen.entry(name.to_string()).or_insert(Seen {
                version: version.clone(),
                at: now,
                first: now,
                changed: false,
            });
            if seen.version != version {
                seen.version = version;
                seen.at = now;
                seen.changed = true;
            }
            let duration = lease
                .spec
                .as_ref()
                .and_then(|s| s.lease_duration_seconds)
                .map_or(self.settings.duration, |s| {
                    Duration::from_secs(s.max(0) as u64)
                });
            seen.at + duration
        };
        let mut members = vec![me.clone()];
        let mut plugin_leases = Vec::new();
        let mut expiries = HashMap::new();
        let mut live_members = Vec::new();
        for (name, lease) in leases {
            let is_member = is_member(lease);
            let expires = expiry(name, lease);
            expiries.insert(name.clone(), expires);
            if is_member {
                if let Some(h) = holder(lease)
                    && h != me
                    && now < expires
                    && !long_unrenewed(lease, self.settings.duration)
                {
                    live_members.push((name.clone(), h.to_string()));
                }
            } else if name.starts_with("kubeplug-") {
                plugin_leases.push((name, lease, expires));
            }
        }
        // A replica renews its membership every round: one not seen to
        // renew within a few retry periods of first seeing it is gone,
        // though its Lease has not expired by this replica's clock yet (a
        // replica that just started would otherwise count a killed one as
        // a member holding nothing, and give up Leases for it).
        let confirm = self.confirm();
        for (name, member) in live_members {
            let renewing = state
                .seen
                .get(&name)
                .is_some_and(|s| s.changed || now < s.first + confirm);
            if renewing {
                members.push(member);
            }
        }
        let mut loads = Loads::default();
        let mut free_since = HashMap::new();
        for (name, lease, expires) in plugin_leases {
            match holder(lease) {
                Some(h) if now < expires && (h == me || members.iter().any(|m| m == h)) => {
                    let group = plugin_of_lease(name).map_or("", balance::group);
                    *loads
                        .0
                        .entry((group.to_string(), h.to_string()))
                        .or_default() += 1;
                }
                // Held by a replica whose membership lapsed (or an older
                // kubeplug without membership): not free until it expires.
                Some(_) if now < expires => {}
                // Released (no holder): free since it last changed;
                // expired: free since it expired.
                None => {
                    let at = state.seen.get(name.as_str()).map_or(now, |s| s.at);
                    free_since.insert(name.clone(), at);
                }
                Some(_) => {
                    free_since.insert(name.clone(), expires);
                }
            }
        }
        self.gc_members(leases, &expiries, now);
        (members, loads, free_since)
    }

    /// Delete membership Leases of replicas gone for long (killed without a
    /// clean shutdown), guarded by their resourceVersion.
    fn gc_members(
        &self,
        leases: &BTreeMap<String, Lease>,
        expiries: &HashMap<String, Instant>,
        now: Instant,
    ) {
        for (name, lease) in leases {
            let is_member = is_member(lease);
            let long_gone = expiries
                .get(name)
                .is_some_and(|e| now > *e + self.settings.duration * 10);
            if is_member && long_gone {
                let (api, name) = (self.api.clone(), name.clone());
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        resource_version: lease.metadata.resource_version.clone(),
                        uid: None,
                    }),
                    ..DeleteParams::default()
                };
                tokio::spawn(async move {
                    let _ = api.delete(&name, &params).await;
                });
            }
        }
    }

    async fn renew_membership(&self) {
        let name = member_name(self.identity());
        let timeout = self.settings.retry;
        let current = match tokio::time::timeout(timeout, self.api.get_opt(&name)).await {
            Ok(Ok(current)) => current,
            _ => return,
        };
        let mut lease = current.unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(MEMBER_LABEL.to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            spec: None,
        });
        let creating = lease.metadata.resource_version.is_none();
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity().to_string()),
            lease_duration_seconds: Some(self.settings.duration.as_secs() as i32),
            renew_time: Some(micro_now()),
            ..lease.spec.unwrap_or_default()
        });
        let pp = PostParams::default();
        let sent = if creating {
            tokio::time::timeout(timeout, self.api.create(&pp, &lease)).await
        } else {
            tokio::time::timeout(timeout, self.api.replace(&name, &pp, &lease)).await
        };
        if let Ok(Err(error)) = sent {
            tracing::debug!(%error, "membership lease not renewed");
        }
    }

    fn set_term(&self, plugin: &str, term: Term, cooldown: Option<Instant>) {
        let mut state = self.state.lock();
        if let Some(slot) = state.slots.get_mut(plugin) {
            let was = slot.tx.borrow().valid();
            slot.tx.send_replace(term);
            if cooldown.is_some() {
                slot.cooldown = cooldown;
            }
            if was != term.leading {
                tracing::info!(plugin, leading = term.leading, identity = %self.settings.identity, "leadership changed");
                self.metrics.leading(plugin, term.leading);
            }
        }
    }

    /// End the terms whose renew deadline passed (their tokens are already
    /// invalid; this makes it visible in logs and metrics).
    fn expire_lapsed(&self) {
        let plugins: Vec<String> = self.state.lock().slots.keys().cloned().collect();
        for plugin in plugins {
            self.expire_lapsed_one(&plugin);
        }
    }

    fn expire_lapsed_one(&self, plugin: &str) {
        let lapsed = {
            let state = self.state.lock();
            state.slots.get(plugin).is_some_and(|s| {
                let t = *s.tx.borrow();
                t.leading && !t.valid()
            })
        };
        if lapsed {
            tracing::warn!(
                plugin,
                "lease not renewed within the renew deadline; stopped writing"
            );
            self.set_term(plugin, Term::follower(), None);
        }
    }

    async fn renew(&self, plugin: &str, name: &str, mut lease: Lease) {
        let started = Instant::now();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.renew_time = Some(micro_now());
        spec.lease_duration_seconds = Some(self.settings.duration.as_secs() as i32);
        if self.replace(name, &lease).await {
            self.lead(plugin, started);
        } else {
            self.expire_lapsed_one(plugin);
        }
    }

    /// A new term for `plugin`: it leads until the renew deadline, counted
    /// from when the successful request was sent.
    fn lead(&self, plugin: &str, sent: Instant) {
        let term = Term {
            leading: true,
            until: sent + self.settings.renew_deadline,
        };
        self.set_term(plugin, term, None);
    }

    async fn acquire(&self, plugin: &str, name: &str, lease: Option<Lease>) -> bool {
        let started = Instant::now();
        let me = self.identity().to_string();
        let duration = self.settings.duration.as_secs() as i32;
        let won = match lease {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(me),
                        lease_duration_seconds: Some(duration),
                        acquire_time: Some(micro_now()),
                        renew_time: Some(micro_now()),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                let sent = tokio::time::timeout(
                    self.settings.retry,
                    self.api.create(&PostParams::default(), &lease),
                )
                .await;
                matches!(sent, Ok(Ok(_)))
            }
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                spec.holder_identity = Some(me);
                spec.acquire_time = Some(micro_now());
                spec.renew_time = Some(micro_now());
                spec.lease_duration_seconds = Some(duration);
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                // `replace` carries the resourceVersion listed: a concurrent
                // winner makes it fail with 409 instead of being overwritten.
                self.replace(name, &lease).await
            }
        };
        if won {
            self.lead(plugin, started);
        }
        won
    }

    /// Give a held Lease up: no holder, so a standby takes it at its next
    /// round instead of after the lease duration.
    async fn release(&self, name: &str, mut lease: Lease) {
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(micro_now());
        if self.replace(name, &lease).await {
            tracing::info!(lease = %name, "lease released");
        }
    }

    async fn replace(&self, name: &str, lease: &Lease) -> bool {
        let sent = tokio::time::timeout(
            self.settings.retry,
            self.api.replace(name, &PostParams::default(), lease),
        )
        .await;
        match sent {
            Ok(Ok(_)) => true,
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => false,
            Ok(Err(error)) => {
                tracing::warn!(lease = %name, %error, "lease update failed");
                false
            }
            Err(_) => {
                tracing::warn!(lease = %name, "lease update timed out");
                false
            }
        }
    }
}

/// How many wanted units each group has (a sharded plugin's shard count), and
/// how many of them are free now (released, expired or not created yet).
fn count_groups(
    units: &[(String, bool, Option<Instant>)],
    leases: &BTreeMap<String, Lease>,
    free_since: &HashMap<String, Instant>,
) -> (HashMap<String, usize>, HashMap<String, usize>) {
    let mut group_sizes: HashMap<String, usize> = HashMap::new();
    let mut free: HashMap<String, usize> = HashMap::new();
    for (unit, wanted, _) in units {
        if *wanted {
            let group = balance::group(unit).to_string();
            let name = lease_name(unit);
            if free_since.contains_key(&name) || !leases.contains_key(&name) {
                *free.entry(group.clone()).or_default() += 1;
            }
            *group_sizes.entry(group).or_default() += 1;
        }
    }
    (group_sizes, free)
}

#[cfg(test)]
mod tests;
