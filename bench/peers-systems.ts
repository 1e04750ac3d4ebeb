/**
 * The systems of the side-by-side benchmark, behind one small interface (`PeerSystem`), and the list of
 * them (`SYSTEMS`: one entry per system with its role, what it is, the workloads it cannot take part in
 * and why, and how a trial opens it). Every peer is real and is started and stopped here, inside the
 * trial process: a private tmpfs, a directory on the disk, bindfs (C FUSE, libfuse2) over either, a
 * redis-server on a free loopback port driven by ioredis, h5py in a python3 child process, and Cascade
 * mounted by `node dist/mount/cli.js mount` as a child.
 *
 * Everything a trial makes lives under its scratch directory (trialLayout), and every daemon's pid goes
 * into the layout's pid file, so the driver can sweep after a crash.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { Redis } from 'ioredis';
import { MiB } from '../store/constants';
import { clockMs, dropPageCache, FUSE_CACHE_EXPIRY_MS, readTarget, readWhole, residentBytes, sha256Hex, writeWhole } from './common';
import {
  cascadeDramBytes,
  CascadeDaemon,
  Daemon,
  delay,
  mountTmpfs,
  startBindfsOver,
  unmountTmpfs,
  waitFor,
  type TrialLayout,
} from './mount-systems';
import type { CheckValue, PeerTrialArgs, SystemName, Workload } from './peers-protocol';
import type { ReaderJob, ReaderReport } from './peers-reader';

// ---- the interface --------------------------------------------------------------------------------

export interface ReadResult {
  timeMs: number;
  bytes: number;
  /** SHA-256 of what was read, computed after the timed region. */
  sha256: string;
}

export interface ConcurrentReadResult {
  /** From the first reader's start to the last reader's end (each reader's own clock readings). */
  timeMs: number;
  bytes: number;
  /** Every reader's last block matched `expectSha256`. */
  verified: boolean;
}

export interface StoredBytes {
  /** Bytes the system holds in memory for the data (tmpfs pages, Redis used_memory, Cascade's DRAM tier). */
  memoryBytes: number;
  /** Bytes on the disk (Cascade's segment files), 0 where none. */
  diskBytes: number;
  how: string;
}

export interface Residency {
  /** Blocks held in memory (Cascade: DRAM tier; Redis: keys not evicted). */
  inMemory: number;
  /** Blocks readable but not in memory (Cascade: disk tier). */
  elsewhere: number;
  /** Blocks gone (Redis: evicted). */
  missing: number;
}

/** What a workload needs from a system. Keys are block names (`b-00001`); each system maps them. */
export interface PeerSystem {
  /** Whole-block write of new content (file: create+write+close; Redis: SET; h5py: new dataset). Returns ms. */
  write(key: string, data: Buffer): Promise<number>;
  /** Whole-block read into a reused buffer (Redis: the client returns a new Buffer). */
  read(key: string, sizeBytes: number): Promise<ReadResult>;
  /** Waits (untimed) until background work caused by `contentBytes` written so far is done. Returns ms. */
  settle(contentBytes: number): Promise<number>;
  /** After the cold workload's writes: make them durable and empty the system's own memory (restart). */
  makeCold(keys: string[]): Promise<void>;
  /** Drops the page cache of every backing file a cold read of `key` could be served from. */
  dropCache(key: string): { backingFiles: number; residentBytes: number | null };
  bytesStored(): Promise<StoredBytes>;
  /** `iterations` open+close cycles over `keys`; null where the system has no such operation. */
  openClose(keys: string[], iterations: number): Promise<number | null>;
  /** Untimed: lets every metadata cache in front of the system expire (FUSE: 1 s; h5py: reopen the file). */
  expireMetadataCaches(): Promise<void>;
  /** The size of every key, timed as one pass. */
  statAll(keys: string[], sizeBytes: number): Promise<{ timeMs: number; ok: boolean }>;
  /** `readers` concurrent readers, each reading every key `rounds` times. */
  concurrentRead(keys: string[], sizeBytes: number, readers: number, rounds: number, expectSha256: string): Promise<ConcurrentReadResult>;
  /** Where the blocks are now (capacity). */
  residency(keys: string[]): Promise<Residency>;
  /** Counters at the end (Cascade: store stats). */
  stats(): Promise<Record<string, CheckValue>>;
  facts(): Record<string, CheckValue>;
  close(): Promise<void>;
  /** For the exit handler, when close() could not run. */
  closeNowSync(): void;
}

export interface SystemContext {
  args: PeerTrialArgs;
  layout: TrialLayout;
}

export type Role = 'limit' | 'peer' | 'cascade';

export interface SystemSpec {
  name: SystemName;
  /** `limit`: the physical limit ratios are taken to; `peer`: a real peer (best peer ratios); `cascade`: under test. */
  role: Role;
  /** What runs, in a table cell. */
  what: string;
  /** Workloads this system does not take part in, each with the reason (reported as such, never as a figure). */
  notApplicable: Partial<Record<Workload, string>>;
  open(ctx: SystemContext): Promise<PeerSystem>;
}

// ---- helpers --------------------------------------------------------------------------------------

/** Debian's python3 (where python3-h5py installs), unless CASCADE_BENCH_PYTHON names another. */
export function pythonForH5py(): string {
  return process.env.CASCADE_BENCH_PYTHON ?? (fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');
}

/** bench/h5py_peer.py in the source tree (the build compiles TypeScript only). */
export const H5PY_PEER_SCRIPT = path.join(__dirname, '..', '..', 'bench', 'h5py_peer.py');

const READER_SCRIPT = path.join(__dirname, 'peers-reader.js');

/** Room for the largest working set of a trial (dup-write 64 MiB: 50 copies = 3.2 GiB on tmpfs). */
const TMPFS_BYTES = 6 * 1024 * MiB;

const keyFile = (dir: string, key: string) => path.join(dir, `${key}.bin`);

/** ROOT/kv/bench, created (Cascade keeps files under kv/<model>/; the peers get the same layout). */
function benchDirUnder(root: string): string {
  const dir = path.join(root, 'kv', 'bench');
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

function usedBytesOf(dir: string): number {
  const s = fs.statfsSync(dir);
  return (s.blocks - s.bfree) * s.bsize;
}

/** Reused read buffers, one per size (allocated and touched once). */
const targets = new Map<number, Buffer>();
function targetFor(sizeBytes: number): Buffer {
  let t = targets.get(sizeBytes);
  if (!t) {
    t = readTarget(sizeBytes);
    targets.set(sizeBytes, t);
  }
  return t;
}

/** Runs `jobs` as worker threads (peers-reader.js); starts them together once all are ready. */
async function workerReaders(jobs: ReaderJob[], expectSha256: string): Promise<ConcurrentReadResult> {
  const workers = jobs.map((job) => new Worker(READER_SCRIPT, { workerData: job }));
  try {
    const failed = new Promise<never>((_, reject) => {
      for (const w of workers) w.once('error', reject);
    });
    const ready = workers.map((w) => new Promise<void>((resolve) => w.once('message', () => resolve())));
    await Promise.race([Promise.all(ready), failed]);
    const reports = workers.map((w) => new Promise<ReaderReport>((resolve) => w.once('message', (m: ReaderReport) => resolve(m))));
    for (const w of workers) w.postMessage('go');
    const done = await Promise.race([Promise.all(reports), failed]);
    return aggregate(done.map((r) => ({ startNs: BigInt(r.startNs), endNs: BigInt(r.endNs), bytes: r.bytes, lastSha256: r.lastSha256 })), expectSha256);
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}

function aggregate(reports: { startNs: bigint; endNs: bigint; bytes: number; lastSha256: string }[], expectSha256: string): ConcurrentReadResult {
  let start = reports[0].startNs;
  let end = reports[0].endNs;
  for (const r of reports) {
    if (r.startNs < start) start = r.startNs;
    if (r.endNs > end) end = r.endNs;
  }
  return {
    timeMs: Number(end - start) / 1e6,
    bytes: reports.reduce((a, r) => a + r.bytes, 0),
    verified: reports.every((r) => r.lastSha256 === expectSha256),
  };
}

// ---- file systems (tmpfs, disk, bindfs, Cascade) --------------------------------------------------

interface FileSystemHooks {
  workDir: string;
  /** A FUSE mount (its kernel entry/attribute caches expire after 1 s). */
  fuse: boolean;
  /** Files whose page cache a cold read of `file` could come from (besides `file` itself). */
  backingFiles(file: string): string[];
  settle?(contentBytes: number): Promise<number>;
  /** Empties the system's own memory (Cascade: restart; bindfs: remount). */
  restart?(): Promise<void>;
  bytesStored(): Promise<StoredBytes>;
  residency?(files: string[]): Promise<Residency>;
  stats?(): Promise<Record<string, CheckValue>>;
  facts(): Record<string, CheckValue>;
  close(): Promise<void>;
  closeNowSync(): void;
}

/** Plain synchronous file I/O from this process (1 MiB calls), as any program would use a filesystem. */
function fileSystem(h: FileSystemHooks): PeerSystem {
  const file = (key: string) => keyFile(h.workDir, key);
  return {
    async write(key, data) {
      const t0 = clockMs();
      writeWhole(file(key), data);
      return clockMs() - t0;
    },
    async read(key, sizeBytes) {
      const target = targetFor(sizeBytes);
      const t0 = clockMs();
      const n = readWhole(file(key), target);
      const timeMs = clockMs() - t0;
      return { timeMs, bytes: n, sha256: sha256Hex(target.subarray(0, n)) };
    },
    settle: (contentBytes) => (h.settle ? h.settle(contentBytes) : Promise.resolve(0)),
    async makeCold(keys) {
      for (const k of keys) {
        const fd = fs.openSync(file(k), 'r'); // (Cascade refuses opening committed content for writing)
        try {
          fs.fsyncSync(fd);
        } finally {
          fs.closeSync(fd);
        }
      }
      await h.restart?.();
    },
    dropCache(key) {
      const backing = [...h.backingFiles(file(key)), file(key)];
      let max: number | null = 0;
      for (const b of backing) dropPageCache(b);
      for (const b of backing.slice(0, -1)) {
        const r = residentBytes(b);
        max = r === null || max === null ? null : Math.max(max, r);
      }
      // Through a FUSE mount the file itself is dropped too; its residency is the mount's page cache.
      return { backingFiles: backing.length - 1 || 1, residentBytes: h.fuse ? max : residentBytes(file(key)) };
    },
    bytesStored: () => h.bytesStored(),
    async openClose(keys, iterations) {
      const names = keys.map(file);
      const t0 = clockMs();
      for (let i = 0; i < iterations; i++) fs.closeSync(fs.openSync(names[i % names.length], 'r'));
      return clockMs() - t0;
    },
    async expireMetadataCaches() {
      if (h.fuse) await delay(FUSE_CACHE_EXPIRY_MS);
    },
    async statAll(keys, sizeBytes) {
      const names = keys.map(file);
      let ok = true;
      const t0 = clockMs();
      for (const n of names) ok = fs.statSync(n).size === sizeBytes && ok;
      return { timeMs: clockMs() - t0, ok };
    },
    concurrentRead: (keys, sizeBytes, readers, rounds, expectSha256) =>
      workerReaders(
        Array.from({ length: readers }, () => ({ kind: 'file' as const, items: keys.map(file), port: 0, sizeBytes, rounds })),
        expectSha256,
      ),
    residency: (keys) => (h.residency ? h.residency(keys.map(file)) : Promise.resolve({ inMemory: keys.length, elsewhere: 0, missing: 0 })),
    stats: () => (h.stats ? h.stats() : Promise.resolve({})),
    facts: () => h.facts(),
    close: () => h.close(),
    closeNowSync: () => h.closeNowSync(),
  };
}

async function openTmpfs(ctx: SystemContext): Promise<PeerSystem> {
  const dir = ctx.layout.tmpfsDir;
  mountTmpfs(dir, TMPFS_BYTES);
  return fileSystem({
    workDir: benchDirUnder(dir),
    fuse: false,
    backingFiles: () => [],
    bytesStored: async () => ({ memoryBytes: usedBytesOf(dir), diskBytes: 0, how: 'statfs used bytes of the tmpfs' }),
    facts: () => ({ backing: 'private tmpfs (4 KiB pages)' }),
    close: async () => unmountTmpfs(dir),
    closeNowSync: () => unmountTmpfs(dir),
  });
}

async function openDisk(ctx: SystemContext): Promise<PeerSystem> {
  const dir = ctx.layout.diskDir;
  fs.mkdirSync(dir, { recursive: true });
  return fileSystem({
    workDir: benchDirUnder(dir),
    fuse: false,
    backingFiles: () => [],
    bytesStored: async () => ({ memoryBytes: 0, diskBytes: 0, how: 'not measured (disk rows are cold reads only)' }),
    facts: () => ({ backing: 'directory on the disk (os.tmpdir())' }),
    close: async () => undefined,
    closeNowSync: () => undefined,
  });
}

/** bindfs over a private tmpfs, or over a disk directory for cold reads (tmpfs has no cold state). */
async function openBindfs(ctx: SystemContext): Promise<PeerSystem> {
  const { layout } = ctx;
  const onDisk = ctx.args.workload === 'cold-read';
  const b = await startBindfsOver(layout, onDisk, TMPFS_BYTES);
  return fileSystem({
    workDir: benchDirUnder(layout.mountDir),
    fuse: true,
    backingFiles: (file) => [path.join(b.sourceDir, path.relative(layout.mountDir, file))],
    restart: () => b.restart(),
    bytesStored: async () => ({ memoryBytes: onDisk ? 0 : usedBytesOf(b.sourceDir), diskBytes: 0, how: 'statfs used bytes of the tmpfs under bindfs' }),
    facts: () => ({ backing: onDisk ? 'bindfs over a disk directory' : 'bindfs over a private tmpfs' }),
    close: () => b.close(),
    closeNowSync: () => b.closeNowSync(),
  });
}

/** Bytes of block content the Cascade DRAM tier must hold for a workload to be hot. */
function cascadeWorkingSetBytes(args: PeerTrialArgs): number {
  const block = Math.max(args.blockBytes, 4096);
  switch (args.workload) {
    case 'hot-read':
    case 'contention':
    case 'meta':
      return args.blocks * block;
    case 'cold-read':
    case 'write':
      return (args.warmups + args.runs) * block;
    case 'dup-write':
      return block;
    case 'capacity':
      return args.memoryBytes;
  }
}

/** `user.cascade.tier` of each file, via python3's os.getxattr (Node has no xattr call); one process for all. */
function cascadeTiers(files: string[]): string[] {
  const r = spawnSync(
    pythonForH5py(),
    ['-c', 'import os,sys,json\nout=[]\nfor p in json.load(sys.stdin):\n  try: out.append(os.getxattr(p, "user.cascade.tier").decode())\n  except OSError as e: out.append("error:%d" % e.errno)\nprint(json.dumps(out))'],
    { input: JSON.stringify(files), encoding: 'utf8', maxBuffer: 64 * MiB },
  );
  if (r.status !== 0) throw new Error(`reading user.cascade.tier failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as string[];
}

/**
 * Cascade through its FUSE mount (direct I/O, the default). `variant` is for later entries (a daemon
 * without the native addon: env CASCADE_NATIVE=0) so that each is one line in SYSTEMS.
 */
async function openCascadeMount(ctx: SystemContext, variant: { env?: Record<string, string>; kernelCache?: boolean } = {}): Promise<PeerSystem> {
  const { args, layout } = ctx;
  const dramBytes = args.workload === 'capacity' ? args.memoryBytes : cascadeDramBytes(cascadeWorkingSetBytes(args));
  const cli = path.join(__dirname, '..', 'mount', 'cli.js');
  if (!fs.existsSync(cli)) throw new Error(`${cli} is missing: build first (npm run build)`);
  const daemon = new CascadeDaemon(layout, { cliPath: cli, kernelCache: variant.kernelCache ?? false, dramBytes, env: variant.env });
  await daemon.start();
  return fileSystem({
    workDir: benchDirUnder(layout.mountDir),
    fuse: true,
    backingFiles: () => daemon.segmentFiles(),
    settle: (contentBytes) => daemon.settle(contentBytes),
    async restart() {
      await daemon.stop();
      await daemon.start();
    },
    async bytesStored() {
      const s = await daemon.freshStats();
      const dram = typeof s.storeDramUsedBytes === 'number' ? s.storeDramUsedBytes : 0;
      return { memoryBytes: dram, diskBytes: daemon.segmentBytes(), how: 'DRAM tier usedBytes (.cascade/stats.json) and segment file bytes' };
    },
    async residency(files) {
      const tiers = cascadeTiers(files);
      const errors = tiers.filter((t) => t.startsWith('error'));
      if (errors.length > 0) throw new Error(`user.cascade.tier: ${errors.length} errors, e.g. ${errors[0]}`);
      const inMemory = tiers.filter((t) => t === 'dram').length;
      return { inMemory, elsewhere: tiers.length - inMemory, missing: 0 };
    },
    stats: () => daemon.freshStats(),
    facts: () => ({ backing: 'Cascade FUSE mount (direct I/O), data dir on the disk', ...daemon.facts() }),
    close: () => daemon.stop(),
    closeNowSync: () => daemon.stopNowSync(),
  });
}

// ---- Redis ----------------------------------------------------------------------------------------

/** A free loopback TCP port (bound and released; redis-server binds it right after). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr !== null ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

const REDIS_START_TIMEOUT_MS = 20_000;

/** Values over proto-max-bulk-len (512 MB by default) are refused by Redis. */
const REDIS_MAX_VALUE_BYTES = 512 * 1000 * 1000;

function parseInfo(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1);
  }
  return out;
}

/**
 * redis-server on a free loopback port, persistence off (`--save '' --appendonly no`), its own dir
 * under the scratch dir; for capacity, `maxmemory` with allkeys-lru. One ioredis client over TCP.
 */
async function openRedis(ctx: SystemContext): Promise<PeerSystem> {
  const { args, layout } = ctx;
  if (args.blockBytes > REDIS_MAX_VALUE_BYTES) throw new Error(`redis: ${args.blockBytes}-byte values exceed proto-max-bulk-len`);
  const dir = path.join(layout.scratchDir, 'redis');
  fs.mkdirSync(dir, { recursive: true });
  const capacity = args.workload === 'capacity';
  const daemon = new Daemon(layout, 'redis-server');
  let port = 0;
  let client: Redis | undefined;
  for (let attempt = 0; attempt < 3 && client === undefined; attempt++) {
    port = await freePort();
    daemon.spawn('redis-server', [
      '--port', String(port),
      '--bind', '127.0.0.1',
      '--save', '',
      '--appendonly', 'no',
      '--dir', dir,
      '--daemonize', 'no',
      ...(capacity ? ['--maxmemory', String(args.memoryBytes), '--maxmemory-policy', 'allkeys-lru'] : []),
    ]);
    try {
      await waitFor('redis-server to start', () => {
        if (!daemon.running) throw new Error(`${daemon.exitDescription}; log:\n${daemon.logTail()}`);
        return daemon.logTail(4000).includes('Ready to accept connections');
      }, REDIS_START_TIMEOUT_MS);
      const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
      await c.connect();
      client = c;
    } catch (e) {
      daemon.kill('SIGKILL');
      await daemon.waitExit(10_000).catch(() => undefined);
      if (attempt === 2) throw e;
    }
  }
  const redis = client!;
  const info = async (section: string) => parseInfo(await redis.info(section));
  const usedMemory = async () => Number((await info('memory')).used_memory);
  const version = (await info('server')).redis_version ?? null;
  const close = async () => {
    redis.disconnect();
    if (daemon.running) {
      daemon.kill('SIGTERM');
      await daemon.waitExit(20_000);
    }
  };
  return {
    async write(key, data) {
      const t0 = clockMs();
      await redis.set(key, data);
      return clockMs() - t0;
    },
    async read(key) {
      const t0 = clockMs();
      const v = await redis.getBuffer(key);
      const timeMs = clockMs() - t0;
      if (v === null) throw new Error(`redis: ${key} is missing`);
      return { timeMs, bytes: v.length, sha256: sha256Hex(v) };
    },
    settle: async () => 0,
    makeCold: async () => {
      throw new Error('redis: no cold state (memory only)');
    },
    dropCache: () => {
      throw new Error('redis: no cold state (memory only)');
    },
    bytesStored: async () => ({ memoryBytes: await usedMemory(), diskBytes: 0, how: 'INFO memory used_memory' }),
    openClose: async () => null,
    expireMetadataCaches: async () => undefined,
    async statAll(keys, sizeBytes) {
      let ok = true;
      const t0 = clockMs();
      for (const k of keys) ok = (await redis.strlen(k)) === sizeBytes && ok;
      return { timeMs: clockMs() - t0, ok };
    },
    concurrentRead: (keys, sizeBytes, readers, rounds, expectSha256) =>
      workerReaders(Array.from({ length: readers }, () => ({ kind: 'redis' as const, items: keys, port, sizeBytes, rounds })), expectSha256),
    async residency(keys) {
      let present = 0;
      for (const k of keys) present += await redis.exists(k);
      return { inMemory: present, elsewhere: 0, missing: keys.length - present };
    },
    async stats() {
      const mem = await info('memory');
      const st = await info('stats');
      return {
        redisUsedMemory: Number(mem.used_memory),
        redisMaxmemory: Number(mem.maxmemory),
        redisEvictedKeys: Number(st.evicted_keys),
        redisKeyspaceHits: Number(st.keyspace_hits),
        redisKeyspaceMisses: Number(st.keyspace_misses),
      };
    },
    facts: () => ({
      backing: `redis-server ${String(version)} on 127.0.0.1:${port}, --save '' --appendonly no${capacity ? `, maxmemory ${args.memoryBytes} allkeys-lru` : ''}`,
      redisPid: daemon.pid ?? null,
    }),
    close,
    closeNowSync: () => {
      redis.disconnect();
      daemon.kill('SIGKILL');
    },
  };
}

// ---- h5py -----------------------------------------------------------------------------------------

/** bench/h5py_peer.py as a child: JSON lines in and out, one request at a time. */
class H5pyProcess {
  private readonly child: ChildProcess;
  private buffer = '';
  private waiting: ((line: string) => void) | undefined;
  private stderr = '';
  exited = false;

  constructor(layout: TrialLayout, args: string[] = []) {
    this.child = spawn(pythonForH5py(), [H5PY_PEER_SCRIPT, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    if (this.child.pid !== undefined) fs.appendFileSync(layout.pidFile, `${this.child.pid}\n`);
    this.child.stdout?.setEncoding('utf8');
    this.child.stdout?.on('data', (d: string) => {
      this.buffer += d;
      this.deliver();
    });
    this.child.stderr?.setEncoding('utf8');
    this.child.stderr?.on('data', (d: string) => (this.stderr = (this.stderr + d).slice(-4000)));
    this.child.on('exit', () => {
      this.exited = true;
      this.waiting?.('');
    });
    this.child.on('error', () => {
      this.exited = true;
      this.waiting?.('');
    });
  }

  private deliver(): void {
    const i = this.buffer.indexOf('\n');
    if (i < 0 || !this.waiting) return;
    const line = this.buffer.slice(0, i);
    this.buffer = this.buffer.slice(i + 1);
    const w = this.waiting;
    this.waiting = undefined;
    w(line);
  }

  /** The next line the child prints (throws if it exits first). */
  async nextLine(): Promise<Record<string, unknown>> {
    const line = await new Promise<string>((resolve) => {
      this.waiting = resolve;
      if (this.exited) resolve('');
      this.deliver();
    });
    if (line === '') throw new Error(`h5py peer exited: ${this.stderr.trim() || 'no output'} (is python3-h5py installed? bash scripts/bench-peers.sh)`);
    const v = JSON.parse(line) as Record<string, unknown>;
    if (typeof v.error === 'string') throw new Error(`h5py peer: ${v.error}`);
    return v;
  }

  send(obj: object): void {
    this.child.stdin?.write(JSON.stringify(obj) + '\n');
  }

  async call(obj: object): Promise<Record<string, unknown>> {
    this.send(obj);
    return this.nextLine();
  }

  async end(): Promise<void> {
    if (this.exited) return;
    this.child.stdin?.end();
    await waitFor('the h5py peer to exit', () => this.exited, 10_000, 20, false).catch(() => this.child.kill('SIGKILL'));
  }

  kill(): void {
    if (!this.exited) this.child.kill('SIGKILL');
  }
}

const num = (v: unknown, what: string): number => {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new Error(`h5py peer: bad ${what}`);
  return v;
};

/**
 * One HDF5 file, one dataset per block, through h5py in a python3 child. The file is on the private
 * tmpfs (like the tmpfs and bindfs peers), on the disk for cold reads.
 */
async function openH5py(ctx: SystemContext): Promise<PeerSystem> {
  const { args, layout } = ctx;
  const onDisk = args.workload === 'cold-read';
  const dir = onDisk ? layout.diskDir : layout.tmpfsDir;
  if (onDisk) fs.mkdirSync(dir, { recursive: true });
  else mountTmpfs(dir, TMPFS_BYTES);
  const file = path.join(dir, 'blocks.h5');
  const stage = path.join(layout.tmpfsDir, 'stage.bin');
  if (onDisk) mountTmpfs(layout.tmpfsDir, Math.max(args.blockBytes, MiB) + 64 * MiB); // the staging file only
  const py = new H5pyProcess(layout);
  const closeAll = async () => {
    await py.end();
    unmountTmpfs(layout.tmpfsDir);
  };
  let versions: Record<string, unknown> = {};
  try {
    versions = await py.call({ op: 'versions' });
    await py.call({ op: 'open', path: file, mode: 'a' });
  } catch (e) {
    await closeAll();
    throw e;
  }
  let stagedSha256 = '';
  const reopen = async () => {
    await py.call({ op: 'close' });
    await py.call({ op: 'open', path: file, mode: 'a' });
  };
  return {
    async write(key, data) {
      const sha = sha256Hex(data); // untimed: stage the content for python when it is new
      if (sha !== stagedSha256) {
        fs.writeFileSync(stage, data);
        await py.call({ op: 'stage', src: stage });
        fs.rmSync(stage);
        stagedSha256 = sha;
      }
      return num((await py.call({ op: 'write', name: key })).timeMs, 'timeMs');
    },
    async read(key, sizeBytes) {
      const r = await py.call({ op: 'read', name: key, sizeBytes });
      return { timeMs: num(r.timeMs, 'timeMs'), bytes: num(r.bytes, 'bytes'), sha256: String(r.sha256) };
    },
    settle: async () => 0,
    async makeCold() {
      await py.call({ op: 'close' });
      await py.call({ op: 'open', path: file, mode: 'r' });
      await py.call({ op: 'fsync' });
    },
    dropCache() {
      // The file stays open in h5py (HDF5 keeps its own metadata cache; contiguous data is not cached).
      dropPageCache(file);
      return { backingFiles: 1, residentBytes: residentBytes(file) };
    },
    async bytesStored() {
      const r = await py.call({ op: 'size' });
      return { memoryBytes: num(r.allocatedBytes, 'allocatedBytes'), diskBytes: 0, how: 'allocated bytes of the .h5 file on tmpfs (st_blocks)' };
    },
    async openClose(keys, iterations) {
      return num((await py.call({ op: 'openClose', names: keys, iterations })).timeMs, 'timeMs');
    },
    expireMetadataCaches: reopen,
    async statAll(keys, sizeBytes) {
      const r = await py.call({ op: 'stat', names: keys, sizeBytes });
      return { timeMs: num(r.timeMs, 'timeMs'), ok: r.ok === true };
    },
    async concurrentRead(keys, sizeBytes, readers, rounds, expectSha256) {
      await py.call({ op: 'close' }); // HDF5 locks a file open for writing; readers open it read-only
      const procs = Array.from({ length: readers }, () => new H5pyProcess(layout, ['reader', file]));
      try {
        await Promise.all(procs.map((p) => p.nextLine()));
        const reports = procs.map((p) => p.nextLine());
        for (const p of procs) p.send({ names: keys, rounds, sizeBytes });
        const done = await Promise.all(reports);
        return aggregate(
          done.map((r) => ({ startNs: BigInt(num(r.startNs, 'startNs')), endNs: BigInt(num(r.endNs, 'endNs')), bytes: num(r.bytes, 'bytes'), lastSha256: String(r.lastSha256) })),
          expectSha256,
        );
      } finally {
        await Promise.all(procs.map((p) => p.end()));
        await py.call({ op: 'open', path: file, mode: 'a' });
      }
    },
    residency: async (keys) => ({ inMemory: keys.length, elsewhere: 0, missing: 0 }),
    stats: async () => ({}),
    facts: () => ({
      backing: `h5py ${String(versions.h5py)} (HDF5 ${String(versions.hdf5)}, numpy ${String(versions.numpy)}, Python ${String(versions.python)}), one .h5 file on ${onDisk ? 'the disk' : 'a private tmpfs'}`,
    }),
    close: closeAll,
    closeNowSync() {
      py.kill();
      unmountTmpfs(layout.tmpfsDir);
    },
  };
}

// ---- the list -------------------------------------------------------------------------------------

const MEMORY_ONLY = 'memory only: no cold state (nothing on disk to read back)';
const NO_EVICTION = 'no eviction: everything written stays in memory until it runs out (no capacity notion to compare)';

/**
 * Every system, in table order. Adding one (e.g. `cascade-client`, or `cascade-noaddon` opening
 * `openCascadeMount(ctx, { env: { CASCADE_NATIVE: '0' } })`) is one entry here and its name in
 * SYSTEM_NAMES.
 */
export const SYSTEMS: SystemSpec[] = [
  {
    name: 'tmpfs',
    role: 'limit',
    what: 'a private tmpfs, plain read/write: the physical limit of this box',
    notApplicable: { 'cold-read': 'memory only: the `disk` row is the limit for cold reads', capacity: NO_EVICTION },
    open: openTmpfs,
  },
  {
    name: 'disk',
    role: 'limit',
    what: 'a directory on the disk, plain read/write, page cache dropped: the limit for cold reads',
    notApplicable: {
      'hot-read': 'a hot disk file is a page-cache read: the tmpfs row',
      write: 'buffered writes go to the page cache: the tmpfs row',
      'dup-write': 'as tmpfs (no dedup)',
      contention: 'a hot disk file is a page-cache read: the tmpfs row',
      capacity: NO_EVICTION,
      meta: 'as tmpfs',
    },
    open: openDisk,
  },
  {
    name: 'bindfs',
    role: 'peer',
    what: 'bindfs -o big_writes (C FUSE, libfuse2) over a private tmpfs; over a disk directory for cold reads',
    notApplicable: { capacity: NO_EVICTION },
    open: openBindfs,
  },
  {
    name: 'redis',
    role: 'peer',
    what: "redis-server on a loopback port (--save '' --appendonly no), ioredis over TCP, one value per block",
    notApplicable: { 'cold-read': MEMORY_ONLY },
    open: openRedis,
  },
  {
    name: 'h5py',
    role: 'peer',
    what: 'h5py in a python3 child: one .h5 file (on a private tmpfs; on the disk for cold reads), one dataset per block',
    notApplicable: { capacity: NO_EVICTION },
    open: openH5py,
  },
  {
    name: 'cascade',
    role: 'cascade',
    what: 'Cascade mounted with `cascade mount` (fuse-native, direct I/O), data dir on the disk',
    notApplicable: {},
    open: (ctx) => openCascadeMount(ctx),
  },
];

export function systemSpec(name: SystemName): SystemSpec {
  const s = SYSTEMS.find((x) => x.name === name);
  if (!s) throw new Error(`unknown system ${name}`);
  return s;
}
