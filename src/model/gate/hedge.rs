//! Whether, when and to whom a late first event is hedged (SPEC 23): a
//! normal turn of a member with a later member in the chain may be hedged
//! (never a probe, never an outage wait's request); after `hedge_after`
//! (or, with `auto`, twice the 95th percentile of the member's last 50
//! first-event times, grown for the request's size, never before 5 s, 20 s
//! while fewer than 10 are known) without a first event, the same request
//! goes to the first later member that may be asked now, within the run's
//! hedge budget. The first-event times come from the shared record
//! (`health::LatencyStore`: a fleet learns together), else the run's own
//! memory (`health_db: off`, or a store that failed). The race itself is
//! `model/hedge.rs`.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::deadline::size_growth;
use super::{Admission, Gate, MemberTurn};
use crate::health::KEPT_FIRST_EVENTS;
use crate::policy::{HedgeAfter, HedgePolicy};

/// Fewer known first-event times than this: `auto` hedges at
/// `AUTO_UNKNOWN`.
const AUTO_MIN_KNOWN: usize = 10;
const AUTO_UNKNOWN: Duration = Duration::from_secs(20);
/// `auto` never hedges sooner.
const AUTO_FLOOR: Duration = Duration::from_secs(5);

/// The run's hedging: its policy, the requests and hedges it sent, and
/// each member's recent first-event times (the run's own memory).
pub(super) struct Hedging {
    policy: HedgePolicy,
    requests: AtomicU32,
    hedges: AtomicU32,
    warned: AtomicBool,
    first_events: Mutex<Vec<VecDeque<Duration>>>,
}

impl Hedging {
    pub(super) fn new(policy: HedgePolicy, members: usize) -> Hedging {
        Hedging {
            policy,
            requests: AtomicU32::new(0),
            hedges: AtomicU32::new(0),
            warned: AtomicBool::new(false),
            first_events: Mutex::new(vec![VecDeque::new(); members]),
        }
    }

    /// A request was let through (hedges included).
    pub(super) fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Member `index` answered, its first event `first_event` after sending.
    fn first_event(&self, index: usize, first_event: Duration) {
        let mut kept = self.first_events.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(times) = kept.get_mut(index) {
            if times.len() == KEPT_FIRST_EVENTS {
                times.pop_front();
            }
            times.push_back(first_event);
        }
    }

    fn known_first_events(&self, index: usize) -> Vec<Duration> {
        let kept = self.first_events.lock().unwrap_or_else(|e| e.into_inner());
        kept.get(index)
            .map(|t| t.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Whether one more hedge stays within the budget: the first always
    /// does; after it, the hedges (this one included) may be at most the
    /// budget's share of the requests (this one included).
    fn within_budget(&self) -> bool {
        let hedges = self.hedges.load(Ordering::Relaxed);
        let requests = self.requests.load(Ordering::Relaxed);
        hedges == 0 || f64::from(hedges + 1) <= self.policy.budget * f64::from(requests + 1)
    }
}

/// The `auto` delay from `known` first-event times for a request of
/// `estimated_input_tokens`: twice their 95th percentile grown for the
/// size, never before `AUTO_FLOOR`; `AUTO_UNKNOWN` while too few are known.
pub(super) fn auto_delay(known: &[Duration], estimated_input_tokens: u64) -> Duration {
    if known.len() < AUTO_MIN_KNOWN {
        return AUTO_UNKNOWN;
    }
    percentile_95(known)
        .saturating_mul(2)
        .saturating_add(size_growth(estimated_input_tokens))
        .max(AUTO_FLOOR)
}

/// A share of 0 to 1 as a percentage without float noise: 0.07 is `7%`,
/// 0.025 `2.5%`.
fn percent(share: f64) -> String {
    let text = format!("{:.4}", share * 100.0);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}%")
}

/// The 95th percentile (nearest rank) of a non-empty list.
fn percentile_95(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * 95).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// The hedge budget held a hedge back; `first` is true the first time in
/// the run (its one warning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverBudget {
    pub first: bool,
}

/// What the partner's admission said: the hedge may go with this
/// first-event deadline (`None`: the partner may not be asked now:
/// cooling, spent, paced, ...), and what it took from the shared record.
/// Unless the hedge goes (`HedgeTurn::admitted`), what it took is given
/// back when it is dropped: the original's first event may come while
/// the admission runs, and then no hedge goes.
pub(crate) struct PartnerAdmission {
    deadline: Option<Duration>,
    taken: Taken,
}

/// What a partner's admission took from the shared record for a hedge
/// that may never go: the pacing reservation of its request (its estimated
/// tokens) and the fleet's due outage probe of the partner (its lease).
/// Given back on drop unless `kept`.
struct Taken {
    gate: Arc<Gate>,
    to: usize,
    reserved: Option<u64>,
    fleet_probe: bool,
}

impl Taken {
    /// The hedge went: what was taken is its own.
    fn keep(mut self) -> bool {
        self.reserved = None;
        std::mem::take(&mut self.fleet_probe)
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if self.reserved.is_none() && !self.fleet_probe {
            return;
        }
        let (gate, to) = (Arc::clone(&self.gate), self.to);
        let (reserved, fleet_probe) = (self.reserved.take(), self.fleet_probe);
        let give_back = move || gate.give_back(to, reserved, fleet_probe);
        // A store call may wait on Redis or a SQLite lock: never on the
        // runtime thread.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(give_back)),
            Err(_) => give_back(),
        }
    }
}

/// The hedge of one member's turn: after how long, to whom, and the
/// partner's own rules.
pub(crate) struct HedgeTurn<'g> {
    gate: &'g Gate,
    /// The same gate, for the partner's admission on a blocking thread.
    shared: Arc<Gate>,
    /// The partner's index in the chain.
    pub to: usize,
    /// How long the original may go without a first event.
    pub after: Duration,
    /// The rules the partner's request is sent under (its pacing, its
    /// budgets, its strikes and successes).
    pub partner: MemberTurn<'g>,
}

impl HedgeTurn<'_> {
    /// At the moment the delay ran out: whether the run's hedge budget (in
    /// memory) lets one more hedge go.
    pub(crate) fn within_budget(&self) -> Result<(), OverBudget> {
        match &self.gate.hedging {
            Some(hedging) if !hedging.within_budget() => Err(OverBudget {
                first: !hedging.warned.swap(true, Ordering::Relaxed),
            }),
            _ => Ok(()),
        }
    }

    /// The partner's admission as its own request's would be (its budgets,
    /// the fleet's outage probe, cooldowns, pacing). These read and write
    /// the shared record, a call that may take a Redis round trip or a
    /// SQLite lock wait, so they run on a blocking thread: the original's
    /// request goes on being read meanwhile. Nothing is counted until the
    /// hedge is sent (`admitted`).
    pub(crate) fn admission(&self) -> impl Future<Output = PartnerAdmission> + Send + 'static {
        let gate = Arc::clone(&self.shared);
        let (to, tokens) = (self.to, self.partner.estimated_input_tokens);
        let task = tokio::task::spawn_blocking(move || {
            let turn = gate.turn(to, tokens);
            // Sending means its pacing reservation was taken.
            let deadline = match turn.admission(1) {
                Admission::Send {
                    first_event_deadline,
                } => Some(first_event_deadline),
                _ => None,
            };
            let fleet_probe = turn.fleet_probe.load(Ordering::Relaxed);
            PartnerAdmission {
                deadline,
                taken: Taken {
                    gate: Arc::clone(&gate),
                    to,
                    reserved: deadline.map(|_| tokens),
                    fleet_probe,
                },
            }
        });
        let gate = Arc::clone(&self.shared);
        async move {
            task.await.unwrap_or_else(|_| PartnerAdmission {
                deadline: None,
                taken: Taken {
                    gate,
                    to,
                    reserved: None,
                    fleet_probe: false,
                },
            })
        }
    }

    /// The hedge goes as `admitted` says: counted as a request and a hedge,
    /// with the first-event deadline it gets, keeping what its admission
    /// took; `None` when the partner may not be asked now (what was taken
    /// is given back).
    pub(crate) fn admitted(&self, admitted: PartnerAdmission) -> Option<Duration> {
        let deadline = admitted.deadline?;
        if admitted.taken.keep() {
            self.partner.fleet_probe.store(true, Ordering::Relaxed);
        }
        if let Some(hedging) = &self.gate.hedging {
            hedging.count_request();
            hedging.hedges.fetch_add(1, Ordering::Relaxed);
        }
        Some(deadline)
    }

    /// The run's hedge budget as the percentage it was given (`10%`,
    /// `2.5%`), for the warning.
    pub(crate) fn budget_percent(&self) -> String {
        percent(self.gate.hedging.as_ref().map_or(0.0, |h| h.policy.budget))
    }
}

impl Gate {
    /// An admission of member `index` whose request never went gives back
    /// what it took: its pacing reservation of `reserved` tokens, and the
    /// fleet's probe lease when it took it (held for no time at all, the
    /// lease is free for the next run at once).
    fn give_back(&self, index: usize, reserved: Option<u64>, fleet_probe: bool) {
        let health = self.record.health();
        if let Some(tokens) = reserved {
            self.pacer.give_back(health, index, tokens);
        }
        if fleet_probe {
            let (key, token) = (&self.keys[index], health.token());
            health.with(|store, now| store.try_lease(key, token, now, 0));
        }
    }

    /// Member `index` answered with its first event `first_event` after
    /// sending: kept in the run's memory and in the shared record.
    pub(super) fn record_first_event(&self, index: usize, first_event: Duration) {
        let Some(hedging) = &self.hedging else {
            return;
        };
        hedging.first_event(index, first_event);
        let ms = first_event.as_millis().min(u128::from(u64::MAX)) as u64;
        let key = &self.keys[index];
        self.record
            .health()
            .with(|store, now| store.record_first_event(key, ms, now));
    }

    /// Member `index`'s last first-event times: the shared record's, else
    /// the run's own.
    fn known_first_events(&self, hedging: &Hedging, index: usize) -> Vec<Duration> {
        let key = &self.keys[index];
        match self
            .record
            .health()
            .with(|store, _| store.first_events(key))
        {
            Some(times) => times.into_iter().map(Duration::from_millis).collect(),
            None => hedging.known_first_events(index),
        }
    }

    /// The same gate, hedging late first events as `policy` says.
    pub(crate) fn with_hedging(self, policy: HedgePolicy) -> Gate {
        let hedging = (policy.after != HedgeAfter::Off).then(|| Hedging::new(policy, self.len()));
        Gate { hedging, ..self }
    }

    /// The hedge of a normal turn of member `index` for a request of
    /// `estimated_input_tokens`: `None` when hedging is off or no later
    /// member may be asked now.
    pub(crate) fn hedge(
        self: &Arc<Self>,
        index: usize,
        estimated_input_tokens: u64,
    ) -> Option<HedgeTurn<'_>> {
        let hedging = self.hedging.as_ref()?;
        let now = self.record.now();
        let blocked = self.budget_blocked();
        let to = (index + 1..self.len()).find(|&j| !blocked[j] && self.eligible(j, now))?;
        let after = match hedging.policy.after {
            HedgeAfter::Off => return None,
            HedgeAfter::After(after) => after,
            HedgeAfter::Auto => auto_delay(
                &self.known_first_events(hedging, index),
                estimated_input_tokens,
            ),
        };
        Some(HedgeTurn {
            gate: self,
            shared: Arc::clone(self),
            to,
            after,
            partner: self.turn(to, estimated_input_tokens),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{
        Health, HealthKey, Heard, LockedStore, MemoryStore, OutageStore, PaceKey, PacingStore,
        Published, Reservation,
    };
    use crate::policy::{Cooldown, FallbackPolicy, RetryPolicy};

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn auto_waits_twenty_seconds_until_ten_are_known() {
        let nine = vec![secs(0.2); 9];
        assert_eq!(auto_delay(&nine, 0), secs(20.0));
        assert_eq!(
            auto_delay(&[], 100_000),
            secs(20.0),
            "not grown: a fixed wait"
        );
        let ten = vec![secs(0.2); 10];
        assert_eq!(auto_delay(&ten, 0), secs(5.0), "ten known: the rule");
    }

    #[test]
    fn auto_is_twice_the_95th_percentile_never_before_five_seconds() {
        let mut times: Vec<Duration> = (1..=100).map(|i| secs(f64::from(i) * 0.1)).collect();
        fastrand::shuffle(&mut times);
        // p95 of 0.1 .. 10.0 s is 9.5 s.
        assert_eq!(auto_delay(&times, 0), secs(19.0));
        let fast = vec![secs(0.3); 50];
        assert_eq!(auto_delay(&fast, 0), secs(5.0));
        assert_eq!(auto_delay(&fast, 600_000), secs(60.6));
        let slow = vec![secs(4.0); 50];
        assert_eq!(auto_delay(&slow, 0), secs(8.0));
        assert_eq!(auto_delay(&slow, 50_000), secs(13.0), "grown for the size");
    }

    fn keys() -> Vec<HealthKey> {
        ["a", "b"]
            .map(|name| HealthKey {
                model: format!("gw/{name}"),
                endpoint: format!("http://127.0.0.1:9/{name}"),
            })
            .to_vec()
    }

    /// A gate of two members hedging with `auto` on `health`.
    fn auto_gate(health: Health) -> Arc<Gate> {
        let retry = RetryPolicy::default();
        let fallback = FallbackPolicy::new(3, Cooldown::Never, retry.attempts);
        Arc::new(
            Gate::new(keys(), retry, fallback, health).with_hedging(HedgePolicy {
                after: HedgeAfter::Auto,
                budget: 0.10,
            }),
        )
    }

    fn auto_after(gate: &Arc<Gate>) -> Duration {
        gate.hedge(0, 0).expect("a partner may be asked").after
    }

    #[test]
    fn auto_learns_from_the_runs_own_memory_with_the_record_off() {
        let gate = auto_gate(Health::off());
        for _ in 0..9 {
            gate.record_first_event(0, secs(3.0));
        }
        assert_eq!(auto_after(&gate), secs(20.0), "nine known");
        gate.record_first_event(0, secs(3.0));
        assert_eq!(auto_after(&gate), secs(6.0));
        gate.record_first_event(1, secs(9.0));
        assert_eq!(auto_after(&gate), secs(6.0), "another member's are its own");
    }

    #[test]
    fn a_fleet_on_one_record_learns_first_events_together() {
        let store: Arc<Mutex<MemoryStore>> = Arc::default();
        let shared = || Health::new(Box::new(store.clone()), "test", |_| {});
        let (one, two) = (auto_gate(shared()), auto_gate(shared()));
        for _ in 0..10 {
            one.record_first_event(0, secs(4.0));
        }
        assert_eq!(auto_after(&two), secs(8.0), "learned from the other run");
        for _ in 0..50 {
            two.record_first_event(0, secs(1.0));
        }
        assert_eq!(auto_after(&one), secs(5.0), "the last fifty only");
    }

    #[test]
    fn a_broken_record_leaves_the_runs_own_memory() {
        let warned = Arc::new(AtomicU32::new(0));
        let count = warned.clone();
        let health = Health::new(Box::new(LockedStore), "test", move |_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        let gate = auto_gate(health);
        for _ in 0..10 {
            gate.record_first_event(0, secs(3.5));
        }
        assert_eq!(auto_after(&gate), secs(7.0));
        assert_eq!(warned.load(Ordering::Relaxed), 1, "one warning");
    }

    /// The partner's admission reads a shared record that takes 300 ms a
    /// call here (a slow Redis, a locked SQLite file): the runtime thread,
    /// where the original's request is read, goes on meanwhile.
    #[tokio::test(flavor = "current_thread")]
    async fn the_partners_admission_never_holds_up_the_runtime_thread() {
        let store: Arc<Mutex<MemoryStore>> = Arc::default();
        let slow = Arc::new(AtomicBool::new(false));
        let stalls = slow.clone();
        let health = Health::new(Box::new(store), "test", |_| {}).with_clock(move || {
            if stalls.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(300));
            }
            crate::health::now_millis()
        });
        let gate = auto_gate(health);
        let turn = gate.hedge(0, 0).expect("a partner may be asked");
        slow.store(true, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let (admitted, meanwhile) = tokio::join!(turn.admission(), async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            started.elapsed()
        });
        assert!(
            meanwhile < Duration::from_millis(250),
            "the runtime thread waited {meanwhile:?} for the store"
        );
        assert!(started.elapsed() >= Duration::from_millis(300));
        let requests = gate
            .hedging
            .as_ref()
            .unwrap()
            .requests
            .load(Ordering::Relaxed);
        assert_eq!(requests, 0, "nothing counted before the hedge is sent");
        assert!(
            turn.admitted(admitted).is_some(),
            "the partner may be asked"
        );
        let hedging = gate.hedging.as_ref().unwrap();
        assert_eq!(hedging.hedges.load(Ordering::Relaxed), 1);
        assert_eq!(hedging.requests.load(Ordering::Relaxed), 1);
    }

    /// A gate hedging after 1 s on `store`, pacing its members there.
    fn paced_gate(store: &Arc<Mutex<MemoryStore>>) -> Arc<Gate> {
        let retry = RetryPolicy::default();
        let fallback = FallbackPolicy::new(3, Cooldown::Never, retry.attempts);
        let health = Health::new(Box::new(store.clone()), "test", |_| {});
        let pace_keys = keys().into_iter().map(|k| PaceKey::new(k, None)).collect();
        Arc::new(
            Gate::new(keys(), retry, fallback, health)
                .with_pacer(super::super::pacing::Pacer::new(pace_keys))
                .with_hedging(HedgePolicy {
                    after: HedgeAfter::After(secs(1.0)),
                    budget: 0.10,
                }),
        )
    }

    /// Waits for a give-back on a blocking thread to reach `store`.
    async fn settled(
        store: &Arc<Mutex<MemoryStore>>,
        done: impl Fn(&mut MemoryStore) -> bool,
    ) -> bool {
        for _ in 0..200 {
            if done(&mut store.lock().unwrap()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    #[tokio::test]
    async fn an_admitted_hedge_that_never_goes_gives_back_its_reservation() {
        let store: Arc<Mutex<MemoryStore>> = Arc::default();
        let partner = PaceKey::new(keys()[1].clone(), None);
        let one_left = Heard {
            requests: Some(Published {
                limit: Some(10),
                remaining: 1,
                reset_at: crate::health::now_millis() + 600_000,
            }),
            tokens: None,
        };
        store
            .lock()
            .unwrap()
            .hear(&partner, &one_left, crate::health::now_millis())
            .unwrap();
        let gate = paced_gate(&store);
        let turn = gate.hedge(0, 50).expect("a partner may be asked");
        let admitted = turn.admission().await;
        assert!(admitted.deadline.is_some(), "the partner's last request");
        let reserve = |s: &mut MemoryStore| {
            s.reserve(
                &partner,
                &crate::health::Ask::tokens(0),
                crate::health::now_millis(),
            )
            .unwrap()
            .outcome
        };
        // The original's first event came meanwhile: no hedge goes.
        drop(admitted);
        assert!(
            settled(&store, |s| reserve(s) == Reservation::Taken).await,
            "the unsent hedge's request is given back"
        );
        // Sent, it keeps it.
        store
            .lock()
            .unwrap()
            .give_back(&partner, 0, crate::health::now_millis())
            .unwrap();
        let admitted = turn.admission().await;
        assert!(turn.admitted(admitted).is_some());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(matches!(
            reserve(&mut store.lock().unwrap()),
            Reservation::Short { .. }
        ));
    }

    #[tokio::test]
    async fn an_admitted_hedge_that_never_goes_gives_up_the_fleets_probe_lease() {
        let store: Arc<Mutex<MemoryStore>> = Arc::default();
        let partner = keys()[1].clone();
        let now = crate::health::now_millis();
        store
            .lock()
            .unwrap()
            .schedule_probe(&partner, now - 1_000, now, true)
            .unwrap();
        let gate = paced_gate(&store);
        let turn = gate.hedge(0, 0).expect("a partner may be asked");
        let admitted = turn.admission().await;
        assert!(
            admitted.taken.fleet_probe,
            "the hedge would be the fleet's probe"
        );
        let another_run = |s: &mut MemoryStore| {
            s.take_due_probe(&partner, 424_242, crate::health::now_millis(), 60_000)
                .unwrap()
        };
        assert!(
            !another_run(&mut store.lock().unwrap()),
            "held while it may go"
        );
        drop(admitted);
        assert!(
            settled(&store, another_run).await,
            "another run may probe at once"
        );
    }

    #[test]
    fn the_budget_allows_the_first_hedge_then_its_share() {
        let policy = HedgePolicy {
            after: HedgeAfter::After(secs(1.0)),
            budget: 0.10,
        };
        let hedging = Hedging::new(policy, 2);
        hedging.count_request();
        assert!(hedging.within_budget(), "the first hedge is always allowed");
        hedging.hedges.store(1, Ordering::Relaxed);
        for _ in 0..18 {
            hedging.count_request();
        }
        // 19 requests, one hedge: a second one would be 2 of 20.
        assert!(hedging.within_budget());
        hedging.hedges.store(2, Ordering::Relaxed);
        hedging.count_request();
        assert!(!hedging.within_budget(), "3 of 21 is past 10 %");
        let none = Hedging::new(
            HedgePolicy {
                budget: 0.0,
                ..policy
            },
            2,
        );
        assert!(none.within_budget(), "0 % still allows the first");
        none.hedges.store(1, Ordering::Relaxed);
        assert!(!none.within_budget());
    }

    #[test]
    fn the_budget_reads_back_as_the_percentage_it_was_given() {
        assert_eq!(percent(0.07), "7%");
        assert_eq!(percent(0.10), "10%");
        assert_eq!(percent(0.025), "2.5%");
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(1.0), "100%");
    }

    #[test]
    fn only_the_last_fifty_first_events_are_kept() {
        let hedging = Hedging::new(HedgePolicy::default(), 1);
        for i in 0..60 {
            hedging.first_event(0, secs(f64::from(i)));
        }
        let known = hedging.known_first_events(0);
        assert_eq!(known.len(), KEPT_FIRST_EVENTS);
        assert_eq!(known[0], secs(10.0));
    }
}
