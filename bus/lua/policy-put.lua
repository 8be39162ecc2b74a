-- Puts a new policy version, atomically: only over the version the writer read (optimistic
-- concurrency), recorded in the version history and the audit stream, announced to every node.
--
-- KEYS[1] current hash   (version, json)      KEYS[2] versions hash (version -> json)
-- KEYS[3] audit stream
-- ARGV[1] the version the writer read (0: none yet)   ARGV[2] the new version   ARGV[3] its JSON
-- ARGV[4] the channel nodes listen on                  ARGV[5..] the audit entry's fields
-- Returns the new version, or an error "CONFLICT <current>" when someone wrote in between.
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then return redis.error_reply('CONFLICT ' .. current) end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'json', ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[3], '*', unpack(fields))
redis.call('PUBLISH', ARGV[4], ARGV[2])
return tonumber(ARGV[2])
