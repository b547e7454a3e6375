//! Waiting out an outage (SPEC 18) through the chain: scripted members, an
//! in-memory store, and tokio's paused clock (every sleep is instant, and
//! the record's clock moves with it).

use super::*;

const MINUTE: Duration = Duration::from_secs(60);

fn outage_events(run: &Run) -> Vec<Event> {
    run.events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Event::OutageWaiting { .. } | Event::OutageOver { .. }))
        .cloned()
        .collect()
}

/// `(model, probes)` of the run's `outage.over`.
fn over(run: &Run) -> Option<(String, u32)> {
    outage_events(run).into_iter().find_map(|e| match e {
        Event::OutageOver { model, probes, .. } => Some((model, probes)),
        _ => None,
    })
}

#[tokio::test(start_paused = true)]
async fn a_lone_model_is_waited_for_and_the_same_step_goes_on_with_it() {
    let script = "- error: {status: 503}\n  repeat: 6\n- text: back\n";
    let mut run = setup(&[script]).outage_wait(MINUTE).build();
    let started = tokio::time::Instant::now();
    let answer = run.step(4).await.unwrap();
    assert_eq!(answer.response.text, "back");
    assert_eq!(run.calls(0), 7, "3 attempts, then 4 probes");
    let events = outage_events(&run);
    assert_eq!(events.len(), 2, "{events:?}");
    let Event::OutageWaiting {
        step, models, wait, ..
    } = &events[0]
    else {
        panic!("{events:?}")
    };
    assert_eq!((*step, *wait), (4, MINUTE));
    assert_eq!(
        models,
        &[crate::events::DownModel {
            model: "script/a".into(),
            reason: crate::reason::SwitchReason::parse("http_503")
        }]
    );
    assert_eq!(over(&run), Some(("script/a".into(), 4)));
    // Probes after 50, 100, 200 and 400 ms (the 1 ms backoff's floor, doubled).
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(750), "{waited:?}");
    assert!(waited < Duration::from_secs(1), "{waited:?}");
    assert!(run.restores().is_empty() && run.switches().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_first_member_to_answer_is_restored() {
    let a = "- error: {status: 503}\n  repeat: 5\n- text: a is back\n";
    let mut run = setup(&[a, DEAD]).outage_wait(MINUTE).build();
    let answer = run.step(2).await.unwrap();
    assert_eq!(answer.spec, "script/a");
    assert_eq!(run.switches(), vec![switch(2, "a", "b", "http_503", 3)]);
    assert_eq!(
        run.restores(),
        vec![(2, "script/b".into(), "script/a".into())]
    );
    assert_eq!(run.chain.active_spec(), "script/a");
    // a, b, a, b, a: one request at a time, in chain order.
    assert_eq!((run.calls(0), run.calls(1)), (6, 5));
    assert_eq!(over(&run), Some(("script/a".into(), 5)));
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_runs_out_names_every_model_its_last_reason_and_the_time() {
    let network = "- error: {status: 503}\n  repeat: 3\n- error: {kind: network}\n";
    let mut run = setup(&["- error: {kind: quota}\n", network])
        .outage_wait(Duration::from_secs(2))
        .build();
    let started = tokio::time::Instant::now();
    let error = run.step(1).await.unwrap_err();
    let ChainError::Exhausted {
        waited: Some(waited),
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(2100),
        "{took:?}"
    );
    assert!(waited.probes > 2, "{waited:?}");
    let text = error.to_string();
    assert!(
        text.starts_with(
            "every model of the fallback chain failed: script/a (quota), script/b (network); waited 2s for a model to answer again ("
        ),
        "{text}"
    );
    assert!(over(&run).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_lone_model_that_stays_down_ends_with_its_reason_and_the_time() {
    let mut run = setup(&[DEAD]).outage_wait(Duration::from_secs(3)).build();
    let text = run.step(1).await.unwrap_err().to_string();
    assert!(
        text.starts_with(
            "the model failed: script/a (http_503); waited 3s for a model to answer again ("
        ),
        "{text}"
    );
    assert!(text.contains("; last error: HTTP 503"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_the_wait_ends_it_at_once() {
    let mut run = setup(&[DEAD])
        .outage_wait(Duration::from_secs(3600))
        .build();
    let cancel = run.cancel.clone();
    let started = tokio::time::Instant::now();
    let (result, ()) = tokio::join!(run.step(1), async move {
        tokio::time::sleep(Duration::from_secs(90)).await;
        cancel.cancel();
    });
    assert_eq!(
        result.unwrap_err(),
        ChainError::Stopped(StopCause::Interrupted)
    );
    assert_eq!(started.elapsed(), Duration::from_secs(90), "at once");
}

#[tokio::test(start_paused = true)]
async fn without_a_wait_the_chain_is_exhausted_at_once() {
    let mut run = setup(&[DEAD]).build();
    let error = run.step(1).await.unwrap_err();
    assert!(matches!(error, ChainError::Exhausted { waited: None, .. }));
    assert!(outage_events(&run).is_empty());
}

/// The probes two runs on one store send during a wait of 10 s, and the
/// requests their members received in all.
async fn two_runs_waiting(shared: bool) -> (u32, usize) {
    let store = Shared::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let build = || {
        let s = setup(&[DEAD])
            .store(&store, &clock)
            .outage_wait(Duration::from_secs(10));
        if shared { s } else { s.no_health() }.build()
    };
    let (mut one, mut two) = (build(), build());
    let (a, b) = tokio::join!(one.step(1), two.step(1));
    let probes = [a, b]
        .iter()
        .map(|r| match r {
            Err(ChainError::Exhausted {
                waited: Some(w), ..
            }) => w.probes,
            other => panic!("{other:?}"),
        })
        .sum();
    (probes, one.calls(0) + two.calls(0))
}

#[tokio::test(start_paused = true)]
async fn runs_waiting_on_one_record_send_one_probe_per_interval_between_them() {
    // Due 50 ms after the wait began, then 100, 200 ... 6.4 s after each
    // failure: 7 probes fit in 10 s, whoever sends them.
    let (probes, _) = two_runs_waiting(true).await;
    assert!((6..=8).contains(&probes), "{probes}");
    let (alone, _) = two_runs_waiting(false).await;
    assert!(alone >= 12, "each on its own: {alone}");
}

#[tokio::test(start_paused = true)]
async fn a_recovery_another_run_recorded_is_followed_within_the_spread() {
    let script = "- error: {status: 503}\n- text: fine\n";
    let mut run = setup(&[script])
        .attempts(1)
        .backoff(Duration::from_secs(10))
        .outage_wait(Duration::from_secs(3600))
        .build();
    let other = run.other();
    let started = tokio::time::Instant::now();
    let (answer, ()) = tokio::join!(run.step(1), async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        other.success(&key("a"));
    });
    assert_eq!(answer.unwrap().response.text, "fine");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited <= Duration::from_secs(8),
        "within 5 s of the recovery (read within a second), before its own probe at 10 s: {waited:?}"
    );
    assert_eq!(over(&run), Some(("script/a".into(), 1)));
}

#[tokio::test(start_paused = true)]
async fn a_failure_joins_a_wait_the_fleet_is_in_without_spending_its_retries() {
    let script = "- error: {status: 503}\n- text: fine\n";
    let mut run = setup(&[script]).outage_wait(MINUTE).build();
    run.other().left(&key("a"), "http_503");
    let answer = run.step(1).await.unwrap();
    assert_eq!(answer.response.text, "fine");
    assert!(run.waits().is_empty(), "no retry: it waited with the fleet");
    assert_eq!(over(&run), Some(("script/a".into(), 1)));
}

/// Keeps every outage notice a sink is handed.
struct Notices(Arc<Mutex<Vec<crate::events::OutageNotice>>>);
impl Sink for Notices {
    fn handle(&mut self, _record: &EventRecord) {}
    fn outage_progress(&mut self, notice: &crate::events::OutageNotice) {
        self.0.lock().unwrap().push(notice.clone());
    }
}

#[tokio::test(start_paused = true)]
async fn a_long_wait_reminds_a_log_at_least_once_a_minute_and_counts_down() {
    let mut run = setup(&[DEAD])
        .backoff(Duration::from_secs(1))
        .outage_wait(Duration::from_secs(300))
        .build();
    let notices = Arc::new(Mutex::new(Vec::new()));
    let emitter = Emitter::new("run", vec![Box::new(Notices(notices.clone()))]);
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
        step: 1,
        emitter: &emitter,
        stop: &run.stop,
    };
    assert!(run.chain.complete(&prompt, ctx).await.is_err());
    let notices = notices.lock().unwrap();
    let reminders: Vec<Duration> = notices
        .iter()
        .filter(|n| n.remind)
        .map(|n| n.left)
        .collect();
    assert!(reminders.len() >= 9, "every 30 s over 300 s: {reminders:?}");
    for pair in reminders.windows(2) {
        let gap = pair[0] - pair[1];
        assert!(gap <= Duration::from_secs(31), "{reminders:?}");
    }
    assert!(
        notices
            .iter()
            .any(|n| !n.remind && n.next_try > Duration::ZERO),
        "each failed probe updates the countdown"
    );
    assert!(notices[0]
        .line()
        .starts_with("outage: every model is down (script/a: http_503); waiting up to "));
}

#[tokio::test(start_paused = true)]
async fn a_wait_never_probes_a_member_whose_own_budget_is_spent() {
    use crate::budget::{Period, Scope};
    let a = "- text: dear\n  cost: 2\n";
    let b = "- error: {status: 503}\n  repeat: 5\n- text: b is back\n";
    let mut run = setup(&[a, b])
        .budgets(vec![Budget {
            usd: 1.0,
            per: Period::Hour,
            scope: Scope::Model("script/a".into()),
        }])
        .outage_wait(MINUTE)
        .build();
    assert_eq!(run.spend_step(1).await.unwrap().spec, "script/a");
    let answer = run.spend_step(2).await.unwrap();
    assert_eq!(answer.response.text, "b is back");
    assert_eq!(run.calls(0), 1, "a is over its budget: never probed");
    assert_eq!(over(&run), Some(("script/b".into(), 3)));
}

#[tokio::test(start_paused = true)]
async fn a_pacing_reset_longer_than_the_interval_sets_the_next_try() {
    use crate::model::ratelimit::{RateLimits, Window};
    let script = "- error: {status: 503}\n  repeat: 3\n- text: back\n";
    let mut run = setup(&[script]).outage_wait(MINUTE).build();
    // Three requests left until 20 s from now: the turn's three attempts
    // spend them, and the wait's first probe finds the limit spent past
    // max_backoff (5 ms), so it moves on at once, sending nothing.
    run.chain.gate.hear(
        0,
        &RateLimits {
            requests: Some(Window {
                limit: Some(10),
                remaining: 3,
                reset: Duration::from_secs(20),
            }),
            tokens: None,
        },
    );
    let started = tokio::time::Instant::now();
    let answer = run.step(1).await.unwrap();
    assert_eq!(answer.response.text, "back");
    assert!(started.elapsed() >= Duration::from_secs(20));
    assert_eq!(run.calls(0), 4, "nothing sent while the limit was spent");
    // The paced-away try, then one after the reset: not a try every
    // backoff interval until then.
    assert_eq!(over(&run), Some(("script/a".into(), 2)));
}
