/**
 * RemoteDram (store/remote.ts) without libfabric: a fake endpoint and arena record what a fetch asks
 * for, and a fake directory counts its round trips. The real transport is tested in
 * test/native/fabric.test.ts and test/mount/remote.test.ts.
 */
import { strict as assert } from 'node:assert';
import type { ClusterDirectory } from '../../store/meta';
import { RemoteDram } from '../../store/cluster/remote';
import type { NativeArenaTier } from '../../store/tiers/native-dram';
import type { NativeFabricBinding, NativeFabricStats } from '../../native';
import { sha } from './meta-conformance';

const PEERS: Record<string, string> = { self: 'aa', n2: 'bb', n3: 'cc' };

/** A directory whose DRAM hints are `holders`, counting how often it is asked for them. */
function fakeDirectory(holders: string[]): { directory: ClusterDirectory; asked: () => number } {
  let asked = 0;
  const directory = {
    dramHolders: async () => {
      asked++;
      return holders;
    },
    nodeStats: async () => Object.entries(PEERS).map(([node, address]) => ({ node, live: true, stats: { remote: { address } } })),
    advertiseDram: async () => undefined,
  } as unknown as ClusterDirectory;
  return { directory, asked: () => asked };
}

/** An arena whose adopt() runs the fill, and an endpoint that records the peer of every fetch. */
function fakeArena(): { dram: NativeArenaTier; fetchedFrom: string[] } {
  const fetchedFrom: string[] = [];
  const fabric: NativeFabricBinding = {
    address: () => PEERS.self,
    provider: () => 'fake',
    fetch: async (peer, sha256) => {
      fetchedFrom.push(peer);
      return sha256;
    },
    stats: () => ({}) as NativeFabricStats,
    close: () => undefined,
  };
  const dram = {
    openFabric: () => fabric,
    adopt: async (key: string, _sizeBytes: number, fill: (handle: number) => Promise<string | void>) => {
      assert.equal(await fill(1), key);
    },
  } as unknown as NativeArenaTier;
  return { dram, fetchedFrom };
}

describe('RemoteDram: holders noted with a resolve', function () {
  it('a fetch right after noteHolders uses the noted holders without asking the directory; once', async function () {
    const { directory, asked } = fakeDirectory(['n3']);
    const { dram, fetchedFrom } = fakeArena();
    const remote = RemoteDram.open(dram, 'self', directory, {}, () => undefined)!;
    try {
      remote.noteHolders(sha(1), ['self', 'n2']);
      assert.equal(await remote.fetch(dram, sha(1), 4096), true);
      assert.equal(asked(), 0, 'no round trip for the holders');
      assert.deepEqual(fetchedFrom, [PEERS.n2], 'from the noted holder, never from itself');
      assert.equal(await remote.fetch(dram, sha(1), 4096), true);
      assert.equal(asked(), 1, 'a noted hint is used once');
      assert.deepEqual(fetchedFrom, [PEERS.n2, PEERS.n3]);
    } finally {
      await remote.close();
    }
  });

  it('asks the directory when the note names only this node, or none, or is over a second old', async function () {
    const { directory, asked } = fakeDirectory(['n2']);
    const { dram } = fakeArena();
    const remote = RemoteDram.open(dram, 'self', directory, {}, () => undefined)!;
    const realNow = Date.now;
    try {
      remote.noteHolders(sha(1), ['self']);
      assert.equal(await remote.fetch(dram, sha(1), 4096), true);
      assert.equal(asked(), 1);
      remote.noteHolders(sha(2), []);
      assert.equal(await remote.fetch(dram, sha(2), 4096), true);
      assert.equal(asked(), 2);
      remote.noteHolders(sha(3), ['n3']);
      const t = realNow();
      Date.now = () => t + 1_001;
      assert.equal(await remote.fetch(dram, sha(3), 4096), true);
      assert.equal(asked(), 3, 'a stale note is not used');
    } finally {
      Date.now = realNow;
      await remote.close();
    }
  });

  it('keeps at most 4,096 notes, dropping the oldest', async function () {
    const { directory, asked } = fakeDirectory(['n2']);
    const { dram } = fakeArena();
    const remote = RemoteDram.open(dram, 'self', directory, {}, () => undefined)!;
    try {
      for (let i = 0; i <= 4_096; i++) remote.noteHolders(sha(i), ['n3']);
      assert.equal(await remote.fetch(dram, sha(0), 4096), true);
      assert.equal(asked(), 1, 'the oldest note went');
      assert.equal(await remote.fetch(dram, sha(4_096), 4096), true);
      assert.equal(asked(), 1, 'the newest is kept');
    } finally {
      await remote.close();
    }
  });
});
