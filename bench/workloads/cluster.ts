/**
 * The cluster suite's workloads: four `cascade mount --cluster` daemons on this machine, one
 * redis-server, one shared directory, all under the trial's scratch directory. Nodes a, b and c run the
 * remote DRAM tier (libfabric tcp;ofi_rxm on loopback; b never keeps a copy of what it reads remotely,
 * so every read is remote); node d runs with `--fabric off` (it reads other nodes' blocks from the
 * shared tier only).
 *
 * - read (per block size): each run writes a new block on a, then times, in this order,
 *   `shared-cold`: a read on d (a's segment files dropped from the page cache; served as each piece
 *   passes its CRC-32C), `remote`: a read on b (hold, fi_read into b's arena, each piece served as it
 *   passes its CRC-32C, the SHA-256 beside it),
 *   `local`: a read on a (the writer's DRAM), `segment-read`: a plain cold read of the block's bytes from
 *   a's segment file (the disk's limit), `redis-get`: a Redis GET of a value of the same size from the
 *   same redis-server. Then the transport's own limits: `fi_read` (native/bench/fi_read_bench.cc, a C++
 *   fi_read loop between two processes over the same provider and address) and `iperf3` (TCP, one stream).
 * - dedup: 64 MiB that a stores, written on c: the time, and how much c's segments grew (global dedup).
 * - scaling: 16 blocks of 2 MiB written on d (which does not advertise its DRAM), read by 1, 2 and 3
 *   nodes (a, b, c): blocks loaded from the shared tier and from peers' DRAM, summed over the nodes.
 *
 * Every read is a whole-file read through a mount (open, read() until the block's size, close) into one
 * buffer per block size that every system reads into (readBuffer), timed in the trial process; the
 * daemons are other processes.
 */
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Redis } from 'ioredis';
import { parseRedisUrl, RedisMeta } from '../../store/meta/redis';
import { Daemon } from '../../test/mount/daemon';
// The test suite's real-Redis helper: the same servers (loopback port, AOF, appendfsync always).
import { RedisServers } from '../../test/store/redis-server';
import { clockMs, dropPageCache, median } from '../common';
import { trialLayout, waitPrefaulted } from '../mounts';
import type { CheckValue, ClusterTrialArgs, FigureSamples } from '../protocol';
import { fiReadLimit, iperf3Limit } from '../transport-peers';

const MiB = 1024 * 1024;
const FABRIC_ADDR = '127.0.0.1';
/** Seconds each transport peer measures. */
const PEER_SECONDS = 3;
/** Blocks of the scaling workload's prefix, and the nodes that read it in turn. */
const PREFIX_BLOCKS = 16;
const PREFIX_BLOCK_BYTES = 2 * MiB;
/** stats.json snapshots are 100 ms old at most. */
const STATS_SETTLE_MS = 150;
/** Long enough for a MONITOR connection to start listening, and for a step's commands to reach it. */
const MONITOR_SETTLE_MS = 100;

const sha256Hex = (data: Buffer) => crypto.createHash('sha256').update(data).digest('hex');
const settleStats = () => new Promise((r) => setTimeout(r, STATS_SETTLE_MS));
/** How long a remote load may take to be counted after its read (its SHA-256 check ends it). */
const REMOTE_COUNTED_WAIT_MS = 10_000;

/** Whether the node's remote loads went past `before` within REMOTE_COUNTED_WAIT_MS. */
async function remoteLoadCounted(mnt: string, before: number): Promise<boolean> {
  const untilMs = Date.now() + REMOTE_COUNTED_WAIT_MS;
  for (;;) {
    await settleStats();
    const now = loads(mnt).remote;
    if (now > before) return now === before + 1;
    if (Date.now() > untilMs) return false;
  }
}

/**
 * A buffer for the reads of one block size, allocated and touched once: every system reads into it, as
 * an engine reads into its own buffers. A fresh buffer per read would time this VM's page faults
 * (about 9 ms per 2 MiB, the same on tmpfs) rather than the read.
 */
const readBuffers = new Map<number, Buffer>();
function readBuffer(sizeBytes: number): Buffer {
  let b = readBuffers.get(sizeBytes);
  if (b === undefined) readBuffers.set(sizeBytes, (b = Buffer.alloc(sizeBytes)));
  return b;
}

/** A whole-file read through a mount, open to close, into readBuffer(); then its SHA-256 checked. */
function timeRead(file: string, want: string, sizeBytes: number): number {
  const buf = readBuffer(sizeBytes);
  const t = clockMs();
  const fd = fs.openSync(file, 'r');
  let off = 0;
  try {
    for (let n = 1; off < sizeBytes && n > 0; off += n) n = fs.readSync(fd, buf, off, sizeBytes - off, off);
  } finally {
    fs.closeSync(fd);
  }
  const ms = clockMs() - t;
  if (off !== sizeBytes || sha256Hex(buf) !== want) throw new Error(`wrong bytes from ${file}`);
  return ms;
}

function segmentFiles(dir: string): string[] {
  const seg = path.join(dir, 'segments');
  return fs.existsSync(seg) ? fs.readdirSync(seg).filter((f) => f.endsWith('.log')).map((f) => path.join(seg, f)) : [];
}

function dirBytes(dir: string): number {
  return segmentFiles(dir).reduce((n, f) => n + fs.statSync(f).size, 0);
}

/** Whole blocks this node loaded from other nodes' segments, and from peers' DRAM, so far. */
function loads(mnt: string): { shared: number; remote: number } {
  const s = JSON.parse(fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8')) as { cluster: { sharedLoads: number; remote?: { loads: number } } };
  return { shared: s.cluster.sharedLoads, remote: s.cluster.remote?.loads ?? 0 };
}

interface Cluster {
  /** A node's mount point ('s': the single-node mount beside the cluster). */
  mnt(node: string): string;
  /** A node's daemon process. */
  pid(node: string): number;
  shared: string;
  url: string;
  redisPort: number;
}

/** Redis and the four nodes, under the trial's scratch directory, for the length of `f`. */
async function withCluster<T>(scratchDir: string, f: (c: Cluster) => Promise<T>): Promise<T> {
  const shared = path.join(scratchDir, 'shared');
  const redis = await RedisServers.start(false);
  const url = `redis://127.0.0.1:${redis.ports[0]}/bench`;
  const nodes: Record<string, Daemon> = {};
  try {
    for (const n of ['a', 'b', 'c', 'd']) {
      const mnt = path.join(scratchDir, `mnt-${n}`);
      fs.mkdirSync(mnt);
      const fabric =
        n === 'd' ? ['--fabric', 'off'] : ['--fabric', 'tcp;ofi_rxm', '--fabric-addr', FABRIC_ADDR, ...(n === 'b' ? ['--remote-promote-after', '1000000'] : [])];
      // 1 GiB of DRAM each: the helper's default (64 MiB) would not hold the 64 MiB blocks.
      nodes[n] = new Daemon(mnt, path.join(scratchDir, `data-${n}`), ['--dram', '1G', '--cluster', url, '--node', n, '--shared', shared, ...fabric]);
      await nodes[n].start();
      // The runner kills what is listed here if this trial dies without stopping its daemons.
      if (nodes[n].proc?.pid !== undefined) fs.appendFileSync(trialLayout(scratchDir).pidFile, `${nodes[n].proc?.pid}\n`);
    }
    // The same path on a single node, in the same run: a mount of its own (no --cluster, same DRAM).
    const single = path.join(scratchDir, 'mnt-s');
    fs.mkdirSync(single);
    nodes.s = new Daemon(single, path.join(scratchDir, 'data-s'), ['--dram', '1G']);
    await nodes.s.start();
    if (nodes.s.proc?.pid !== undefined) fs.appendFileSync(trialLayout(scratchDir).pidFile, `${nodes.s.proc?.pid}\n`);
    await waitPrefaulted(Object.values(nodes).map((d) => d.mnt));
    return await f({ mnt: (n) => nodes[n].mnt, pid: (n) => nodes[n].proc!.pid!, shared, url, redisPort: redis.ports[0] });
  } finally {
    for (const d of Object.values(nodes)) await d.stop();
    await redis.stop();
  }
}

/** CPU time a process has used, all its threads, in ns (the first field of each thread's schedstat). */
function cpuNs(pid: number): number {
  let ns = 0;
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // the thread ended meanwhile
    }
  }
  return ns;
}

/**
 * Commands clients sent to Redis while `f` ran (a MONITOR connection sees each, and each command a
 * script runs as coming from "lua": those are not counted). Every client counts: a heartbeat that
 * falls in the window does too.
 */
async function redisCommandsDuring(client: Redis, f: () => void): Promise<number> {
  const monitor = await client.monitor();
  let sent = 0;
  monitor.on('monitor', (_time: string, _args: string[], source: string) => {
    if (source !== 'lua') sent++;
  });
  try {
    await new Promise((r) => setTimeout(r, MONITOR_SETTLE_MS)); // the monitor is listening
    sent = 0;
    f();
    await new Promise((r) => setTimeout(r, MONITOR_SETTLE_MS)); // what the step sent has arrived
    return sent;
  } finally {
    monitor.disconnect();
  }
}

const round2 = (x: number) => Math.round(x * 100) / 100;

function fsyncFile(file: string): void {
  const fd = fs.openSync(file, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

const figure = (name: string, label: string, bytesPerRun: number, timesMs: number[], opsPerRun = 1): FigureSamples => ({ figure: name, label, unit: 'GB/s', bytesPerRun, opsPerRun, timesMs });

async function readWorkload(args: ClusterTrialArgs, c: Cluster): Promise<{ figures: FigureSamples[]; checks: Record<string, CheckValue> }> {
  const size = args.blockBytes;
  const meta = await RedisMeta.connect(parseRedisUrl(c.url));
  const client = new Redis({ host: '127.0.0.1', port: c.redisPort });
  const times = { cold: [] as number[], remote: [] as number[], local: [] as number[], single: [] as number[], raw: [] as number[], get: [] as number[] };
  // Per counted run: CPU seconds per GB of the remote read (reader b, holder a).
  const costs = { readerCpu: [] as number[], holderCpu: [] as number[] };
  const commands = { write: -1, remoteRead: -1, localRead: -1 };
  try {
    const dir = `kv/bench/s${size}`;
    fs.mkdirSync(path.join(c.mnt('a'), dir), { recursive: true });
    fs.mkdirSync(path.join(c.mnt('s'), dir), { recursive: true });
    for (let i = 0; i < args.warmups + args.runs; i++) {
      const counted = i >= args.warmups;
      const data = crypto.randomBytes(size);
      const sha = sha256Hex(data);
      const rel = `${dir}/r${i}`;
      fs.writeFileSync(path.join(c.mnt('a'), rel), data);
      // a's close returns before its shared-tier append (other nodes fetch from its DRAM meanwhile):
      // its fsync, untimed, puts the block there, so that each read below measures only itself.
      fsyncFile(path.join(c.mnt('a'), rel));
      for (const f of segmentFiles(path.join(c.shared, 'nodes', 'a'))) dropPageCache(f);
      const cold = timeRead(path.join(c.mnt('d'), rel), sha, size);
      const before = loads(c.mnt('b')).remote;
      const cpuBefore = [cpuNs(c.pid('b')), cpuNs(c.pid('a'))];
      const remote = timeRead(path.join(c.mnt('b'), rel), sha, size);
      // b checks the SHA-256 beside the read, at low priority, and counts the remote load once it
      // matches: that may end well after the read (a 64 MiB block on two busy cores). Wait for it.
      const loadCounted = await remoteLoadCounted(c.mnt('b'), before);
      const cpuAfter = [cpuNs(c.pid('b')), cpuNs(c.pid('a'))];
      if (!loadCounted) throw new Error(`the read on b was not a remote DRAM read (${before} -> ${loads(c.mnt('b')).remote} after ${REMOTE_COUNTED_WAIT_MS} ms)`);
      const local = timeRead(path.join(c.mnt('a'), rel), sha, size);
      if (counted) {
        const perGB = (ns: number) => ns / 1e9 / (size / 1e9);
        costs.readerCpu.push(perGB(cpuAfter[0] - cpuBefore[0]));
        costs.holderCpu.push(perGB(cpuAfter[1] - cpuBefore[1]));
      }
      // The same on the single-node mount: the block written there, read back as a reads its own.
      fs.writeFileSync(path.join(c.mnt('s'), rel), data);
      const single = timeRead(path.join(c.mnt('s'), rel), sha, size);
      const [place] = (await meta.locate(sha)).filter((p) => p.node === 'a');
      const file = path.join(c.shared, place.file);
      dropPageCache(file);
      const buf = readBuffer(size);
      const fd = fs.openSync(file, 'r');
      const t = clockMs();
      for (let off = 0; off < size; ) off += fs.readSync(fd, buf, off, size - off, place.offsetBytes + 4096 + off);
      const raw = clockMs() - t;
      fs.closeSync(fd);
      if (sha256Hex(buf) !== sha) throw new Error(`the record in ${file} holds other bytes`);
      await client.set('bench:value', data);
      const g = clockMs();
      const back = await client.getBuffer('bench:value');
      const get = clockMs() - g;
      if (!back || !back.equals(data)) throw new Error('Redis GET returned other bytes');
      if (!counted) continue;
      times.cold.push(cold);
      times.remote.push(remote);
      times.local.push(local);
      times.single.push(single);
      times.raw.push(raw);
      times.get.push(get);
    }
    // Untimed, after the timed runs: Redis commands of each step for one more block (a MONITOR
    // connection slows Redis down, so it is not open while anything is timed).
    const data = crypto.randomBytes(size);
    const rel = `${dir}/counted`;
    commands.write = await redisCommandsDuring(client, () => fs.writeFileSync(path.join(c.mnt('a'), rel), data));
    commands.remoteRead = await redisCommandsDuring(client, () => fs.readFileSync(path.join(c.mnt('b'), rel)));
    commands.localRead = await redisCommandsDuring(client, () => fs.readFileSync(path.join(c.mnt('a'), rel)));
  } finally {
    await meta.close();
    client.disconnect();
  }
  const fi = await fiReadLimit({ blockBytes: size, seconds: PEER_SECONDS, addr: FABRIC_ADDR });
  const tcp = await iperf3Limit({ seconds: PEER_SECONDS, addr: FABRIC_ADDR });
  return {
    figures: [
      figure('remote', "read on b of a block in a's DRAM (remote DRAM tier): hold + fi_reads into b's arena, each piece served once it passes its CRC-32C (the SHA-256 beside) + read through the mount", size, times.remote),
      figure('shared-cold', "read on d of a block a wrote (shared tier, cold): d has no fabric; a's segments dropped from the page cache; each piece served once it passes its CRC-32C", size, times.cold),
      figure('local', "read on a (the writer's DRAM, local, hot)", size, times.local),
      figure('single-node', 'the same on a single-node mount beside the cluster: a block written there, read back (hot)', size, times.single),
      figure('segment-read', "peer: plain read of the record from a's segment file, cold (the disk limit for the cold read)", size, times.raw),
      figure('redis-get', 'peer: Redis GET of a value of the same size (redis-server on loopback, ioredis, in memory)', size, times.get),
      // One entry: the mean block time of the loop (its rate is the loop's bytes over its summed time).
      figure('fi_read', `peer: fi_read loop between two processes (C++, libfabric tcp;ofi_rxm on ${FABRIC_ADDR}), ${fi.blocks} blocks in ${PEER_SECONDS} s`, size, [fi.meanBlockMs]),
      figure('iperf3', `peer: iperf3 TCP, one stream, ${FABRIC_ADDR}, ${PEER_SECONDS} s (1 GB at its rate)`, 1e9, [1000 / tcp.GBps]),
    ],
    checks: {
      remoteReaderCpuSecondsPerGB: round2(median(costs.readerCpu)),
      remoteHolderCpuSecondsPerGB: round2(median(costs.holderCpu)),
      redisCommandsPerWrite: commands.write,
      redisCommandsPerRemoteRead: commands.remoteRead,
      redisCommandsPerLocalRead: commands.localRead,
      contentVerified: true,
      fiReadBlocks: fi.blocks, fabric: `a, b, c: tcp;ofi_rxm on ${FABRIC_ADDR} (b: --remote-promote-after 1000000); d: --fabric off`, dramPerNode: '1 GiB' },
  };
}

async function dedupWorkload(args: ClusterTrialArgs, c: Cluster): Promise<{ figures: FigureSamples[]; checks: Record<string, CheckValue> }> {
  const dup = crypto.randomBytes(args.blockBytes);
  fs.mkdirSync(path.join(c.mnt('a'), 'kv/bench/dup'), { recursive: true });
  fs.writeFileSync(path.join(c.mnt('a'), 'kv/bench/dup/one'), dup);
  fsyncFile(path.join(c.mnt('a'), 'kv/bench/dup/one')); // on the shared tier: what global dedup references
  const cBefore = dirBytes(path.join(c.shared, 'nodes', 'c'));
  const t = clockMs();
  fs.writeFileSync(path.join(c.mnt('c'), 'kv/bench/dup/two'), dup);
  const ms = clockMs() - t;
  const grew = dirBytes(path.join(c.shared, 'nodes', 'c')) - cBefore;
  const back = fs.readFileSync(path.join(c.mnt('c'), 'kv/bench/dup/two'));
  return {
    figures: [figure('put-duplicate', 'write on c of a block a already stores (SHA-256 and one Redis script; nothing to store)', args.blockBytes, [ms])],
    checks: { contentVerified: back.equals(dup), otherNodeSegmentGrowthBytes: grew },
  };
}

async function scalingWorkload(args: ClusterTrialArgs, c: Cluster): Promise<{ figures: FigureSamples[]; checks: Record<string, CheckValue> }> {
  const figures: FigureSamples[] = [];
  const checks: Record<string, CheckValue> = { contentVerified: true, blocks: args.blocks };
  for (const count of [1, 2, 3]) {
    const prefixDir = `kv/bench/prefix${count}`;
    fs.mkdirSync(path.join(c.mnt('d'), prefixDir), { recursive: true });
    const shas: string[] = [];
    for (let i = 0; i < args.blocks; i++) {
      const data = crypto.randomBytes(args.blockBytes);
      shas.push(sha256Hex(data));
      fs.writeFileSync(path.join(c.mnt('d'), prefixDir, `b${i}`), data);
    }
    const readers = ['a', 'b', 'c'].slice(0, count);
    await settleStats();
    const before = readers.map((n) => loads(c.mnt(n)));
    let ms = 0;
    for (const n of readers) for (let i = 0; i < args.blocks; i++) ms += timeRead(path.join(c.mnt(n), prefixDir, `b${i}`), shas[i], args.blockBytes);
    await settleStats();
    const after = readers.map((n) => loads(c.mnt(n)));
    figures.push(figure(`read ${count} node${count > 1 ? 's' : ''}`, `${count} node(s) read the ${args.blocks} prefix blocks in turn (summed read time)`, count * args.blocks * args.blockBytes, [ms], count * args.blocks));
    checks[`sharedLoads${count}`] = after.reduce((s, x, i) => s + x.shared - before[i].shared, 0);
    checks[`remoteLoads${count}`] = after.reduce((s, x, i) => s + x.remote - before[i].remote, 0);
  }
  return { figures, checks };
}

const VLLM_SCRIPT = path.join(__dirname, '..', '..', '..', 'bench', 'vllm_pattern.py');

function vllm(op: 'store' | 'exists' | 'load', dir: string, args: ClusterTrialArgs, threads: number): number {
  const out = spawnSync('python3', [VLLM_SCRIPT, op, dir, String(args.blocks), String(args.blockBytes), String(threads)], { encoding: 'utf8', timeout: 600_000 });
  if (out.status !== 0) throw new Error(`vllm_pattern.py ${op} ${dir}: ${out.stderr || out.stdout}`);
  return (JSON.parse(out.stdout.trim().split('\n').pop()!) as { ms: number }).ms;
}

/**
 * vLLM's file-tier pattern (bench/vllm_pattern.py): 4 writer threads store the blocks (existence check,
 * O_EXCL|O_DIRECT temp file, one write, rename) on a and on the single-node mount; existence checks of
 * all of them there; then a fresh process loads every block on b (from a, cross-node) and on the
 * single node (its own blocks). Each figure is one pass over all blocks, wall time.
 */
async function vllmWorkload(args: ClusterTrialArgs, c: Cluster): Promise<{ figures: FigureSamples[]; checks: Record<string, CheckValue> }> {
  const THREADS = 4;
  const times = { storeCluster: [] as number[], storeSingle: [] as number[], existsCluster: [] as number[], existsSingle: [] as number[], loadCross: [] as number[], loadSingle: [] as number[] };
  for (let i = 0; i < args.warmups + args.runs; i++) {
    const rel = `kv/vllm/llama_r${i}`;
    const t = {
      storeSingle: vllm('store', path.join(c.mnt('s'), rel), args, THREADS),
      storeCluster: vllm('store', path.join(c.mnt('a'), rel), args, THREADS),
      existsSingle: vllm('exists', path.join(c.mnt('s'), rel), args, 1),
      existsCluster: vllm('exists', path.join(c.mnt('a'), rel), args, 1),
      loadSingle: vllm('load', path.join(c.mnt('s'), rel), args, THREADS),
      loadCross: vllm('load', path.join(c.mnt('b'), rel), args, THREADS),
    };
    if (i < args.warmups) continue;
    for (const k of Object.keys(t) as Array<keyof typeof t>) times[k].push(t[k]);
  }
  const bytes = args.blocks * args.blockBytes;
  const files = (name: string, label: string, ms: number[]): FigureSamples => ({ figure: name, label, unit: 'ops/s', bytesPerRun: 0, opsPerRun: args.blocks, timesMs: ms });
  return {
    figures: [
      figure('store cluster', `${THREADS} threads store ${args.blocks} blocks on cluster node a (exists, O_EXCL|O_DIRECT temp, write, rename)`, bytes, times.storeCluster),
      figure('store single', 'the same on the single-node mount', bytes, times.storeSingle),
      figure('load cross-node', `a fresh process on b loads every block a stored (${THREADS} threads, open + readinto)`, bytes, times.loadCross),
      figure('load single', 'a fresh process on the single-node mount loads its own blocks', bytes, times.loadSingle),
      files('exists cluster', 'os.path.exists of every stored block on a', times.existsCluster),
      files('exists single', 'the same on the single-node mount', times.existsSingle),
    ],
    checks: { contentVerified: true, threads: THREADS },
  };
}

/** One cluster-suite trial: start the cluster, run the workload, stop it. */
export function runClusterTrial(args: ClusterTrialArgs): Promise<{ figures: FigureSamples[]; checks: Record<string, CheckValue> }> {
  const run = { read: readWorkload, vllm: vllmWorkload, dedup: dedupWorkload, scaling: scalingWorkload }[args.workload];
  return withCluster(args.scratchDir, (c) => run(args, c));
}

export const CLUSTER_PREFIX = { blocks: PREFIX_BLOCKS, blockBytes: PREFIX_BLOCK_BYTES };
