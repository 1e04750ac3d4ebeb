/**
 * The systems of the side-by-side (peers) suite, behind one small interface (`PeerSystem`), and the list of
 * them (`SYSTEMS`: one entry per system with its role, what it is, the workloads it cannot take part in
 * and why, and how a trial opens it). Every peer is real and is started and stopped here, inside the
 * trial process: a private tmpfs, a directory on the disk, bindfs (C FUSE, libfuse2) over either, a
 * redis-server on a free loopback port driven by ioredis, h5py in a python3 child process, and Cascade
 * mounted by `node dist/mount/cli.js mount` as a child: with each of its two FUSE engines (named
 * explicitly, never `auto`), and with reads through its same-node client (mount/socket/client.ts).
 *
 * Everything a trial makes lives under its scratch directory (trialLayout), and every daemon's pid goes
 * into the layout's pid file, so the runner can sweep after a crash.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { Redis } from 'ioredis';
import type { LocalClient } from '../mount/socket/client';
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
} from './mounts';
import type { CheckValue, PeerTrialArgs, SystemOf, WorkloadOf } from './protocol';

type SystemName = SystemOf<'peers'>;
type Workload = WorkloadOf<'peers'>;
import type { RaceReport, ReaderJob, ReaderReport } from './reader-thread';

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

/** One run of the rename-race workload: the readers' counts summed (reader-thread.ts). */
export interface RenameRaceResult extends Omit<RaceReport, 'startNs' | 'endNs'> {
  /** From the first reader's start to the last reader's end. */
  timeMs: number;
  /** Write of hot.bin.tmp + rename over hot.bin, done by the writer while the readers ran. */
  renames: number;
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
  /** The size of every key, timed as one pass; null where the system has no such operation. */
  statAll(keys: string[], sizeBytes: number): Promise<{ timeMs: number; ok: boolean } | null>;
  /**
   * One process (python3) creates `count` new files of `sizeBytes` in a fresh directory (open, one
   * write, close: an inference engine's file backend), then, once the metadata caches expired, lists
   * it with os.scandir + is_file() (SGLang's existence check). Null where the system has no files.
   */
  createAndScan(count: number, sizeBytes: number): Promise<{ createMs: number; scanMs: number; ok: boolean } | null>;
  /**
   * One python3 process stores `count` new files of `sizeBytes` one at a time as SGLang's HiCacheFile
   * and LMCache's file connectors do (a temp name opened O_CREAT|O_TRUNC, one whole write, close,
   * os.replace over the final name), then checks each exists and loads it (open, readinto into a
   * buffer made beforehand, close). Per-operation times summed over the files; null without files.
   */
  perFile(count: number, sizeBytes: number): Promise<PerFileResult | null>;
  /** `readers` concurrent readers, each reading every key `rounds` times. */
  concurrentRead(keys: string[], sizeBytes: number, readers: number, rounds: number, expectSha256: string): Promise<ConcurrentReadResult>;
  /**
   * rename-race: `readers` concurrent readers make `opens` open + whole read + close of kv/bench/hot.bin
   * in all, while a writer writes kv/bench/hot.bin.tmp (versions[0] and [1] alternately) and renames it
   * over hot.bin. The first call creates hot.bin (untimed).
   */
  renameRace(versions: [Buffer, Buffer], readers: number, opens: number): Promise<RenameRaceResult>;
  /** Where the blocks are now (capacity). */
  residency(keys: string[]): Promise<Residency>;
  /** Counters at the end (Cascade: store stats). */
  stats(): Promise<Record<string, CheckValue>>;
  facts(): Record<string, CheckValue>;
  close(): Promise<void>;
  /** For the exit handler, when close() could not run. */
  closeNowSync(): void;
}

/** PeerSystem.perFile: each operation's time summed over the files, ms; `ok` when every load was byte-exact. */
export interface PerFileResult {
  createMs: number;
  writeMs: number;
  closeMs: number;
  renameMs: number;
  existsMs: number;
  openMs: number;
  readMs: number;
  readCloseMs: number;
  ok: boolean;
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
  /** Figures of a workload it takes part in that it has no operation for (`meta`: 'open+close', 'stat-uncached'), with the reason. */
  figuresNotApplicable?: Record<string, string>;
  open(ctx: SystemContext): Promise<PeerSystem>;
}

// ---- helpers --------------------------------------------------------------------------------------

/** Debian's python3 (where python3-h5py installs), unless CASCADE_BENCH_PYTHON names another. */
export function pythonForH5py(): string {
  return process.env.CASCADE_BENCH_PYTHON ?? (fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');
}

/** bench/h5py_peer.py in the source tree (the build compiles TypeScript only). */
export const H5PY_PEER_SCRIPT = path.join(__dirname, '..', '..', 'bench', 'h5py_peer.py');

const READER_SCRIPT = path.join(__dirname, 'reader-thread.js');

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

/**
 * Runs `jobs` as worker threads (reader-thread.js); starts them together once all are ready, then runs
 * `during` (synchronously, on this thread: the rename-race writer) and collects every report.
 */
async function runWorkers<R>(jobs: ReaderJob[], during?: () => void): Promise<R[]> {
  const workers = jobs.map((job) => new Worker(READER_SCRIPT, { workerData: job }));
  try {
    const failed = new Promise<never>((_, reject) => {
      for (const w of workers) w.once('error', reject);
    });
    failed.catch(() => undefined); // raced below; never an unhandled rejection
    const ready = workers.map((w) => new Promise<void>((resolve) => w.once('message', () => resolve())));
    await Promise.race([Promise.all(ready), failed]);
    const reports = workers.map((w) => new Promise<R>((resolve) => w.once('message', (m: R) => resolve(m))));
    for (const w of workers) w.postMessage('go');
    during?.();
    return await Promise.race([Promise.all(reports), failed]);
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}

async function workerReaders(jobs: ReaderJob[], expectSha256: string): Promise<ConcurrentReadResult> {
  const done = await runWorkers<ReaderReport>(jobs);
  return aggregate(done.map((r) => ({ startNs: BigInt(r.startNs), endNs: BigInt(r.endNs), bytes: r.bytes, lastSha256: r.lastSha256 })), expectSha256);
}

/** The rename-race writer gives up after this long even if a reader never reported done (it always does). */
const RENAME_RACE_WRITER_LIMIT_MS = 10 * 60 * 1000;

/**
 * rename-race on a directory: `readers` worker threads open + read + close `hot` while this thread
 * writes `hot`.tmp with the two versions alternately (create + 1 MiB writes + close) and renames it
 * over `hot`, until every reader is done.
 */
async function renameRaceOn(dir: string, versions: [Buffer, Buffer], readers: number, opens: number): Promise<RenameRaceResult> {
  const hot = path.join(dir, 'hot.bin');
  const tmp = path.join(dir, 'hot.bin.tmp');
  if (!fs.existsSync(hot)) {
    writeWhole(tmp, versions[0]);
    fs.renameSync(tmp, hot);
  }
  const current = fs.readFileSync(hot); // untimed
  const doneBuffer = new SharedArrayBuffer(4);
  const done = new Int32Array(doneBuffer);
  const perReader = Array.from({ length: readers }, (_, i) => Math.floor(opens / readers) + (i < opens % readers ? 1 : 0));
  const versionBytes = versions.map((v) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength)) as [Uint8Array, Uint8Array];
  let renames = 0;
  let writerError: unknown;
  const reports = await runWorkers<RaceReport>(
    perReader.map((n) => ({ kind: 'rename-race' as const, items: [hot], port: 0, sizeBytes: versions[0].length, rounds: 0, opens: n, versions: versionBytes, done: doneBuffer })),
    () => {
      const deadline = clockMs() + RENAME_RACE_WRITER_LIMIT_MS;
      let next = current.equals(versions[0]) ? 1 : 0; // alternate from whichever version is there
      try {
        while (Atomics.load(done, 0) < readers) {
          if (clockMs() > deadline) throw new Error(`the readers did not finish in ${RENAME_RACE_WRITER_LIMIT_MS} ms`);
          writeWhole(tmp, versions[next]);
          fs.renameSync(tmp, hot);
          renames++;
          next ^= 1;
        }
      } catch (e) {
        writerError = e;
      }
    },
  );
  if (writerError !== undefined) throw writerError instanceof Error ? writerError : new Error(String(writerError));
  let start = BigInt(reports[0].startNs);
  let end = BigInt(reports[0].endNs);
  for (const r of reports) {
    if (BigInt(r.startNs) < start) start = BigInt(r.startNs);
    if (BigInt(r.endNs) > end) end = BigInt(r.endNs);
  }
  const sum = (k: 'opens' | 'enoent' | 'short' | 'mixed' | 'readsOfA' | 'readsOfB' | 'otherErrors') => reports.reduce((a, r) => a + r[k], 0);
  return {
    timeMs: Number(end - start) / 1e6,
    opens: sum('opens'),
    enoent: sum('enoent'),
    short: sum('short'),
    mixed: sum('mixed'),
    readsOfA: sum('readsOfA'),
    readsOfB: sum('readsOfB'),
    otherErrors: sum('otherErrors'),
    firstError: reports.find((r) => r.firstError !== null)?.firstError ?? null,
    renames,
  };
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
  /**
   * Whether dropCache also drops `file` itself through the mount (an open of it there; default true).
   * False for Cascade: its mount holds no page cache of a file not opened since the restart that made
   * the blocks cold (page-cache reads need the block held in DRAM; a direct I/O mount keeps none), and
   * an open through it loads the block into DRAM (the native engine holds every read-only open's
   * version), which would make the timed read a hot one.
   */
  dropThroughMount?: boolean;
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

/**
 * perFile's python3. The bytes are made before any clock starts and written from one buffer (a counter
 * in its first 8 bytes between files: no dedup); the loads go into one buffer touched beforehand and
 * are checked outside the timed calls.
 */
const PER_FILE_PY = `
import json, os, sys, time
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d)
buf = bytearray(os.urandom(size))
into = bytearray(size)
into[::4096] = b"\\1" * len(range(0, size, 4096))
t = {k: 0.0 for k in ["create", "write", "close", "rename", "exists", "open", "read", "rclose"]}
clock = time.perf_counter
for i in range(n):
    buf[:8] = i.to_bytes(8, "little")
    tmp, final = f"{d}/{i:08d}.tmp", f"{d}/{i:08d}.bin"
    t0 = clock(); fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    t1 = clock(); os.write(fd, buf)
    t2 = clock(); os.close(fd)
    t3 = clock(); os.replace(tmp, final)
    t4 = clock()
    t["create"] += t1 - t0; t["write"] += t2 - t1; t["close"] += t3 - t2; t["rename"] += t4 - t3
ok = True
for i in range(n):
    final = f"{d}/{i:08d}.bin"
    t0 = clock(); e = os.path.exists(final)
    t1 = clock(); fd = os.open(final, os.O_RDONLY)
    t2 = clock(); got = os.readv(fd, [into])
    t3 = clock(); os.close(fd)
    t4 = clock()
    t["exists"] += t1 - t0; t["open"] += t2 - t1; t["read"] += t3 - t2; t["rclose"] += t4 - t3
    buf[:8] = i.to_bytes(8, "little")
    ok = ok and e and got == size and into == buf
out = {k + "Ms": v * 1000 for k, v in t.items()}
out["readCloseMs"] = out.pop("rcloseMs")
out["ok"] = ok
print(json.dumps(out))
`;

/** createAndScan's python3: unique content per file (a counter in its first 8 bytes: no dedup). */
const CREATE_AND_SCAN_PY = `
import json, os, sys, time
d, n, size, expire_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(d)
data = os.urandom(size)
t0 = time.perf_counter()
for i in range(n):
    with open(f"{d}/{i:08d}.bin", "wb") as f: f.write(i.to_bytes(8, "little") + data[8:])
t1 = time.perf_counter()
time.sleep(expire_ms / 1000)
t2 = time.perf_counter()
files = sum(1 for e in os.scandir(d) if e.is_file())
t3 = time.perf_counter()
print(json.dumps({"createMs": (t1 - t0) * 1000, "scanMs": (t3 - t2) * 1000, "files": files}))
`;

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
      const f = file(key);
      const backing = h.backingFiles(f);
      // The file itself first: an open of it through a FUSE mount may read its backing files.
      if (h.dropThroughMount !== false) dropPageCache(f);
      for (const b of backing) dropPageCache(b);
      if (!h.fuse) return { backingFiles: 1, residentBytes: residentBytes(f) };
      // Through a FUSE mount the residency that counts is the backing files' (the mount's own is its page cache).
      let max: number | null = 0;
      for (const b of backing) {
        const r = residentBytes(b);
        max = r === null || max === null ? null : Math.max(max, r);
      }
      return { backingFiles: backing.length, residentBytes: max };
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
    async createAndScan(count, sizeBytes) {
      const dir = path.join(h.workDir, `creates-${process.pid}-${Date.now()}`);
      const r = spawnSync('python3', ['-c', CREATE_AND_SCAN_PY, dir, String(count), String(sizeBytes), h.fuse ? String(FUSE_CACHE_EXPIRY_MS) : '0'], {
        encoding: 'utf8',
        maxBuffer: 1 << 20,
      });
      if (r.status !== 0) throw new Error(`python3 create loop failed in ${dir}: ${r.stderr.trim().slice(-500)}`);
      const out = JSON.parse(r.stdout.trim()) as { createMs: number; scanMs: number; files: number };
      fs.rmSync(dir, { recursive: true, force: true }); // untimed
      return { createMs: out.createMs, scanMs: out.scanMs, ok: out.files === count };
    },
    async perFile(count, sizeBytes) {
      const dir = path.join(h.workDir, `per-file-${process.pid}-${Date.now()}`);
      const r = spawnSync('python3', ['-c', PER_FILE_PY, dir, String(count), String(sizeBytes)], { encoding: 'utf8', maxBuffer: 1 << 20 });
      if (r.status !== 0) throw new Error(`python3 per-file loop failed in ${dir}: ${r.stderr.trim().slice(-500)}`);
      fs.rmSync(dir, { recursive: true, force: true }); // untimed
      return JSON.parse(r.stdout.trim()) as PerFileResult;
    },
    concurrentRead: (keys, sizeBytes, readers, rounds, expectSha256) =>
      workerReaders(
        Array.from({ length: readers }, () => ({ kind: 'file' as const, items: keys.map(file), port: 0, sizeBytes, rounds })),
        expectSha256,
      ),
    renameRace: (versions, readers, opens) => renameRaceOn(h.workDir, versions, readers, opens),
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
    case 'rename-race':
      return 3 * block; // the two versions and the one being written
    case 'per-file':
      return args.blocks * block;
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

/** Cascade's FUSE engines (`cascade mount --engine`); the benchmark names one, never `auto`. */
export type CascadeEngine = 'native' | 'fuse-native';

export interface CascadeVariant {
  /** Passed as CASCADE_ENGINE (the CLI's --engine default): the mount fails rather than fall back. */
  engine: CascadeEngine;
  /** Reads (and open+close) through the same-node client (LocalClient) instead of the mount. */
  client?: boolean;
  /** More variables for the daemon (e.g. CASCADE_NATIVE=0). */
  env?: Record<string, string>;
  kernelCache?: boolean;
  /** FUSE over io_uring (--fuse-uring on); every other row takes /dev/fuse (off), whatever the kernel offers. */
  uring?: boolean;
}

function logText(logFile: string): string {
  try {
    return fs.readFileSync(logFile, 'utf8');
  } catch {
    return '';
  }
}

/** The engine the daemon says it mounted with: `cascade: mounted MNT (engine DESCRIPTION, data ...)`, the last one. */
function mountedEngine(logFile: string): string | null {
  const text = logText(logFile);
  // Log lines are `TIME LEVEL cascade: ...` (mount/daemon/log.ts).
  const all = [...text.matchAll(/^(?:\S+ INFO +)?cascade: mounted .* \(engine (.*), data /gm)];
  return all.length > 0 ? all[all.length - 1][1] : null;
}

/**
 * Cascade through its FUSE mount (direct I/O, the default), with the engine named in `variant` (the
 * daemon's log must confirm it: no silent fallback). With `variant.client`, every read (hot, cold,
 * contention, capacity) and open+close goes through the same-node client instead: LocalClient.read =
 * open by path (a request on the daemon's socket: a disk block is promoted into DRAM first) + copy of
 * the block's views out of the shared arena into a reused, pre-touched buffer + release, all timed;
 * writes, settling, restarts and tiers go through the mount.
 */
async function openCascadeMount(ctx: SystemContext, variant: CascadeVariant): Promise<PeerSystem> {
  const { args, layout } = ctx;
  const dramBytes = args.workload === 'capacity' ? args.memoryBytes : cascadeDramBytes(cascadeWorkingSetBytes(args));
  const cli = path.join(__dirname, '..', 'mount', 'cli.js');
  if (!fs.existsSync(cli)) throw new Error(`${cli} is missing: build first (npm run build)`);
  const env = { ...variant.env, CASCADE_ENGINE: variant.engine, CASCADE_FUSE_URING: variant.uring === true ? 'on' : 'off' };
  const daemon = new CascadeDaemon(layout, { cliPath: cli, kernelCache: variant.kernelCache ?? false, dramBytes, env });
  const start = async () => {
    await daemon.start();
    const engine = mountedEngine(layout.logFile);
    if (engine === null || !engine.startsWith(`${variant.engine}:`)) {
      throw new Error(`cascade was asked for the ${variant.engine} engine but mounted with ${String(engine)}; log:\n${logText(layout.logFile).slice(-2000)}`);
    }
    if ((variant.uring === true) !== engine.includes('io_uring')) {
      throw new Error(`cascade was asked for ${variant.uring === true ? 'FUSE over io_uring' : '/dev/fuse'} but mounted with ${engine}; log:\n${logText(layout.logFile).slice(-2000)}`);
    }
  };
  try {
    await start();
  } catch (e) {
    await daemon.stop().catch(() => undefined);
    throw e;
  }
  let client: LocalClient | undefined;
  const dropClient = async () => {
    const c = client;
    client = undefined;
    await c?.close();
  };
  const sys = fileSystem({
    workDir: benchDirUnder(layout.mountDir),
    fuse: true,
    backingFiles: () => daemon.segmentFiles(),
    dropThroughMount: variant.kernelCache === true,
    settle: (contentBytes) => daemon.settle(contentBytes),
    async restart() {
      await dropClient(); // the client's connection and mapping belong to the daemon being stopped
      await daemon.stop();
      await start();
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
    facts: () => ({
      backing: `Cascade FUSE mount (${variant.engine} engine, direct I/O), data dir on the disk${variant.client ? '; reads through the same-node client (LocalClient)' : ''}`,
      cascadeEngine: mountedEngine(layout.logFile),
      ...daemon.facts(),
    }),
    async close() {
      await dropClient();
      await daemon.stop();
    },
    closeNowSync() {
      void client?.close();
      daemon.stopNowSync();
    },
  });
  if (!variant.client) return sys;

  const { LocalClient: Client } = await import('../mount/socket/client');
  /** Connected before any timed region (and again after a restart). */
  const connected = async () => (client ??= await Client.connect(layout.mountDir));
  const rel = (key: string) => `kv/bench/${key}.bin`;
  await connected().catch(async (e: unknown) => {
    await sys.close();
    throw e;
  });
  return {
    ...sys,
    async read(key, sizeBytes) {
      const c = await connected();
      const target = targetFor(sizeBytes);
      const t0 = clockMs();
      const out = await c.read(rel(key), target);
      const timeMs = clockMs() - t0;
      return { timeMs, bytes: out.length, sha256: sha256Hex(out) };
    },
    async openClose(keys, iterations) {
      const c = await connected();
      const names = keys.map(rel);
      const t0 = clockMs();
      for (let i = 0; i < iterations; i++) await (await c.open(names[i % names.length])).release();
      return clockMs() - t0;
    },
    statAll: async () => null,
    createAndScan: async () => null,
    perFile: async () => null,
    concurrentRead: (keys, sizeBytes, readers, rounds, expectSha256) =>
      workerReaders(
        Array.from({ length: readers }, () => ({ kind: 'cascade-client' as const, items: keys.map(rel), port: 0, sizeBytes, rounds, mountpoint: layout.mountDir })),
        expectSha256,
      ),
    renameRace: async () => {
      throw new Error(`cascade-client: ${CLIENT_NO_RENAME_RACE}`);
    },
  };
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
    createAndScan: async () => null,
    perFile: async () => null,
    expireMetadataCaches: async () => undefined,
    async statAll(keys, sizeBytes) {
      let ok = true;
      const t0 = clockMs();
      for (const k of keys) ok = (await redis.strlen(k)) === sizeBytes && ok;
      return { timeMs: clockMs() - t0, ok };
    },
    concurrentRead: (keys, sizeBytes, readers, rounds, expectSha256) =>
      workerReaders(Array.from({ length: readers }, () => ({ kind: 'redis' as const, items: keys, port, sizeBytes, rounds })), expectSha256),
    renameRace: async () => {
      throw new Error(`redis: ${NO_FILES}`);
    },
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
    createAndScan: async () => null,
    perFile: async () => null,
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
    renameRace: async () => {
      throw new Error(`h5py: ${NO_FILE_RENAME}`);
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
const NO_FILE_CREATES = 'no files: the create loop and the directory listing are file-system operations';
const NO_PER_FILE = 'no files: the per-file pattern is create, write, close and rename of files, then open and read';
const NO_FILES = 'no files: nothing to open while another name is renamed over it (a GET of a key replaced by RENAME is atomic by construction)';
const NO_FILE_RENAME = 'no file rename: the peer is one .h5 file open in one process; its datasets are not opened by path by other processes';
const NO_EVICTION = 'no eviction: everything written stays in memory until it runs out (no capacity notion to compare)';

const CLIENT_NO_RENAME_RACE =
  'the race measured is open(2) through a file system against rename(2) in it; the client does not open files (it asks the daemon for the current version by path)';
const CLIENT_ONLY_READS = 'the client only reads: writes go through the mount, which is the `cascade` row';
const CASCADE_DIRECT = 'direct I/O, data dir on the disk';

/**
 * Every system, in table order. Adding one (e.g. `cascade-noaddon` opening
 * `openCascadeMount(ctx, { engine: 'native', env: { CASCADE_NATIVE: '0' } })`) is one entry here and
 * its name in SYSTEM_NAMES. Every Cascade row has role `cascade`: each gets its own ratios to the limit
 * and to the best peer.
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
      'rename-race': 'open, read and rename of a hot file are page-cache operations: the tmpfs row',
      'per-file': 'creates, buffered writes and renames go to the page cache: the tmpfs row',
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
    notApplicable: { 'cold-read': MEMORY_ONLY, 'rename-race': NO_FILES, 'per-file': NO_PER_FILE },
    figuresNotApplicable: { 'open+close': 'Redis has no open/close', create: NO_FILE_CREATES, scandir: NO_FILE_CREATES },
    open: openRedis,
  },
  {
    name: 'h5py',
    role: 'peer',
    what: 'h5py in a python3 child: one .h5 file (on a private tmpfs; on the disk for cold reads), one dataset per block',
    notApplicable: { capacity: NO_EVICTION, 'rename-race': NO_FILE_RENAME, 'per-file': NO_PER_FILE },
    figuresNotApplicable: { create: NO_FILE_CREATES, scandir: NO_FILE_CREATES },
    open: openH5py,
  },
  {
    name: 'cascade',
    role: 'cascade',
    what: `Cascade mounted with \`cascade mount\`, native engine (CASCADE_ENGINE=native: C++ FUSE on /dev/fuse, requests of up to 4 MiB as fs.fuse.max_pages_limit allows, DRAM-held blocks read from shared memory without JS), ${CASCADE_DIRECT}`,
    notApplicable: {},
    open: (ctx) => openCascadeMount(ctx, { engine: 'native' }),
  },
  {
    name: 'cascade-uring',
    role: 'cascade',
    what: `the native-engine mount with --fuse-uring on: requests through FUSE over io_uring (one queue per CPU, each thread on its CPU; the runner sets the fuse module parameter enable_uring for the run and puts it back), ${CASCADE_DIRECT}`,
    notApplicable: {},
    open: (ctx) => openCascadeMount(ctx, { engine: 'native', uring: true }),
  },
  {
    name: 'cascade-passthrough',
    role: 'cascade',
    what: `the native-engine mount with --passthrough (CASCADE_PASSTHROUGH=1): read-only opens of committed files get a shared-memory backing file the kernel reads without the daemon, ${CASCADE_DIRECT}`,
    notApplicable: {},
    open: (ctx) => openCascadeMount(ctx, { engine: 'native', env: { CASCADE_PASSTHROUGH: '1' } }),
  },
  {
    name: 'cascade-fuse-native',
    role: 'cascade',
    what: `the same mount with the previous engine (CASCADE_ENGINE=fuse-native: libfuse 2 via fuse-native, 128 KiB requests, every request in JS), ${CASCADE_DIRECT}`,
    notApplicable: {},
    open: (ctx) => openCascadeMount(ctx, { engine: 'fuse-native' }),
  },
  {
    name: 'cascade-client',
    role: 'cascade',
    what:
      'Cascade\'s same-node client (LocalClient) beside the native-engine mount: each read = open by path over the daemon\'s socket (a disk block is promoted to DRAM) + ' +
      'copy of the whole block from the shared arena into a reused, pre-touched buffer + release, all timed; SHA-256 after the timed region. ' +
      'Writes, setup and restarts through the mount; open+close = client open + release; no stat',
    notApplicable: { write: CLIENT_ONLY_READS, 'dup-write': CLIENT_ONLY_READS, 'rename-race': CLIENT_NO_RENAME_RACE, 'per-file': CLIENT_ONLY_READS },
    figuresNotApplicable: {
      'stat-uncached': 'the client has no stat (its open returns the size); a stat is the mount\'s: the `cascade` row',
      create: 'the client reads; files are created through the mount: the `cascade` row',
      scandir: 'the client has no listing; a listing is the mount\'s: the `cascade` row',
    },
    open: (ctx) => openCascadeMount(ctx, { engine: 'native', client: true }),
  },
];

export function systemSpec(name: SystemName): SystemSpec {
  const s = SYSTEMS.find((x) => x.name === name);
  if (!s) throw new Error(`unknown system ${name}`);
  return s;
}
