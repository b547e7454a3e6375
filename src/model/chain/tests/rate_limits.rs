//! Empty replies and rate limits against `switch_after` and the retry
//! budgets (SPEC 4 and 5).

use super::*;

#[tokio::test]
async fn empty_replies_count_toward_switch_after() {
    let empty = "- text: \"\"\n";
    let mut run = setup(&[empty, ANSWER]).switch_after(2).build();
    run.step(1).await.unwrap();
    assert_eq!(
        run.switches(),
        vec![switch(1, "a", "b", "empty_response", 2)]
    );
    assert_eq!(
        run.waits(),
        vec![0.0],
        "the first empty reply is retried at once"
    );
}

const LIMITED: &str = "- error: {status: 429}\n  repeat: 7\n- text: through\n";

#[tokio::test]
async fn a_lone_model_tries_a_rate_limit_up_to_rate_limit_attempts() {
    let mut run = setup(&[LIMITED]).build();
    let answer = run.step(1).await.unwrap();
    assert_eq!(answer.response.text, "through");
    assert_eq!(run.calls(0), 8, "attempts is 3, a 429 gets 8");
    let overloaded = "- error: {status: 529}\n  repeat: 7\n- text: through\n";
    let mut run = setup(&[overloaded]).build();
    assert!(run.step(1).await.is_ok(), "an overload too");
}

#[tokio::test]
async fn other_transient_failures_stop_after_attempts() {
    let dead = "- error: {status: 503}\n  repeat: 7\n- text: through\n";
    let mut run = setup(&[dead]).build();
    let Err(ChainError::Exhausted { attempts, .. }) = run.step(1).await else {
        panic!("a 503 gets attempts only")
    };
    assert_eq!(attempts, 3);
    // Rate limits, then a 503 past `attempts`: the 503 ends the turn.
    let mixed = "- error: {status: 429}\n  repeat: 3\n- error: {status: 503}\n- text: through\n";
    let mut run = setup(&[mixed]).build();
    assert!(run.step(1).await.is_err());
    assert_eq!(run.calls(0), 4);
}

#[tokio::test]
async fn rate_limit_tries_past_attempts_stop_at_the_budget() {
    // Waits of 1, 2, 4, 5, 5 ms (backoff doubled, capped at 5 ms): with a
    // 5 ms budget the tries beyond `attempts` (3) stop once the waits on
    // rate limits would pass it: 1 + 2 = 3, then + 4 = 7 > 5.
    let mut run = setup(&[LIMITED])
        .rate_limits(8, Duration::from_millis(5))
        .build();
    assert!(run.step(1).await.is_err());
    assert_eq!(run.calls(0), 3);
    let mut run = setup(&[LIMITED])
        .rate_limits(8, Duration::from_millis(12))
        .build();
    assert!(run.step(1).await.is_err());
    assert_eq!(
        run.calls(0),
        5,
        "1 + 2 + 4 + 5 = 12 ms: a fourth and fifth try"
    );
}

#[tokio::test]
async fn rate_limit_attempts_never_fewer_than_attempts_and_not_for_a_chain_s_early_members() {
    let mut run = setup(&[LIMITED])
        .rate_limits(1, Duration::from_secs(120))
        .build();
    assert!(run.step(1).await.is_err());
    assert_eq!(run.calls(0), 3, "attempts still applies");
    // In a chain, switch_after moves the first member on after 3 of any kind;
    // the last member gets the larger budget.
    let mut run = setup(&[LIMITED, LIMITED]).build();
    let answer = run.step(1).await.unwrap();
    assert_eq!((run.calls(0), run.calls(1)), (3, 8));
    assert_eq!(answer.spec, "script/b");
}
