/**
 * The cluster benchmark (issue 11): three `cascade mount --cluster` daemons on this machine (nodes a, b
 * and c), one redis-server, and one shared directory. It measures, in the same run:
 *
 * - a read on node b of a block that node a wrote, cold: a's segment files are dropped from the page
 *   cache (posix_fadvise DONTNEED) and b has never read the block. b reads it from the shared tier and
 *   checks its SHA-256;
 * - the same read again on b, now from b's DRAM;
 * - a read on a, from the writer's DRAM;
 * - the peers: a plain read of the block's byte range from a's segment file, cold (the disk's own
 *   limit for that read), and a Redis GET of a value of the same size from the same redis-server
 *   (in memory);
 * - a put on c of 64 MiB that a already stores: how many bytes c's segments grew (global dedup);
 * - 1, 2 and 3 nodes reading one shared set of 16 blocks of 2 MiB that a wrote: shared-tier reads
 *   summed over the nodes (whole-block loads from other nodes' segments, `cluster.sharedLoads`).
 *
 * Every figure is a whole-file read through the mount with Node's fs.readFileSync (open, read until
 * EOF, close), timed in this process; the daemons are other processes. Runs per size: 5 (--quick: 3).
 *
 *   node dist/bench/cluster-bench.js [--quick]   -> bench/results/cluster-<date>.json and a table
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Redis } from 'ioredis';
import { parseRedisUrl, RedisMeta } from '../store/meta/redis';
import { Daemon } from '../test/mount/daemon';
// The test suite's real-Redis helper: the same servers (loopback port, AOF, appendfsync always).
import { RedisServers } from '../test/store/redis-server';
import { clockMs, dropPageCache, f3, gbPerS, hostEnvironment, median } from './common';

const MiB = 1024 * 1024;

interface Row {
  what: string;
  sizeBytes: number;
  runs: number[];
  GBps: number;
  note: string;
}

function timeRead(file: string, want: string): number {
  const t = clockMs();
  const data = fs.readFileSync(file);
  const ms = clockMs() - t;
  if (crypto.createHash('sha256').update(data).digest('hex') !== want) throw new Error(`wrong bytes from ${file}`);
  return ms;
}

function segmentFiles(dir: string): string[] {
  const seg = path.join(dir, 'segments');
  return fs.existsSync(seg) ? fs.readdirSync(seg).filter((f) => f.endsWith('.log')).map((f) => path.join(seg, f)) : [];
}

function dirBytes(dir: string): number {
  return segmentFiles(dir).reduce((n, f) => n + fs.statSync(f).size, 0);
}

/** Whole blocks this node loaded from other nodes' segments so far. */
function sharedLoads(mnt: string): number {
  return (JSON.parse(fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8')) as { cluster: { sharedLoads: number } }).cluster.sharedLoads;
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const runs = quick ? 3 : 5;
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-cbench-'));
  const shared = path.join(root, 'shared');
  const redis = await RedisServers.start(false);
  const url = `redis://127.0.0.1:${redis.ports[0]}/bench`;
  const nodes: Record<string, Daemon> = {};
  const started = Date.now();
  try {
    for (const n of ['a', 'b', 'c']) {
      const mnt = path.join(root, `mnt-${n}`);
      fs.mkdirSync(mnt);
      // 1 GiB of DRAM each: the harness default (64 MiB) would not hold the 64 MiB blocks.
      nodes[n] = new Daemon(mnt, path.join(root, `data-${n}`), ['--dram', '1G', '--cluster', url, '--node', n, '--shared', shared]);
      await nodes[n].start();
    }
    const m = (n: string) => nodes[n].mnt;
    const meta = await RedisMeta.connect(parseRedisUrl(url));
    const client = new Redis({ host: '127.0.0.1', port: redis.ports[0] });
    const rows: Row[] = [];
    const add = (what: string, sizeBytes: number, times: number[], note: string) =>
      rows.push({ what, sizeBytes, runs: times, GBps: gbPerS(sizeBytes, median(times)), note });

    for (const size of [2 * MiB, 64 * MiB]) {
      const cold: number[] = [];
      const bDram: number[] = [];
      const aDram: number[] = [];
      const raw: number[] = [];
      const get: number[] = [];
      const dir = `kv/bench/s${size}`;
      fs.mkdirSync(path.join(m('a'), dir), { recursive: true });
      for (let i = 0; i < runs; i++) {
        const data = crypto.randomBytes(size);
        const sha = crypto.createHash('sha256').update(data).digest('hex');
        const rel = `${dir}/r${i}`;
        fs.writeFileSync(path.join(m('a'), rel), data);
        for (const f of segmentFiles(path.join(shared, 'nodes', 'a'))) dropPageCache(f);
        cold.push(timeRead(path.join(m('b'), rel), sha));
        bDram.push(timeRead(path.join(m('b'), rel), sha));
        aDram.push(timeRead(path.join(m('a'), rel), sha));
        const [place] = (await meta.locate(sha)).filter((p) => p.node === 'a');
        const file = path.join(shared, place.file);
        dropPageCache(file);
        const buf = Buffer.allocUnsafe(size);
        const fd = fs.openSync(file, 'r');
        const t = clockMs();
        for (let off = 0; off < size; ) off += fs.readSync(fd, buf, off, size - off, place.offsetBytes + 4096 + off);
        raw.push(clockMs() - t);
        fs.closeSync(fd);
        await client.set('bench:value', data);
        const g = clockMs();
        const back = await client.getBuffer('bench:value');
        get.push(clockMs() - g);
        if (!back || !back.equals(data)) throw new Error('Redis GET returned other bytes');
      }
      add('cascade: read on b of a block a wrote (shared tier, cold)', size, cold, "a's segments dropped from the page cache; b checks the SHA-256");
      add('cascade: the same read again on b (b\'s DRAM)', size, bDram, 'promoted on the first read');
      add("cascade: read on a (the writer's DRAM)", size, aDram, 'hot');
      add("peer: plain read of the record from a's segment file, cold", size, raw, 'the disk limit for the cold read');
      add('peer: Redis GET of a value of the same size', size, get, 'redis-server 7 on loopback, ioredis, in memory');
    }

    // Global dedup: content a stores, put on c.
    const dup = crypto.randomBytes(64 * MiB);
    fs.mkdirSync(path.join(m('a'), 'kv/bench/dup'), { recursive: true });
    fs.writeFileSync(path.join(m('a'), 'kv/bench/dup/one'), dup);
    const cBefore = dirBytes(path.join(shared, 'nodes', 'c'));
    const tDup = clockMs();
    fs.writeFileSync(path.join(m('c'), 'kv/bench/dup/two'), dup);
    const dupMs = clockMs() - tDup;
    const cGrewBytes = dirBytes(path.join(shared, 'nodes', 'c')) - cBefore;

    // Scaling: 16 prefix blocks written on a, read by 1, 2, 3 nodes.
    const scaling: Array<{ nodes: number; sharedReads: number; blocks: number }> = [];
    for (const count of [1, 2, 3]) {
      const prefixDir = `kv/bench/prefix${count}`;
      fs.mkdirSync(path.join(m('a'), prefixDir), { recursive: true });
      const shas: string[] = [];
      for (let i = 0; i < 16; i++) {
        const data = crypto.randomBytes(2 * MiB);
        shas.push(crypto.createHash('sha256').update(data).digest('hex'));
        fs.writeFileSync(path.join(m('a'), prefixDir, `b${i}`), data);
      }
      const readers = ['a', 'b', 'c'].slice(0, count);
      await new Promise((r) => setTimeout(r, 150)); // stats.json snapshots are 100 ms old at most
      const before = readers.map((n) => sharedLoads(m(n)));
      for (const n of readers) for (let i = 0; i < 16; i++) timeRead(path.join(m(n), prefixDir, `b${i}`), shas[i]);
      await new Promise((r) => setTimeout(r, 150));
      const after = readers.map((n) => sharedLoads(m(n)));
      scaling.push({ nodes: count, blocks: 16, sharedReads: after.reduce((s, x, i) => s + x - before[i], 0) });
    }
    await meta.close();
    client.disconnect();

    const doc = {
      schema: 'cascade-cluster-bench/1',
      date: new Date().toISOString(),
      wallTimeMs: Date.now() - started,
      environment: hostEnvironment(),
      setup: { nodes: 3, redis: 'redis-server on loopback, appendonly yes, appendfsync always', dramPerNode: '1 GiB', runs, engine: 'native (auto as root)' },
      rows,
      dedup: { sizeBytes: dup.length, putOnOtherNodeMs: dupMs, otherNodeSegmentGrowthBytes: cGrewBytes },
      scaling,
    };
    const outDir = path.join(__dirname, '..', '..', 'bench', 'results');
    fs.mkdirSync(outDir, { recursive: true });
    const out = path.join(outDir, `cluster-${doc.date.slice(0, 10)}${quick ? '-quick' : ''}.json`);
    fs.writeFileSync(out, JSON.stringify(doc, null, 2) + '\n');
    const lines = ['| what | size | GB/s (median) | runs, ms | note |', '|---|---:|---:|---|---|'];
    for (const r of rows) lines.push(`| ${r.what} | ${r.sizeBytes / MiB} MiB | ${f3(r.GBps)} | ${r.runs.map((x) => x.toFixed(1)).join(', ')} | ${r.note} |`);
    lines.push('', `dedup: 64 MiB already on a, put on c in ${dupMs.toFixed(0)} ms; c's segments grew ${cGrewBytes} bytes`);
    lines.push('', '| nodes reading 16 shared blocks | blocks loaded from the shared tier |', '|---:|---:|');
    for (const s of scaling) lines.push(`| ${s.nodes} | ${s.sharedReads} |`);
    process.stdout.write(lines.join('\n') + `\n\nresults: ${out}\n`);
  } finally {
    for (const d of Object.values(nodes)) await d.stop();
    await redis.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`cluster-bench: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
