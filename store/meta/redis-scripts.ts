/**
 * The Lua scripts of RedisMeta: each change to names, versions, blocks, directories and nodes is one
 * script, so it is atomic on the server and costs one round trip. Scripts that change a name or a
 * directory PUBLISH it on <P>changes before they reply (the change feed).
 */
import { INODE_ALLOCATED_LIMIT, INODE_FIRST_ALLOCATED } from '../constants';

/**
 * Released blocks a node has not yet dropped, at most (its queue keeps the newest). A node that falls
 * further behind drops the rest of its stale copies at its next start, when it reconciles.
 */
const RECLAIM_QUEUE_MAX = 1_000_000;

// ---- the scripts ----------------------------------------------------------------------------------
// ARGV[1] is always the key prefix <P>; KEYS[1] is <P>totals (it routes the script to the slot).
// Numbers go to redis.call as strings made with %d: Lua numbers are doubles, and the default
// conversion may print 1.7e+12.

const LUA_COMMON = `
local P = ARGV[1]
local T = KEYS[1]
local function s(n) return string.format('%d', n) end
-- Content released for good: every node that holds a copy is told to drop it (a bounded queue each).
local function notify_holders(sha)
  local lk, dk = P .. 'loc:' .. sha, P .. 'dram:' .. sha
  local told = {}
  local function tell(node)
    if told[node] then return end
    told[node] = true
    local q = P .. 'reclaim:' .. node
    redis.call('RPUSH', q, sha)
    redis.call('LTRIM', q, -${RECLAIM_QUEUE_MAX}, -1)
  end
  for _, node in ipairs(redis.call('HKEYS', lk)) do tell(node) end
  for _, node in ipairs(redis.call('SMEMBERS', dk)) do tell(node) end
  redis.call('DEL', lk, dk)
end
-- Every change of a name or directory, told to the other nodes (watchChanges): the origin (the
-- caller's last argument), the kind, then its fields (names; a file's new version as its member, and
-- the node that holds its content in DRAM), NUL-separated. Queued before the caller's reply.
local function changed(kind, ...)
  redis.call('PUBLISH', P .. 'changes', table.concat({ ARGV[#ARGV], kind, ... }, '\0'))
end
local function member(v, sha, size, t, ino) return s(v) .. ':' .. sha .. ':' .. s(size) .. ':' .. s(t) .. ':' .. s(ino) end
local function vkey(name) return P .. 'v:' .. name end
local function bkey(sha) return P .. 'b:' .. sha end
local function skey(sha) return P .. 's:' .. sha end
local function parse(member)
  local v, sha, size, t, ino = string.match(member, '^(%d+):(%x+):(%d+):(%d+):(%d+)$')
  return tonumber(v), sha, tonumber(size), tonumber(t), tonumber(ino)
end
-- The block row goes (its last reference went), with its share of the totals and its places.
local function drop_block(sha)
  local bk = bkey(sha)
  local size = tonumber(redis.call('HGET', bk, 'size'))
  if redis.call('HGET', bk, 'pinned') == '1' then
    redis.call('HINCRBY', T, 'pinned', s(-size))
    redis.call('SREM', P .. 'pinned', sha)
  end
  redis.call('DEL', bk)
  notify_holders(sha)
  redis.call('SREM', P .. 'blocks', sha)
  redis.call('HINCRBY', T, 'blocks', -1)
  redis.call('HINCRBY', T, 'unique', s(-size))
end
local function unref(sha, released)
  local refs = redis.call('HINCRBY', bkey(sha), 'refs', -1)
  if refs > 0 then return end
  drop_block(sha)
  table.insert(released, sha)
end
-- Checks before any write: known content must keep its size.
local function check_size(sha, size)
  local known = redis.call('HGET', bkey(sha), 'size')
  if known and tonumber(known) ~= size then
    return redis.error_reply('ASSERT block ' .. sha .. ' committed with size ' .. s(size) .. ', known as ' .. known)
  end
end
local function take_inodes(count)
  local first = tonumber(redis.call('GET', P .. 'next_ino') or '${INODE_FIRST_ALLOCATED}')
  if first + count > ${INODE_ALLOCATED_LIMIT} then return nil end
  redis.call('SET', P .. 'next_ino', s(first + count))
  return first
end
local function add_version(name, sha, size, t, keep, ino, released)
  local bk = bkey(sha)
  if redis.call('EXISTS', bk) == 0 then
    redis.call('HSET', bk, 'size', s(size), 'refs', '1', 'pinned', '0')
    redis.call('SADD', P .. 'blocks', sha)
    redis.call('HINCRBY', T, 'blocks', 1)
    redis.call('HINCRBY', T, 'unique', s(size))
  else
    redis.call('HINCRBY', bk, 'refs', 1)
  end
  local last = redis.call('HGET', P .. 'last', name)
  if not last then
    last = 0
    redis.call('ZADD', P .. 'names', '0', name)
    redis.call('HINCRBY', T, 'names', 1)
  end
  local vk = vkey(name)
  local prev = redis.call('ZRANGE', vk, -1, -1)
  if prev[1] then
    local _, _, _, pt = parse(prev[1])
    if pt > t then t = pt end
  end
  local v = tonumber(last) + 1
  redis.call('HSET', P .. 'last', name, s(v))
  redis.call('ZADD', vk, s(v), member(v, sha, size, t, ino))
  redis.call('SADD', skey(sha), name .. '\\0' .. s(v))
  redis.call('HINCRBY', T, 'versions', 1)
  redis.call('HINCRBY', T, 'logical', s(size))
  local n = redis.call('ZCARD', vk)
  if n > keep then
    for _, m in ipairs(redis.call('ZRANGE', vk, 0, n - keep - 1)) do
      local ov, osha, osize = parse(m)
      redis.call('ZREM', vk, m)
      redis.call('SREM', skey(osha), name .. '\\0' .. s(ov))
      redis.call('HINCRBY', T, 'versions', -1)
      redis.call('HINCRBY', T, 'logical', s(-osize))
      unref(osha, released)
    end
  end
  return { v, t, ino }
end
local function drop_name(name, released)
  local vk = vkey(name)
  for _, m in ipairs(redis.call('ZRANGE', vk, 0, -1)) do
    local ov, osha, osize = parse(m)
    redis.call('SREM', skey(osha), name .. '\\0' .. s(ov))
    redis.call('HINCRBY', T, 'versions', -1)
    redis.call('HINCRBY', T, 'logical', s(-osize))
    unref(osha, released)
  end
  redis.call('DEL', vk)
  redis.call('HDEL', P .. 'last', name)
  redis.call('HDEL', P .. 'modes', name)
  redis.call('ZREM', P .. 'names', name)
  redis.call('HINCRBY', T, 'names', -1)
end
local function head_ino(name)
  local head = redis.call('ZRANGE', vkey(name), -1, -1)
  if head[1] then local _, _, _, _, ino = parse(head[1]); return ino end
end
`;

/**
 * commit(name, sha, size, time, keep, ino or '', node or '', where or '', knownOnly '1'|'', dram node or '')
 *   -> { version, time, ino, released... }.
 * With node and where, the committing node's copy on the shared tier is recorded in the same step, so
 * no reader can see the version without a place to read it from. knownOnly: commit only if the
 * content is already stored on the shared tier (by any node), else ENOENT and nothing changes (global
 * dedup).
 */
export const LUA_COMMIT = `${LUA_COMMON}
local name, sha, size, t, keep = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local err = check_size(sha, size)
if err then return err end
if ARGV[10] == '1' then
  if redis.call('EXISTS', bkey(sha)) == 0 then return redis.error_reply('ENOENT content ' .. sha .. ' is not stored') end
  -- Only in its writer's DRAM so far (the shared-tier append follows that commit): a reference to it
  -- would not survive that node's crash, so the caller stores a copy of its own.
  if redis.call('EXISTS', P .. 'loc:' .. sha) == 0 then return redis.error_reply('ENOENT content ' .. sha .. ' is not on the shared tier yet') end
end
local ino = tonumber(ARGV[7]) or head_ino(name) or take_inodes(1)
if not ino then return redis.error_reply('ENOSPC inode numbers are used up') end
local released = {}
local r = add_version(name, sha, size, t, keep, ino, released)
if ARGV[8] ~= '' then redis.call('HSET', P .. 'loc:' .. sha, ARGV[8], ARGV[9]) end
local holder = ''
if ARGV[11] ~= '' and redis.call('EXISTS', bkey(sha)) == 1 then
  redis.call('SADD', P .. 'dram:' .. sha, ARGV[11])
  holder = ARGV[11]
end
changed('f', name, member(r[1], sha, size, r[2], r[3]), holder)
for _, x in ipairs(released) do table.insert(r, x) end
return r
`;

/** rename(from, to, time, keep) -> { version, time, ino, sha, size, released... } */
export const LUA_RENAME = `${LUA_COMMON}
local from, to, t, keep = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local head = redis.call('ZRANGE', vkey(from), -1, -1)
if not head[1] then return redis.error_reply('ENOENT no such name: ' .. from) end
local hv, sha, size, ht, ino = parse(head[1])
if from == to then return { hv, ht, ino, sha, size } end
local released = {}
-- Add to \`to\` first: the moved content gains a reference before \`from\` drops its own.
local r = add_version(to, sha, size, t, keep, ino, released)
local mode = redis.call('HGET', P .. 'modes', from)
if mode then redis.call('HSET', P .. 'modes', to, mode) else redis.call('HDEL', P .. 'modes', to) end
drop_name(from, released)
changed('r', from, to, member(r[1], sha, size, r[2], r[3]))
table.insert(r, sha)
table.insert(r, size)
for _, x in ipairs(released) do table.insert(r, x) end
return r
`;

/** remove(name) -> { released... } */
export const LUA_REMOVE = `${LUA_COMMON}
local name = ARGV[2]
if not redis.call('HGET', P .. 'last', name) then return redis.error_reply('ENOENT no such name: ' .. name) end
local released = {}
drop_name(name, released)
changed('x', name)
return released
`;

/** setMode(name, mode) */
export const LUA_MODE = `${LUA_COMMON}
if not redis.call('HGET', P .. 'last', ARGV[2]) then return redis.error_reply('ENOENT no such name: ' .. ARGV[2]) end
redis.call('HSET', P .. 'modes', ARGV[2], ARGV[3])
-- The version is unchanged: sent again, so that other nodes keep it as current.
local head = redis.call('ZRANGE', vkey(ARGV[2]), -1, -1)
changed('f', ARGV[2], head[1] or '')
return 1
`;

/** makeDir(name, mode) */
export const LUA_MKDIR = `${LUA_COMMON}
redis.call('ZADD', P .. 'dirs', 0, ARGV[2])
redis.call('HSET', P .. 'dirmodes', ARGV[2], ARGV[3])
changed('D', ARGV[2])
return 1
`;

/** removeDir(name) */
export const LUA_RMDIR = `${LUA_COMMON}
redis.call('ZREM', P .. 'dirs', ARGV[2])
redis.call('HDEL', P .. 'dirmodes', ARGV[2])
changed('d', ARGV[2])
return 1
`;

/** setPinned(sha, 0|1) */
export const LUA_PIN = `${LUA_COMMON}
local sha, pinned = ARGV[2], ARGV[3]
local bk = bkey(sha)
local row = redis.call('HMGET', bk, 'size', 'pinned')
if not row[1] then return redis.error_reply('ENOENT no such block: ' .. sha) end
if row[2] == pinned then return 0 end
redis.call('HSET', bk, 'pinned', pinned)
local size = tonumber(row[1])
if pinned == '1' then
  redis.call('HINCRBY', T, 'pinned', s(size))
  redis.call('SADD', P .. 'pinned', sha)
else
  redis.call('HINCRBY', T, 'pinned', s(-size))
  redis.call('SREM', P .. 'pinned', sha)
end
return 1
`;

/** forget(sha) -> removed version count */
export const LUA_FORGET = `${LUA_COMMON}
local sha = ARGV[2]
local bk = bkey(sha)
local refs = tonumber(redis.call('HGET', bk, 'refs') or '0')
local members = redis.call('SMEMBERS', skey(sha))
if #members ~= refs then
  return redis.error_reply('ASSERT block ' .. sha .. ' has refs ' .. s(refs) .. ' but ' .. s(#members) .. ' versions')
end
for _, m in ipairs(members) do
  local name, v = string.match(m, '^(.*)%z(%d+)$')
  local vk = vkey(name)
  local found = redis.call('ZRANGEBYSCORE', vk, v, v)
  local _, _, size = parse(found[1])
  redis.call('ZREMRANGEBYSCORE', vk, v, v)
  redis.call('HINCRBY', T, 'versions', -1)
  redis.call('HINCRBY', T, 'logical', s(-size))
  -- A name whose every version went no longer exists (its numbering restarts, as after remove).
  if redis.call('ZCARD', vk) == 0 and redis.call('HDEL', P .. 'last', name) == 1 then
    redis.call('HDEL', P .. 'modes', name)
    redis.call('ZREM', P .. 'names', name)
    redis.call('HINCRBY', T, 'names', -1)
  end
end
redis.call('DEL', skey(sha))
if refs > 0 then drop_block(sha) end
return #members
`;

/** allocateInodes(count) -> first */
export const LUA_INODES = `${LUA_COMMON}
local first = take_inodes(tonumber(ARGV[2]))
if not first then return redis.error_reply('ENOSPC inode numbers are used up') end
return first
`;

/** placeBlock(sha, node, "offset:size:file"): only while the block row exists (else it was released). */
export const LUA_PLACE = `${LUA_COMMON}
local sha, node, where = ARGV[2], ARGV[3], ARGV[4]
if redis.call('EXISTS', bkey(sha)) == 0 then return 0 end
redis.call('HSET', P .. 'loc:' .. sha, node, where)
return 1
`;

/**
 * joinNode(name, token, ttlMs, replacing): 1 when the lease is ours now, 0 when another token holds
 * it (a holder equal to `replacing`, a token of a dead process, may be replaced).
 */
export const LUA_JOIN = `${LUA_COMMON}
local key, token, ttl, replacing = P .. 'node:' .. ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local held = redis.call('GET', key)
if held and held ~= token and held ~= replacing then return 0 end
redis.call('SET', key, token, 'PX', ttl)
redis.call('SADD', P .. 'nodes', ARGV[2])
return 1
`;

/**
 * currentWithHolders(name): the newest version's member, then the nodes that hold its content in DRAM;
 * an empty list when the name has none. Read-only: a remote read's two lookups in one round trip.
 */
export const LUA_CURRENT = `
local P = ARGV[1]
local m = redis.call('ZRANGE', P .. 'v:' .. ARGV[2], -1, -1)[1]
if not m then return {} end
local out = { m }
local sha = string.match(m, '^%d+:(%x+):')
if sha then
  for _, node in ipairs(redis.call('SMEMBERS', P .. 'dram:' .. sha)) do out[#out + 1] = node end
end
return out
`;

/**
 * lookupName(name): what a path is, in one round trip. A file: { 'f', newest version's member, the
 * nodes that hold its content in DRAM... }; a directory: { 'd', its mkdir mode or '' (one that exists
 * through the names below it) }; nothing: {}. Read-only.
 */
export const LUA_LOOKUP = `
local P, name = ARGV[1], ARGV[2]
local m = redis.call('ZRANGE', P .. 'v:' .. name, -1, -1)[1]
if m then
  local out = { 'f', m }
  local sha = string.match(m, '^%d+:(%x+):')
  if sha then
    for _, node in ipairs(redis.call('SMEMBERS', P .. 'dram:' .. sha)) do out[#out + 1] = node end
  end
  return out
end
local mode = redis.call('HGET', P .. 'dirmodes', name)
if mode then return { 'd', mode } end
-- '0' follows '/' in byte order: the names below name/ lie in [name/, name0).
if redis.call('ZRANGEBYLEX', P .. 'names', '[' .. name .. '/', '(' .. name .. '0', 'LIMIT', 0, 1)[1] then return { 'd', '' } end
return {}
`;

/** leaveNode(name, token): drops the lease if it is still ours. */
export const LUA_LEAVE = `${LUA_COMMON}
local key, token = P .. 'node:' .. ARGV[2], ARGV[3]
if redis.call('GET', key) == token then redis.call('DEL', key) return 1 end
return 0
`;

