-- An owner's grants, appended to its shard's log unless the log is fenced against the writer (a later
-- owner raised the fence before replaying the log: `fence.lua`). A grant leaves the owner only once
-- this returned an id, so every grant a later owner did not replay was refused here, never issued.
--
-- KEYS[1] the shard's log stream   KEYS[2] its fence hash   (one hash tag: one slot)
-- ARGV[1] the writer's owner epoch   ARGV[2] the writer's process, `nodeId/nodeEpoch`
-- ARGV[3] the log's approximate length cap
-- ARGV[4..] the entry's fields (field, value, ...); the entry also gets `epoch` = ARGV[1]
--
-- The fence stands against the writer when its epoch is higher, or equal and another process's; none
-- (never raised, or Redis lost it) stands against nobody. Returns the entry's id, or false.
local f = redis.call('HMGET', KEYS[2], 'epoch', 'holder')
local epoch = tonumber(f[1])
local mine = tonumber(ARGV[1])
if epoch ~= nil and (epoch > mine or (epoch == mine and f[2] ~= ARGV[2])) then return false end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'epoch', ARGV[1], unpack(fields))
