//! `OutageStore` on Redis: a hash per key under `tinyagent:outage:`
//! (`failures`, `next_probe_at`, `updated_at`), one Lua script per call,
//! each reading the model's health hash for its last success (a hash
//! written before it reads as empty) and, for the lease, writing the same
//! `lease` field `try_lease` does. Records expire on their own an hour
//! after the probe they schedule.

use redis::Script;

use super::super::outage::{OutageRecord, OutageStore};
use super::super::{HealthKey, Millis, StoreError};
use super::{RedisStore, KEEP_AFTER};

/// Key prefix of every outage record.
const PREFIX: &str = "tinyagent:outage:";

/// Shared head of every script: `fresh` (the hash is newer than the
/// model's last success), `failures` and `next` (nil when none).
/// KEYS: outage hash, health hash.
const HEAD: &str = r#"
local updated = tonumber(redis.call('HGET', KEYS[1], 'updated_at'))
local success = tonumber(redis.call('HGET', KEYS[2], 'last_success_at'))
local fresh = updated ~= nil and (success == nil or success < updated)
local failures, next = 0, nil
if fresh then
  failures = tonumber(redis.call('HGET', KEYS[1], 'failures')) or 0
  next = tonumber(redis.call('HGET', KEYS[1], 'next_probe_at'))
end
local function write(now, keep)
  redis.call('HSET', KEYS[1], 'failures', failures, 'updated_at', now)
  if next then
    redis.call('HSET', KEYS[1], 'next_probe_at', next)
  else
    redis.call('HDEL', KEYS[1], 'next_probe_at')
  end
  local ttl = keep
  if next then ttl = math.max(next - tonumber(now), 0) + keep end
  redis.call('PEXPIRE', KEYS[1], ttl)
end
"#;

/// Returns `{failures, next_probe_at or -1}`.
const READ: &str = r#"
return {failures, next or -1}
"#;

/// ARGV: now, keep. Returns the failures, this one included.
const FAILED: &str = r#"
failures = failures + 1
write(ARGV[1], tonumber(ARGV[2]))
return failures
"#;

/// ARGV: at, now, replace (1 or 0), keep. Returns the time held.
const SCHEDULE: &str = r#"
if ARGV[3] == '0' and next then return next end
next = tonumber(ARGV[1])
write(ARGV[2], tonumber(ARGV[4]))
return next
"#;

/// ARGV: holder, now, until, keep. Returns 1 when the holder took it.
const TAKE: &str = r#"
local now = tonumber(ARGV[2])
if not next or next > now then return 0 end
local held = redis.call('HGET', KEYS[2], 'lease')
if held then
  local sep = string.find(held, ':', 1, true)
  local holder = string.sub(held, 1, sep - 1)
  local ends = tonumber(string.sub(held, sep + 1))
  if holder ~= ARGV[1] and ends > now then return 0 end
end
redis.call('HSET', KEYS[2], 'lease', ARGV[1] .. ':' .. ARGV[3])
local keep = tonumber(ARGV[3]) - now + tonumber(ARGV[4])
if redis.call('PTTL', KEYS[2]) < keep then redis.call('PEXPIRE', KEYS[2], keep) end
return 1
"#;

impl RedisStore {
    /// Runs one outage script (`HEAD` then `body`) on `key`'s outage and
    /// health hashes.
    fn outage_eval(&self, body: &str, key: &HealthKey, args: &[String]) -> Result<i64, StoreError> {
        let (health, _) = Self::keys(key);
        let outage = format!("{PREFIX}{}|{}", key.model, key.endpoint);
        let script = Script::new(&format!("{HEAD}{body}"));
        self.eval(&script, &[&outage, &health], args)
    }
}

impl OutageStore for RedisStore {
    fn read_outage(&mut self, key: &HealthKey) -> Result<OutageRecord, StoreError> {
        let (health, _) = Self::keys(key);
        let outage = format!("{PREFIX}{}|{}", key.model, key.endpoint);
        let script = Script::new(&format!("{HEAD}{READ}"));
        let mut conn = self.conn.clone();
        let (failures, next): (i64, i64) = super::wait(&self.runtime, async move {
            script.key(outage).key(health).invoke_async(&mut conn).await
        })?;
        Ok(OutageRecord {
            failures: failures.clamp(0, u32::MAX as i64) as u32,
            next_probe_at: (next >= 0).then_some(next),
        })
    }

    fn count_failed_probe(&mut self, key: &HealthKey, now: Millis) -> Result<u32, StoreError> {
        let n = self.outage_eval(FAILED, key, &[now.to_string(), KEEP_AFTER.to_string()])?;
        Ok(n.clamp(0, u32::MAX as i64) as u32)
    }

    fn schedule_probe(
        &mut self,
        key: &HealthKey,
        at: Millis,
        now: Millis,
        replace: bool,
    ) -> Result<Millis, StoreError> {
        self.outage_eval(
            SCHEDULE,
            key,
            &[
                at.to_string(),
                now.to_string(),
                if replace { "1" } else { "0" }.to_string(),
                KEEP_AFTER.to_string(),
            ],
        )
    }

    fn take_due_probe(
        &mut self,
        key: &HealthKey,
        holder: u64,
        now: Millis,
        ttl: Millis,
    ) -> Result<bool, StoreError> {
        let taken = self.outage_eval(
            TAKE,
            key,
            &[
                holder.to_string(),
                now.to_string(),
                (now + ttl).to_string(),
                KEEP_AFTER.to_string(),
            ],
        )?;
        Ok(taken == 1)
    }
}
