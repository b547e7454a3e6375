//! `LatencyStore` in Redis: one list per model
//! (`tinyagent:first_events:<model>|<endpoint>`), the newest time pushed
//! in front and the list trimmed to `KEPT_FIRST_EVENTS` by one Lua script,
//! expiring a week after its last write. A read is one `LRANGE`.

use std::sync::LazyLock;

use redis::Script;

use super::super::latency::{LatencyStore, KEPT_FIRST_EVENTS};
use super::super::{HealthKey, Millis, StoreError};
use super::{wait, RedisStore};

/// Key prefix of every first-event list.
const PREFIX: &str = "tinyagent:first_events:";
/// How long a list outlives its last write.
const KEEP_AFTER_MS: u64 = 7 * 24 * 3_600_000;

/// Pushes ARGV[1], keeps ARGV[2] entries, expires after ARGV[3] ms.
static PUSH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"#,
    )
});

fn key(key: &HealthKey) -> String {
    format!("{PREFIX}{}|{}", key.model, key.endpoint)
}

impl LatencyStore for RedisStore {
    fn record_first_event(
        &mut self,
        health_key: &HealthKey,
        ms: u64,
        _now: Millis,
    ) -> Result<(), StoreError> {
        let list = key(health_key);
        let script = PUSH.clone();
        let mut conn = self.conn.clone();
        wait(&self.runtime, async move {
            script
                .prepare_invoke()
                .key(&list)
                .arg(ms)
                .arg(KEPT_FIRST_EVENTS)
                .arg(KEEP_AFTER_MS)
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .map(|_| ())
    }

    fn first_events(&mut self, health_key: &HealthKey) -> Result<Vec<u64>, StoreError> {
        let list = key(health_key);
        let mut conn = self.conn.clone();
        wait(&self.runtime, async move {
            redis::cmd("LRANGE")
                .arg(&list)
                .arg(0)
                .arg(KEPT_FIRST_EVENTS as i64 - 1)
                .query_async::<Vec<u64>>(&mut conn)
                .await
        })
    }
}
