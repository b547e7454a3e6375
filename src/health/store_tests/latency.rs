//! The first-event record's rule, for every store: the last
//! `KEPT_FIRST_EVENTS` times per key, and nothing of another key's.

use super::super::{LatencyStore, Store, KEPT_FIRST_EVENTS};
use super::{key, other};

pub(super) fn first_events_keep_the_last_fifty(s: &mut dyn Store) {
    assert!(s.first_events(&key()).unwrap().is_empty());
    for ms in 0..60u64 {
        s.record_first_event(&key(), ms, 1_000 + ms as i64).unwrap();
    }
    let mut kept = s.first_events(&key()).unwrap();
    kept.sort_unstable();
    assert_eq!(kept.len(), KEPT_FIRST_EVENTS);
    assert_eq!(kept, (10..60).collect::<Vec<u64>>(), "the newest are kept");
    assert!(
        s.first_events(&other()).unwrap().is_empty(),
        "keys differ by endpoint"
    );
}

#[test]
fn a_fleet_on_one_file_learns_first_events_together() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("health.db");
    let mut one = super::SqliteStore::open(&path).unwrap();
    let mut two = super::SqliteStore::open(&path).unwrap();
    one.record_first_event(&key(), 300, 1).unwrap();
    two.record_first_event(&key(), 500, 2).unwrap();
    let mut seen = one.first_events(&key()).unwrap();
    seen.sort_unstable();
    assert_eq!(seen, [300, 500]);
}
