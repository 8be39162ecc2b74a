-- One control round of a bus member, atomic: heartbeat, give up shards it no longer wants, claim or
-- renew the shards it wants, and read back the fleet and the ownership table.
--
-- KEYS[1] members zset   (node id -> Redis time of its last round, ms)
-- KEYS[2] epochs hash    (node id -> node epoch of its current process)
-- KEYS[3] owners hash    (shard -> "nodeId/nodeEpoch|ownerEpoch|expiresAt": the owning process)
-- KEYS[4] left zset      (node id -> Redis time it left the fleet cleanly)
-- KEYS[5] beats hash     (node id -> its last heartbeat statement, a sealed `beat` envelope; after a
--                        clean leave, its sealed leave statement)
-- ARGV[1] node id   ARGV[2] node epoch   ARGV[3] owner lease, ms   ARGV[4] member expiry, ms
-- ARGV[5] shards wanted, comma-separated   ARGV[6] shards given up, comma-separated
-- ARGV[7] '1' when the node leaves the fleet (clean shutdown): it drops out of the member list
-- ARGV[8] the highest owner epoch this node has seen on any shard
-- ARGV[9] this node's heartbeat statement (its leave statement with ARGV[7] '1'), sealed
--
-- The owner epoch of a shard grows at every change of owner: max(previous + 1, now in ms, the
-- highest epoch the claimant has seen + 1), so it keeps growing even if Redis lost the table (a
-- restart without persistence), and even if Redis's clock went back meanwhile.
-- Nothing here can check a MAC: readers verify the statements (`FleetTable.take`, through
-- `BeatStatements.open`), and a node takes a table entry naming its own process only under the epoch
-- this very call gave it (the last list).
-- Returns { now, {id, lastSeen, nodeEpoch, beat, ...}, {shard, "owner|epoch|expiresAt", ...},
--           {blind shard, ...}, {id, leftAt, leave statement, ...}, {shard, epoch, ...} }.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local me = ARGV[1] .. '/' .. ARGV[2]
local leaseMs = tonumber(ARGV[3])
local expiry = tonumber(ARGV[4])
local function fmt(n) return string.format('%.0f', n) end

local seen = tonumber(ARGV[8]) or 0
if ARGV[7] == '1' then
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('HSET', KEYS[5], id, ARGV[9] or '')
  redis.call('ZADD', KEYS[4], now, id)
else
  redis.call('ZADD', KEYS[1], now, id)
  redis.call('HSET', KEYS[2], id, ARGV[2])
  redis.call('HSET', KEYS[5], id, ARGV[9] or '')
end

-- An epoch far ahead of both Redis time and the highest epoch the caller has seen was written in,
-- never claimed (claims seed epochs from those and add one a change): read as none, so it cannot stop
-- epochs growing (`RedisBus` ignores it too).
local function parse(v)
  if not v then return '', 0, 0 end
  local owner, epoch, exp = string.match(v, '^([^|]*)|(%d+)|(%d+)$')
  if not owner or tonumber(epoch) > math.max(now, seen) + 1e9 then return '', 0, 0 end
  return owner, tonumber(epoch), tonumber(exp)
end

for s in string.gmatch(ARGV[6], '[^,]+') do
  local owner, epoch = parse(redis.call('HGET', KEYS[3], s))
  if owner == me then redis.call('HSET', KEYS[3], s, '|' .. fmt(epoch) .. '|0') end
end

-- Shards claimed with no record at all: Redis lost the table (and maybe the log), a blind takeover.
local blind = {}
local held = {}
for s in string.gmatch(ARGV[5], '[^,]+') do
  local v = redis.call('HGET', KEYS[3], s)
  local owner, epoch, exp = parse(v)
  if not v then blind[#blind + 1] = s end
  if owner == me then
    -- Still this process's (nobody took it even if it lapsed): renew under the same epoch.
    redis.call('HSET', KEYS[3], s, me .. '|' .. fmt(epoch) .. '|' .. fmt(now + leaseMs))
    held[#held + 1] = s
    held[#held + 1] = fmt(epoch)
  elseif owner == '' or exp <= now then
    epoch = math.max(epoch + 1, now, seen + 1)
    redis.call('HSET', KEYS[3], s, me .. '|' .. fmt(epoch) .. '|' .. fmt(now + leaseMs))
    held[#held + 1] = s
    held[#held + 1] = fmt(epoch)
  end
end

-- Members silent for an hour are gone for good (the epoch reaper removes their consumers).
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - 3600000)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 3600000)
  for _, g in ipairs(gone) do
    redis.call('HDEL', KEYS[2], g)
    redis.call('HDEL', KEYS[5], g)
  end
end

local members = {}
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now - expiry, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  members[#members + 1] = live[i]
  members[#members + 1] = live[i + 1]
  members[#members + 1] = redis.call('HGET', KEYS[2], live[i]) or ''
  members[#members + 1] = redis.call('HGET', KEYS[5], live[i]) or ''
end
for _, g in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now - expiry)) do
  if not redis.call('ZSCORE', KEYS[1], g) then redis.call('HDEL', KEYS[5], g) end
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - expiry)
local left = {}
local departed = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
for i = 1, #departed, 2 do
  left[#left + 1] = departed[i]
  left[#left + 1] = departed[i + 1]
  left[#left + 1] = redis.call('HGET', KEYS[5], departed[i]) or ''
end
return { fmt(now), members, redis.call('HGETALL', KEYS[3]), blind, left, held }
