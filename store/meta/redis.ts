/**
 * RedisMeta: the metadata engine on Redis, for many nodes sharing one namespace (ioredis client).
 *
 * Every mutation is one Lua script, so it is atomic: Redis runs a script with nothing interleaved. A
 * script that fails at run time keeps what it wrote before failing (Redis has no rollback), so each
 * script checks everything that can fail before its first write, as MemoryMeta does.
 *
 * Key layout. Every key of one namespace carries the hash tag `{<namespace>}`, so on Redis Cluster all
 * of them live in one slot and a script may touch any of them (a commit touches a name, a block and the
 * totals at once). One namespace is served by one master; several namespaces spread over the masters.
 * This is how JuiceFS lays out one volume on Redis Cluster.
 *
 *   <P> = cascade:{<ns>}:
 *   <P>names        sorted set, every score 0: the names, in byte order (ZRANGEBYLEX = code point order)
 *   <P>last         hash name -> highest version number given (numbers are not reused while it exists)
 *   <P>modes        hash name -> permission bits set by chmod (absent: 0644); moved by rename
 *   <P>dirs         sorted set, every score 0: the directories made by mkdir (ZRANGEBYLEX, as names)
 *   <P>dirmodes     hash directory -> its permission bits
 *   <P>v:<name>     sorted set of retained versions, score = version, member "v:sha:size:timeMs:ino"
 *   <P>b:<sha>      hash size, refs, pinned: one per content referenced by a retained version
 *   <P>s:<sha>      set of "<name>\0<version>": the versions that reference the content (for forget)
 *   <P>blocks       set of every content with a block row
 *   <P>pinned       set of the pinned contents (a node loads them at start without reading every row)
 *   <P>totals       hash names, versions, blocks, unique, logical, pinned
 *   <P>next_ino     the inode number counter
 *   <P>loc:<sha>    hash node -> "offset:size:file": where cluster nodes hold the block on the shared
 *                   tier (file relative to the shared directory); deleted with the block row
 *   <P>node:<name>  a node's lease (its token, with a TTL the node keeps renewing); <P>nodes: the names
 *   <P>nodestats:<name>  a node's last published figures (JSON, with a TTL)
 *   <P>reclaim:<name>  released blocks that node holds a copy of and should drop (a bounded list)
 *   <P>replicate:<name>  pinned blocks that node is asked to keep a DRAM copy of (a bounded list)
 *   <P>dram:<sha>   set of nodes that hold the block in DRAM (for remote reads over the fabric); a
 *                   hint, not a promise: a node checks its copy when asked, and drops stale members
 *
 * Durability: a reply means Redis applied the script. For it to survive a crash of Redis, run Redis
 * with `appendonly yes` and `appendfsync always`, as the tests do; sync() then has nothing left to wait
 * for. With `appendfsync everysec` up to a second of commits can be lost when Redis (not Cascade) dies.
 */
import { randomBytes } from 'node:crypto';
import { Cluster, Redis, type ChainableCommander, type RedisOptions } from 'ioredis';
import { assert, CascadeError, isCascadeError } from '../errors';
import type { BlockPlacement, BlockRecord, ChangeListener, ClusterDirectory, CommitResult, ListOptions, MetaEngine, MetaTotals, NameChange, NameLookup, VersionRecord } from '../meta';

import {
  LUA_COMMIT,
  LUA_RENAME,
  LUA_REMOVE,
  LUA_MODE,
  LUA_MKDIR,
  LUA_RMDIR,
  LUA_PIN,
  LUA_FORGET,
  LUA_INODES,
  LUA_PLACE,
  LUA_JOIN,
  LUA_CURRENT,
  LUA_LOOKUP,
  LUA_LEAVE,
} from './redis-scripts';
export type { BlockPlacement, ClusterDirectory } from '../meta';
import {
  checkCommitArgs,
  checkIno,
  checkInodeCount,
  checkKeepVersions,
  checkListArgs,
  checkMode,
  checkName,
  checkTimeMs,
  closedError,
  prefixUpperBound,
} from './memory';

/** A namespace is one key tag: short, and nothing that could end the tag or confuse a key. */
const NAMESPACE_RE = /^[A-Za-z0-9_.-]{1,64}$/;
/** How long a command may wait for Redis before the call fails with EIO (a commit must not hang). */
const COMMAND_TIMEOUT_MS = 5_000;
/** How long connect() waits for Redis to answer. */
const CONNECT_TIMEOUT_MS = 5_000;
/** Block rows read per round trip by blocks(). */
const BLOCKS_BATCH = 1000;
/** Replica requests a node has not taken yet, at most (pins are bounded by quotas anyway). */
const REPLICA_QUEUE_MAX = 100_000;

export interface RedisMetaOptions {
  /** One server (`redis://host:port`) or the seed nodes of a Redis Cluster. */
  nodes: Array<{ host: string; port: number }>;
  cluster?: boolean;
  /** Which Cascade namespace (all nodes of one Cascade use the same). */
  namespace: string;
  password?: string;
}

/** Parses `redis://[:password@]host:port[,host:port...][/namespace]`; several hosts mean a cluster. */
export function parseRedisUrl(url: string, namespaceDefault = 'cascade'): RedisMetaOptions {
  const m = /^redis(\+cluster)?:\/\/(?:(?:[^:@/]*):([^@/]*)@)?([^/]+?)(?:\/([^/]*))?$/.exec(url);
  if (!m) throw new CascadeError('EINVAL', `bad Redis URL ${JSON.stringify(url)}: expected redis://host:port[/namespace]`);
  const nodes = m[3].split(',').map((hp) => {
    const hm = /^([^:]+|\[[0-9a-fA-F:]+\]):(\d{1,5})$/.exec(hp);
    const port = hm ? Number(hm[2]) : NaN;
    if (!hm || port < 1 || port > 65535) throw new CascadeError('EINVAL', `bad Redis address ${JSON.stringify(hp)} in ${url}: expected host:port`);
    return { host: hm[1].replace(/^\[|\]$/g, ''), port };
  });
  const namespace = m[4] || namespaceDefault;
  if (!NAMESPACE_RE.test(namespace)) throw new CascadeError('EINVAL', `bad namespace ${JSON.stringify(namespace)}: letters, digits, _ . - (1-64)`);
  return { nodes, cluster: m[1] !== undefined || nodes.length > 1, namespace, password: m[2] ? decodeURIComponent(m[2]) : undefined };
}

type Client = Redis | Cluster;
interface Scripts {
  cascadeCommit(totals: string, ...args: string[]): Promise<Array<number | string>>;
  cascadeRename(totals: string, ...args: string[]): Promise<Array<number | string>>;
  cascadeRemove(totals: string, ...args: string[]): Promise<string[]>;
  cascadePin(totals: string, ...args: string[]): Promise<number>;
  cascadeMode(totals: string, ...args: string[]): Promise<number>;
  cascadeMkdir(totals: string, ...args: string[]): Promise<number>;
  cascadeRmdir(totals: string, ...args: string[]): Promise<number>;
  cascadeForget(totals: string, ...args: string[]): Promise<number>;
  cascadeInodes(totals: string, ...args: string[]): Promise<number>;
  cascadePlace(totals: string, ...args: string[]): Promise<number>;
  cascadeJoin(totals: string, ...args: string[]): Promise<number>;
  cascadeLeave(totals: string, ...args: string[]): Promise<number>;
  cascadeCurrent(totals: string, ...args: string[]): Promise<string[]>;
  cascadeLookup(totals: string, ...args: string[]): Promise<string[]>;
}

function parseMember(name: string, member: string): VersionRecord {
  const m = /^(\d+):([0-9a-f]{64}):(\d+):(\d+):(\d+)$/.exec(member);
  assert(m !== null, `malformed version entry ${JSON.stringify(member)} of ${name}`);
  return { name, version: Number(m[1]), sha256: m[2], sizeBytes: Number(m[3]), timeMs: Number(m[4]), ino: Number(m[5]) };
}

const BLOCK_FIELDS = ['size', 'refs', 'pinned'] as const;

/** Run a pipeline; its `count` results in order, or the first command's error (a pipeline does not throw). */
async function results(pipe: ChainableCommander, count: number): Promise<unknown[]> {
  const replies = (await pipe.exec()) ?? [];
  const out: unknown[] = [];
  for (let i = 0; i < count; i++) {
    const [err, value] = replies[i] ?? [new Error('no reply'), null];
    if (err) throw err;
    out.push(value);
  }
  return out;
}

/** A block row from its hash fields (BLOCK_FIELDS order), or undefined when there is none. */
function blockRow(sha256: string, [size, refs, pinned]: Array<string | null>): BlockRecord | undefined {
  if (size === null) return undefined;
  return { sha256, sizeBytes: Number(size), refs: Number(refs), pinned: pinned === '1' };
}

/** Errors from Redis: ours (ENOENT/ENOSPC/ASSERT from the scripts), else the connection's: EIO. */
function mapError(e: unknown): unknown {
  if (isCascadeError(e)) return e;
  const message = e instanceof Error ? e.message : String(e);
  const code = /^(?:ERR )?(?:Error running script[^:]*: )?(?:@user_script:\d+: )?(ENOENT|ENOSPC|ASSERT) (.*)$/s.exec(message);
  if (code?.[1] === 'ASSERT') assert(false, code[2]);
  if (code) return new CascadeError(code[1] as 'ENOENT' | 'ENOSPC', code[2]);
  return new CascadeError('EIO', `metadata on Redis: ${message}`, { cause: e });
}

/**
 * ZRANGEBYLEX bounds of the members that start with `prefix`, after `after` when given. Lex ranges
 * compare bytes (UTF-8), which is code point order, the order of compareNames().
 */
function lexRange(prefix: string, after: string | undefined): [string, string] {
  const min = after !== undefined && Buffer.compare(Buffer.from(after), Buffer.from(prefix)) >= 0 ? `(${after}` : `[${prefix}`;
  const bound = prefixUpperBound(prefix);
  return [min, bound === undefined ? '+' : `(${bound}`];
}

const CHANGE_KINDS: Record<string, NameChange['kind']> = { f: 'file', x: 'removed', r: 'renamed', D: 'dirMade', d: 'dirRemoved' };

/** A change message of the scripts' changed(): undefined for this client's own, or one it cannot read. */
function parseChange(message: string, origin: string): NameChange | undefined {
  const [from, k, name, ...rest] = message.split('\0');
  const kind = CHANGE_KINDS[k];
  if (from === origin || kind === undefined || name === undefined) return undefined;
  // The new version, where the script sent it: a message that garbles it still says what changed.
  const version = (of: string, member: string | undefined): VersionRecord | undefined => {
    if (member === undefined) return undefined;
    try {
      return parseMember(of, member);
    } catch {
      return undefined;
    }
  };
  if (kind === 'renamed') {
    const to = rest[0];
    return to === undefined ? undefined : { kind, name, to, version: version(to, rest[1]) };
  }
  if (kind === 'file') return { kind, name, version: version(name, rest[0]), dramHolder: rest[1] || undefined };
  return { kind, name };
}

export class RedisMeta implements MetaEngine, ClusterDirectory {
  readonly kind = 'redis';
  private closed = false;
  private readonly prefix: string;
  private readonly totalsKey: string;
  /** Who this client is in the change messages it causes (its own are not told back to it). */
  private readonly origin = randomBytes(8).toString('hex');

  private constructor(
    private readonly client: Client,
    readonly namespace: string,
  ) {
    this.prefix = `cascade:{${namespace}}:`;
    this.totalsKey = `${this.prefix}totals`;
    for (const [name, lua] of [
      ['cascadeCommit', LUA_COMMIT],
      ['cascadeRename', LUA_RENAME],
      ['cascadeRemove', LUA_REMOVE],
      ['cascadePin', LUA_PIN],
      ['cascadeMode', LUA_MODE],
      ['cascadeMkdir', LUA_MKDIR],
      ['cascadeRmdir', LUA_RMDIR],
      ['cascadeForget', LUA_FORGET],
      ['cascadeInodes', LUA_INODES],
      ['cascadePlace', LUA_PLACE],
      ['cascadeJoin', LUA_JOIN],
      ['cascadeLeave', LUA_LEAVE],
      ['cascadeCurrent', LUA_CURRENT],
      ['cascadeLookup', LUA_LOOKUP],
    ] as const) {
      client.defineCommand(name, { numberOfKeys: 1, lua });
    }
  }

  /** Connects and checks that Redis answers; EIO (with the address) when it does not. */
  static async connect(options: RedisMetaOptions): Promise<RedisMeta> {
    if (!NAMESPACE_RE.test(options.namespace)) throw new CascadeError('EINVAL', `bad namespace ${JSON.stringify(options.namespace)}`);
    if (options.nodes.length === 0) throw new CascadeError('EINVAL', 'no Redis address');
    const common: RedisOptions = {
      password: options.password,
      lazyConnect: true,
      connectTimeout: CONNECT_TIMEOUT_MS,
      commandTimeout: COMMAND_TIMEOUT_MS,
      // Fail calls while disconnected instead of queueing them without bound.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
    };
    const client: Client = options.cluster
      ? new Cluster(options.nodes, { redisOptions: common, lazyConnect: true, enableOfflineQueue: false, clusterRetryStrategy: (n) => (n > 3 ? null : 200) })
      : new Redis({ ...common, host: options.nodes[0].host, port: options.nodes[0].port, retryStrategy: (n) => Math.min(n * 200, 2_000) });
    // ioredis reports connection errors as events too; they reach callers as rejected commands.
    client.on('error', () => {});
    const where = options.nodes.map((n) => `${n.host}:${n.port}`).join(',');
    try {
      await client.connect();
      await client.ping();
    } catch (e) {
      client.disconnect();
      throw new CascadeError('EIO', `cannot reach Redis at ${where}: ${(e as Error).message}`, { cause: e });
    }
    return new RedisMeta(client, options.namespace);
  }

  private get scripts(): Scripts {
    return this.client as unknown as Scripts;
  }

  private key(suffix: string): string {
    return this.prefix + suffix;
  }

  private async guard<T>(body: () => Promise<T>): Promise<T> {
    if (this.closed) throw closedError(this.kind);
    try {
      return await body();
    } catch (e) {
      throw mapError(e);
    }
  }

  async current(name: string): Promise<VersionRecord | undefined> {
    return this.guard(async () => {
      checkName(name);
      const [m] = await this.client.zrange(this.key(`v:${name}`), '-1', '-1');
      return m === undefined ? undefined : parseMember(name, m);
    });
  }

  async version(name: string, version: number): Promise<VersionRecord | undefined> {
    return this.guard(async () => {
      checkName(name);
      if (!Number.isSafeInteger(version)) return undefined;
      const [m] = await this.client.zrangebyscore(this.key(`v:${name}`), version, version);
      return m === undefined ? undefined : parseMember(name, m);
    });
  }

  async versionAt(name: string, timeMs: number): Promise<VersionRecord | undefined> {
    const all = await this.versions(name);
    // timeMs never decreases along versions, so the newest match is the last one from the end.
    for (let i = all.length - 1; i >= 0; i--) if (all[i].timeMs <= timeMs) return all[i];
    return undefined;
  }

  async versions(name: string): Promise<VersionRecord[]> {
    return this.guard(async () => {
      checkName(name);
      return (await this.client.zrange(this.key(`v:${name}`), '0', '-1')).map((m) => parseMember(name, m));
    });
  }

  async commit(name: string, sha256: string, sizeBytes: number, timeMs: number, keepVersions: number, ino?: number): Promise<CommitResult> {
    return this.commitPlaced(name, sha256, sizeBytes, timeMs, keepVersions, ino, undefined);
  }

  /** commit(), recording in the same atomic step where the committing node holds the content. */
  async commitPlaced(
    name: string,
    sha256: string,
    sizeBytes: number,
    timeMs: number,
    keepVersions: number,
    ino: number | undefined,
    placement: BlockPlacement | undefined,
    knownOnly = false,
    dramHolder?: string,
  ): Promise<CommitResult> {
    return this.guard(async () => {
      checkCommitArgs(name, sha256, sizeBytes, timeMs, keepVersions);
      checkIno(ino);
      const where = placement === undefined ? ['', ''] : [placement.node, `${placement.offsetBytes}:${placement.sizeBytes}:${placement.file}`];
      const r = await this.scripts.cascadeCommit(
        this.totalsKey,
        this.prefix,
        name,
        sha256,
        String(sizeBytes),
        String(timeMs),
        String(keepVersions),
        ino === undefined ? '' : String(ino),
        ...where,
        knownOnly ? '1' : '',
        dramHolder ?? '',
        this.origin,
      );
      const [version, time, fileIno, ...released] = r;
      return {
        version: { name, version: Number(version), sha256, sizeBytes, timeMs: Number(time), ino: Number(fileIno) },
        released: released.map(String),
      };
    });
  }

  async remove(name: string): Promise<{ released: string[] }> {
    return this.guard(async () => {
      checkName(name);
      return { released: (await this.scripts.cascadeRemove(this.totalsKey, this.prefix, name, this.origin)).map(String) };
    });
  }

  async rename(from: string, to: string, timeMs: number, keepVersions: number): Promise<CommitResult> {
    return this.guard(async () => {
      checkName(from, 'from');
      checkName(to, 'to');
      checkTimeMs(timeMs);
      checkKeepVersions(keepVersions);
      const r = await this.scripts.cascadeRename(this.totalsKey, this.prefix, from, to, String(timeMs), String(keepVersions), this.origin);
      const [version, time, ino, sha, size, ...released] = r;
      return {
        version: { name: to, version: Number(version), sha256: String(sha), sizeBytes: Number(size), timeMs: Number(time), ino: Number(ino) },
        released: released.map(String),
      };
    });
  }

  async allocateInodes(count: number): Promise<number> {
    return this.guard(async () => {
      checkInodeCount(count);
      return Number(await this.scripts.cascadeInodes(this.totalsKey, this.prefix, String(count)));
    });
  }

  async list(prefix: string, options: ListOptions): Promise<string[]> {
    return this.guard(async () => {
      checkListArgs(prefix, options);
      if (options.limit === 0) return [];
      return this.client.zrangebylex(this.key('names'), ...lexRange(prefix, options.after), 'LIMIT', '0', String(options.limit));
    });
  }

  async block(sha256: string): Promise<BlockRecord | undefined> {
    return this.guard(async () => blockRow(sha256, await this.client.hmget(this.key(`b:${sha256}`), ...BLOCK_FIELDS)));
  }

  async setMode(name: string, mode: number): Promise<void> {
    return this.guard(async () => {
      checkName(name);
      checkMode(mode);
      await this.scripts.cascadeMode(this.totalsKey, this.prefix, name, String(mode), this.origin);
    });
  }

  async modes(options: ListOptions): Promise<Array<[string, number]>> {
    return this.guard(async () => {
      checkListArgs('', options);
      if (options.limit === 0) return [];
      // Few names have a mode: read the hash whole (HSCAN, in pages) and order it as list() does.
      const all: Array<[string, number]> = [];
      let cursor = '0';
      do {
        const [next, flat] = await this.client.hscan(this.key('modes'), cursor, 'COUNT', 1000);
        for (let i = 0; i < flat.length; i += 2) all.push([flat[i], Number(flat[i + 1])]);
        cursor = next;
      } while (cursor !== '0');
      const after = options.after;
      return all
        .filter(([n]) => after === undefined || Buffer.compare(Buffer.from(n), Buffer.from(after)) > 0)
        .sort(([a], [b]) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
        .slice(0, options.limit);
    });
  }

  async makeDir(name: string, mode: number): Promise<void> {
    return this.guard(async () => {
      checkName(name);
      checkMode(mode);
      await this.scripts.cascadeMkdir(this.totalsKey, this.prefix, name, String(mode), this.origin);
    });
  }

  async removeDir(name: string): Promise<void> {
    return this.guard(async () => {
      checkName(name);
      await this.scripts.cascadeRmdir(this.totalsKey, this.prefix, name, this.origin);
    });
  }

  async dirMode(name: string): Promise<number | undefined> {
    return this.guard(async () => {
      checkName(name);
      const m = await this.client.hget(this.key('dirmodes'), name);
      return m === null ? undefined : Number(m);
    });
  }

  async dirs(prefix: string, options: ListOptions): Promise<Array<[string, number]>> {
    return this.guard(async () => {
      checkListArgs(prefix, options);
      if (options.limit === 0) return [];
      const names = await this.client.zrangebylex(this.key('dirs'), ...lexRange(prefix, options.after), 'LIMIT', '0', String(options.limit));
      if (names.length === 0) return [];
      const modes = await this.client.hmget(this.key('dirmodes'), ...names);
      // A directory removed between the two reads has no mode: it is left out.
      return names.flatMap((n, i) => (modes[i] === null ? [] : [[n, Number(modes[i])] as [string, number]]));
    });
  }

  async setPinned(sha256: string, pinned: boolean): Promise<void> {
    return this.guard(async () => {
      await this.scripts.cascadePin(this.totalsKey, this.prefix, sha256, pinned ? '1' : '0');
    });
  }

  async blocks(): Promise<BlockRecord[]> {
    return this.guard(async () => {
      const shas = (await this.client.smembers(this.key('blocks'))).sort();
      return (await this.blockRows(shas)).filter((b): b is BlockRecord => b !== undefined);
    });
  }

  async blockRows(shas: readonly string[]): Promise<Array<BlockRecord | undefined>> {
    return this.guard(async () => {
      const out: Array<BlockRecord | undefined> = [];
      for (let i = 0; i < shas.length; i += BLOCKS_BATCH) {
        const batch = shas.slice(i, i + BLOCKS_BATCH);
        const pipe = this.client.pipeline();
        for (const sha of batch) pipe.hmget(this.key(`b:${sha}`), ...BLOCK_FIELDS);
        const rows = await results(pipe, batch.length);
        batch.forEach((sha, j) => out.push(blockRow(sha, rows[j] as Array<string | null>)));
      }
      return out;
    });
  }

  async pinnedBlocks(): Promise<BlockRecord[]> {
    const shas = await this.guard(() => this.client.smembers(this.key('pinned')));
    return (await this.blockRows(shas.sort())).filter((b): b is BlockRecord => b?.pinned === true);
  }

  async forget(sha256: string): Promise<{ removedVersions: number }> {
    return this.guard(async () => ({ removedVersions: Number(await this.scripts.cascadeForget(this.totalsKey, this.prefix, sha256)) }));
  }

  async totals(): Promise<MetaTotals> {
    return this.guard(async () => {
      const t = await this.client.hgetall(this.totalsKey);
      const n = (k: string) => Number(t[k] ?? 0);
      return { names: n('names'), versions: n('versions'), blocks: n('blocks'), uniqueBytes: n('unique'), logicalBytes: n('logical'), pinnedBytes: n('pinned') };
    });
  }

  /**
   * Every earlier reply already means applied; a round trip confirms Redis is there. Durable against a
   * crash of Redis itself when Redis runs with appendfsync always (see the header).
   */
  async sync(): Promise<void> {
    return this.guard(async () => {
      await this.client.ping();
    });
  }

  async watchChanges(listener: ChangeListener): Promise<(() => Promise<void>) | undefined> {
    // On Redis Cluster a script's PUBLISH reaches subscribers over the cluster bus, after the writer's
    // reply: a node could answer an open from its cache after the writer's close returned. Off there.
    if (this.client instanceof Cluster) return undefined;
    const sub = (this.client.duplicate as () => Client).call(this.client);
    sub.on('error', () => {}); // a lost connection is a reset (below); ioredis reconnects and resubscribes
    const channel = `${this.prefix}changes`;
    let ready = false;
    sub.on('ready', () => {
      if (ready) listener.reset(); // reconnected: what was published meanwhile is lost
      ready = true;
    });
    sub.on('message', (ch: string, message: string) => {
      if (ch !== channel) return;
      const c = parseChange(message, this.origin);
      if (c !== undefined) listener.change(c);
    });
    try {
      if (sub.status !== 'ready') await sub.connect().catch((e: unknown) => (sub.status === 'ready' ? undefined : Promise.reject(e)));
      await sub.subscribe(channel);
    } catch (e) {
      sub.disconnect();
      throw new CascadeError('EIO', `metadata on Redis: cannot watch changes: ${(e as Error).message}`, { cause: e });
    }
    return async () => {
      sub.removeAllListeners('message');
      sub.removeAllListeners('ready');
      await sub.quit().catch(() => sub.disconnect());
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.client.quit();
    } catch {
      this.client.disconnect();
    }
  }

  // ---- ClusterDirectory ----

  async placeBlock(sha256: string, p: BlockPlacement): Promise<void> {
    return this.guard(async () => {
      await this.scripts.cascadePlace(this.totalsKey, this.prefix, sha256, p.node, `${p.offsetBytes}:${p.sizeBytes}:${p.file}`);
    });
  }

  async unplaceBlock(sha256: string, node: string): Promise<void> {
    return this.guard(async () => {
      await this.client.hdel(this.key(`loc:${sha256}`), node);
    });
  }

  async locate(sha256: string): Promise<BlockPlacement[]> {
    return this.guard(async () => {
      const all = await this.client.hgetall(this.key(`loc:${sha256}`));
      const out: BlockPlacement[] = [];
      for (const [node, where] of Object.entries(all)) {
        const m = /^(\d+):(\d+):(.+)$/s.exec(where);
        if (m) out.push({ node, offsetBytes: Number(m[1]), sizeBytes: Number(m[2]), file: m[3] });
      }
      return out;
    });
  }

  async advertiseDram(changes: ReadonlyArray<{ sha256: string; node: string; held: boolean }>): Promise<void> {
    if (changes.length === 0) return;
    return this.guard(async () => {
      const pipe = this.client.pipeline();
      for (const c of changes) {
        if (c.held) pipe.sadd(this.key(`dram:${c.sha256}`), c.node);
        else pipe.srem(this.key(`dram:${c.sha256}`), c.node);
      }
      await results(pipe, changes.length);
    });
  }

  async requestReplica(node: string, sha256: string): Promise<void> {
    return this.guard(async () => {
      const q = this.key(`replicate:${node}`);
      await results(this.client.pipeline().rpush(q, sha256).ltrim(q, -REPLICA_QUEUE_MAX, -1), 2);
    });
  }

  async takeReplicaRequests(node: string, max: number): Promise<string[]> {
    return this.guard(async () => (await this.client.lpop(this.key(`replicate:${node}`), max)) ?? []);
  }

  async lookupName(name: string): Promise<NameLookup> {
    return this.guard(async () => {
      checkName(name);
      const [kind, a, ...holders] = await this.scripts.cascadeLookup(this.totalsKey, this.prefix, name);
      if (kind === 'f') return { version: parseMember(name, a), dir: false, dramHolders: holders };
      if (kind === 'd') return { version: undefined, dir: true, dirMode: a === '' ? undefined : Number(a), dramHolders: [] };
      return { version: undefined, dir: false, dramHolders: [] };
    });
  }

  async currentWithHolders(name: string): Promise<{ version: VersionRecord | undefined; dramHolders: string[] }> {
    return this.guard(async () => {
      checkName(name);
      const [m, ...holders] = await this.scripts.cascadeCurrent(this.totalsKey, this.prefix, name);
      return m === undefined ? { version: undefined, dramHolders: [] } : { version: parseMember(name, m), dramHolders: holders };
    });
  }

  async dramHolders(sha256: string): Promise<string[]> {
    return this.guard(async () => this.client.smembers(this.key(`dram:${sha256}`)));
  }

  async joinNode(node: string, token: string, ttlMs: number, replacing?: string): Promise<boolean> {
    return this.guard(async () => (await this.scripts.cascadeJoin(this.totalsKey, this.prefix, node, token, String(ttlMs), replacing ?? '')) === 1);
  }

  async nodeHolder(node: string): Promise<string | undefined> {
    return this.guard(async () => (await this.client.get(this.key(`node:${node}`))) ?? undefined);
  }

  async leaveNode(node: string, token: string): Promise<void> {
    return this.guard(async () => {
      await this.scripts.cascadeLeave(this.totalsKey, this.prefix, node, token);
    });
  }

  async liveNodes(): Promise<string[]> {
    return this.guard(async () => {
      const names = (await this.client.smembers(this.key('nodes'))).sort();
      const live: string[] = [];
      for (const n of names) if ((await this.client.exists(this.key(`node:${n}`))) === 1) live.push(n);
      return live;
    });
  }

  async publishNodeStats(node: string, statsJson: string, ttlMs: number): Promise<void> {
    return this.guard(async () => {
      await this.client.set(this.key(`nodestats:${node}`), statsJson, 'PX', String(ttlMs));
    });
  }

  async takeReclaims(node: string, max: number): Promise<string[]> {
    return this.guard(async () => {
      const r = await this.client.lpop(this.key(`reclaim:${node}`), max);
      return r ?? [];
    });
  }

  async nodeStats(): Promise<Array<{ node: string; live: boolean; stats: unknown }>> {
    return this.guard(async () => {
      const out: Array<{ node: string; live: boolean; stats: unknown }> = [];
      for (const node of (await this.client.smembers(this.key('nodes'))).sort()) {
        const live = (await this.client.exists(this.key(`node:${node}`))) === 1;
        const raw = await this.client.get(this.key(`nodestats:${node}`));
        let stats: unknown;
        try {
          stats = raw === null ? undefined : JSON.parse(raw);
        } catch {
          stats = undefined; // not ours to crash on: shown as unknown
        }
        out.push({ node, live, stats });
      }
      return out;
    });
  }

  /** Removes every key of this namespace (tests and `cascade` tooling; not part of MetaEngine). */
  async destroyNamespace(): Promise<void> {
    return this.guard(async () => {
      const nodes = this.client instanceof Cluster ? this.client.nodes('master') : [this.client];
      for (const node of nodes) {
        let cursor = '0';
        do {
          const [next, keys] = await node.scan(cursor, 'MATCH', `${this.prefix}*`, 'COUNT', '1000');
          cursor = next;
          for (const k of keys) await this.client.del(k);
        } while (cursor !== '0');
      }
    });
  }
}
