//! The rules of declared and learned windows (SPEC 24) every store keeps:
//! the memory and SQLite stores through `WindowState`, Redis through its
//! Lua, on one store per rule set with a key per rule.

use super::super::pacing::windows::REFILL_LAG as LAG;
use super::super::pacing::{Ask, Dim, PaceKey, PaceSource, Reservation, Shortfall, Window};
use super::{pace_key, requests, Store};

const MIN: i64 = 60_000;

fn rpm(limit: u64) -> Window {
    Window {
        dim: Dim::Requests,
        limit,
        per_ms: MIN,
    }
}

fn ask<'a>(input: u64, output: u64, windows: &'a [Window]) -> Ask<'a> {
    Ask {
        input_tokens: input,
        output_tokens: output,
        windows,
        force: false,
    }
}

fn reserve(s: &mut dyn Store, k: &PaceKey, a: &Ask<'_>, now: i64) -> Reservation {
    s.reserve(k, a, now).unwrap().outcome
}

fn waits_until(r: Reservation) -> (i64, PaceSource) {
    match r {
        Reservation::Window(Shortfall {
            ready_at, source, ..
        }) => (ready_at, source),
        other => panic!("expected a window wait, got {other:?}"),
    }
}

/// A declared window starts full and refills evenly; a short one takes
/// nothing and says when it holds the need.
fn declared_requests(s: &mut dyn Store) {
    let k = pace_key("declared");
    let w = [rpm(3)];
    let a = ask(10, 10, &w);
    for now in [1_000, 1_001, 1_002] {
        assert_eq!(reserve(s, &k, &a, now), Reservation::Taken, "{now}");
    }
    let (ready, source) = waits_until(reserve(s, &k, &a, 1_003));
    assert_eq!(source, PaceSource::Declared);
    // One request refills in 20 s, counted from the take, the refill
    // trailing the clock by LAG.
    assert_eq!(ready, 21_000 + LAG);
    assert!(matches!(
        reserve(s, &k, &a, 20_999 + LAG),
        Reservation::Window(_)
    ));
    assert_eq!(reserve(s, &k, &a, 21_000 + LAG), Reservation::Taken);
    assert!(matches!(
        reserve(s, &k, &a, 21_001 + LAG),
        Reservation::Window(_)
    ));
}

/// Token windows: a need above what is held waits in proportion; a need
/// above the whole window goes when the window is full, and later ones
/// wait for what it overdrew; unused output comes back.
fn declared_tokens(s: &mut dyn Store) {
    let k = pace_key("tokens");
    let w = [Window {
        dim: Dim::InputTokens,
        limit: 1_000,
        per_ms: MIN,
    }];
    assert_eq!(reserve(s, &k, &ask(600, 0, &w), 0), Reservation::Taken);
    let (ready, _) = waits_until(reserve(s, &k, &ask(600, 0, &w), 0));
    assert_eq!(ready, 12_000 + LAG, "200 tokens at 1000/min");
    // Full again after a minute: a request of five windows goes.
    let full = MIN + LAG;
    assert_eq!(reserve(s, &k, &ask(5_000, 0, &w), full), Reservation::Taken);
    let (ready, _) = waits_until(reserve(s, &k, &ask(1, 0, &w), full));
    assert_eq!(
        ready,
        MIN + 60_060 + LAG,
        "it overdrew the window, by one window at most"
    );

    let k = pace_key("output");
    let w = [Window {
        dim: Dim::OutputTokens,
        limit: 1_000,
        per_ms: MIN,
    }];
    assert_eq!(reserve(s, &k, &ask(0, 800, &w), 0), Reservation::Taken);
    assert!(matches!(
        reserve(s, &k, &ask(0, 800, &w), 0),
        Reservation::Window(_)
    ));
    s.settle(&k, &w, 700, 0).unwrap();
    assert_eq!(reserve(s, &k, &ask(0, 800, &w), 0), Reservation::Taken);
}

/// Published counts and declared windows are both obeyed, and a short
/// window takes nothing off the published count.
fn both_sources(s: &mut dyn Store) {
    let k = pace_key("both");
    s.hear(&k, &requests(10, 2, 100_000), 0).unwrap();
    let w = [rpm(1)];
    assert_eq!(reserve(s, &k, &ask(0, 0, &w), 1), Reservation::Taken);
    assert!(matches!(
        reserve(s, &k, &ask(0, 0, &w), 2),
        Reservation::Window(_)
    ));
    // One published request is left, the window's refusal took none.
    assert_eq!(reserve(s, &k, &Ask::tokens(0), 3), Reservation::Taken);
    assert!(matches!(
        reserve(s, &k, &Ask::tokens(0), 4),
        Reservation::Short { .. }
    ));
    assert_eq!(
        s.refused(&k, 4, 5).unwrap(),
        None,
        "it publishes its limits"
    );
}

/// Learning: seven tenths of the last minute's sends (at least one), an
/// empty window, one change for refusals already in flight, growth by a
/// tenth after a full minute, forgotten after an hour.
fn learned(s: &mut dyn Store) {
    let k = pace_key("learned");
    let t = 1_000_000;
    for i in 0..29 {
        assert_eq!(
            reserve(s, &k, &Ask::tokens(1), t + i * 1_000),
            Reservation::Taken
        );
    }
    let refused_at = t + 28_500;
    assert_eq!(s.refused(&k, t + 28_000, refused_at).unwrap(), Some(20));
    assert_eq!(s.learned(&k, refused_at).unwrap(), Some(20));
    // Sent before it was learned: nothing new.
    assert_eq!(s.refused(&k, t + 27_000, refused_at + 10).unwrap(), None);
    // The window starts empty: one request in 3 s.
    let (ready, source) = waits_until(reserve(s, &k, &Ask::tokens(1), refused_at));
    assert_eq!(source, PaceSource::Learned);
    assert_eq!(ready, refused_at + 3_000 + LAG);
    // Sent at the limit for the whole minute: 19 requests.
    for i in 1..20 {
        let r = s
            .reserve(&k, &Ask::tokens(1), refused_at + i * 3_000 + LAG)
            .unwrap();
        assert_eq!(r.outcome, Reservation::Taken, "{i}");
        assert_eq!(r.grown, None);
    }
    let r = s.reserve(&k, &Ask::tokens(1), refused_at + MIN).unwrap();
    assert_eq!(r.grown, Some(22), "grown by a tenth");
    assert_eq!(s.learned(&k, refused_at + MIN).unwrap(), Some(22));
    // A quiet minute does not grow it.
    let r = s
        .reserve(&k, &Ask::tokens(1), refused_at + 2 * MIN + 1)
        .unwrap();
    assert_eq!(r.grown, None);
    // Another refusal sets it again from the last minute's sends (1 + 1).
    let again = refused_at + 2 * MIN + 2;
    assert_eq!(s.refused(&k, again - 1, again).unwrap(), Some(1), "floor 1");
    // Forgotten an hour after the last refusal.
    assert_eq!(s.learned(&k, again + 3_599_999).unwrap(), Some(1));
    assert_eq!(s.learned(&k, again + 3_600_000).unwrap(), None);
    assert_eq!(
        reserve(s, &k, &Ask::tokens(1), again + 3_600_000),
        Reservation::Taken
    );
    assert_eq!(s.learned(&k, again + 3_600_001).unwrap(), None);
}

/// A clock that jumps back or far ahead neither panics nor waits past a
/// whole window.
fn jumping_clock(s: &mut dyn Store) {
    let k = pace_key("clock");
    let w = [rpm(2)];
    for now in [5_000_000_000_000, 0, -5, i64::MAX / 4, 1_000] {
        match reserve(s, &k, &ask(1, 1, &w), now) {
            Reservation::Taken => {}
            Reservation::Window(short) => {
                assert!(short.ready_at - now <= MIN, "{now}: {short:?}")
            }
            other => panic!("{other:?}"),
        }
    }
    let _ = s.refused(&k, 0, -1_000).unwrap();
}

pub(super) fn all_rules(make: &dyn Fn() -> Box<dyn Store>) {
    let mut s = make();
    declared_requests(&mut *s);
    declared_tokens(&mut *s);
    both_sources(&mut *s);
    learned(&mut *s);
    jumping_clock(&mut *s);
}

/// Garbage someone wrote into a key's windows never fails a call: the
/// store reads it as a fresh state and goes on.
pub(super) fn hostile_windows(s: &mut dyn Store, write: &dyn Fn(&str)) {
    let k = pace_key("hostile");
    let w = [rpm(2)];
    for garbage in [
        "not json".to_string(),
        "[".repeat(100_000),
        r#"{"b":{"x":[1e999,"a"]},"l":["a",1,2,3,4],"s":[[1,2],"x",null]}"#.into(),
        r#"{"buckets":[["1:2:60000",{"level":-1e308,"at":-9e18}]],"learned":{"rpm":0}}"#.into(),
        r#"{"b":{"1:2:60000":[-1e300,9e300]},"l":[0,0,0,0,0],"s":{"a":1}}"#.into(),
    ] {
        write(&garbage);
        let now = 10_000_000;
        match reserve(s, &k, &ask(1, 1, &w), now) {
            Reservation::Taken => {}
            Reservation::Window(short) => assert!(short.ready_at - now <= 2 * MIN),
            other => panic!("{other:?}"),
        }
        let _ = s.refused(&k, now, now + 1).unwrap();
        let _ = s.learned(&k, now + 2).unwrap();
        s.settle(&k, &w, 5, now + 3).unwrap();
    }
}
