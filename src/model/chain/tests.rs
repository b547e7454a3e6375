//! The switch rules of SPEC sections 5 and 13, one test each, on scripted
//! members, an in-memory health store and a fake clock.

mod budgets;
mod rate_limits;
mod records;
mod wait;

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::budget::Budget;
use crate::events::{Emitter, EventRecord, Sink};
use crate::health::{Health, HealthKey, MemoryStore};
use crate::model::gate::{BudgetBook, SharedRecord};
use crate::model::script::ScriptModel;
use crate::model::Model;
use crate::model::StreamObserver;
use crate::policy::Cooldown;
use crate::stop::Stop;

const ANSWER: &str = "- text: done\n";
const DEAD: &str = "- error: {status: 503}\n";
const TEN_S: Cooldown = Cooldown::For(Duration::from_secs(10));

/// Runs before a member's `n`-th request (given `n`).
type Hook = Box<dyn Fn(usize) + Send + Sync>;

/// A scripted model that counts its requests and may run a hook on each.
struct Counted {
    inner: ScriptModel,
    calls: Arc<AtomicUsize>,
    on_call: Option<Hook>,
}

#[async_trait]
impl Model for Counted {
    async fn complete(
        &self,
        request: &Request<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(hook) = &self.on_call {
            hook(n);
        }
        self.inner.complete(request, observer).await
    }
}

struct Collect(Arc<Mutex<Vec<Event>>>);
impl Sink for Collect {
    fn handle(&mut self, record: &EventRecord) {
        self.0.lock().unwrap().push(record.event.clone());
    }
}

type Shared = Arc<Mutex<MemoryStore>>;

fn key(name: &str) -> HealthKey {
    HealthKey {
        model: format!("script/{name}"),
        endpoint: format!("/{name}.yaml"),
    }
}

/// A chain of scripted members `script/a`, `script/b`, ... with its events,
/// request counts, stop signal and clock.
struct Run {
    chain: ChainModel,
    calls: Vec<Arc<AtomicUsize>>,
    events: Arc<Mutex<Vec<Event>>>,
    emitter: Emitter,
    cancel: CancellationToken,
    stop: Stop,
    clock: Arc<AtomicI64>,
    /// With a paused tokio clock: the clock also moves with tokio's time.
    base: Option<tokio::time::Instant>,
    store: Shared,
}

struct Setup {
    scripts: Vec<&'static str>,
    switch_after: u32,
    cooldown: Cooldown,
    attempts: u32,
    rate_limit_attempts: u32,
    rate_limit_budget: Duration,
    store: Shared,
    clock: Arc<AtomicI64>,
    health: bool,
    /// Member index and the hook run before each of its requests.
    hooks: Vec<(usize, Hook)>,
    backoff: Duration,
    outage_wait: Duration,
    base: Option<tokio::time::Instant>,
    /// The run's budgets (SPEC 19), on the same store and clock.
    budgets: Vec<Budget>,
}

fn setup(scripts: &[&'static str]) -> Setup {
    Setup {
        scripts: scripts.to_vec(),
        switch_after: 3,
        cooldown: TEN_S,
        attempts: 3,
        rate_limit_attempts: 8,
        rate_limit_budget: Duration::from_secs(120),
        store: Arc::default(),
        clock: Arc::new(AtomicI64::new(1_000_000)),
        health: true,
        hooks: Vec::new(),
        budgets: Vec::new(),
        backoff: Duration::from_millis(1),
        outage_wait: Duration::ZERO,
        base: None,
    }
}

/// The run's clock: the fake one, plus tokio's time since `base` when the
/// test runs on a paused tokio clock (so sleeps move it).
fn clock_fn(
    clock: &Arc<AtomicI64>,
    base: Option<tokio::time::Instant>,
) -> impl Fn() -> i64 + Send + Sync + 'static {
    let clock = clock.clone();
    move || {
        let moved = base.map_or(0, |b| b.elapsed().as_millis() as i64);
        clock.load(Ordering::SeqCst) + moved
    }
}

fn policy(switch_after: u32, cooldown: Cooldown) -> FallbackPolicy {
    FallbackPolicy {
        switch_after,
        cooldown,
    }
}

/// Another run on the same store and clock.
fn other_run(s: &Shared, clock: &Arc<AtomicI64>, cooldown: Cooldown) -> SharedRecord {
    other_run_at(s, clock, None, cooldown)
}

fn other_run_at(
    s: &Shared,
    clock: &Arc<AtomicI64>,
    base: Option<tokio::time::Instant>,
    cooldown: Cooldown,
) -> SharedRecord {
    let health = Health::new(Box::new(s.clone()), "test", |_| {}).with_clock(clock_fn(clock, base));
    SharedRecord::new(health, policy(3, cooldown))
}

impl Setup {
    fn switch_after(mut self, n: u32) -> Self {
        self.switch_after = n;
        self
    }
    fn cooldown(mut self, cooldown: Cooldown) -> Self {
        self.cooldown = cooldown;
        self
    }
    fn rate_limits(mut self, attempts: u32, budget: Duration) -> Self {
        self.rate_limit_attempts = attempts;
        self.rate_limit_budget = budget;
        self
    }
    fn no_health(mut self) -> Self {
        self.health = false;
        self
    }
    /// Another run on the same store and clock as an earlier one.
    fn on(mut self, store: Shared, clock: Arc<AtomicI64>) -> Self {
        self.store = store;
        self.clock = clock;
        self
    }
    fn budgets(mut self, budgets: Vec<Budget>) -> Self {
        self.budgets = budgets;
        self
    }
    fn hook(mut self, member: usize, f: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.hooks.push((member, Box::new(f)));
        self
    }
    fn attempts(mut self, n: u32) -> Self {
        self.attempts = n;
        self
    }
    fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }
    /// Waits up to `wait` when every member is down, on tokio's paused
    /// clock (the test runs with `start_paused`).
    fn outage_wait(mut self, wait: Duration) -> Self {
        self.outage_wait = wait;
        self.base = Some(tokio::time::Instant::now());
        self
    }
    fn store(mut self, store: &Shared, clock: &Arc<AtomicI64>) -> Self {
        self.store = store.clone();
        self.clock = clock.clone();
        self
    }

    fn build(self) -> Run {
        let mut hooks = self.hooks;
        let mut calls = Vec::new();
        let members = self
            .scripts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let name = ((b'a' + i as u8) as char).to_string();
                let count = Arc::new(AtomicUsize::new(0));
                calls.push(count.clone());
                let on_call = hooks
                    .iter()
                    .position(|(m, _)| *m == i)
                    .map(|p| hooks.remove(p).1);
                let model = Counted {
                    inner: ScriptModel::parse(text).unwrap(),
                    calls: count,
                    on_call,
                };
                let spec = ModelSpec::parse(&format!("script/{name}")).unwrap();
                Member::new(spec, Box::new(model), None, None).with_health_key(key(&name))
            })
            .collect();
        let retry = RetryPolicy {
            attempts: self.attempts,
            backoff: self.backoff,
            max_backoff: Duration::from_millis(5),
            jitter: 0.0,
            rate_limit_attempts: self.rate_limit_attempts,
            rate_limit_budget: self.rate_limit_budget,
            ..RetryPolicy::default()
        };
        let health = if self.health {
            Health::new(Box::new(self.store.clone()), "test", |_| {})
        } else {
            Health::off()
        }
        .with_clock(clock_fn(&self.clock, self.base));
        let book = BudgetBook::new(self.budgets, health.clone());
        let chain = ChainModel::new(members, retry, policy(self.switch_after, self.cooldown))
            .with_health(health)
            .with_outage_wait(self.outage_wait)
            .with_budgets(book);
        let events = Arc::new(Mutex::new(Vec::new()));
        let emitter = Emitter::new("run", vec![Box::new(Collect(events.clone()))]);
        let cancel = CancellationToken::new();
        Run {
            chain,
            calls,
            events,
            emitter,
            stop: Stop::new(cancel.clone(), None),
            cancel,
            clock: self.clock,
            base: self.base,
            store: self.store,
        }
    }
}

impl Run {
    async fn step(&mut self, step: u32) -> Result<Answer, ChainError> {
        let prompt = Prompt {
            system: "",
            messages: &[],
            tools: &[],
            output_schema: None,
            max_output_tokens: None,
            reasoning_effort: None,
            estimated_input_tokens: 0,
        };
        let ctx = RequestCtx {
            step,
            emitter: &self.emitter,
            stop: &self.stop,
        };
        self.chain.complete(&prompt, ctx).await
    }

    /// A step whose reply is counted toward the budgets, as the agent does.
    async fn spend_step(&mut self, step: u32) -> Result<Answer, ChainError> {
        let answer = self.step(step).await?;
        self.chain.record_spend(&answer.spec, answer.cost_usd);
        Ok(answer)
    }

    fn calls(&self, member: usize) -> usize {
        self.calls[member].load(Ordering::SeqCst)
    }

    fn advance(&self, ms: i64) {
        self.clock.fetch_add(ms, Ordering::SeqCst);
    }

    /// `(step, from, to, reason, attempts)` of each `model.fallback`.
    fn switches(&self) -> Vec<(u32, String, String, String, u32)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Event::ModelFallback {
                    step,
                    from,
                    to,
                    reason,
                    attempts,
                } => Some((
                    *step,
                    from.clone(),
                    to.clone(),
                    reason.to_string(),
                    *attempts,
                )),
                _ => None,
            })
            .collect()
    }

    fn restores(&self) -> Vec<(u32, String, String)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Event::ModelRestore { step, from, to } => Some((*step, from.clone(), to.clone())),
                _ => None,
            })
            .collect()
    }

    /// The `wait_seconds` of each `provider.retry`.
    fn waits(&self) -> Vec<f64> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Event::ProviderRetry { wait_seconds, .. } => Some(*wait_seconds),
                _ => None,
            })
            .collect()
    }

    /// Another run on this run's store and clock.
    fn other(&self) -> SharedRecord {
        other_run_at(&self.store, &self.clock, self.base, TEN_S)
    }

    /// Whether another run reads member `name` as cooling down.
    fn cooling_for_others(&self, name: &str) -> bool {
        other_run(&self.store, &self.clock, TEN_S)
            .elsewhere(&key(name))
            .cooling
    }
}

fn switch(
    step: u32,
    from: &str,
    to: &str,
    reason: &str,
    attempts: u32,
) -> (u32, String, String, String, u32) {
    (
        step,
        format!("script/{from}"),
        format!("script/{to}"),
        reason.to_string(),
        attempts,
    )
}

#[tokio::test]
async fn switches_after_switch_after_transient_failures() {
    let mut run = setup(&[DEAD, ANSWER]).switch_after(2).build();
    let answer = run.step(1).await.unwrap();
    assert_eq!(answer.spec, "script/b");
    assert_eq!(run.calls(0), 2);
    assert_eq!(run.switches(), vec![switch(1, "a", "b", "http_503", 2)]);
    assert_eq!(
        run.waits().len(),
        1,
        "one retry before the switch, none after"
    );
    assert_eq!(run.chain.active_spec(), "script/b");
    assert_eq!(run.chain.switches().len(), 1);
    // Stickiness: the next step stays on b.
    run.step(2).await.unwrap();
    assert_eq!((run.calls(0), run.calls(1)), (2, 2));
}

#[tokio::test]
async fn switch_after_larger_than_attempts_acts_as_attempts() {
    let mut run = setup(&[DEAD, ANSWER]).switch_after(9).build();
    run.step(1).await.unwrap();
    assert_eq!(run.switches(), vec![switch(1, "a", "b", "http_503", 3)]);
}

#[tokio::test]
async fn quota_switches_at_once() {
    let mut run = setup(&["- error: {kind: quota}\n", ANSWER]).build();
    run.step(1).await.unwrap();
    assert_eq!(run.calls(0), 1);
    assert_eq!(run.switches(), vec![switch(1, "a", "b", "quota", 1)]);
    assert!(run.waits().is_empty());
}

#[tokio::test]
async fn a_long_retry_after_moves_on_at_once_with_a_chain() {
    let long = "- error: {status: 429, retry_after: 3600}\n";
    let mut run = setup(&[long, ANSWER]).build();
    run.step(1).await.unwrap();
    assert_eq!(run.switches(), vec![switch(1, "a", "b", "http_429", 1)]);
    assert!(run.waits().is_empty());
}

#[tokio::test]
async fn a_long_retry_after_waits_max_backoff_without_a_chain() {
    // (A 503: a 429 would get the larger budget of rate limits.)
    let long = "- error: {status: 503, retry_after: 3600}\n";
    let mut run = setup(&[long]).build();
    let Err(ChainError::Exhausted { attempts, .. }) = run.step(1).await else {
        panic!("the lone member fails")
    };
    assert_eq!(attempts, 3, "every attempt is used");
    assert_eq!(run.waits(), vec![0.005, 0.005], "max_backoff each time");
    assert!(run.switches().is_empty());
}

#[tokio::test]
async fn a_left_member_is_skipped_for_its_cooldown_then_restored() {
    let flaky = "- error: {status: 503}\n- text: back\n";
    let mut run = setup(&[flaky, ANSWER]).switch_after(1).no_health().build();
    run.step(1).await.unwrap();
    run.advance(9_999);
    assert_eq!(run.step(2).await.unwrap().spec, "script/b");
    assert_eq!(run.calls(0), 1, "not asked within its cooldown");
    run.advance(1);
    let answer = run.step(3).await.unwrap();
    assert_eq!(answer.spec, "script/a");
    assert_eq!(answer.response.text, "back");
    assert_eq!(run.calls(0), 2, "one probe, no retry");
    assert_eq!(
        run.restores(),
        vec![(3, "script/b".into(), "script/a".into())]
    );
    assert_eq!(run.chain.active_spec(), "script/a");
    assert_eq!(run.switches().len(), 1);
}

#[tokio::test]
async fn a_failed_probe_switches_with_one_attempt_and_restarts_the_cooldown() {
    let mut run = setup(&[DEAD, ANSWER]).switch_after(2).no_health().build();
    run.step(1).await.unwrap();
    run.advance(10_000);
    assert_eq!(run.step(2).await.unwrap().spec, "script/b");
    assert_eq!(run.calls(0), 3, "two at step 1, one probe at step 2");
    assert_eq!(
        run.switches(),
        vec![
            switch(1, "a", "b", "http_503", 2),
            switch(2, "a", "b", "http_503", 1)
        ]
    );
    assert_eq!(run.waits().len(), 1, "the probe had no backoff");
    assert!(run.restores().is_empty());
    // The cooldown restarted at the probe.
    run.advance(9_999);
    run.step(3).await.unwrap();
    assert_eq!(run.calls(0), 3);
    run.advance(1);
    run.step(4).await.unwrap();
    assert_eq!(run.calls(0), 4);
}

#[tokio::test]
async fn probes_go_in_chain_order_and_move_on_to_the_next_probe() {
    let mut run = setup(&[DEAD, "- error: {status: 503}\n- text: b\n", ANSWER])
        .switch_after(1)
        .no_health()
        .build();
    run.step(1).await.unwrap();
    assert_eq!(run.chain.active_spec(), "script/c");
    run.advance(10_000);
    let answer = run.step(2).await.unwrap();
    assert_eq!(answer.spec, "script/b");
    assert_eq!(
        run.switches()[2..],
        [switch(2, "a", "b", "http_503", 1)],
        "a's failed probe moves on to the next probe"
    );
    assert_eq!(
        run.restores(),
        vec![(2, "script/c".into(), "script/b".into())]
    );
}

#[tokio::test]
async fn cooldown_zero_retries_the_left_member_every_step() {
    let mut run = setup(&[DEAD, ANSWER])
        .switch_after(1)
        .cooldown(Cooldown::For(Duration::ZERO))
        .build();
    for step in 1..=3 {
        run.step(step).await.unwrap();
    }
    assert_eq!(run.calls(0), 3, "one request per step");
    assert_eq!(run.switches().len(), 3);
    assert!(
        !run.cooling_for_others("a"),
        "a zero cooldown records nothing"
    );
}

#[tokio::test]
async fn cooldown_never_stays_on_the_fallback() {
    let mut run = setup(&[DEAD, ANSWER])
        .switch_after(1)
        .cooldown(Cooldown::Never)
        .build();
    run.step(1).await.unwrap();
    run.advance(100_000_000);
    run.step(2).await.unwrap();
    assert_eq!(run.calls(0), 1);
    assert_eq!(run.chain.active_spec(), "script/b");
}

#[tokio::test]
async fn the_last_member_is_asked_even_when_everything_is_cooling() {
    let mut run = setup(&[DEAD, DEAD, ANSWER]).switch_after(1).build();
    let other = other_run(&run.store, &run.clock, TEN_S);
    for name in ["a", "b", "c"] {
        other.left(&key(name), "http_503");
    }
    let answer = run.step(1).await.unwrap();
    assert_eq!(answer.spec, "script/c");
    // No later member may be asked: a is not skipped, and c, though
    // cooling, is where the chain goes after it.
    assert_eq!(run.switches(), vec![switch(1, "a", "c", "http_503", 1)]);
    assert_eq!((run.calls(0), run.calls(1), run.calls(2)), (1, 0, 1));
}

#[tokio::test]
async fn a_pending_stop_is_never_a_switch() {
    let cancel = Arc::new(Mutex::new(None::<CancellationToken>));
    let handle = cancel.clone();
    let mut run = setup(&[DEAD, ANSWER])
        .switch_after(1)
        .hook(0, move |_| {
            if let Some(token) = handle.lock().unwrap().as_ref() {
                token.cancel();
            }
        })
        .build();
    *cancel.lock().unwrap() = Some(run.cancel.clone());
    assert_eq!(
        run.step(1).await.unwrap_err(),
        ChainError::Stopped(StopCause::Interrupted)
    );
    assert!(run.switches().is_empty());
    assert_eq!(run.calls(1), 0, "no request after the stop");
}

#[tokio::test]
async fn a_stop_pending_before_the_step_sends_no_request() {
    let mut run = setup(&[DEAD, ANSWER]).build();
    run.cancel.cancel();
    assert_eq!(
        run.step(1).await.unwrap_err(),
        ChainError::Stopped(StopCause::Interrupted)
    );
    assert_eq!(run.calls(0) + run.calls(1), 0);
}

#[tokio::test]
async fn an_exhausted_chain_names_each_model_and_its_reason() {
    let mut run = setup(&[
        "- error: {kind: quota}\n",
        DEAD,
        "- error: {kind: network}\n",
    ])
    .switch_after(2)
    .build();
    let error = run.step(1).await.unwrap_err();
    let ChainError::Exhausted {
        tried, attempts, ..
    } = &error
    else {
        panic!("{error:?}")
    };
    let tried: Vec<(String, String)> = tried
        .iter()
        .map(|(spec, reason)| (spec.to_string(), reason.to_string()))
        .collect();
    assert_eq!(
        tried,
        vec![
            ("script/a".to_string(), "quota".to_string()),
            ("script/b".to_string(), "http_503".to_string()),
            ("script/c".to_string(), "network".to_string()),
        ]
    );
    assert_eq!(*attempts, 3, "the last member spends all of retry.attempts");
    assert_eq!(
        error.to_string(),
        "every model of the fallback chain failed: script/a (quota), script/b (http_503), script/c (network)"
    );
}

#[tokio::test]
async fn a_lone_model_names_its_error_and_attempts() {
    let mut run = setup(&[DEAD]).build();
    let error = run.step(1).await.unwrap_err();
    assert!(
        error.to_string().starts_with("script/a: HTTP 503")
            && error.to_string().ends_with("(after 3 attempts)"),
        "{error}"
    );
}

#[tokio::test]
async fn a_fatal_error_of_a_fallback_ends_the_chain() {
    let mut run = setup(&[DEAD, "- error: {status: 401}\n", ANSWER])
        .switch_after(1)
        .build();
    let error = run.step(1).await.unwrap_err();
    assert!(
        matches!(&error, ChainError::Fatal { spec, .. } if spec == "script/b"),
        "{error:?}"
    );
    assert_eq!(run.calls(2), 0);
}

#[tokio::test]
async fn a_context_overflow_is_not_a_switch() {
    let mut run = setup(&["- error: {kind: context_overflow}\n", ANSWER]).build();
    let error = run.step(1).await.unwrap_err();
    assert!(
        matches!(error, ChainError::ContextOverflow { .. }),
        "{error:?}"
    );
    assert!(run.switches().is_empty());
}
