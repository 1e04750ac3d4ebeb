/**
 * The Redis metadata engine against real redis-server processes: the MetaEngine conformance suite on
 * one server and on a 3-master Redis Cluster, then what only a shared engine has to get right (several
 * clients committing to one namespace at once) and its failure modes.
 */
import { strict as assert } from 'node:assert';
import { isCascadeError } from '../../store/errors';
import type { MetaEngine } from '../../store/meta';
import { parseRedisUrl, RedisMeta, type RedisMetaOptions } from '../../store/meta/redis';
import { metaConformance, sha } from './meta-conformance';
import { haveRedis, RedisServers } from './redis-server';

let namespaceSeq = 0;
function freshNamespace(): string {
  return `t${process.pid}-${Date.now()}-${namespaceSeq++}`;
}

for (const cluster of [false, true]) {
  describe(`RedisMeta on ${cluster ? 'a 3-master Redis Cluster' : 'one redis-server'}`, function () {
    this.timeout(60_000);
    let servers: RedisServers | undefined;

    before(async function () {
      if (!haveRedis()) this.skip();
      servers = await RedisServers.start(cluster);
    });
    after(async function () {
      await servers?.stop();
    });

    const options = (namespace: string): RedisMetaOptions => ({ nodes: servers!.nodes, cluster, namespace });

    metaConformance(cluster ? 'redis-cluster' : 'redis', async () => {
      const namespace = freshNamespace();
      let latest: MetaEngine = await RedisMeta.connect(options(namespace));
      return {
        engine: latest,
        reopen: async () => (latest = await RedisMeta.connect(options(namespace))),
        cleanup: async () => {
          await latest.close();
          const wipe = await RedisMeta.connect(options(namespace));
          await wipe.destroyNamespace();
          await wipe.close();
        },
      };
    });

    it('several clients of one namespace commit to one name at once: every version numbered once, totals exact', async function () {
      const namespace = freshNamespace();
      const clients = await Promise.all([0, 1, 2, 3].map(() => RedisMeta.connect(options(namespace))));
      try {
        const perClient = 50;
        const results = await Promise.all(
          clients.map((c, ci) =>
            Promise.all(Array.from({ length: perClient }, (_, i) => c.commit('m/shared', sha(`${ci}-${i}`), 10, 1_000 + i, 1024))),
          ),
        );
        const numbers = results.flat().map((r) => r.version.version).sort((a, b) => a - b);
        assert.deepEqual(numbers, Array.from({ length: 4 * perClient }, (_, i) => i + 1), 'versions 1..200, each once');
        const inos = new Set(results.flat().map((r) => r.version.ino));
        assert.equal(inos.size, 1, 'one file, one inode number, whichever client committed first');
        // Another client sees everything at once (one namespace, one truth).
        assert.equal((await clients[3].versions('m/shared')).length, 4 * perClient);
        assert.deepEqual(await clients[2].totals(), { names: 1, versions: 200, blocks: 200, uniqueBytes: 2000, logicalBytes: 2000, pinnedBytes: 0 });
        // Inode numbers from several clients never collide.
        const firsts = await Promise.all(clients.map((c) => c.allocateInodes(100)));
        const all = new Set(firsts.flatMap((f) => Array.from({ length: 100 }, (_, i) => f + i)));
        assert.equal(all.size, 400);
      } finally {
        for (const c of clients) await c.close();
        const wipe = await RedisMeta.connect(options(namespace));
        await wipe.destroyNamespace();
        await wipe.close();
      }
    });

    it('cluster directory: a commit records its place atomically; releasing the content drops every place; node leases', async function () {
      const meta = await RedisMeta.connect(options(freshNamespace()));
      try {
        const place = (node: string) => ({ node, file: `nodes/${node}/segments/seg-00000001.log`, offsetBytes: 4096, sizeBytes: 10 });
        await meta.commitPlaced('m/a', sha(1), 10, 1_000, 8, undefined, place('n1'));
        await meta.placeBlock(sha(1), place('n2'));
        await meta.placeBlock(sha(9), place('n2')); // content without a block row: not recorded
        assert.deepEqual((await meta.locate(sha(1))).sort((x, y) => x.node.localeCompare(y.node)), [place('n1'), place('n2')]);
        assert.deepEqual(await meta.locate(sha(9)), []);
        // Global dedup references only content with a place on the shared tier.
        await meta.commitPlaced('m/b', sha(3), 10, 1_000, 8, undefined, undefined, false, 'n1');
        await assert.rejects(meta.commitPlaced('m/c', sha(3), 10, 1_000, 8, undefined, undefined, true), (e: unknown) => isCascadeError(e, 'ENOENT'), 'only in a DRAM holder');
        assert.equal(await meta.current('m/c'), undefined, 'nothing committed');
        await meta.placeBlock(sha(3), place('n1'));
        assert.equal((await meta.commitPlaced('m/c', sha(3), 10, 1_000, 8, undefined, undefined, true)).version.sha256, sha(3), 'placed: referenced');
        await meta.unplaceBlock(sha(1), 'n2');
        assert.deepEqual(await meta.locate(sha(1)), [place('n1')]);
        assert.deepEqual((await meta.remove('m/a')).released, [sha(1)]);
        assert.deepEqual(await meta.locate(sha(1)), [], 'released content has no places left');

        assert.equal(await meta.joinNode('n1', 'tok-1', 10_000), true);
        assert.equal(await meta.joinNode('n1', 'tok-2', 10_000), false, 'a second holder is refused');
        assert.equal(await meta.nodeHolder('n1'), 'tok-1');
        assert.equal(await meta.joinNode('n1', 'tok-2', 10_000, 'tok-1'), true, 'a known-dead holder is replaced');
        assert.equal(await meta.joinNode('n2', 'tok-3', 200), true);
        assert.deepEqual(await meta.liveNodes(), ['n1', 'n2']);
        await new Promise((r) => setTimeout(r, 400));
        assert.deepEqual(await meta.liveNodes(), ['n1'], 'a lease not renewed expires');
        await meta.leaveNode('n1', 'tok-1'); // not the holder any more: no effect
        assert.deepEqual(await meta.liveNodes(), ['n1']);
        await meta.leaveNode('n1', 'tok-2');
        assert.deepEqual(await meta.liveNodes(), []);
      } finally {
        await meta.destroyNamespace();
        await meta.close();
      }
    });

    it('currentWithHolders: the current version and its DRAM holders in one call, as current() and dramHolders() give them', async function () {
      const meta = await RedisMeta.connect(options(freshNamespace()));
      try {
        assert.deepEqual(await meta.currentWithHolders('m/none'), { version: undefined, dramHolders: [] });
        await meta.commitPlaced('m/a', sha(1), 10, 1_000, 8, undefined, undefined, false, 'n1');
        await meta.commit('m/a', sha(2), 20, 2_000, 8);
        assert.deepEqual(await meta.currentWithHolders('m/a'), { version: await meta.current('m/a'), dramHolders: [] }, 'the newest version, whose content nobody holds');
        await meta.advertiseDram([
          { sha256: sha(2), node: 'n2', held: true },
          { sha256: sha(2), node: 'n3', held: true },
        ]);
        const r = await meta.currentWithHolders('m/a');
        assert.equal(r.version?.sha256, sha(2));
        assert.equal(r.version?.version, 2);
        assert.deepEqual(r.dramHolders.sort(), ['n2', 'n3']);
        assert.deepEqual(r.dramHolders.sort(), (await meta.dramHolders(sha(2))).sort());
        await assert.rejects(meta.currentWithHolders('m/\ud800'), (e: unknown) => isCascadeError(e, 'EINVAL'), 'a name that is not well-formed');
      } finally {
        await meta.destroyNamespace();
        await meta.close();
      }
    });

    it('namespaces are separate', async function () {
      const [a, b] = [freshNamespace(), freshNamespace()];
      const ea = await RedisMeta.connect(options(a));
      const eb = await RedisMeta.connect(options(b));
      try {
        await ea.commit('m/x', sha(1), 1, 1_000, 8);
        assert.equal(await eb.current('m/x'), undefined);
        assert.deepEqual(await eb.list('', { limit: 10 }), []);
      } finally {
        await ea.destroyNamespace();
        await ea.close();
        await eb.close();
      }
    });
  });
}

describe('RedisMeta: addresses and failures', function () {
  this.timeout(30_000);

  it('parses redis:// URLs (one server, a cluster, a namespace, a password) and refuses bad ones with EINVAL', function () {
    assert.deepEqual(parseRedisUrl('redis://10.0.0.1:6379'), { nodes: [{ host: '10.0.0.1', port: 6379 }], cluster: false, namespace: 'cascade', password: undefined });
    assert.deepEqual(parseRedisUrl('redis://a:7000,b:7001/job42'), {
      nodes: [
        { host: 'a', port: 7000 },
        { host: 'b', port: 7001 },
      ],
      cluster: true,
      namespace: 'job42',
      password: undefined,
    });
    assert.equal(parseRedisUrl('redis+cluster://a:7000').cluster, true);
    assert.equal(parseRedisUrl('redis://:s%40cret@h:1').password, 's@cret');
    for (const bad of ['http://h:1', 'redis://h', 'redis://h:0', 'redis://h:70000', 'redis://h:1/bad{tag}', 'redis://h:1/' + 'n'.repeat(65)]) {
      assert.throws(() => parseRedisUrl(bad), (e: unknown) => isCascadeError(e, 'EINVAL'), bad);
    }
  });

  it('an unreachable Redis is EIO at connect, within the connect timeout, naming the address', async function () {
    const started = Date.now();
    await assert.rejects(RedisMeta.connect({ nodes: [{ host: '127.0.0.1', port: 1 }], namespace: 'x' }), (e: unknown) => {
      assert.ok(isCascadeError(e, 'EIO'), String(e));
      assert.match((e as Error).message, /127\.0\.0\.1:1/);
      return true;
    });
    assert.ok(Date.now() - started < 10_000, `took ${Date.now() - started} ms`);
  });

  it('commits and reads fail with EIO once Redis is gone, within the command timeout', async function () {
    if (!haveRedis()) this.skip();
    const servers = await RedisServers.start(false);
    const namespace = freshNamespace();
    const meta = await RedisMeta.connect({ nodes: servers.nodes, namespace });
    try {
      await meta.commit('m/a', sha(1), 1, 1_000, 8);
      await servers.stop();
      const started = Date.now();
      await assert.rejects(meta.commit('m/a', sha(2), 2, 2_000, 8), (e: unknown) => isCascadeError(e, 'EIO'));
      await assert.rejects(meta.current('m/a'), (e: unknown) => isCascadeError(e, 'EIO'));
      assert.ok(Date.now() - started < 12_000, `took ${Date.now() - started} ms`);
    } finally {
      await meta.close();
    }
  });
});
