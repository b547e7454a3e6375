//! The bucket arithmetic and the learn, grow and forget rules on a fake
//! clock (the stores are held to the same rules in `store_tests`).

use super::*;

fn w(limit: u64, per_ms: Millis) -> Window {
    Window {
        dim: Dim::Requests,
        limit,
        per_ms,
    }
}

#[test]
fn a_bucket_refills_evenly_and_never_past_its_limit() {
    let win = w(60, 60_000);
    let mut b = Bucket { level: 0.0, at: 0 };
    // The refill trails the clock by REFILL_LAG.
    b.refill(&win, 30_000 + REFILL_LAG);
    assert_eq!((b.level, b.at), (30.0, 30_000));
    b.refill(&win, 10_000_000);
    assert_eq!(b.level, 60.0);
    assert_eq!(b.ready_at(&win, 1), None);
    b.level = -0.5;
    let at = b.at;
    assert_eq!(b.ready_at(&win, 1), Some(at + 1_500 + REFILL_LAG));
    assert_eq!(
        b.ready_at(&win, 1_000),
        Some(at + 60_500 + REFILL_LAG),
        "a whole window at most"
    );
}

#[test]
fn a_clock_that_goes_back_keeps_the_level() {
    let win = w(10, 60_000);
    let mut b = Bucket {
        level: 5.0,
        at: 100_000,
    };
    b.refill(&win, 90_000);
    assert_eq!((b.level, b.at), (5.0, 100_000));
    b.refill(&win, REFILL_LAG);
    assert_eq!(
        (b.level, b.at),
        (5.0, 0),
        "further than a window: restarts there"
    );
    b.level = f64::NAN;
    b.refill(&win, 1);
    assert_eq!(b.level, 10.0);
}

#[test]
fn windows_print_as_the_human_line_names_them() {
    assert_eq!(w(8, 60_000).to_string(), "8 requests/min");
    let t = Window {
        dim: Dim::InputTokens,
        limit: 200_000,
        per_ms: 3_600_000,
    };
    assert_eq!(t.to_string(), "200000 input tokens/h");
}

#[test]
fn the_state_reads_garbage_as_fresh_and_stays_bounded() {
    assert_eq!(WindowState::parse("not json"), WindowState::default());
    assert_eq!(
        WindowState::parse(&"[".repeat(100_000)),
        WindowState::default()
    );
    let many: Vec<String> = (0..500)
        .map(|i| format!("[\"{i}\",{{\"level\":1.0,\"at\":0}}]"))
        .collect();
    let sends: Vec<String> = (0..500).map(|i| format!("[{i},1]")).collect();
    let text = format!(
        "{{\"buckets\":[{}],\"sends\":[{}]}}",
        many.join(","),
        sends.join(",")
    );
    let s = WindowState::parse(&text);
    assert_eq!(s.buckets.len(), MAX_BUCKETS);
    assert!(s.sends.0.len() <= 120);
    let round = WindowState::parse(&s.text());
    assert_eq!(round, s);
}

#[test]
fn learning_takes_seven_tenths_and_floors_at_one() {
    let mut s = WindowState::default();
    assert_eq!(s.refused(0, 1_000), Some(1), "nothing sent: one a minute");
    let mut s = WindowState::default();
    // Sends older than a minute do not count.
    s.take(&Ask::tokens(1), 10_000);
    for i in 0..10 {
        s.take(&Ask::tokens(1), 100_000 + i * 100);
    }
    assert_eq!(s.refused(101_000, 101_000), Some(7));
    assert!(s.short(&Ask::tokens(1), 101_000).is_some(), "starts empty");
}

#[test]
fn growth_counts_whole_minutes_from_the_change() {
    let mut s = WindowState::default();
    for i in 0..15 {
        s.take(&Ask::tokens(1), i * 10);
    }
    assert_eq!(s.refused(200, 200), Some(10));
    // Nine sends in the first minute: 9/10 of 10, grown by one.
    for i in 1..10 {
        assert_eq!(s.tick(200 + i * 6_000), None);
        s.take(&Ask::tokens(1), 200 + i * 6_000);
    }
    assert_eq!(s.tick(60_199), None, "the minute is not over");
    assert_eq!(s.tick(60_200), Some(11));
    // Eight sends the next minute: under 9/10 of 11, no growth.
    for i in 1..9 {
        s.take(&Ask::tokens(1), 60_200 + i * 6_000);
    }
    assert_eq!(s.tick(120_200), None);
    // A long silence skips ahead without looping minute by minute.
    assert_eq!(s.tick(120_200 + 50 * 60_000 + 5), None);
    assert_eq!(s.learned.unwrap().minute_start, 120_200 + 50 * 60_000);
    // Forgotten an hour after the refusal.
    assert_eq!(s.tick(3_600_200), None);
    assert!(s.learned.is_none());
    assert!(s.buckets.iter().all(|(id, _)| id != LEARNED_ID));
}
