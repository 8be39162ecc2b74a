-- Sets the kill switch, audits it and announces it, atomically (one hash tag: one slot).
--
-- KEYS[1] switch hash   KEYS[2] audit stream
-- ARGV[1] '1' enforce, '0' off   ARGV[2] at   ARGV[3] by   ARGV[4] reason   ARGV[5] kid   ARGV[6] mac
-- ARGV[7] '1' to write even if the stored value is the same (the stored record did not verify)
-- ARGV[8] channel   ARGV[9..] the audit entry's fields
-- Returns 0 when the switch was already so (nothing written), 1 when it changed.
local now = redis.call('HGET', KEYS[1], 'enforce') or '1'
if now == ARGV[1] and ARGV[7] ~= '1' then return 0 end
redis.call('HSET', KEYS[1], 'enforce', ARGV[1], 'at', ARGV[2], 'by', ARGV[3], 'reason', ARGV[4], 'kid', ARGV[5], 'mac', ARGV[6])
local fields = {}
for i = 9, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('PUBLISH', ARGV[8], 'switch')
return 1
