"""The worker's Redis function library: the Lua that writes what Redis holds.

Four scripts, each one ``FCALL``-able function of one Redis Functions library (``LIBRARY``),
write atomically and only forward (keys in ``output.layout``, hash fields, channel messages
and result codes in ``output.redis``): a batch's session updates (``SESSIONS_WRITE``), an
expired session's drop (``SESSION_DROP``), a partition's retired figure (``RETIRED_WRITE``)
and its dead-letter count (``DEAD_WRITE``); in cluster mode the first two publish with
``SPUBLISH`` on the session's channel and its shard's feed (``_sharded``).

The library's name carries a hash of its code (``library``), and so do its functions'
names: a worker calls exactly the code it was built with (note 005). ``publish.redis_sink``
calls and loads it; ``python -m stream.publish.redis_sink`` prints it for an admin.

Pure text: no Redis client in here.
"""

import hashlib

# A batch's session updates in one call (one slot: in cluster mode one call per shard), so a
# batch costs one round trip and one script run instead of one per session (note 016).
# KEYS: tallies hash, stats hash, recent zset, then each update's session key (= channel)
# ARGV: ttl seconds (0: none), "NX" to add to recent only when absent (a re-seed) or "",
#       then 3 per update: "gen seq n v score f d x" (its version, its recent score and
#       its tally, in one argument: redis-py packs each argument in Python, and eight
#       per session were 40 % of the worker's Redis leg), update JSON, session id
# Returns per update 1 (written), 2 (this version is there already), 0 (older: refused).
SESSIONS_WRITE = """
local ttl = tonumber(ARGV[1])
local nx = ARGV[2] == 'NX'
local names = {'folded', 'duplicate', 'faulted'}
local moved = {0, 0, 0}
local out = {}
local added = false
for i = 4, #KEYS do
  local key = KEYS[i]
  local a = (i - 4) * 3 + 2
  local h = {}
  for v in string.gmatch(ARGV[a + 1], '%S+') do h[#h + 1] = v end
  local new = {tonumber(h[1]), tonumber(h[2]), tonumber(h[3]), tonumber(h[4])}
  local result = 1
  local stored = redis.call('HMGET', key, 'gen', 'seq', 'n', 'v')
  if stored[1] then
    for j = 1, 4 do
      local old = tonumber(stored[j] or '0')
      if new[j] < old then result = 0; break end
      if new[j] > old then break end
      if j == 4 then result = 2 end
    end
  end
  if result == 1 then
    local id, tally, payload = ARGV[a + 3], h[6] .. ' ' .. h[7] .. ' ' .. h[8], ARGV[a + 2]
    local old = redis.call('HGET', KEYS[1], id)
    local o = {0, 0, 0}
    if old then
      local j = 1
      for v in string.gmatch(old, '%S+') do o[j] = tonumber(v); j = j + 1 end
    end
    local j = 1
    for v in string.gmatch(tally, '%S+') do
      moved[j] = moved[j] + tonumber(v) - o[j]
      j = j + 1
    end
    redis.call('HSET', KEYS[1], id, tally)
    redis.call('HSET', key, 'gen', h[1], 'seq', h[2], 'n', h[3], 'v', h[4], 'update', payload)
    if ttl > 0 then redis.call('EXPIRE', key, ttl) end
    if nx then
      redis.call('ZADD', KEYS[3], 'NX', h[5], id)
    else
      redis.call('ZADD', KEYS[3], h[5], id)
    end
    redis.call('PUBLISH', key, payload)
    added = true
  end
  out[#out + 1] = result
end
for j = 1, 3 do
  if moved[j] ~= 0 then redis.call('HINCRBY', KEYS[2], names[j], moved[j]) end
end
if added then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -10001) end  -- the 10,000 most recent
return out
"""

# A session expired: drop what Redis holds of its life, if not newer than that life's
# last version, take its tally out of the live totals (the partition's retired figure,
# RETIRED_WRITE, or the next life's tally carries it back in), and tell subscribers.
# KEYS: session key (= channel), tallies hash, stats hash, recent zset
# ARGV: gen, seq, n, v (the expired life's version), session id, the expiry message
SESSION_DROP = """
local stored = redis.call('HMGET', KEYS[1], 'gen', 'seq', 'n', 'v')
if stored[1] then
  local drop = {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])}
  for i = 1, 4 do
    local old = tonumber(stored[i] or '0')
    if old > drop[i] then return 0 end
    if old < drop[i] then break end
  end
end
local old = redis.call('HGET', KEYS[2], ARGV[5])
if old then
  local names = {'folded', 'duplicate', 'faulted'}
  local i = 1
  for v in string.gmatch(old, '%S+') do
    local d = tonumber(v)
    if d ~= 0 then redis.call('HINCRBY', KEYS[3], names[i], -d) end
    i = i + 1
  end
  redis.call('HDEL', KEYS[2], ARGV[5])
end
local existed = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[4], ARGV[5])
if existed == 1 or old then redis.call('PUBLISH', KEYS[1], ARGV[6]) end
return 1
"""

# A partition's retired figure: the events of the sessions its sweeps expired, and how
# many sessions; kept like the dead letters (per generation, only forward), so the
# totals stay the sum of every event ever taken after sessions leave.
# KEYS: retired hash, stats hash. ARGV: field (topic:partition), gen, "f d x", expired
RETIRED_WRITE = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local o = {0, 0, 0, 0}
local g0 = 0
if old then
  local i = 0
  for v in string.gmatch(old, '%S+') do
    if i == 0 then g0 = tonumber(v) else o[i] = tonumber(v) end
    i = i + 1
  end
end
local gen = tonumber(ARGV[2])
local new = {}
for v in string.gmatch(ARGV[3], '%S+') do new[#new + 1] = tonumber(v) end
new[4] = tonumber(ARGV[4])
if gen < g0 or (gen == g0 and new[4] <= o[4]) then return 0 end
if gen > g0 then o = {0, 0, 0, 0} end
local names = {'folded', 'duplicate', 'faulted', 'expired'}
for i = 1, 4 do
  local d = new[i] - o[i]
  if d ~= 0 then redis.call('HINCRBY', KEYS[2], names[i], d) end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
return 1
"""

# KEYS: dead-letter hash, stats hash. ARGV: field (topic:partition), gen, count
DEAD_WRITE = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local g0, c0 = 0, 0
if old then
  local sep = string.find(old, ' ')
  g0, c0 = tonumber(string.sub(old, 1, sep - 1)), tonumber(string.sub(old, sep + 1))
end
local gen, count = tonumber(ARGV[2]), tonumber(ARGV[3])
if gen < g0 or (gen == g0 and count <= c0) then return 0 end
if gen > g0 then c0 = 0 end
redis.call('HINCRBY', KEYS[2], 'dead_lettered', count - c0)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
return 1
"""


def _sharded(script: str, channel: str, publish: str, feed: str) -> str:
    """A script's cluster-mode text: its ``PUBLISH`` on the session's channel becomes
    ``SPUBLISH`` there and on the shard's feed channel (argument ``feed``)."""
    call = f"redis.call('PUBLISH', {channel}, {publish})"
    assert script.count(call) == 1, "the script's one publish"
    sharded = (
        f"redis.call('SPUBLISH', {channel}, {publish}); redis.call('SPUBLISH', {feed}, {publish})"
    )
    return script.replace(call, sharded)


# Cluster mode: the feed channel is SESSIONS_WRITE's ARGV[3] (its updates follow from
# ARGV[4]: the script reads them from an offset of 3) and SESSION_DROP's ARGV[7].
SESSIONS_WRITE_SHARDED = _sharded(
    SESSIONS_WRITE.replace("local a = (i - 4) * 3 + 2", "local a = (i - 4) * 3 + 3"),
    "key",
    "payload",
    "ARGV[3]",
)
SESSION_DROP_SHARDED = _sharded(SESSION_DROP, "KEYS[1]", "ARGV[6]", "ARGV[7]")

# The scripts above as the callbacks of one function library, by function role.
CALLBACKS = {
    "sessions_write": SESSIONS_WRITE,
    "sessions_write_sharded": SESSIONS_WRITE_SHARDED,
    "session_drop": SESSION_DROP,
    "session_drop_sharded": SESSION_DROP_SHARDED,
    "retired_write": RETIRED_WRITE,
    "dead_write": DEAD_WRITE,
}


def library(callbacks: dict[str, str]) -> tuple[str, str, dict[str, str]]:
    """``(library name, FUNCTION LOAD code, function name by role)``: each script becomes a
    ``function(KEYS, ARGV)`` registered under a name carrying the hash of all the code, as
    does the library's (every one of them writes, so none is flagged ``no-writes``)."""
    version = hashlib.sha256("\0".join(f"{k}\0{v}" for k, v in callbacks.items()).encode())
    tag = version.hexdigest()[:12]
    name = f"context_stream_{tag}"
    functions = {role: f"cs_{tag}_{role}" for role in callbacks}
    parts = [f"#!lua name={name}"]
    for role, body in callbacks.items():
        parts += [f"local function {role}(KEYS, ARGV)", body.strip("\n"), "end"]
        parts.append(f"redis.register_function('{functions[role]}', {role})")
    return name, "\n".join(parts) + "\n", functions


LIBRARY_NAME, LIBRARY, FUNCTIONS = library(CALLBACKS)
