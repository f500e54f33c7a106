package redisstore

import "github.com/redis/go-redis/v9"

// The scripts run atomically on the server. Keys are computed from the
// prefix (ARGV[1]) inside them: the store needs one primary (no Cluster).

// luaLib is shared by the scripts: the server's clock and the versioned
// save of a task record with its listing indexes.
const luaLib = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- task_version returns the stored version of a task (0: none or expired).
local function task_version(p, id)
  return tonumber(redis.call('HGET', p .. 't:' .. id, 'v') or '0')
end

-- save_task stores a task record whose version was checked, moves its
-- index entries, and returns the new version. The index hash also keeps
-- the status and the update time (s, u): a record that no longer decodes
-- is listed from them.
local function save_task(p, id, cur, data, member, c, o, g, exp, s, u)
  local tk, xk = p .. 't:' .. id, p .. 'tx:' .. id
  local old = redis.call('HMGET', xk, 'm', 'c', 'o', 'g')
  if old[1] then
    redis.call('ZREM', p .. 'ti:all', old[1])
    redis.call('ZREM', p .. 'ti:c:' .. old[2], old[1])
    if old[3] ~= '' then redis.call('ZREM', p .. 'ti:o:' .. old[3], old[1]) end
    if old[4] ~= '' then redis.call('ZREM', p .. 'ti:g:' .. old[4], old[1]) end
  end
  local e = tonumber(exp)
  if e > 0 and e <= now_ms() then
    redis.call('DEL', tk, xk)
    return cur + 1
  end
  redis.call('HSET', tk, 'v', string.format('%d', cur + 1), 'd', data)
  if e > 0 then redis.call('PEXPIREAT', tk, e) else redis.call('PERSIST', tk) end
  redis.call('HSET', xk, 'm', member, 'c', c, 'o', o, 'g', g, 's', s, 'u', u)
  redis.call('ZADD', p .. 'ti:all', 0, member)
  redis.call('ZADD', p .. 'ti:c:' .. c, 0, member)
  if o ~= '' then redis.call('ZADD', p .. 'ti:o:' .. o, 0, member) end
  if g ~= '' then redis.call('ZADD', p .. 'ti:g:' .. g, 0, member) end
  return cur + 1
end

-- durable_drop removes a task from the durable set when it has neither a
-- checkpoint nor a journal.
local function durable_drop(p, id)
  if redis.call('EXISTS', p .. 'cp:' .. id, p .. 'jo:' .. id) == 0 then
    redis.call('SREM', p .. 'dur', id)
  end
end
`

// saveTask: ARGV p, id, version, data, member, context, owner, agent,
// expiry (ms, 0 none), status, updated (Unix ns). Returns {1, new version} or {0, stored version}.
var saveTaskScript = redis.NewScript(luaLib + `
local p, id = ARGV[1], ARGV[2]
local cur = task_version(p, id)
if cur ~= tonumber(ARGV[3]) then return {0, cur} end
return {1, save_task(p, id, cur, ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11])}
`)

// deleteTask: ARGV p, id.
var deleteTaskScript = redis.NewScript(luaLib + `
local p, id = ARGV[1], ARGV[2]
local xk = p .. 'tx:' .. id
local old = redis.call('HMGET', xk, 'm', 'c', 'o', 'g')
if old[1] then
  redis.call('ZREM', p .. 'ti:all', old[1])
  redis.call('ZREM', p .. 'ti:c:' .. old[2], old[1])
  if old[3] ~= '' then redis.call('ZREM', p .. 'ti:o:' .. old[3], old[1]) end
  if old[4] ~= '' then redis.call('ZREM', p .. 'ti:g:' .. old[4], old[1]) end
end
redis.call('DEL', p .. 't:' .. id, xk)
return 1
`)

// dropIndex removes the index entries of a task whose record expired
// (nothing when it exists again). ARGV p, id, member.
var dropIndexScript = redis.NewScript(`
local p, id = ARGV[1], ARGV[2]
if redis.call('EXISTS', p .. 't:' .. id) == 1 then return 0 end
local xk = p .. 'tx:' .. id
local old = redis.call('HMGET', xk, 'm', 'c', 'o', 'g')
redis.call('ZREM', p .. 'ti:all', ARGV[3])
if old[1] then
  redis.call('ZREM', p .. 'ti:all', old[1])
  redis.call('ZREM', p .. 'ti:c:' .. old[2], old[1])
  if old[3] ~= '' then redis.call('ZREM', p .. 'ti:o:' .. old[3], old[1]) end
  if old[4] ~= '' then redis.call('ZREM', p .. 'ti:g:' .. old[4], old[1]) end
end
redis.call('DEL', xk)
return 1
`)

// commitTurnLua defines commit_turn(o, last), the commit of a turn with its
// arguments at ARGV[o+1] .. ARGV[last]:
//
//	1 p, 2 context id of the messages, 3 context id of the agent, 4 agent JSON,
//	5 lease key ('' none), 6 lease owner, 7 lease token,
//	8 task id ('' none), 9 version, 10 data, 11 member, 12 context, 13 owner, 14 agent, 15 expiry,
//	16 status, 17 updated, 18 checkpoint to delete ('' none),
//	19 the agent's score in the index by last activity, 20.. messages.
//
// It returns {'OK', version} or {'LOST'} or {'CONFLICT', stored version},
// and writes nothing unless OK.
const commitTurnLua = `
local function commit_turn(o, last)
  local p = ARGV[o + 1]
  if ARGV[o + 5] ~= '' then
    local l = redis.call('HMGET', p .. 'l:' .. ARGV[o + 5], 'o', 't')
    if (not l[1]) or l[1] ~= ARGV[o + 6] or l[2] ~= ARGV[o + 7] then return {'LOST'} end
  end
  local cur = 0
  if ARGV[o + 8] ~= '' then
    cur = task_version(p, ARGV[o + 8])
    if cur ~= tonumber(ARGV[o + 9]) then return {'CONFLICT', cur} end
  end
  local mk = p .. 'm:' .. ARGV[o + 2]
  local i = o + 20
  while i <= last do
    local j = math.min(i + 999, last)
    redis.call('RPUSH', mk, unpack(ARGV, i, j))
    i = j + 1
  end
  redis.call('SET', p .. 'a:' .. ARGV[o + 3], ARGV[o + 4])
  redis.call('ZADD', p .. 'ca', ARGV[o + 19], ARGV[o + 3])
  local v = 0
  if ARGV[o + 8] ~= '' then
    v = save_task(p, ARGV[o + 8], cur, ARGV[o + 10], ARGV[o + 11], ARGV[o + 12], ARGV[o + 13], ARGV[o + 14],
      ARGV[o + 15], ARGV[o + 16], ARGV[o + 17])
  end
  if ARGV[o + 18] ~= '' then
    redis.call('DEL', p .. 'cp:' .. ARGV[o + 18])
    durable_drop(p, ARGV[o + 18])
  end
  return {'OK', v}
end
`

// commitTurn: ARGV the arguments of commit_turn. Returns what it does.
var commitTurnScript = redis.NewScript(luaLib + commitTurnLua + `
return commit_turn(0, #ARGV)
`)

// evtAddLua defines evt_add(key, lkey, d): XADD of record d to the stream
// key, after the last id lkey kept when the stream's records expired (see
// expireEvents), so that ids never go back; and PERSIST, since an append
// cancels the stream's expiry (a stream written to after its deadline was
// set is never deleted under its writer).
const evtAddLua = `
local function evt_add(key, lkey, d)
  if redis.call('PERSIST', key) == 0 and redis.call('EXISTS', key) == 0 then
    local last = redis.call('GET', lkey)
    if last then
      return redis.call('XADD', key, '0-' .. string.format('%d', tonumber(last) + 1), 'd', d)
    end
  end
  return redis.call('XADD', key, '0-*', 'd', d)
end
`

// appendStreamsLua defines append_streams(i, skip_after): for each stream
// of the first half of KEYS (the second half: their last-id keys), from
// ARGV[i] on, the number of records before and after (a turn's end), then
// those records; it appends them all, or only those before when
// skip_after, and returns the id of each stream's first record (an empty
// string when none was appended).
const appendStreamsLua = evtAddLua + `
local function append_streams(i, skip_after)
  local firsts = {}
  local ns = #KEYS / 2
  for k = 1, ns do
    local nb, na = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    i = i + 2
    local n = nb + na
    if skip_after then n = nb end
    local first = ''
    for j = 0, n - 1 do
      local id = evt_add(KEYS[k], KEYS[k + ns], ARGV[i + j])
      if j == 0 then first = id end
    end
    i = i + nb + na
    firsts[k] = first
  end
  return firsts
end
`

// appendStreams: KEYS the streams, then their last-id keys; ARGV for each stream the number of its
// records, 0, then its records. Returns each stream's first id.
var appendStreamsScript = redis.NewScript(appendStreamsLua + `
return append_streams(1, false)
`)

// appendCommit: KEYS the streams, then their last-id keys; ARGV[1] the number c of commit_turn's
// arguments, ARGV[2 .. c+1] those arguments, then append_streams's from
// c+2. One script, so one step on the server: the records before the end,
// the commit and the end's records (only when the commit is OK). Returns
// {status, version or stored version (0 when none), first id of each
// stream ...}.
var appendCommitScript = redis.NewScript(luaLib + commitTurnLua + appendStreamsLua + `
local c = tonumber(ARGV[1])
local res = commit_turn(1, c + 1)
local firsts = append_streams(c + 2, res[1] ~= 'OK')
local out = {res[1], res[2] or 0}
for k = 1, #firsts do out[k + 2] = firsts[k] end
return out
`)

// appendEvents: KEYS stream, its last-id key; ARGV records. Returns the id
// of the first. An append cancels the stream's expiry (evt_add).
var appendEventsScript = redis.NewScript(evtAddLua + `
local first
for i = 1, #ARGV do
  local id = evt_add(KEYS[1], KEYS[2], ARGV[i])
  if i == 1 then first = id end
end
return first
`)

// seedEvents: KEYS stream, its last-id key; ARGV[1] the last id a stream
// without records is to continue after (see evt_add).
var seedEvents = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur < tonumber(ARGV[1]) then redis.call('SET', KEYS[2], ARGV[1]) end
return 1
`)

// expireEvents: KEYS stream, its last-id key; ARGV[1] the ttl in ms (0:
// now). The stream's last id goes to the last-id key, which has no expiry
// (a few bytes per stream name), and the stream expires with its records:
// the next append continues after that id (evt_add). Returns 0 when there
// is no stream.
var expireEventsScript = redis.NewScript(`
local m = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #m == 0 then return 0 end
redis.call('SET', KEYS[2], string.sub(m[1][1], 3))
if ARGV[1] == '0' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 1
`)

// acquireLease: ARGV p, key, owner, data, ttl ms.
// Returns {1, token, expiry ms} or {0, owner, expiry ms}.
var acquireLeaseScript = redis.NewScript(luaLib + `
local p, key, owner = ARGV[1], ARGV[2], ARGV[3]
local lk = p .. 'l:' .. key
local now = now_ms()
local cur = redis.call('HMGET', lk, 'o', 't', 'e')
local tok
if not cur[1] then
  tok = 1
elseif cur[1] == owner then
  tok = tonumber(cur[2]) + 1
elseif now < tonumber(cur[3]) then
  return {0, cur[1], cur[3]}
else
  tok = tonumber(cur[2]) + 1
end
local exp = now + tonumber(ARGV[5])
redis.call('HSET', lk, 'o', owner, 't', string.format('%d', tok), 'e', string.format('%d', exp), 'd', ARGV[4])
redis.call('SADD', p .. 'ls', key)
return {1, string.format('%d', tok), string.format('%d', exp)}
`)

// renewLease: ARGV p, key, owner, token, ttl ms. Returns {1, expiry} or {0}.
var renewLeaseScript = redis.NewScript(luaLib + `
local lk = ARGV[1] .. 'l:' .. ARGV[2]
local cur = redis.call('HMGET', lk, 'o', 't', 'd')
if (not cur[1]) or cur[1] ~= ARGV[3] or cur[2] ~= ARGV[4] then return {0} end
local exp = now_ms() + tonumber(ARGV[5])
redis.call('HSET', lk, 'e', string.format('%d', exp))
return {1, string.format('%d', exp), cur[3] or ''}
`)

// releaseLease: ARGV p, key, owner, token.
var releaseLeaseScript = redis.NewScript(`
local lk = ARGV[1] .. 'l:' .. ARGV[2]
local cur = redis.call('HMGET', lk, 'o', 't')
if cur[1] == ARGV[3] and cur[2] == ARGV[4] then
  redis.call('DEL', lk)
  redis.call('SREM', ARGV[1] .. 'ls', ARGV[2])
  return 1
end
return 0
`)

// beginCall: ARGV p, task, call, entry JSON.
var beginCallScript = redis.NewScript(`
local p, t, c = ARGV[1], ARGV[2], ARGV[3]
local jk = p .. 'j:' .. t
if redis.call('HEXISTS', jk, 'b:' .. c) == 0 then
  redis.call('RPUSH', p .. 'jo:' .. t, c)
end
redis.call('HSET', jk, 'b:' .. c, ARGV[4])
redis.call('HDEL', jk, 'e:' .. c)
redis.call('SADD', p .. 'dur', t)
return 1
`)

// endCall: ARGV p, task, call, end JSON. Returns 0 when never begun.
var endCallScript = redis.NewScript(`
local jk = ARGV[1] .. 'j:' .. ARGV[2]
if redis.call('HEXISTS', jk, 'b:' .. ARGV[3]) == 0 then return 0 end
redis.call('HSET', jk, 'e:' .. ARGV[3], ARGV[4])
return 1
`)

// deleteCalls: ARGV p, task.
var deleteCallsScript = redis.NewScript(luaLib + `
redis.call('DEL', ARGV[1] .. 'j:' .. ARGV[2], ARGV[1] .. 'jo:' .. ARGV[2])
durable_drop(ARGV[1], ARGV[2])
return 1
`)

// saveCheckpoint: ARGV p, task, JSON.
var saveCheckpointScript = redis.NewScript(`
redis.call('SET', ARGV[1] .. 'cp:' .. ARGV[2], ARGV[3])
redis.call('SADD', ARGV[1] .. 'dur', ARGV[2])
return 1
`)

// deleteCheckpoint: ARGV p, task.
var deleteCheckpointScript = redis.NewScript(luaLib + `
redis.call('DEL', ARGV[1] .. 'cp:' .. ARGV[2])
durable_drop(ARGV[1], ARGV[2])
return 1
`)

// kvSet: ARGV value key, usage key, value, max keys, max bytes (-1: no
// check). The usage hash (k: keys, b: value bytes) changes with the value.
// Answers "" when written, "keys" or "bytes" when refused by the check.
var kvSetScript = redis.NewScript(`
local existed = redis.call('EXISTS', ARGV[1])
local old = redis.call('STRLEN', ARGV[1])
local dk = 1 - existed
local db = string.len(ARGV[3]) - old
local maxk = tonumber(ARGV[4])
if maxk >= 0 then
  local k = tonumber(redis.call('HGET', ARGV[2], 'k') or '0')
  local b = tonumber(redis.call('HGET', ARGV[2], 'b') or '0')
  if k + dk > maxk then return 'keys' end
  if b + db > tonumber(ARGV[5]) then return 'bytes' end
end
redis.call('SET', ARGV[1], ARGV[3])
if dk ~= 0 then redis.call('HINCRBY', ARGV[2], 'k', dk) end
if db ~= 0 then redis.call('HINCRBY', ARGV[2], 'b', db) end
return ''
`)

// kvDelete: ARGV value key, usage key.
var kvDeleteScript = redis.NewScript(`
local old = redis.call('STRLEN', ARGV[1])
if redis.call('DEL', ARGV[1]) == 1 then
  redis.call('HINCRBY', ARGV[2], 'k', -1)
  if old ~= 0 then redis.call('HINCRBY', ARGV[2], 'b', -old) end
end
return 0
`)
