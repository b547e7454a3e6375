//! The pacing records (SPEC 17, 24) in Redis: one hash per model, endpoint
//! and key fingerprint under `tinyagent:pace:`, each operation one Lua
//! script (one atomic round trip) that follows `PaceRecord`'s rules (and
//! `WindowState`'s, `pace_windows.rs`), and a TTL that outlives the
//! record's furthest reset by an hour (its windows by their period and an
//! hour).
//!
//! Fields: `rl`, `rr`, `rt` (the requests' limit, remaining, reset time in
//! unix ms) and `tl`, `tr`, `tt` (the tokens'); a count is there when its
//! remaining is, and a count without a reset started again at its reset
//! and awaits its first response.

use super::pace_windows::{PRELUDE, RESERVE_WINDOWS, TICK};
use super::RedisStore;
use crate::health::pacing::{
    Ask, Dim, Heard, PaceKey, PaceLimit, PaceSource, PacingStore, Published, Reservation, Reserved,
    Shortfall, Window,
};
use crate::health::{Millis, StoreError};

/// How long a record outlives its furthest reset (its limits stay known).
const KEEP_AFTER: Millis = 3_600_000;
/// Key prefix of every pacing record.
const PREFIX: &str = "tinyagent:pace:";

/// `pacing::reserve` after the prelude (`pace_windows.rs`). KEYS: the
/// record hash. ARGV: now, input tokens, output tokens, the declared
/// windows (count, then dim, limit, per for each). Returns `{1, grown}`
/// when taken; `{0, limit (1 requests, 2 tokens), reset_at or -1, grown}`
/// for a short published count; `{2, dim, limit, per, source (2 declared,
/// 3 learned), ready_at, grown}` for a short window (`grown`: the learned
/// limit when it grew, else -1).
pub(super) const RESERVE: &str = r#"
local need = tonumber(ARGV[2])
load()
%TICK%
local function int(x) return string.format('%d', x) end
local f = redis.call('HMGET', KEYS[1], 'rl', 'rr', 'rt', 'tl', 'tr', 'tt')
-- The count at now: as is before its reset; after it, started again from
-- its limit, or gone when the limit is unknown.
local function at(p, l, r, t)
  if not r or not tonumber(r) then return nil end
  local c = {l = l and tonumber(l), r = tonumber(r), t = t and tonumber(t)}
  if c.t and c.t <= now then
    if not c.l then
      redis.call('HDEL', KEYS[1], p .. 'l', p .. 'r', p .. 't')
      return nil
    end
    c.r = c.l
    c.t = nil
    redis.call('HSET', KEYS[1], p .. 'r', int(c.r))
    redis.call('HDEL', KEYS[1], p .. 't')
  end
  return c
end
local function short_of(c, n)
  if not c then return false end
  local want = n
  if c.l and c.l < want then want = c.l end
  return c.r < want
end
local req = at('r', f[1], f[2], f[3])
local tok = at('t', f[4], f[5], f[6])
local limit, reset = nil, nil
for i, c in ipairs({{1, req, 1}, {2, tok, need}}) do
  if short_of(c[2], c[3]) then
    local t = c[2].t or -1
    if limit == nil or t == -1 or (reset ~= -1 and t >= reset) then
      limit, reset = c[1], t
    end
  end
end
if limit then
  save(7200000)
  return {0, limit, reset, grown}
end
local short = nil
%WINDOWS%
if short then
  return {2, short[1], short[2], short[3], short[4], short[5], grown}
end
if req then redis.call('HSET', KEYS[1], 'rr', int(req.r - 1)) end
if tok then redis.call('HSET', KEYS[1], 'tr', int(math.max(tok.r - need, 0))) end
return {1, grown}
"#;

/// A script that starts with the windows' prelude.
pub(super) fn with_prelude(body: &str) -> String {
    format!("{PRELUDE}{body}")
}

/// The reserve script, whole.
pub(super) fn reserve_script() -> String {
    with_prelude(
        &RESERVE
            .replace("%TICK%", TICK)
            .replace("%WINDOWS%", RESERVE_WINDOWS),
    )
}

/// `PaceRecord::hear`. KEYS: the record hash. ARGV: now, keep, then for
/// the requests and the tokens: present (1 or 0), limit (-1: unknown),
/// remaining, reset_at.
pub(super) const HEAR: &str = r#"
local now = tonumber(ARGV[1])
local keep = tonumber(ARGV[2])
local function int(x) return string.format('%d', x) end
local function hear(p, present, l, r, t)
  if present ~= '1' then return end
  l, r, t = tonumber(l), tonumber(r), tonumber(t)
  local f = redis.call('HMGET', KEYS[1], p .. 'l', p .. 'r', p .. 't')
  local old_l = f[1] and tonumber(f[1])
  local old_r = f[2] and tonumber(f[2])
  local old_t = f[3] and tonumber(f[3])
  if old_r and not (old_t and old_t <= now) then
    -- Before the reset: never raised, its reset never brought forward.
    if l < 0 and old_l then l = old_l end
    r = math.min(old_r, r)
    if old_t and old_t > t then t = old_t end
  end
  if l >= 0 then
    redis.call('HSET', KEYS[1], p .. 'l', int(l))
  else
    redis.call('HDEL', KEYS[1], p .. 'l')
  end
  redis.call('HSET', KEYS[1], p .. 'r', int(r), p .. 't', int(t))
end
hear('r', ARGV[3], ARGV[4], ARGV[5], ARGV[6])
hear('t', ARGV[7], ARGV[8], ARGV[9], ARGV[10])
local resets = redis.call('HMGET', KEYS[1], 'rt', 'tt')
local last = now
for i = 1, 2 do
  local t = resets[i] and tonumber(resets[i])
  if t and t > last then last = t end
end
-- Resets lie at most a day ahead (the parser's bound); a stray value
-- keeps the record two days at most.
local ttl = math.min(last - now, 172800000) + keep
-- Declared and learned windows keep the hash as long as they need.
if redis.call('HEXISTS', KEYS[1], 'w') == 1 then
  ttl = math.max(ttl, redis.call('PTTL', KEYS[1]))
end
redis.call('PEXPIRE', KEYS[1], int(ttl))
return 1
"#;

/// `PaceRecord::give_back`. KEYS: the record hash. ARGV: now, tokens.
pub(super) const GIVE_BACK: &str = r#"
local now = tonumber(ARGV[1])
local function int(x) return string.format('%d', x) end
local function back(p, n)
  local f = redis.call('HMGET', KEYS[1], p .. 'l', p .. 'r', p .. 't')
  if not f[2] then return end
  if f[3] and tonumber(f[3]) <= now then return end
  local r = tonumber(f[2]) + n
  if f[1] and tonumber(f[1]) < r then r = tonumber(f[1]) end
  redis.call('HSET', KEYS[1], p .. 'r', int(r))
end
back('r', 1)
back('t', tonumber(ARGV[2]))
return 1
"#;

fn hash(key: &PaceKey) -> String {
    format!("{PREFIX}{}|{}|{}", key.model, key.endpoint, key.account)
}

/// One limit's four `HEAR` arguments.
fn published(p: Option<Published>) -> [String; 4] {
    match p {
        Some(p) => [
            "1".into(),
            p.limit
                .map_or(-1, |l| l.min(i64::MAX as u64) as i64)
                .to_string(),
            p.remaining.to_string(),
            p.reset_at.to_string(),
        ],
        None => ["0".into(), "-1".into(), "0".into(), "0".into()],
    }
}

/// The declared windows as script arguments: their count, then dim,
/// limit and period of each.
fn window_args(windows: &[Window]) -> Vec<String> {
    let mut args = vec![windows.len().to_string()];
    for w in windows {
        args.extend([
            w.dim.code().to_string(),
            w.limit.min(i64::MAX as u64).to_string(),
            w.per_ms.to_string(),
        ]);
    }
    args
}

fn dim(code: i64) -> Dim {
    match code {
        2 => Dim::InputTokens,
        3 => Dim::OutputTokens,
        4 => Dim::Tokens,
        _ => Dim::Requests,
    }
}

fn grown(g: i64) -> Option<u64> {
    (g > 0).then_some(g as u64)
}

impl PacingStore for RedisStore {
    fn reserve(
        &mut self,
        key: &PaceKey,
        ask: &Ask<'_>,
        now: Millis,
    ) -> Result<Reserved, StoreError> {
        let hash = hash(key);
        let mut args = vec![
            now.to_string(),
            ask.input_tokens.min(i64::MAX as u64).to_string(),
            ask.output_tokens.min(i64::MAX as u64).to_string(),
        ];
        args.extend(window_args(ask.windows));
        args.push(if ask.force { "1" } else { "0" }.to_string());
        let reply: Vec<i64> = self.eval(&self.scripts.pace_reserve, &[&hash], &args)?;
        Ok(match reply.as_slice() {
            [0, limit, reset, g] => Reserved {
                outcome: Reservation::Short {
                    limit: if *limit == 1 {
                        PaceLimit::Requests
                    } else {
                        PaceLimit::Tokens
                    },
                    reset_at: (*reset >= 0).then_some(*reset),
                },
                grown: grown(*g),
            },
            [2, d, limit, per, source, ready_at, g] => Reserved {
                outcome: Reservation::Window(Shortfall {
                    window: Window {
                        dim: dim(*d),
                        limit: (*limit).max(1) as u64,
                        per_ms: (*per).max(1),
                    },
                    source: if *source == 3 {
                        PaceSource::Learned
                    } else {
                        PaceSource::Declared
                    },
                    ready_at: *ready_at,
                }),
                grown: grown(*g),
            },
            [_, g] => Reserved {
                outcome: Reservation::Taken,
                grown: grown(*g),
            },
            _ => Reserved::default(),
        })
    }

    fn hear(&mut self, key: &PaceKey, heard: &Heard, now: Millis) -> Result<(), StoreError> {
        let hash = hash(key);
        let mut args = vec![now.to_string(), KEEP_AFTER.to_string()];
        args.extend(published(heard.requests));
        args.extend(published(heard.tokens));
        let _: i64 = self.eval(&self.scripts.pace_hear, &[&hash], &args)?;
        Ok(())
    }

    fn give_back(&mut self, key: &PaceKey, tokens: u64, now: Millis) -> Result<(), StoreError> {
        let hash = hash(key);
        let args = [now.to_string(), tokens.to_string()];
        let _: i64 = self.eval(&self.scripts.pace_give_back, &[&hash], &args)?;
        Ok(())
    }
    fn settle(
        &mut self,
        key: &PaceKey,
        windows: &[Window],
        unused: u64,
        now: Millis,
    ) -> Result<(), StoreError> {
        if windows.is_empty() || unused == 0 {
            return Ok(());
        }
        let hash = hash(key);
        let mut args = vec![now.to_string(), unused.min(i64::MAX as u64).to_string()];
        args.extend(window_args(windows));
        let _: i64 = self.eval(&self.scripts.pace_settle, &[&hash], &args)?;
        Ok(())
    }

    fn refused(
        &mut self,
        key: &PaceKey,
        sent_at: Millis,
        now: Millis,
    ) -> Result<Option<u64>, StoreError> {
        let hash = hash(key);
        let rpm: i64 = self.eval(
            &self.scripts.pace_refused,
            &[&hash],
            &[now.to_string(), sent_at.to_string()],
        )?;
        Ok(grown(rpm))
    }

    fn learned(&mut self, key: &PaceKey, now: Millis) -> Result<Option<u64>, StoreError> {
        let hash = hash(key);
        let rpm: i64 = self.eval(&self.scripts.pace_learned, &[&hash], &[now.to_string()])?;
        Ok(grown(rpm))
    }
}
