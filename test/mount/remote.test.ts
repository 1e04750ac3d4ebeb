/**
 * The remote DRAM tier through real mounts: three `cascade mount --cluster` daemons whose fabric
 * endpoints (libfabric tcp;ofi_rxm) talk over loopback, and again in three network namespaces joined
 * by veth pairs and a bridge. Reads of blocks another node holds in DRAM come from that node's memory
 * (counted on both sides), not from the shared tier; a block read remotely three times gets a local
 * copy; the shared tier is read once per block however many nodes read it; a node killed while others
 * read from it costs a fallback, never a wrong byte. Skipped without libfabric in the addon.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { nativeBinding } from '../../native';
import { rmDir, seededBytes, sha256, tmpDir } from '../store/helpers';
import { haveRedis, RedisServers } from '../store/redis-server';
import { canMount, CLI, Daemon, isMounted } from './daemon';
import { NetNamespaces } from './netns';

type Node = 'a' | 'b' | 'c';
const NODES: Node[] = ['a', 'b', 'c'];

function sh(cmd: string): { code: number; stdout: string; stderr: string } {
  const r = spawnSync('bash', ['-c', cmd], { encoding: 'utf8', maxBuffer: 1 << 28 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

interface RemoteFigures {
  loads: number;
  loadBytes: number;
  fallbacks: number;
  promotions: number;
  provider: string;
  fabric: { holdsGranted: number; servedBytes: number; holdsActive: number };
}

/** A cluster of three daemons (on loopback, or each in its own network namespace). */
class Trio {
  readonly nodes = {} as Record<Node, Daemon>;
  constructor(
    readonly root: string,
    readonly url: string,
    private readonly flags: (n: Node) => { extra: string[]; wrapper?: string[] },
  ) {}

  mnt(n: Node): string {
    return this.nodes[n].mnt;
  }

  async start(n: Node): Promise<void> {
    if (!this.nodes[n]) {
      const m = path.join(this.root, `mnt-${n}`);
      fs.mkdirSync(m, { recursive: true });
      const f = this.flags(n);
      this.nodes[n] = new Daemon(
        m,
        path.join(this.root, `data-${n}`),
        ['--cluster', this.url, '--node', n, '--shared', path.join(this.root, 'shared'), ...f.extra],
        f.wrapper,
      );
    }
    await this.nodes[n].start();
  }

  async stop(): Promise<void> {
    for (const d of Object.values(this.nodes)) await d.stop();
    for (const d of Object.values(this.nodes)) assert.equal(isMounted(d.mnt), false, 'nothing left mounted');
  }

  /** stats.json of a node (waits out the snapshot's age so the figures include what just happened). */
  async stats(n: Node): Promise<{ remote: RemoteFigures; sharedLoads: number; hits: Record<string, number> }> {
    await delay(250);
    const s = JSON.parse(fs.readFileSync(`${this.mnt(n)}/.cascade/stats.json`, 'utf8'));
    return { remote: s.cluster.remote, sharedLoads: s.cluster.sharedLoads, hits: s.hits };
  }

  tier(n: Node, rel: string): string {
    return sh(`getfattr --only-values -n user.cascade.tier ${this.mnt(n)}/${rel}`).stdout;
  }

  read(n: Node, rel: string): string {
    return sha256(fs.readFileSync(`${this.mnt(n)}/${rel}`));
  }
}

function haveFabric(): boolean {
  return nativeBinding()?.features.libfabric === true;
}

describe('remote DRAM tier: three daemons, reads from each other\'s memory over libfabric', function () {
  this.timeout(180_000);
  let root: string;
  let redis: RedisServers;
  let trio: Trio;

  before(async function () {
    if (!canMount(['fusermount', 'python3', 'getfattr']) || !haveRedis() || !haveFabric()) this.skip();
    root = tmpDir('remote');
    redis = await RedisServers.start(false);
    trio = new Trio(root, `redis://127.0.0.1:${redis.ports[0]}/r${process.pid}`, () => ({
      extra: ['--fabric', 'tcp;ofi_rxm', '--fabric-addr', '127.0.0.1', '--remote-promote-after', '3'],
    }));
    for (const n of NODES) await trio.start(n);
  });

  after(async function () {
    await trio?.stop();
    await redis?.stop();
    if (root) rmDir(root);
  });

  it('a block written on A is read on B from A\'s DRAM (tier "remote"), byte-exact, not from the shared tier', async function () {
    const data = seededBytes(21, 5 * 1024 * 1024 + 3);
    fs.mkdirSync(`${trio.mnt('a')}/kv/m/r1`, { recursive: true });
    fs.writeFileSync(`${trio.mnt('a')}/kv/m/r1/blk`, data);
    const a0 = await trio.stats('a');
    const b0 = await trio.stats('b');
    assert.equal(trio.tier('b', 'kv/m/r1/blk'), 'remote', 'B sees the block in a peer\'s DRAM');
    assert.equal(sh(`sha256sum ${trio.mnt('b')}/kv/m/r1/blk`).stdout.split(' ')[0], sha256(data));
    const a1 = await trio.stats('a');
    const b1 = await trio.stats('b');
    assert.equal(b1.remote.loads - b0.remote.loads, 1, 'one remote load on B');
    assert.equal(b1.remote.loadBytes - b0.remote.loadBytes, data.length);
    assert.equal(b1.sharedLoads - b0.sharedLoads, 0, 'the shared tier was not read');
    assert.equal(a1.remote.fabric.holdsGranted - a0.remote.fabric.holdsGranted, 1, 'A served it');
    assert.equal(a1.remote.fabric.holdsActive, 0, 'and released its hold');
    assert.equal(b1.remote.provider, 'tcp;ofi_rxm');
    const status = JSON.parse(sh(`node ${CLI} cluster status --cluster ${trio.url} --json`).stdout);
    const nodeB = status.nodes.find((x: { node: string }) => x.node === 'b');
    assert.equal(typeof nodeB.stats.remote.address, 'string', 'cluster status shows B\'s fabric endpoint');
  });

  it('locality-aware promotion: C keeps its own copy at the third remote read, and serves later reads from it', async function () {
    const data = seededBytes(22, 2 * 1024 * 1024);
    fs.mkdirSync(`${trio.mnt('a')}/kv/m/r2`, { recursive: true });
    fs.writeFileSync(`${trio.mnt('a')}/kv/m/r2/blk`, data);
    const c0 = await trio.stats('c');
    for (let i = 1; i <= 2; i++) {
      assert.equal(trio.read('c', 'kv/m/r2/blk'), sha256(data));
      await delay(100); // the borrowed copy goes when the reader closes
      assert.equal(trio.tier('c', 'kv/m/r2/blk'), 'remote', `after read ${i}: no local copy kept`);
    }
    assert.equal(trio.read('c', 'kv/m/r2/blk'), sha256(data));
    assert.equal(trio.tier('c', 'kv/m/r2/blk'), 'dram', 'after read 3: a local copy');
    assert.equal(trio.read('c', 'kv/m/r2/blk'), sha256(data));
    const c1 = await trio.stats('c');
    assert.equal(c1.remote.loads - c0.remote.loads, 3, 'three fetches, the fourth read was local');
    assert.equal(c1.remote.promotions - c0.remote.promotions, 1);
  });

  it('the shared tier is read once per block, however many nodes read it (the first reader serves the rest)', async function () {
    const blocks = [0, 1, 2, 3].map((i) => seededBytes(30 + i, 1024 * 1024 + i));
    fs.mkdirSync(`${trio.mnt('a')}/kv/m/r3`, { recursive: true });
    blocks.forEach((d, i) => fs.writeFileSync(`${trio.mnt('a')}/kv/m/r3/${i}`, d));
    assert.equal(sh(`python3 -c "import os; [os.fsync(os.open('${trio.mnt('a')}/kv/m/r3/%d' % i, os.O_RDONLY)) for i in range(4)]"`).code, 0);
    // A restarts with empty DRAM: the blocks are in nobody's memory, only on the shared tier.
    await trio.nodes.a.stop('SIGKILL');
    await trio.start('a');
    const before = { b: await trio.stats('b'), c: await trio.stats('c') };
    blocks.forEach((d, i) => assert.equal(trio.read('b', `kv/m/r3/${i}`), sha256(d), `b block ${i}`));
    // C finds B's copies through the directory, which B updates as it loads each block: under load
    // (the whole suite) C could read before the last update landed and go to the shared tier. Wait
    // until C sees every block in a peer's DRAM.
    for (let waitedMs = 0; !blocks.every((_, i) => trio.tier('c', `kv/m/r3/${i}`) === 'remote'); waitedMs += 50) {
      assert.ok(waitedMs < 10_000, 'C sees B\'s copies within 10 s');
      await delay(50);
    }
    blocks.forEach((d, i) => assert.equal(trio.read('c', `kv/m/r3/${i}`), sha256(d), `c block ${i}`));
    const after = { b: await trio.stats('b'), c: await trio.stats('c') };
    const shared = after.b.sharedLoads - before.b.sharedLoads + (after.c.sharedLoads - before.c.sharedLoads);
    const remote = after.b.remote.loads - before.b.remote.loads + (after.c.remote.loads - before.c.remote.loads);
    const why = JSON.stringify({ before, after });
    assert.equal(shared, blocks.length, `each block read from the shared tier once, cluster-wide: ${why}`);
    assert.equal(remote, blocks.length, `and once from the first reader's DRAM: ${why}`);
  });

  it('kill -9 of B while C reads blocks from B\'s DRAM: every read byte-exact, one stall for the dead peer (<= the 500 ms reply bound), not one per block or per 10 s', async function () {
    const count = 30;
    const blocks = Array.from({ length: count }, (_, i) => seededBytes(100 + i, 1024 * 1024 + i));
    fs.mkdirSync(`${trio.mnt('b')}/kv/m/r4`, { recursive: true });
    blocks.forEach((d, i) => fs.writeFileSync(`${trio.mnt('b')}/kv/m/r4/${i}`, d));
    const expected = blocks.map((d) => sha256(d));
    const reader = spawn('python3', [
      '-c',
      `
import hashlib, sys, time
exp = sys.argv[1].split(",")
for i, want in enumerate(exp):
    t = time.monotonic()
    got = hashlib.sha256(open("${trio.mnt('c')}/kv/m/r4/%d" % i, "rb").read()).hexdigest()
    print(i, "ok" if got == want else "WRONG", round((time.monotonic() - t) * 1000), flush=True)
    time.sleep(0.5)  # the reads span more than 10 s after the kill
`,
      expected.join(','),
    ]);
    let out = '';
    reader.stdout.on('data', (d: Buffer) => (out += d.toString()));
    reader.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const done = new Promise<number | null>((r) => reader.on('exit', (c) => r(c)));
    while (out.split('\n').length < 8) await delay(20);
    await trio.nodes.b.stop('SIGKILL');
    assert.equal(await done, 0, out);
    const lines = out.trim().split('\n').map((l) => l.split(' '));
    assert.equal(lines.length, count, out);
    assert.deepEqual(lines.filter((l) => l[1] !== 'ok'), [], 'no wrong bytes');
    const ms = lines.map((l) => Number(l[2]));
    const slowest = Math.max(...ms);
    assert.ok(slowest < 1_500, `slowest read ${slowest} ms (the 500 ms reply bound, then the shared tier)`);
    // A read past 250 ms is a stall on the dead peer (a shared-tier read of 1 MiB takes a few ms).
    const stalls = ms.filter((t) => t > 250).length;
    console.log(`      dead peer: slowest read ${slowest} ms, ${stalls} stalled of ${ms.length}`);
    assert.ok(stalls <= 1, `${stalls} reads stalled on the dead peer (${ms.join(' ')} ms)`);
    await trio.start('b');
  });

  it('a close on A waits for Redis, not for the shared tier: with A\'s segment writes failing, the commit lands, B reads the block from A\'s memory, and once the flusher gets it out the shared tier serves it after A dies', async function () {
    await trio.nodes.a.stop();
    trio.nodes.a.env = { CASCADE_FAILPOINTS: 'disk.write=EIO#4' };
    await trio.start('a');
    try {
      const data = seededBytes(45, 3 * 1024 * 1024 + 7);
      fs.mkdirSync(`${trio.mnt('a')}/kv/m/r6`, { recursive: true });
      // A commit that waited for the segment write would fail here with EIO.
      fs.writeFileSync(`${trio.mnt('a')}/kv/m/r6/blk`, data);
      const b0 = await trio.stats('b');
      assert.equal(trio.read('b', 'kv/m/r6/blk'), sha256(data));
      const b1 = await trio.stats('b');
      assert.equal(b1.remote.loads - b0.remote.loads, 1, 'B read it from A\'s DRAM');
      assert.equal(b1.sharedLoads - b0.sharedLoads, 0);
      // The flusher retries each second; fsync() returns once the block and its place are recorded.
      let synced = false;
      for (let i = 0; i < 40 && !synced; i++) {
        synced = sh(`python3 -c "import os; os.fsync(os.open('${trio.mnt('a')}/kv/m/r6/blk', os.O_RDONLY))"`).code === 0;
        if (!synced) await delay(250);
      }
      assert.ok(synced, `fsync on A succeeds once a segment write does: ${trio.nodes.a.stderr.slice(-1500)}`);
      assert.match(trio.nodes.a.stderr, /injected by CASCADE_FAILPOINTS/, 'the segment writes did fail');
      await trio.nodes.a.stop('SIGKILL');
      const c0 = await trio.stats('c');
      assert.equal(trio.read('c', 'kv/m/r6/blk'), sha256(data), 'read on C after A died');
      const c1 = await trio.stats('c');
      assert.equal(c1.sharedLoads - c0.sharedLoads, 1, 'from the shared tier');
    } finally {
      await trio.nodes.a.stop();
      trio.nodes.a.env = {};
      await trio.start('a');
    }
  });

  it('content only in its writer\'s DRAM is not deduplicated against: B writing the same bytes stores its own copy, and B\'s fsync holds after A dies', async function () {
    await trio.nodes.a.stop();
    trio.nodes.a.env = { CASCADE_FAILPOINTS: 'disk.write=EIO' }; // A never gets a block to the shared tier
    await trio.start('a');
    try {
      const data = seededBytes(46, 2 * 1024 * 1024 + 9);
      fs.mkdirSync(`${trio.mnt('a')}/kv/m/r7`, { recursive: true });
      fs.writeFileSync(`${trio.mnt('a')}/kv/m/r7/one`, data);
      const bBytes = () => Number(sh(`du -sb ${path.join(trio.root, 'shared', 'nodes', 'b')}`).stdout.split('\t')[0]);
      const before = bBytes();
      fs.writeFileSync(`${trio.mnt('b')}/kv/m/r7/two`, data);
      const t = Date.now();
      const f = sh(`python3 -c "import os; os.fsync(os.open('${trio.mnt('b')}/kv/m/r7/two', os.O_RDONLY))"`);
      assert.equal(f.code, 0, `fsync on B: ${f.stderr}`);
      assert.ok(Date.now() - t < 5_000, `fsync on B took ${Date.now() - t} ms`);
      assert.ok(bBytes() - before >= data.length, `B stored a copy of its own (${bBytes() - before} bytes more in its segments)`);
      await trio.nodes.a.stop('SIGKILL');
      assert.equal(trio.read('c', 'kv/m/r7/two'), sha256(data), 'B\'s file on C after A died');
    } finally {
      await trio.nodes.a.stop('SIGKILL');
      trio.nodes.a.env = {};
      await trio.start('a');
    }
  });

  it('a pinned block keeps a second DRAM copy on another node, and stays readable from memory after its node is killed', async function () {
    const data = seededBytes(40, 3 * 1024 * 1024);
    fs.mkdirSync(`${trio.mnt('a')}/kv/m/r5`, { recursive: true });
    fs.writeFileSync(`${trio.mnt('a')}/kv/m/r5/prefix`, data);
    assert.equal(sh(`setfattr -n user.cascade.pinned -v 1 ${trio.mnt('a')}/kv/m/r5/prefix`).code, 0);
    // Within a heartbeat another node holds a copy.
    let replicas: Node[] = [];
    for (let i = 0; i < 100 && replicas.length === 0; i++) {
      await delay(200);
      replicas = (['b', 'c'] as const).filter((n) => trio.tier(n, 'kv/m/r5/prefix') === 'dram');
    }
    assert.equal(replicas.length, 1, 'one more DRAM copy, on B or C');
    const other = replicas[0] === 'b' ? 'c' : 'b';
    await trio.nodes.a.stop('SIGKILL');
    const o0 = await trio.stats(other);
    assert.equal(trio.read(other, 'kv/m/r5/prefix'), sha256(data));
    const o1 = await trio.stats(other);
    assert.equal(o1.sharedLoads - o0.sharedLoads, 0, `read from the replica's memory, not the shared tier: ${JSON.stringify({ o0, o1, replicas })} ${trio.nodes[other].stderr.slice(-2000)}`);
    assert.equal(o1.remote.loads - o0.remote.loads, 1);
    await trio.start('a');
  });
});

describe('remote DRAM tier in three network namespaces (veth + bridge)', function () {
  this.timeout(180_000);
  let root: string;
  let redis: RedisServers;
  let trio: Trio;
  let ns: NetNamespaces | undefined;

  before(async function () {
    if (!canMount(['fusermount', 'getfattr', 'ip', 'nsenter']) || !haveRedis() || !haveFabric()) this.skip();
    ns = NetNamespaces.create(3);
    if (!ns) this.skip();
    root = tmpDir('remote-ns');
    redis = await RedisServers.start(false, [ns.hostAddress]);
    trio = new Trio(root, `redis://${ns.hostAddress}:${redis.ports[0]}/n${process.pid}`, (n) => {
      const i = NODES.indexOf(n);
      return { extra: ['--fabric', 'tcp;ofi_rxm', '--fabric-addr', ns!.addresses[i]], wrapper: ns!.enter(i) };
    });
    for (const n of NODES) await trio.start(n);
  });

  after(async function () {
    await trio?.stop();
    await redis?.stop();
    ns?.destroy();
    if (root) rmDir(root);
  });

  it('each daemon sits in its own namespace, reachable only over the veths; writes on A read byte-exact on B and C from A\'s memory', async function () {
    assert.ok(ns!.addresses.every((addr, i) => sh(`${ns!.enter(i).join(' ')} ip -o -4 addr show`).stdout.includes(addr)), 'addresses inside');
    const data = seededBytes(50, 4 * 1024 * 1024 + 1);
    fs.mkdirSync(`${trio.mnt('a')}/kv/m/ns`, { recursive: true });
    fs.writeFileSync(`${trio.mnt('a')}/kv/m/ns/blk`, data);
    for (const n of ['b', 'c'] as const) {
      const s0 = await trio.stats(n);
      assert.equal(trio.read(n, 'kv/m/ns/blk'), sha256(data), `read on ${n}`);
      const s1 = await trio.stats(n);
      assert.equal(s1.remote.loads - s0.remote.loads, 1, `${n} fetched it from A's memory`);
      assert.equal(s1.sharedLoads - s0.sharedLoads, 0);
    }
  });

  it('a link cut between A and C: C falls back to the shared tier (byte-exact), B still reads from A\'s memory', async function () {
    const data = seededBytes(51, 2 * 1024 * 1024);
    fs.mkdirSync(`${trio.mnt('a')}/kv/m/cut`, { recursive: true });
    fs.writeFileSync(`${trio.mnt('a')}/kv/m/cut/blk`, data);
    ns!.block(2, ns!.addresses[0]);
    try {
      const c0 = await trio.stats('c');
      assert.equal(trio.read('c', 'kv/m/cut/blk'), sha256(data));
      const c1 = await trio.stats('c');
      assert.equal(c1.sharedLoads - c0.sharedLoads, 1, 'C read the shared tier');
      const b0 = await trio.stats('b');
      assert.equal(trio.read('b', 'kv/m/cut/blk'), sha256(data));
      const b1 = await trio.stats('b');
      assert.equal(b1.remote.loads - b0.remote.loads, 1, 'B read A\'s memory');
    } finally {
      ns!.unblock(2, ns!.addresses[0]);
    }
  });
});

describe('remote DRAM tier: corruption in transit and at the holder (CASCADE_FABRIC_FAULT on the holder)', function () {
  this.timeout(180_000);
  let root: string;
  let redis: RedisServers;
  let trio: Trio;
  // a: holds blocks and sends a wrong CRC for each first piece; b: holds blocks whose memory goes bad
  // before their CRCs are taken (CRCs right, SHA-256 wrong); c: reads (crc32c); its strict twin is c
  // restarted with --verify sha256.
  const faults: Record<Node, string> = { a: 'piece-crc', b: 'block-bytes', c: '' };
  let strictC = false;

  before(async function () {
    if (!canMount(['fusermount', 'python3', 'getfattr']) || !haveRedis() || !haveFabric()) this.skip();
    root = tmpDir('remote-faults');
    redis = await RedisServers.start(false);
    trio = new Trio(root, `redis://127.0.0.1:${redis.ports[0]}/f${process.pid}`, (n) => ({
      extra: ['--fabric', 'tcp;ofi_rxm', '--fabric-addr', '127.0.0.1', '--remote-promote-after', '1', ...(n === 'c' && strictC ? ['--verify', 'sha256'] : [])],
    }));
    for (const n of NODES) {
      await trio.start(n);
      // The fault is set in the daemon's environment: restart it with it.
      trio.nodes[n].env = { CASCADE_FABRIC_FAULT: faults[n] };
      await trio.nodes[n].stop();
      await trio.start(n);
    }
  });

  after(async function () {
    await trio?.stop();
    await redis?.stop();
    if (root) rmDir(root);
  });

  async function corrupt(n: Node): Promise<number> {
    const s = await trio.stats(n);
    return (s.remote as unknown as { corrupt: number }).corrupt;
  }

  it('a piece that fails its CRC-32C is never served: the read is byte-exact from the shared tier, counted, and the holder marked', async function () {
    const blocks = [seededBytes(60, 3 * 1024 * 1024), seededBytes(61, 3 * 1024 * 1024)];
    fs.mkdirSync(`${trio.mnt('a')}/kv/m/crc`, { recursive: true });
    blocks.forEach((d, i) => fs.writeFileSync(`${trio.mnt('a')}/kv/m/crc/${i}`, d));
    const c0 = await trio.stats('c');
    const k0 = await corrupt('c');
    assert.equal(trio.read('c', 'kv/m/crc/0'), sha256(blocks[0]), 'byte-exact');
    assert.equal(await corrupt('c'), k0 + 1, 'the bad fetch is counted');
    assert.equal(trio.read('c', 'kv/m/crc/1'), sha256(blocks[1]), 'byte-exact');
    const c1 = await trio.stats('c');
    assert.equal(c1.sharedLoads - c0.sharedLoads, 2, 'both read from the shared tier');
    assert.equal(c1.remote.loads - c0.remote.loads, 0, 'nothing kept from the bad holder');
    assert.equal(await corrupt('c'), k0 + 1, 'the holder is marked: the second block did not try it');
  });

  it('CRCs right, SHA-256 wrong: what is served passed its CRCs, nothing is kept, the holder is marked, later reads are byte-exact; --verify sha256 serves only the right bytes', async function () {
    const data = seededBytes(62, 3 * 1024 * 1024);
    fs.mkdirSync(`${trio.mnt('b')}/kv/m/sha`, { recursive: true });
    fs.writeFileSync(`${trio.mnt('b')}/kv/m/sha/blk`, data);
    fs.writeFileSync(`${trio.mnt('b')}/kv/m/sha/blk2`, seededBytes(63, 3 * 1024 * 1024));
    const k0 = await corrupt('c');
    const c0 = await trio.stats('c');
    const first = fs.readFileSync(`${trio.mnt('c')}/kv/m/sha/blk`);
    // The holder's byte 0 went bad before its CRCs were taken: a reader served before the whole
    // SHA-256 failed sees exactly that byte wrong; one that came after reads the shared tier.
    const diff = [...first.keys()].filter((i) => first[i] !== data[i]);
    assert.ok(diff.length === 0 || (diff.length === 1 && diff[0] === 0), `wrong bytes at ${diff.slice(0, 5).join(',')}`);
    assert.equal(await corrupt('c'), k0 + 1, 'the SHA-256 mismatch is counted');
    const c1 = await trio.stats('c');
    assert.equal(c1.remote.loads - c0.remote.loads, 0, 'the bad copy was not kept');
    assert.equal(c1.sharedLoads - c0.sharedLoads, 1, 'the block came from the shared tier instead');
    assert.equal(trio.read('c', 'kv/m/sha/blk'), sha256(data), 'the next read is byte-exact');
    console.log(`      CRC right, SHA wrong: first read ${diff.length === 0 ? 'byte-exact (the hash failed first)' : 'served the holder\'s bad byte'}`);
    // Strict: every read waits for the whole SHA-256.
    strictC = true;
    await trio.nodes.c.stop();
    delete (trio.nodes as Partial<Record<Node, Daemon>>).c; // made again, with the strict flag
    await trio.start('c');
    assert.ok(trio.nodes.c.extra.includes('sha256'), 'C runs with --verify sha256');
    const k1 = await corrupt('c');
    assert.equal(sha256(fs.readFileSync(`${trio.mnt('c')}/kv/m/sha/blk2`)), sha256(seededBytes(63, 3 * 1024 * 1024)), 'strict: byte-exact');
    assert.equal(await corrupt('c'), k1 + 1, 'strict: the mismatch is counted too');
  });
});
