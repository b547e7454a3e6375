//! The shared record (SPEC 13): what other runs wrote skips, strikes and
//! probes members of this run's chain.

use super::*;

#[tokio::test]
async fn another_runs_record_is_a_cooldown_switch_without_a_request() {
    let mut run = setup(&[DEAD, ANSWER]).build();
    other_run(&run.store, &run.clock, TEN_S).left(&key("a"), "http_503");
    let answer = run.step(1).await.unwrap();
    assert_eq!(answer.spec, "script/b");
    assert_eq!(run.calls(0), 0);
    assert_eq!(run.switches(), vec![switch(1, "a", "b", "cooldown", 0)]);
    // The skip renewed nothing: once the other run's cooldown ends, a is
    // probed at the next step boundary.
    run.advance(10_000);
    run.step(2).await.unwrap();
    assert_eq!(run.calls(0), 1);
}

#[tokio::test]
async fn a_record_written_during_the_retry_loop_skips_with_the_requests_made() {
    let store: Shared = Arc::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let other = other_run(&store, &clock, TEN_S);
    let mut s = setup(&[DEAD, ANSWER]).hook(0, move |n| {
        if n == 2 {
            other.left(&key("a"), "http_503");
        }
    });
    s.store = store;
    s.clock = clock;
    let mut run = s.build();
    run.step(1).await.unwrap();
    assert_eq!(run.switches(), vec![switch(1, "a", "b", "cooldown", 2)]);
}

#[tokio::test]
async fn a_failed_probe_of_another_runs_record_moves_on_at_once() {
    let mut run = setup(&[DEAD, ANSWER]).build();
    other_run(&run.store, &run.clock, TEN_S).left(&key("a"), "http_503");
    run.advance(10_000);
    run.step(1).await.unwrap();
    assert_eq!(run.switches(), vec![switch(1, "a", "b", "http_503", 1)]);
    assert!(run.cooling_for_others("a"), "renewed for everyone");
}

#[tokio::test]
async fn a_run_without_a_chain_never_skips_for_the_record() {
    let mut run = setup(&["- error: {status: 503}\n- text: fine\n"]).build();
    other_run(&run.store, &run.clock, TEN_S).left(&key("a"), "http_503");
    let answer = run.step(1).await.unwrap();
    assert_eq!(answer.response.text, "fine");
    assert_eq!(run.calls(0), 2);
    assert!(
        !run.cooling_for_others("a"),
        "its success cleared the record"
    );
}

#[tokio::test]
async fn strikes_of_another_run_add_up_to_a_skip() {
    let mut run = setup(&[DEAD, ANSWER]).switch_after(3).build();
    let other = other_run(&run.store, &run.clock, TEN_S);
    other.strike(&key("a"), "http_503");
    other.strike(&key("a"), "http_503");
    run.step(1).await.unwrap();
    // This run's first failure is the third strike: the record is now
    // cooling, and not this run's alone, so it moves on before its budget.
    assert_eq!(run.switches(), vec![switch(1, "a", "b", "cooldown", 1)]);
}

#[tokio::test]
async fn a_success_of_another_run_lets_a_left_member_be_probed_early() {
    let mut run = setup(&[DEAD, ANSWER]).switch_after(1).build();
    run.step(1).await.unwrap();
    run.advance(1_000);
    other_run(&run.store, &run.clock, TEN_S).success(&key("a"));
    run.step(2).await.unwrap();
    assert_eq!(run.calls(0), 2, "probed before its own cooldown ended");
}
