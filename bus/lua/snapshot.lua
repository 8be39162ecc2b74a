-- An owner's checkpoint of one shard, and the trim it allows (B4), atomic and fenced.
--
-- KEYS[1] the shard's log stream    KEYS[2] the shard's report stream   (one hash tag: one slot)
-- ARGV[1] the writer's owner epoch   ARGV[2] keep this many ms behind the checkpoint
-- ARGV[3] id time (ms) of the last report entry the writer has read, 0 for none
-- ARGV[4..] the snapshot entry's fields (field, value, ...)
--
-- Every entry an owner writes to the log carries its owner epoch in field `epoch` (and a signed copy
-- inside its envelope). A writer that finds a higher epoch among the newest entries may have been
-- deposed: it writes and trims nothing, so a stale owner can never delete what its successor wrote.
-- The script cannot check a MAC: the writer does (`RedisBus.clearForgedFences`), and deletes entries
-- whose signed epoch is not their plain one. An epoch that is not a number fences nothing.
-- Returns the snapshot's id, or false.
local mine = tonumber(ARGV[1])
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
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], '*', 'epoch', ARGV[1], unpack(fields))
local at = tonumber(string.match(id, '^(%d+)-'))
local margin = tonumber(ARGV[2])
redis.call('XTRIM', KEYS[1], 'MINID', '~', string.format('%.0f', at - margin))
local read = tonumber(ARGV[3])
if read > 0 then redis.call('XTRIM', KEYS[2], 'MINID', '~', string.format('%.0f', math.min(at, read) - margin)) end
return id
