/**
 * The cluster benchmark (issue 11): four `cascade mount --cluster` daemons on this machine, one
 * redis-server, one shared directory. Nodes a, b and c run the remote DRAM tier (libfabric
 * tcp;ofi_rxm on loopback; b never keeps a copy of what it reads remotely, so every read is remote);
 * node d runs with `--fabric off` (it reads other nodes' blocks from the shared tier only). Measured in
 * the same run:
 *
 * - remote: a read on b of a block a wrote and holds in DRAM: hold, fi_read into b's arena, SHA-256
 *   check, then the read through b's mount;
 * - shared tier, cold: a read on d of a block a wrote, a's segment files dropped from the page cache
 *   (posix_fadvise DONTNEED); d checks its SHA-256;
 * - local DRAM: a read on a, the writer's DRAM;
 * - the peers: the transport's own limit (native/bench/fi_read_bench.cc, a C++ fi_read loop between two
 *   processes over the same provider and address, and iperf3 TCP on that address), a plain cold read
 *   of the block's byte range from a's segment file (the disk's limit), and a Redis GET of a value of
 *   the same size from the same redis-server (in memory);
 * - a put on c of 64 MiB that a already stores: how many bytes c's segments grew (global dedup);
 * - 1, 2 and 3 nodes (a, b, c) reading one prefix set of 16 blocks of 2 MiB that d wrote (d does not
 *   advertise its DRAM): blocks loaded from the shared tier and from peers' DRAM, summed over the nodes.
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
import { fiReadLimit, iperf3Limit } from './transport-peers';

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

/** Whole blocks this node loaded from other nodes' segments, and from peers' DRAM, so far. */
function loads(mnt: string): { shared: number; remote: number } {
  const s = JSON.parse(fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8')) as { cluster: { sharedLoads: number; remote?: { loads: number } } };
  return { shared: s.cluster.sharedLoads, remote: s.cluster.remote?.loads ?? 0 };
}

const FABRIC_ADDR = '127.0.0.1';
/** Seconds each transport peer measures. */
const PEER_SECONDS = 3;

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
    for (const n of ['a', 'b', 'c', 'd']) {
      const mnt = path.join(root, `mnt-${n}`);
      fs.mkdirSync(mnt);
      const fabric =
        n === 'd' ? ['--fabric', 'off'] : ['--fabric', 'tcp;ofi_rxm', '--fabric-addr', FABRIC_ADDR, ...(n === 'b' ? ['--remote-promote-after', '1000000'] : [])];
      // 1 GiB of DRAM each: the harness default (64 MiB) would not hold the 64 MiB blocks.
      nodes[n] = new Daemon(mnt, path.join(root, `data-${n}`), ['--dram', '1G', '--cluster', url, '--node', n, '--shared', shared, ...fabric]);
      await nodes[n].start();
    }
    const m = (n: string) => nodes[n].mnt;
    const meta = await RedisMeta.connect(parseRedisUrl(url));
    const client = new Redis({ host: '127.0.0.1', port: redis.ports[0] });
    const rows: Row[] = [];
    const add = (what: string, sizeBytes: number, times: number[], note: string) =>
      rows.push({ what, sizeBytes, runs: times, GBps: gbPerS(sizeBytes, median(times)), note });

    const limits: Record<number, { fiRead: number }> = {};
    for (const size of [2 * MiB, 64 * MiB]) {
      const cold: number[] = [];
      const remote: number[] = [];
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
        cold.push(timeRead(path.join(m('d'), rel), sha));
        const before = loads(m('b')).remote;
        remote.push(timeRead(path.join(m('b'), rel), sha));
        await new Promise((r) => setTimeout(r, 150)); // stats.json snapshots are 100 ms old at most
        if (loads(m('b')).remote !== before + 1) throw new Error(`the read on b was not a remote DRAM read (${before} -> ${loads(m('b')).remote})`);
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
      const fi = await fiReadLimit({ blockBytes: size, seconds: PEER_SECONDS, addr: FABRIC_ADDR });
      limits[size] = { fiRead: fi.GBps };
      add("cascade: read on b of a block in a's DRAM (remote DRAM tier)", size, remote, 'hold + fi_read into b\'s arena + SHA-256 check + read through the mount');
      add('cascade: read on d of a block a wrote (shared tier, cold)', size, cold, "d has no fabric; a's segments dropped from the page cache; d checks the SHA-256");
      add("cascade: read on a (the writer's DRAM, local)", size, aDram, 'hot');
      rows.push({ what: 'peer: fi_read loop between two processes (C++, libfabric)', sizeBytes: size, runs: [fi.meanBlockMs], GBps: fi.GBps, note: `tcp;ofi_rxm on ${FABRIC_ADDR}, ${fi.blocks} blocks in ${PEER_SECONDS} s, mean per block in runs` });
      add("peer: plain read of the record from a's segment file, cold", size, raw, 'the disk limit for the cold read');
      add('peer: Redis GET of a value of the same size', size, get, 'redis-server 7 on loopback, ioredis, in memory');
    }

    const tcp = await iperf3Limit({ seconds: PEER_SECONDS, addr: FABRIC_ADDR });
    rows.push({ what: 'peer: iperf3 TCP, one stream', sizeBytes: 0, runs: [], GBps: tcp.GBps, note: `${FABRIC_ADDR}, ${PEER_SECONDS} s` });

    // Global dedup: content a stores, put on c.
    const dup = crypto.randomBytes(64 * MiB);
    fs.mkdirSync(path.join(m('a'), 'kv/bench/dup'), { recursive: true });
    fs.writeFileSync(path.join(m('a'), 'kv/bench/dup/one'), dup);
    const cBefore = dirBytes(path.join(shared, 'nodes', 'c'));
    const tDup = clockMs();
    fs.writeFileSync(path.join(m('c'), 'kv/bench/dup/two'), dup);
    const dupMs = clockMs() - tDup;
    const cGrewBytes = dirBytes(path.join(shared, 'nodes', 'c')) - cBefore;

    // Scaling: 16 prefix blocks written on d (which advertises no DRAM copy), read by 1, 2, 3 nodes.
    const scaling: Array<{ nodes: number; sharedReads: number; remoteReads: number; blocks: number }> = [];
    for (const count of [1, 2, 3]) {
      const prefixDir = `kv/bench/prefix${count}`;
      fs.mkdirSync(path.join(m('d'), prefixDir), { recursive: true });
      const shas: string[] = [];
      for (let i = 0; i < 16; i++) {
        const data = crypto.randomBytes(2 * MiB);
        shas.push(crypto.createHash('sha256').update(data).digest('hex'));
        fs.writeFileSync(path.join(m('d'), prefixDir, `b${i}`), data);
      }
      const readers = ['a', 'b', 'c'].slice(0, count);
      await new Promise((r) => setTimeout(r, 150)); // stats.json snapshots are 100 ms old at most
      const before = readers.map((n) => loads(m(n)));
      for (const n of readers) for (let i = 0; i < 16; i++) timeRead(path.join(m(n), prefixDir, `b${i}`), shas[i]);
      await new Promise((r) => setTimeout(r, 150));
      const after = readers.map((n) => loads(m(n)));
      scaling.push({
        nodes: count,
        blocks: 16,
        sharedReads: after.reduce((s, x, i) => s + x.shared - before[i].shared, 0),
        remoteReads: after.reduce((s, x, i) => s + x.remote - before[i].remote, 0),
      });
    }
    await meta.close();
    client.disconnect();

    const doc = {
      schema: 'cascade-cluster-bench/1',
      date: new Date().toISOString(),
      wallTimeMs: Date.now() - started,
      environment: hostEnvironment(),
      setup: {
        nodes: 4,
        fabric: `a, b, c: tcp;ofi_rxm on ${FABRIC_ADDR} (b: --remote-promote-after 1000000); d: --fabric off`,
        redis: 'redis-server on loopback, appendonly yes, appendfsync always',
        dramPerNode: '1 GiB',
        runs,
        engine: 'native (auto as root)',
      },
      rows,
      goals: [2 * MiB, 64 * MiB].map((size) => {
        const get = (prefix: string) => rows.find((r) => r.sizeBytes === size && r.what.startsWith(prefix))!.GBps;
        const remote = get('cascade: read on b');
        const cold = get('cascade: read on d');
        return {
          sizeBytes: size,
          remoteOverFiRead: remote / limits[size].fiRead,
          remoteOverSharedCold: remote / cold,
          pass: { remoteAtLeast0p8xFiRead: remote >= 0.8 * limits[size].fiRead, remoteAtLeast2xSharedCold: remote >= 2 * cold },
        };
      }),
      dedup: { sizeBytes: dup.length, putOnOtherNodeMs: dupMs, otherNodeSegmentGrowthBytes: cGrewBytes },
      scaling,
    };
    const outDir = path.join(__dirname, '..', '..', 'bench', 'results');
    fs.mkdirSync(outDir, { recursive: true });
    const out = path.join(outDir, `cluster-${doc.date.slice(0, 10)}${quick ? '-quick' : ''}.json`);
    fs.writeFileSync(out, JSON.stringify(doc, null, 2) + '\n');
    const lines = ['| what | size | GB/s (median) | runs, ms | note |', '|---|---:|---:|---|---|'];
    for (const r of rows) lines.push(`| ${r.what} | ${r.sizeBytes ? `${r.sizeBytes / MiB} MiB` : '-'} | ${f3(r.GBps)} | ${r.runs.map((x) => x.toFixed(1)).join(', ')} | ${r.note} |`);
    lines.push('');
    for (const g of doc.goals) {
      lines.push(
        `goals at ${g.sizeBytes / MiB} MiB: remote ${f3(g.remoteOverFiRead)}x the fi_read limit (goal 0.8x: ${g.pass.remoteAtLeast0p8xFiRead ? 'PASS' : 'FAIL'}), ` +
          `${f3(g.remoteOverSharedCold)}x the cold shared-tier read (goal 2x: ${g.pass.remoteAtLeast2xSharedCold ? 'PASS' : 'FAIL'})`,
      );
    }
    lines.push('', `dedup: 64 MiB already on a, put on c in ${dupMs.toFixed(0)} ms; c's segments grew ${cGrewBytes} bytes`);
    lines.push('', '| nodes reading 16 prefix blocks | loaded from the shared tier | fetched from a peer\'s DRAM |', '|---:|---:|---:|');
    for (const s of scaling) lines.push(`| ${s.nodes} | ${s.sharedReads} | ${s.remoteReads} |`);
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
