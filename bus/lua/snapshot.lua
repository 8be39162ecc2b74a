-- An owner's checkpoint of one shard, and the trim it allows (B4), atomic and fenced.
--
-- KEYS[1] the shard's log stream    KEYS[2] the shard's report stream   KEYS[3] its fence hash
--         (one hash tag: one slot)
-- ARGV[1] the writer's owner epoch   ARGV[2] the writer's process, `nodeId/nodeEpoch`
-- ARGV[3] keep this many ms behind the checkpoint
-- ARGV[4] id time (ms) of the last report entry the writer has read, 0 for none
-- ARGV[5..] the snapshot entry's fields (field, value, ...)
--
-- A fence raised against the writer (`fence.lua`: a later owner is replaying, or has replayed, the
-- log) stops it too: its trim could take report entries the later owner has not read yet.
-- Every entry an owner writes to the log carries its owner epoch in field `epoch` (and a signed copy
-- inside its envelope). A writer that finds a higher epoch among the newest entries may have been
-- deposed: it writes and trims nothing, so a stale owner can never delete what its successor wrote.
-- The script cannot check a MAC: the writer does (`LogFence.clearForged`), and deletes entries
-- whose signed epoch is not their plain one. An epoch that is not a number fences nothing.
-- Returns the snapshot's id, or false.
local mine = tonumber(ARGV[1])
local fence = redis.call('HMGET', KEYS[3], 'epoch', 'holder')
local fenced = tonumber(fence[1])
if fenced ~= nil and (fenced > mine or (fenced == mine and fence[2] ~= ARGV[2])) then return false end
for _, e in ipairs(redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 256)) do
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'epoch' then
      local epoch = tonumber(f[i + 1])
      if epoch ~= nil and epoch > mine then return false end
    end
  end
end
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], '*', 'epoch', ARGV[1], unpack(fields))
local at = tonumber(string.match(id, '^(%d+)-'))
local margin = tonumber(ARGV[3])
redis.call('XTRIM', KEYS[1], 'MINID', '~', string.format('%.0f', at - margin))
local read = tonumber(ARGV[4])
if read > 0 then redis.call('XTRIM', KEYS[2], 'MINID', '~', string.format('%.0f', math.min(at, read) - margin)) end
return id
