//! The declared and learned windows (SPEC 24) in Redis: the `w` field of
//! a key's pacing hash holds its `WindowState` as JSON (levels, learned
//! limit, sends per second), read and written only inside the pacing
//! scripts, so every step is atomic and one round trip. The Lua here
//! follows `WindowState`'s rules (`health/pacing/windows.rs`,
//! `learned.rs`); `store_tests.rs` holds it to them.
//!
//! Whatever the field holds, the scripts never fail on it: a value that is
//! not JSON, too long, or holds anything but finite numbers where numbers
//! belong is read as a fresh state, or that entry as missing.

/// Helpers every windows script starts with: `load()` reads the state of
/// `KEYS[1]` into `B` (levels by id), `L` (the learned limit or nil) and
/// `S` (sends per second); `save(keep)` writes it back and makes the hash
/// live at least `keep` ms more. ARGV[1] is always now.
pub(super) const PRELUDE: &str = r#"
local now = tonumber(ARGV[1])
local MIN = 60000
local FORGET = 3600000
local function num(x)
  return type(x) == 'number' and x == x and x > -1e300 and x < 1e300
end
local B, L, S, NB = {}, nil, {}, 0
local function load()
  local s = redis.call('HGET', KEYS[1], 'w')
  if not s or #s > 65536 then return end
  local ok, v = pcall(cjson.decode, s)
  if not ok or type(v) ~= 'table' then return end
  if type(v.b) == 'table' then
    for id, b in pairs(v.b) do
      if NB < 32 and type(id) == 'string' and type(b) == 'table' and num(b[1]) and num(b[2]) then
        B[id] = {b[1], b[2]}
        NB = NB + 1
      end
    end
  end
  local l = v.l
  if type(l) == 'table' and num(l[1]) and num(l[2]) and num(l[3]) and num(l[4]) and num(l[5]) then
    L = {rpm = math.max(1, math.floor(l[1])), changed = l[2], refused = l[3], ms = l[4], sent = math.max(0, l[5])}
  end
  if type(v.s) == 'table' then
    local sec = math.floor(now / 1000)
    for _, e in ipairs(v.s) do
      if type(e) == 'table' and num(e[1]) and num(e[2]) and e[1] > sec - 120 and e[1] <= sec then
        S[#S + 1] = {e[1], e[2]}
      end
      if #S >= 120 then break end
    end
  end
end
local function save(keep)
  local b = {}
  local any = false
  for id, x in pairs(B) do b[id] = x; any = true end
  local v = {s = S}
  if any then v.b = b end
  if L then v.l = {L.rpm, L.changed, L.refused, L.ms, L.sent} end
  redis.call('HSET', KEYS[1], 'w', cjson.encode(v))
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < keep then redis.call('PEXPIRE', KEYS[1], keep) end
end
local LAG = 250
local function refill(b, w)
  local now = now - LAG
  if now >= b[2] then
    b[1] = math.min(w.l, b[1] + (now - b[2]) * w.l / math.max(w.p, 1))
    b[2] = now
  elseif b[2] - now > w.p then
    b[2] = now
  end
end
local function sent_last_minute()
  local sec = math.floor(now / 1000)
  local n = 0
  for _, e in ipairs(S) do
    if e[1] > sec - 60 and e[1] <= sec then n = n + e[2] end
  end
  return n
end
"#;

/// `WindowState::settle`. ARGV: now, unused, then the declared windows
/// (count, and dim, limit, per for each).
pub(super) const SETTLE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
load()
local unused = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
for i = 0, n - 1 do
  local d, l, p = tonumber(ARGV[4 + 3 * i]), tonumber(ARGV[5 + 3 * i]), tonumber(ARGV[6 + 3 * i])
  local b = B[string.format('%d:%d:%d', d, l, p)]
  if (d == 3 or d == 4) and b then
    local w = {l = l, p = p}
    refill(b, w)
    b[1] = math.min(l, b[1] + unused)
  end
end
save(7200000)
return 1
"#;

/// `pacing::refused`. ARGV: now, sent_at. Returns the learned limit when
/// new or changed, else -1.
pub(super) const REFUSED: &str = r#"
local sent_at = tonumber(ARGV[2])
if redis.call('HEXISTS', KEYS[1], 'rr') == 1 or redis.call('HEXISTS', KEYS[1], 'tr') == 1 then
  return -1
end
load()
if L and L.changed > sent_at then
  L.refused = math.max(L.refused, now)
  save(7200000)
  return -1
end
local before = L and L.rpm
local rpm = math.max(1, math.floor(sent_last_minute() * 7 / 10))
L = {rpm = rpm, changed = now, refused = now, ms = now, sent = 0}
if not B['learned'] then NB = NB + 1 end
B['learned'] = {0, now}
save(7200000)
if before == rpm then return -1 end
return rpm
"#;

/// `WindowState::learned_rpm`. ARGV: now. The limit, or -1.
pub(super) const LEARNED: &str = r#"
load()
if L and now - L.refused < FORGET then return L.rpm end
return -1
"#;

/// The windows part of `pacing::reserve`, run inside the reserve script
/// after the published counts were found not short (`req`, `tok` are
/// their counts, `need` the input tokens). ARGV: now, input, output, then
/// the declared windows (count, and dim, limit, per for each), then force
/// (1: taken even when short). Sets
/// `short` to `{dim, limit, per, source (2 declared, 3 learned), ready_at}`
/// or takes from every window and logs the send.
pub(super) const RESERVE_WINDOWS: &str = r#"
local out = tonumber(ARGV[3])
local function needs(d)
  if d == 1 then return 1 elseif d == 2 then return need elseif d == 3 then return out end
  return need + out
end
local W = {}
local n = tonumber(ARGV[4])
for i = 0, n - 1 do
  local d, l, p = tonumber(ARGV[5 + 3 * i]), tonumber(ARGV[6 + 3 * i]), tonumber(ARGV[7 + 3 * i])
  W[#W + 1] = {id = string.format('%d:%d:%d', d, l, p), d = d, l = l, p = p, src = 2}
end
if L then W[#W + 1] = {id = 'learned', d = 1, l = math.max(L.rpm, 1), p = MIN, src = 3} end
if NB >= 32 then
  local keep = {learned = true}
  for _, w in ipairs(W) do keep[w.id] = true end
  NB = 0
  for id, _ in pairs(B) do
    if keep[id] then NB = NB + 1 else B[id] = nil end
  end
end
for _, w in ipairs(W) do
  local b = B[w.id]
  if b then refill(b, w)
  elseif NB < 32 then B[w.id] = {w.l, now}; NB = NB + 1 end
end
for _, w in ipairs(W) do
  local b = B[w.id]
  if b then
    local want = math.min(needs(w.d), w.l)
    if b[1] < want then
      local ms = math.ceil((want - b[1]) * w.p / math.max(w.l, 1))
      ms = math.max(1, math.min(ms, 2 * math.max(w.p, 1)))
      local ready = math.max(b[2] + ms + LAG, now + 1)
      if not short or ready > short[5] then short = {w.d, w.l, w.p, w.src, ready} end
    end
  end
end
if short and ARGV[5 + 3 * n] == '1' then short = nil end
if not short then
  for _, w in ipairs(W) do
    local b = B[w.id]
    if b then b[1] = math.max(b[1] - needs(w.d), -w.l) end
  end
  if L then L.sent = L.sent + 1 end
  local sec = math.floor(now / 1000)
  if #S > 0 and S[#S][1] == sec then S[#S][2] = S[#S][2] + 1 else S[#S + 1] = {sec, 1} end
  while #S > 120 do table.remove(S, 1) end
end
local keep = 7200000
for _, w in ipairs(W) do keep = math.max(keep, w.p + FORGET) end
save(keep)
"#;

/// The learned limit's tick (`WindowState::tick`), run first in the
/// reserve script: sets `grown` to the new limit when it grew, else -1.
pub(super) const TICK: &str = r#"
local grown = -1
if L then
  if now - L.refused >= FORGET then
    L = nil
    if B['learned'] then B['learned'] = nil; NB = NB - 1 end
  elseif now >= L.ms + MIN then
    if L.sent * 10 >= L.rpm * 9 then
      L.rpm = L.rpm + math.max(1, math.floor(L.rpm / 10))
      L.changed = L.ms + MIN
      grown = L.rpm
    end
    L.ms = L.ms + math.floor((now - L.ms) / MIN) * MIN
    L.sent = 0
  end
end
"#;
