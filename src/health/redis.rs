//! The health record in a Redis server a fleet shares (`health_db:
//! redis://…`): the same rules as the SQLite file, with Redis TTLs so
//! records expire on their own, one Lua script per call so each call is one
//! atomic round trip, and a 200 ms bound on every operation.
//!
//! The `redis` crate is async; the `HealthStore` interface is called from
//! the retry loop between requests and answers at once. So the store runs
//! its connection on a small runtime of its own (one thread) and each call
//! waits at most `OP_TIMEOUT` for its answer: a slow or dead Redis costs
//! the caller that long once, then the run goes on without the record.
//! The outage record (SPEC 18), spend per budget and period (SPEC 19) and
//! the first-event times (SPEC 23) have keys and scripts of their own
//! (`redis/outage.rs`, `redis/budget.rs`, `redis/latency.rs`).

mod budget;
mod latency;
mod outage;

use std::sync::mpsc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Script};

use super::{HealthKey, HealthStore, Lease, Millis, Record, StoreError, MAX_STRIKES};

mod pace_windows;
mod pacing;

/// The longest one operation may take, connecting included (SPEC 13).
pub(super) const OP_TIMEOUT: Duration = Duration::from_millis(200);
/// How long a record outlives its last write: a cooling record must last
/// through its cooldown and the hour its probe may come in.
const KEEP_AFTER: Millis = 3_600_000;
/// Key prefix of every record.
const PREFIX: &str = "tinyagent:health:";

/// Adds a strike: drops strikes out of the window, adds this one, keeps at
/// most MAX, renews the TTLs; returns the strikes in the window.
/// KEYS: record hash, strikes zset. ARGV: now, window, reason, member, max, keep.
const STRIKE: &str = r#"
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]))
redis.call('ZADD', KEYS[2], now, ARGV[4])
local n = redis.call('ZCARD', KEYS[2])
local max = tonumber(ARGV[5])
if n > max then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - max - 1)
  n = max
end
redis.call('HSET', KEYS[1], 'last_reason', ARGV[3], 'updated_at', now)
local keep = tonumber(ARGV[2]) + tonumber(ARGV[6])
for _, k in ipairs(KEYS) do
  if redis.call('PTTL', k) < keep then redis.call('PEXPIRE', k, keep) end
end
return n
"#;

/// Clears strikes, cooling and lease after a success (no write when clean).
/// KEYS: record hash, strikes zset. ARGV: now, keep.
const SUCCESS: &str = r#"
local dirty = redis.call('EXISTS', KEYS[2]) == 1
  or redis.call('HEXISTS', KEYS[1], 'cooling_until') == 1
  or redis.call('HEXISTS', KEYS[1], 'lease') == 1
if not dirty then return 0 end
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[1], 'cooling_until', 'lease')
redis.call('HSET', KEYS[1], 'last_success_at', ARGV[1], 'updated_at', ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"#;

/// Records cooling until ARGV[2]; ends the probe lease when it is the
/// writer's (ARGV[5]) or expired, never another run's live one.
/// KEYS: record hash. ARGV: now, until, reason, keep, holder.
const COOLING: &str = r#"
redis.call('HSET', KEYS[1], 'cooling_until', ARGV[2], 'last_reason', ARGV[3], 'updated_at', ARGV[1])
local held = redis.call('HGET', KEYS[1], 'lease')
if held then
  local sep = string.find(held, ':', 1, true)
  local holder = string.sub(held, 1, sep - 1)
  local ends = tonumber(string.sub(held, sep + 1))
  if holder == ARGV[5] or ends <= tonumber(ARGV[1]) then redis.call('HDEL', KEYS[1], 'lease') end
end
local keep = math.max(tonumber(ARGV[2]) - tonumber(ARGV[1]), 0) + tonumber(ARGV[4])
if redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
return 1
"#;

/// Takes the probe lease unless another holder's is still live.
/// KEYS: record hash. ARGV: holder, now, until, keep.
const LEASE: &str = r#"
local held = redis.call('HGET', KEYS[1], 'lease')
if held then
  local sep = string.find(held, ':', 1, true)
  local holder = string.sub(held, 1, sep - 1)
  local ends = tonumber(string.sub(held, sep + 1))
  if holder ~= ARGV[1] and ends > tonumber(ARGV[2]) then return 0 end
end
redis.call('HSET', KEYS[1], 'lease', ARGV[1] .. ':' .. ARGV[3])
local keep = tonumber(ARGV[3]) - tonumber(ARGV[2]) + tonumber(ARGV[4])
if redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
return 1
"#;

/// A Redis URL with its password hidden, for messages and labels.
pub(super) fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        Err(_) => "redis://(unparsable URL)".to_string(),
    }
}

/// The Redis implementation of `HealthStore`.
pub struct RedisStore {
    conn: MultiplexedConnection,
    /// The store's own runtime, driving the connection on its own thread.
    runtime: tokio::runtime::Handle,
    /// Dropped with the store: ends the runtime's thread.
    _stop: tokio::sync::oneshot::Sender<()>,
    scripts: Scripts,
}

struct Scripts {
    strike: Script,
    success: Script,
    cooling: Script,
    lease: Script,
    pace_reserve: Script,
    pace_hear: Script,
    pace_give_back: Script,
    pace_settle: Script,
    pace_refused: Script,
    pace_learned: Script,
}

/// Why a store could not be made or used, never holding the password.
fn fail(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("{what}: {e}"))
}

impl RedisStore {
    /// Connects to `url` (`redis://` or `rediss://`), taking the password
    /// from `password` when the URL has none. Bounded by `OP_TIMEOUT`.
    pub fn connect(url: &str, password: Option<String>) -> Result<RedisStore, StoreError> {
        let mut info = redis::IntoConnectionInfo::into_connection_info(url).map_err(|_| {
            StoreError("not a Redis URL (redis://[user:password@]host:port/db)".into())
        })?;
        if let Some(password) = password.filter(|p| !p.is_empty()) {
            if info.redis_settings().password().is_none() {
                let settings = info.redis_settings().clone().set_password(password);
                info = info.set_redis_settings(settings);
            }
        }
        let client = redis::Client::open(info).map_err(|e| fail("cannot use", e))?;
        let (runtime, stop) = spawn_runtime()?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(OP_TIMEOUT))
            .set_response_timeout(Some(OP_TIMEOUT));
        let conn = wait(&runtime, async move {
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            // A wrong password or an unreachable server shows here, once.
            redis::cmd("PING").query_async::<String>(&mut conn).await?;
            Ok(conn)
        })?;
        Ok(RedisStore {
            conn,
            runtime,
            _stop: stop,
            scripts: Scripts {
                strike: Script::new(STRIKE),
                success: Script::new(SUCCESS),
                cooling: Script::new(COOLING),
                lease: Script::new(LEASE),
                pace_reserve: Script::new(&pacing::reserve_script()),
                pace_hear: Script::new(pacing::HEAR),
                pace_give_back: Script::new(pacing::GIVE_BACK),
                pace_settle: Script::new(&pacing::with_prelude(pace_windows::SETTLE)),
                pace_refused: Script::new(&pacing::with_prelude(pace_windows::REFUSED)),
                pace_learned: Script::new(&pacing::with_prelude(pace_windows::LEARNED)),
            },
        })
    }

    fn keys(key: &HealthKey) -> (String, String) {
        let base = format!("{PREFIX}{}|{}", key.model, key.endpoint);
        (base.clone(), format!("{base}:strikes"))
    }

    /// Runs `script` with `keys` and `args` as one round trip.
    fn eval<T: redis::FromRedisValue + Send + 'static>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[String],
    ) -> Result<T, StoreError> {
        let script = script.clone();
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let args = args.to_vec();
        let mut conn = self.conn.clone();
        wait(&self.runtime, async move {
            let mut invocation = script.prepare_invoke();
            for k in &keys {
                invocation.key(k);
            }
            for a in &args {
                invocation.arg(a);
            }
            invocation.invoke_async::<T>(&mut conn).await
        })
    }
}

/// A current-thread runtime on a thread of its own, alive until the
/// returned sender is dropped.
fn spawn_runtime() -> Result<(tokio::runtime::Handle, tokio::sync::oneshot::Sender<()>), StoreError>
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail("cannot start", e))?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("tinyagent-redis".into())
        .spawn(move || {
            let _ = runtime.block_on(stopped);
        })
        .map_err(|e| fail("cannot start", e))?;
    Ok((handle, stop))
}

/// Runs `work` on the store's runtime and waits at most `OP_TIMEOUT` (plus
/// a little for the hand-over) for its answer.
fn wait<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    work: impl std::future::Future<Output = redis::RedisResult<T>> + Send + 'static,
) -> Result<T, StoreError> {
    let (tx, rx) = mpsc::sync_channel(1);
    runtime.spawn(async move {
        let outcome = tokio::time::timeout(OP_TIMEOUT, work).await;
        let _ = tx.send(outcome);
    });
    match rx.recv_timeout(OP_TIMEOUT + Duration::from_millis(20)) {
        Ok(Ok(Ok(value))) => Ok(value),
        Ok(Ok(Err(e))) => Err(describe(&e)),
        Ok(Err(_)) | Err(_) => Err(StoreError(format!(
            "no answer within {} ms",
            OP_TIMEOUT.as_millis()
        ))),
    }
}

/// A short description of a Redis error (the crate's messages never hold
/// the password; they may hold the server's own words).
fn describe(e: &redis::RedisError) -> StoreError {
    if e.is_timeout() {
        return StoreError(format!("no answer within {} ms", OP_TIMEOUT.as_millis()));
    }
    if e.is_connection_refusal() {
        return StoreError("connection refused".into());
    }
    match e.kind() {
        redis::ErrorKind::AuthenticationFailed => {
            StoreError("the server refused the password".into())
        }
        _ => {
            let text = e.to_string();
            if text.contains("NOAUTH") || text.contains("WRONGPASS") {
                StoreError("the server refused the password".into())
            } else {
                StoreError(text.chars().take(200).collect())
            }
        }
    }
}

impl HealthStore for RedisStore {
    fn read(&mut self, key: &HealthKey) -> Result<Record, StoreError> {
        let (hash, _) = Self::keys(key);
        let mut conn = self.conn.clone();
        let fields: (Option<Millis>, Option<Millis>, Option<String>) =
            wait(&self.runtime, async move {
                redis::cmd("HMGET")
                    .arg(&hash)
                    .arg("cooling_until")
                    .arg("last_success_at")
                    .arg("lease")
                    .query_async(&mut conn)
                    .await
            })?;
        let lease = fields.2.as_deref().and_then(|held| {
            let (holder, until) = held.split_once(':')?;
            Some(Lease {
                holder: holder.parse().ok()?,
                until: until.parse().ok()?,
            })
        });
        Ok(Record {
            cooling_until: fields.0,
            last_success_at: fields.1,
            lease,
        })
    }

    fn record_strike(
        &mut self,
        key: &HealthKey,
        reason: &str,
        now: Millis,
        window: Millis,
    ) -> Result<u32, StoreError> {
        let (hash, strikes) = Self::keys(key);
        let member = format!("{now}-{:016x}", fastrand::u64(..));
        let n: i64 = self.eval(
            &self.scripts.strike,
            &[&hash, &strikes],
            &[
                now.to_string(),
                window.to_string(),
                reason.to_string(),
                member,
                MAX_STRIKES.to_string(),
                KEEP_AFTER.to_string(),
            ],
        )?;
        Ok(n.max(0) as u32)
    }

    fn record_success(&mut self, key: &HealthKey, now: Millis) -> Result<(), StoreError> {
        let (hash, strikes) = Self::keys(key);
        let _: i64 = self.eval(
            &self.scripts.success,
            &[&hash, &strikes],
            &[now.to_string(), KEEP_AFTER.to_string()],
        )?;
        Ok(())
    }

    fn mark_cooling(
        &mut self,
        key: &HealthKey,
        until: Millis,
        reason: &str,
        now: Millis,
        holder: u64,
    ) -> Result<(), StoreError> {
        let (hash, _) = Self::keys(key);
        let _: i64 = self.eval(
            &self.scripts.cooling,
            &[&hash],
            &[
                now.to_string(),
                until.to_string(),
                reason.to_string(),
                KEEP_AFTER.to_string(),
                holder.to_string(),
            ],
        )?;
        Ok(())
    }

    fn try_lease(
        &mut self,
        key: &HealthKey,
        holder: u64,
        now: Millis,
        ttl: Millis,
    ) -> Result<bool, StoreError> {
        let (hash, _) = Self::keys(key);
        let taken: i64 = self.eval(
            &self.scripts.lease,
            &[&hash],
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
