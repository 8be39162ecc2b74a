-- Puts a new policy version, atomically: only over the version the writer read (optimistic
-- concurrency, compared as stored: a forged record need not hold a number), recorded in the version
-- history and the audit stream, announced to every node.
--
-- KEYS[1] current hash   (version, json, kid, mac)   KEYS[2] versions hash (version -> signed record)
-- KEYS[3] audit stream
-- ARGV[1] the version field the writer read ('0': none yet)   ARGV[2] the new version   ARGV[3] its JSON
-- ARGV[4] kid   ARGV[5] mac (the JSON's signature)   ARGV[6] the history record
-- ARGV[7] the channel nodes listen on   ARGV[8..] the audit entry's fields
-- Returns the new version, or an error "CONFLICT <current>" when someone wrote in between.
local current = redis.call('HGET', KEYS[1], 'version') or '0'
if current ~= ARGV[1] then return redis.error_reply('CONFLICT ' .. current) end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'json', ARGV[3], 'kid', ARGV[4], 'mac', ARGV[5])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[6])
local fields = {}
for i = 8, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[3], '*', unpack(fields))
redis.call('PUBLISH', ARGV[7], ARGV[2])
return tonumber(ARGV[2])
