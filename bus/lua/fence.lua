-- The fence of a shard's grant log, raised by a new owner as it reads the log to replay it: from then
-- on no earlier owner can add a grant the replay did not see, however late its write reaches Redis
-- (`append-grants.lua` and `snapshot.lua` refuse it). Safety needs no timing here, only this order.
--
-- KEYS[1] the shard's fence hash: epoch, holder, seal        KEYS[2] the shard's log stream
-- ARGV[1] the claimant's owner epoch   ARGV[2] the claimant's process, `nodeId/nodeEpoch`
-- ARGV[3] its sealed `fence` envelope (stored for readers: this script cannot check a MAC)
-- ARGV[4] the seal of a fence the claimant found forged, or its own to re-seal ('' for none); a
--         fence with exactly that seal is replaced whatever its epoch
-- ARGV[5] '1': also read the log, in the same step as the fence goes up
--
-- A fence stands against the claimant when its epoch is higher, or equal and another process's.
-- An epoch that is not a number fences nothing.
-- Returns {1, the seal it replaced (or ''), the log's entries when asked}, or
-- {0, epoch, holder, seal} of the fence that stands.
local f = redis.call('HMGET', KEYS[1], 'epoch', 'holder', 'seal')
local epoch = tonumber(f[1])
local mine = tonumber(ARGV[1])
if epoch ~= nil and (epoch > mine or (epoch == mine and f[2] ~= ARGV[2])) and (f[3] or '') ~= ARGV[4] then
  return { 0, f[1], f[2] or '', f[3] or '' }
end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'holder', ARGV[2], 'seal', ARGV[3])
local log = {}
if ARGV[5] == '1' then log = redis.call('XRANGE', KEYS[2], '-', '+') end
return { 1, f[3] or '', log }
