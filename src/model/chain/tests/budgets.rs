//! The budget rules of SPEC 19 in the chain: a spent budget of a member's
//! own skips it (`budget`) while a later member's budgets are not spent,
//! and halts the run when none is left; a spent fleet budget halts it;
//! members are probed back once their period rolls over. Scripted members
//! state their replies' costs; the clock starts 16 minutes into an hour.

use super::*;
use crate::budget::{Period, Scope};
use crate::model::gate::Halt;

const HOUR: i64 = 3_600_000;

/// A reply that costs `usd`.
fn costing(usd: &str) -> &'static str {
    Box::leak(format!("- text: done\n  cost: {usd}\n").into_boxed_str())
}

fn hourly(usd: f64, scope: Scope) -> Budget {
    Budget {
        usd,
        per: Period::Hour,
        scope,
    }
}

fn model(name: &str) -> Scope {
    Scope::Model(format!("script/{name}"))
}

/// The halt's budgets, as `(key, spent in USD)`.
fn halted(result: Result<Answer, ChainError>) -> Vec<(String, f64)> {
    match result {
        Err(ChainError::Halted(Halt::Budget(spent))) => spent
            .0
            .iter()
            .map(|s| (s.budget.key(), crate::budget::usd(s.spent)))
            .collect(),
        other => panic!("not halted: {other:?}"),
    }
}

#[tokio::test]
async fn a_member_over_its_budget_is_skipped_after_the_reply_that_crossed_it() {
    let mut run = setup(&[costing("0.4"), costing("0.1")])
        .budgets(vec![hourly(1.0, model("a"))])
        .build();
    for step in 1..=3 {
        // 0.4, 0.8, then 1.2: the reply that crosses the cap is used.
        assert_eq!(run.spend_step(step).await.unwrap().spec, "script/a");
    }
    assert_eq!(run.spend_step(4).await.unwrap().spec, "script/b");
    assert_eq!(run.calls(0), 3, "nothing sent once spent");
    assert_eq!(run.switches(), vec![switch(4, "a", "b", "budget", 0)]);
    // Stays on b; a is not probed while its budget is spent.
    run.spend_step(5).await.unwrap();
    assert_eq!((run.calls(0), run.calls(1)), (3, 2));
    assert!(
        !run.cooling_for_others("a"),
        "a budget skip is not a health fact"
    );
}

#[tokio::test]
async fn a_member_is_probed_back_once_its_period_rolled_over() {
    let mut run = setup(&[costing("2"), costing("0.1")])
        .budgets(vec![hourly(1.0, model("a"))])
        .build();
    run.spend_step(1).await.unwrap();
    assert_eq!(run.spend_step(2).await.unwrap().spec, "script/b");
    run.advance(HOUR);
    let answer = run.spend_step(3).await.unwrap();
    assert_eq!(answer.spec, "script/a", "a new hour, a new budget");
    assert_eq!(
        run.restores(),
        vec![(3, "script/b".into(), "script/a".into())]
    );
}

#[tokio::test]
async fn a_spent_fleet_budget_halts_before_any_request() {
    let mut run = setup(&[costing("0.6"), costing("0.1")])
        .budgets(vec![hourly(1.0, Scope::Fleet)])
        .build();
    run.spend_step(1).await.unwrap();
    run.spend_step(2).await.unwrap();
    assert_eq!(halted(run.spend_step(3).await), [("hour".to_string(), 1.2)]);
    assert_eq!((run.calls(0), run.calls(1)), (2, 0));
    assert!(run.switches().is_empty(), "a halt is not a switch");
}

#[tokio::test]
async fn every_member_over_its_budget_halts_naming_each() {
    let mut run = setup(&[costing("0.6"), costing("0.6")])
        .budgets(vec![
            hourly(0.5, model("a")),
            hourly(0.5, model("b")),
            hourly(100.0, Scope::Fleet),
        ])
        .build();
    run.spend_step(1).await.unwrap();
    assert_eq!(run.spend_step(2).await.unwrap().spec, "script/b");
    assert_eq!(
        halted(run.spend_step(3).await),
        [
            ("hour model=script/b".to_string(), 0.6),
            ("hour model=script/a".to_string(), 0.6)
        ]
    );
    assert_eq!((run.calls(0), run.calls(1)), (1, 1));
}

#[tokio::test]
async fn a_provider_budget_covers_every_member_of_the_provider() {
    let mut run = setup(&[costing("0.6"), costing("0.6")])
        .budgets(vec![hourly(0.5, Scope::Provider("script".into()))])
        .build();
    run.spend_step(1).await.unwrap();
    assert_eq!(
        halted(run.spend_step(2).await),
        [("hour provider=script".to_string(), 0.6)]
    );
    assert_eq!(run.calls(1), 0);
}

#[tokio::test]
async fn a_switch_for_a_failure_passes_over_a_member_over_its_budget() {
    let mut run = setup(&[DEAD, costing("0.1"), costing("0.1")])
        .switch_after(1)
        .budgets(vec![hourly(0.0, model("b"))])
        .build();
    assert_eq!(run.spend_step(1).await.unwrap().spec, "script/c");
    assert_eq!(run.calls(1), 0);
    assert_eq!(run.switches(), vec![switch(1, "a", "c", "http_503", 1)]);
}

#[tokio::test]
async fn a_cooling_member_is_asked_when_every_later_one_is_over_budget() {
    let mut run = setup(&[costing("0.1"), costing("0.1")])
        .budgets(vec![hourly(0.0, model("b"))])
        .build();
    other_run(&run.store, &run.clock, TEN_S).left(&key("a"), "http_503");
    assert_eq!(run.spend_step(1).await.unwrap().spec, "script/a");
    assert!(run.switches().is_empty());
}

#[tokio::test]
async fn without_the_shared_record_the_run_counts_its_own_spend() {
    let mut run = setup(&[costing("0.6")])
        .no_health()
        .budgets(vec![hourly(1.0, Scope::Fleet)])
        .build();
    run.spend_step(1).await.unwrap();
    run.spend_step(2).await.unwrap();
    assert_eq!(halted(run.spend_step(3).await), [("hour".to_string(), 1.2)]);
    assert_eq!(run.calls(0), 2);
}

#[tokio::test]
async fn runs_sharing_the_record_share_the_spend() {
    let first = setup(&[costing("0.6")]).budgets(vec![hourly(1.0, Scope::Fleet)]);
    let (store, clock) = (first.store.clone(), first.clock.clone());
    let mut first = first.build();
    first.spend_step(1).await.unwrap();
    let mut second = setup(&[costing("0.6")])
        .budgets(vec![hourly(2.0, Scope::Fleet)])
        .on(store, clock)
        .build();
    second.spend_step(1).await.unwrap();
    // 1.2 spent by two runs: the first's cap is reached, the second's not.
    assert!(first.spend_step(2).await.is_err());
    second.spend_step(2).await.unwrap();
    second.spend_step(3).await.unwrap();
    assert!(second.spend_step(4).await.is_err(), "1.8 + 0.6 crossed 2");
}
