/**
 * The MetaEngine conformance suite: every engine runs exactly these tests (see meta.test.ts), so that the
 * store can rely on one behaviour whatever the engine.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { INODE_ALLOCATED_LIMIT, INODE_FIRST_ALLOCATED, INODE_RESERVE_MAX, KEEP_VERSIONS_MAX, LIST_PAGE_MAX } from '../../store/constants';
import { isCascadeError, type ErrorCode } from '../../store/errors';
import type { BlockRecord, MetaEngine, MetaTotals, VersionRecord } from '../../store/meta';

export interface MetaFixture {
  engine: MetaEngine;
  /** Opens the same store again; the suite closes the previous engine first. Absent for volatile engines. */
  reopen?: () => Promise<MetaEngine>;
  /** Closes whatever engine is open (close is idempotent) and removes what the fixture created. */
  cleanup: () => Promise<void>;
}

const T0_MS = 1_700_000_000_000;
const KEEP = 8;

/** A real SHA-256 (engines may validate the format). */
export function sha(label: string | number): string {
  return createHash('sha256').update(String(label)).digest('hex');
}

async function rejectsWith(promise: Promise<unknown>, code: ErrorCode): Promise<void> {
  await assert.rejects(promise, (e: unknown) => {
    assert.ok(isCascadeError(e, code), `expected CascadeError ${code}, got ${String(e)}`);
    return true;
  });
}

interface Snapshot {
  names: string[];
  versions: Record<string, VersionRecord[]>;
  blocks: BlockRecord[];
  totals: MetaTotals;
}

async function snapshot(engine: MetaEngine): Promise<Snapshot> {
  const names = await engine.list('', { limit: LIST_PAGE_MAX });
  const versions: Record<string, VersionRecord[]> = {};
  for (const name of names) versions[name] = await engine.versions(name);
  const blocks = (await engine.blocks()).sort((a, b) => (a.sha256 < b.sha256 ? -1 : a.sha256 > b.sha256 ? 1 : 0));
  return { names, versions, blocks, totals: await engine.totals() };
}

/**
 * What must hold after any sequence of calls: versions are numbered upwards with non-decreasing times,
 * each block's refs equals the retained versions that reference it, a block row exists exactly for
 * referenced content, and totals() equals what the rows add up to.
 */
async function checkInvariants(engine: MetaEngine): Promise<Snapshot> {
  const snap = await snapshot(engine);
  const referenced = new Map<string, { refs: number; sizeBytes: number }>();
  let versionCount = 0;
  let logicalBytes = 0;
  for (const name of snap.names) {
    const versions = snap.versions[name];
    assert.ok(versions.length > 0, `listed name ${name} has no versions`);
    for (let i = 0; i < versions.length; i++) {
      const v = versions[i];
      assert.equal(v.name, name);
      if (i > 0) {
        assert.ok(v.version > versions[i - 1].version, `${name}: versions ascend`);
        assert.ok(v.timeMs >= versions[i - 1].timeMs, `${name}: times never decrease`);
      }
      const seen = referenced.get(v.sha256);
      if (seen) {
        assert.equal(seen.sizeBytes, v.sizeBytes, `one size per content (${v.sha256})`);
        seen.refs++;
      } else {
        referenced.set(v.sha256, { refs: 1, sizeBytes: v.sizeBytes });
      }
      versionCount++;
      logicalBytes += v.sizeBytes;
    }
    assert.deepEqual(await engine.current(name), versions[versions.length - 1], `${name}: current is the newest`);
  }
  let uniqueBytes = 0;
  let pinnedBytes = 0;
  for (const block of snap.blocks) {
    const seen = referenced.get(block.sha256);
    assert.ok(seen, `block row ${block.sha256} without versions`);
    assert.equal(block.refs, seen.refs, `refs of ${block.sha256}`);
    assert.equal(block.sizeBytes, seen.sizeBytes, `size of ${block.sha256}`);
    assert.deepEqual(await engine.block(block.sha256), block);
    uniqueBytes += block.sizeBytes;
    if (block.pinned) pinnedBytes += block.sizeBytes;
  }
  assert.equal(snap.blocks.length, referenced.size, 'a block row for every referenced content');
  assert.deepEqual(snap.totals, {
    names: snap.names.length,
    versions: versionCount,
    blocks: snap.blocks.length,
    uniqueBytes,
    logicalBytes,
    pinnedBytes,
  });
  return snap;
}

/** Deterministic xorshift32, so that a failing workload replays. */
function makeRandom(seed: number): (n: number) => number {
  let s = seed >>> 0 || 1;
  return (n) => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s % n;
  };
}

export function metaConformance(label: string, open: () => Promise<MetaFixture>): void {
  describe(`MetaEngine conformance: ${label}`, function () {
    let fixture: MetaFixture;
    let engine: MetaEngine;

    beforeEach(async function () {
      fixture = await open();
      engine = fixture.engine;
    });

    afterEach(async function () {
      await fixture.cleanup();
    });

    /** Closes and reopens the store when the engine persists; returns false when it does not. */
    async function reopen(): Promise<boolean> {
      if (fixture.reopen === undefined) return false;
      await engine.close();
      engine = await fixture.reopen();
      return true;
    }

    describe('commit and reads', function () {
      it('numbers the commits of a name 1, 2, 3 and reads each version back', async function () {
        const c1 = await engine.commit('m/a', sha(1), 10, T0_MS, KEEP);
        const c2 = await engine.commit('m/a', sha(2), 20, T0_MS + 1, KEEP);
        const c3 = await engine.commit('m/a', sha(3), 30, T0_MS + 2, KEEP);
        const ino = c1.version.ino;
        assert.ok(Number.isSafeInteger(ino) && ino >= INODE_FIRST_ALLOCATED, `a fresh inode number, got ${ino}`);
        assert.deepEqual(c1, { version: { name: 'm/a', version: 1, sha256: sha(1), sizeBytes: 10, timeMs: T0_MS, ino }, released: [] });
        assert.deepEqual(c2.version, { name: 'm/a', version: 2, sha256: sha(2), sizeBytes: 20, timeMs: T0_MS + 1, ino });
        assert.deepEqual(c3.version, { name: 'm/a', version: 3, sha256: sha(3), sizeBytes: 30, timeMs: T0_MS + 2, ino });

        assert.deepEqual(await engine.current('m/a'), c3.version);
        assert.deepEqual(await engine.version('m/a', 1), c1.version);
        assert.deepEqual(await engine.version('m/a', 2), c2.version);
        assert.equal(await engine.version('m/a', 0), undefined);
        assert.equal(await engine.version('m/a', 4), undefined);

        // Numbering is per name.
        assert.equal((await engine.commit('m/b', sha(1), 10, T0_MS, KEEP)).version.version, 1);
        await checkInvariants(engine);
      });

      it('answers undefined / empty for a name that does not exist', async function () {
        await engine.commit('m/a', sha(1), 10, T0_MS, KEEP);
        assert.equal(await engine.current('m/none'), undefined);
        assert.equal(await engine.version('m/none', 1), undefined);
        assert.equal(await engine.versionAt('m/none', T0_MS), undefined);
        assert.deepEqual(await engine.versions('m/none'), []);
        // A prefix of an existing name is not a name.
        assert.equal(await engine.current('m/'), undefined);
      });

      it('lists retained versions oldest first', async function () {
        for (let i = 1; i <= 5; i++) await engine.commit('m/a', sha(i), i, T0_MS + i, KEEP);
        const versions = await engine.versions('m/a');
        assert.deepEqual(
          versions.map((v) => [v.version, v.sha256]),
          [1, 2, 3, 4, 5].map((i) => [i, sha(i)]),
        );
      });

      it('versionAt picks the newest version at or before the time, including equal timestamps', async function () {
        await engine.commit('m/a', sha(1), 1, T0_MS, KEEP);
        await engine.commit('m/a', sha(2), 2, T0_MS + 100, KEEP);
        await engine.commit('m/a', sha(3), 3, T0_MS + 100, KEEP);
        await engine.commit('m/a', sha(4), 4, T0_MS + 200, KEEP);
        const at = async (timeMs: number): Promise<number | undefined> => (await engine.versionAt('m/a', timeMs))?.version;
        assert.equal(await at(T0_MS - 1), undefined, 'before the first version');
        assert.equal(await at(T0_MS), 1);
        assert.equal(await at(T0_MS + 99), 1);
        assert.equal(await at(T0_MS + 100), 3, 'the newest of two versions with the same time');
        assert.equal(await at(T0_MS + 150), 3);
        assert.equal(await at(T0_MS + 200), 4);
        assert.equal(await at(T0_MS + 1_000_000), 4);
        assert.deepEqual(await engine.versionAt('m/a', T0_MS + 150), await engine.version('m/a', 3));
      });

      it('raises a commit time older than the previous version, so times never decrease', async function () {
        await engine.commit('m/a', sha(1), 1, T0_MS + 500, KEEP);
        const late = await engine.commit('m/a', sha(2), 2, T0_MS + 100, KEEP);
        assert.equal(late.version.timeMs, T0_MS + 500);
        assert.equal((await engine.version('m/a', 2))?.timeMs, T0_MS + 500);
        assert.equal(await engine.versionAt('m/a', T0_MS + 499), undefined);
        assert.equal((await engine.versionAt('m/a', T0_MS + 500))?.version, 2);
        // A later time is kept as given, not raised further.
        assert.equal((await engine.commit('m/a', sha(3), 3, T0_MS + 600, KEEP)).version.timeMs, T0_MS + 600);
        // Clamping is per name: another name keeps its own, earlier time.
        assert.equal((await engine.commit('m/b', sha(4), 4, T0_MS, KEEP)).version.timeMs, T0_MS);
      });
    });

    describe('retention and dedup', function () {
      it('trims to keepVersions and releases content only when its last reference goes', async function () {
        const [x, y, z, w1, w2] = [sha('x'), sha('y'), sha('z'), sha('w1'), sha('w2')];
        await engine.commit('m/a', x, 1, T0_MS, 2);
        await engine.commit('m/a', y, 2, T0_MS, 2);
        const third = await engine.commit('m/a', z, 3, T0_MS, 2);
        assert.deepEqual(third.released, [x], 'v1 trimmed and x unreferenced');
        assert.equal(await engine.block(x), undefined);
        assert.deepEqual((await engine.versions('m/a')).map((v) => v.version), [2, 3]);

        await engine.commit('m/b', z, 3, T0_MS, 2); // z now referenced by two names
        assert.deepEqual((await engine.commit('m/a', w1, 4, T0_MS, 2)).released, [y]);
        const trimsZ = await engine.commit('m/a', w2, 5, T0_MS, 2);
        assert.deepEqual(trimsZ.released, [], 'z is still referenced by m/b');
        assert.deepEqual(await engine.block(z), { sha256: z, sizeBytes: 3, refs: 1, pinned: false });
        assert.deepEqual((await engine.versions('m/a')).map((v) => v.version), [4, 5]);

        // Committing content that the trim removes keeps it alive (the new reference comes first).
        await engine.commit('m/c', x, 1, T0_MS, 1);
        const same = await engine.commit('m/c', x, 1, T0_MS, 1);
        assert.deepEqual(same.released, []);
        assert.deepEqual(await engine.block(x), { sha256: x, sizeBytes: 1, refs: 1, pinned: false });
        assert.deepEqual((await engine.versions('m/c')).map((v) => v.version), [2]);
        await checkInvariants(engine);
      });

      it('a smaller keepVersions trims several old versions at once', async function () {
        for (let i = 1; i <= 5; i++) await engine.commit('m/a', sha(i), i, T0_MS, KEEP);
        const result = await engine.commit('m/a', sha(6), 6, T0_MS, 2);
        assert.deepEqual([...result.released].sort(), [sha(1), sha(2), sha(3), sha(4)].sort());
        assert.deepEqual((await engine.versions('m/a')).map((v) => v.version), [5, 6]);
        await checkInvariants(engine);
      });

      it('keeps one block row per content, with refs = the versions that reference it', async function () {
        const x = sha('x');
        await engine.commit('m/a', x, 100, T0_MS, KEEP);
        await engine.commit('m/b', x, 100, T0_MS, KEEP);
        await engine.commit('m/c', x, 100, T0_MS, KEEP);
        await engine.commit('m/a', x, 100, T0_MS, KEEP); // the same content twice under one name
        assert.deepEqual(await engine.block(x), { sha256: x, sizeBytes: 100, refs: 4, pinned: false });
        assert.deepEqual(await engine.blocks(), [{ sha256: x, sizeBytes: 100, refs: 4, pinned: false }]);
        assert.deepEqual(await engine.totals(), { names: 3, versions: 4, blocks: 1, uniqueBytes: 100, logicalBytes: 400, pinnedBytes: 0 });

        assert.deepEqual((await engine.remove('m/a')).released, []);
        assert.equal((await engine.block(x))?.refs, 2);
        assert.deepEqual((await engine.remove('m/b')).released, []);
        assert.deepEqual((await engine.remove('m/c')).released, [x]);
        assert.equal(await engine.block(x), undefined);
        assert.deepEqual(await engine.totals(), { names: 0, versions: 0, blocks: 0, uniqueBytes: 0, logicalBytes: 0, pinnedBytes: 0 });
      });
    });

    describe('remove', function () {
      it('removes a name with all its versions, releases unshared content, and restarts numbering', async function () {
        const [x, y] = [sha('x'), sha('y')];
        await engine.commit('m/a', x, 10, T0_MS, KEEP);
        await engine.commit('m/a', y, 20, T0_MS, KEEP);
        await engine.commit('m/b', y, 20, T0_MS, KEEP);
        const { released } = await engine.remove('m/a');
        assert.deepEqual(released, [x]);
        assert.equal(await engine.current('m/a'), undefined);
        assert.equal(await engine.version('m/a', 1), undefined);
        assert.deepEqual(await engine.versions('m/a'), []);
        assert.deepEqual(await engine.list('m/', { limit: 10 }), ['m/b']);
        assert.equal(await engine.block(x), undefined);
        assert.equal((await engine.block(y))?.refs, 1);
        assert.equal((await engine.commit('m/a', x, 10, T0_MS, KEEP)).version.version, 1);
        await checkInvariants(engine);
      });

      it('is ENOENT for a name that does not exist (or no longer does)', async function () {
        await rejectsWith(engine.remove('m/none'), 'ENOENT');
        await engine.commit('m/a', sha(1), 1, T0_MS, KEEP);
        await engine.remove('m/a');
        await rejectsWith(engine.remove('m/a'), 'ENOENT');
      });
    });

    describe('rename', function () {
      it('moves the current content to a new name and releases the rest of the history', async function () {
        const [a, b] = [sha('a'), sha('b')];
        await engine.commit('m/src', a, 10, T0_MS, KEEP);
        const { ino } = (await engine.commit('m/src', b, 20, T0_MS + 1, KEEP)).version;
        const result = await engine.rename('m/src', 'm/dst', T0_MS + 10, KEEP);
        assert.deepEqual(result, { version: { name: 'm/dst', version: 1, sha256: b, sizeBytes: 20, timeMs: T0_MS + 10, ino }, released: [a] });
        assert.equal(await engine.current('m/src'), undefined);
        assert.deepEqual(await engine.versions('m/src'), []);
        assert.deepEqual(await engine.current('m/dst'), result.version);
        assert.deepEqual(await engine.list('m/', { limit: 10 }), ['m/dst']);
        assert.deepEqual(await engine.block(b), { sha256: b, sizeBytes: 20, refs: 1, pinned: false });
        assert.equal(await engine.block(a), undefined);
        await checkInvariants(engine);
      });

      it('over an existing name, adds a version after its history (time raised to its last)', async function () {
        const [d1, d2, s] = [sha('d1'), sha('d2'), sha('s')];
        await engine.commit('m/dst', d1, 1, T0_MS, KEEP);
        await engine.commit('m/dst', d2, 2, T0_MS + 1000, KEEP);
        const { ino } = (await engine.commit('m/src', s, 3, T0_MS + 5, KEEP)).version;
        const result = await engine.rename('m/src', 'm/dst', T0_MS + 10, KEEP);
        // The moved file keeps its number; the replaced file's versions keep theirs.
        assert.deepEqual(result, { version: { name: 'm/dst', version: 3, sha256: s, sizeBytes: 3, timeMs: T0_MS + 1000, ino }, released: [] });
        assert.deepEqual((await engine.versions('m/dst')).map((v) => [v.version, v.sha256]), [[1, d1], [2, d2], [3, s]]);
        assert.equal(await engine.current('m/src'), undefined);
        // `from` is gone: a new commit to it starts at 1 again.
        assert.equal((await engine.commit('m/src', s, 3, T0_MS, KEEP)).version.version, 1);
        await checkInvariants(engine);
      });

      it('trims the destination to keepVersions, never releasing the content it moves', async function () {
        const [s, d2, d3] = [sha('s'), sha('d2'), sha('d3')];
        await engine.commit('m/dst', s, 1, T0_MS, KEEP); // the content being moved, as dst's oldest version
        await engine.commit('m/dst', d2, 2, T0_MS, KEEP);
        await engine.commit('m/src', s, 1, T0_MS, KEEP);
        const first = await engine.rename('m/src', 'm/dst', T0_MS, 2);
        assert.deepEqual(first.released, [], 's lost two references but gained one');
        assert.deepEqual((await engine.versions('m/dst')).map((v) => [v.version, v.sha256]), [[2, d2], [3, s]]);
        assert.deepEqual(await engine.block(s), { sha256: s, sizeBytes: 1, refs: 1, pinned: false });

        await engine.commit('m/other', d3, 3, T0_MS, KEEP);
        const second = await engine.rename('m/other', 'm/dst', T0_MS, 2);
        assert.deepEqual(second.released, [d2]);
        await checkInvariants(engine);
      });

      it('of a name onto itself changes nothing and returns the current version', async function () {
        await engine.commit('m/a', sha(1), 1, T0_MS, KEEP);
        const head = await engine.commit('m/a', sha(2), 2, T0_MS + 1, KEEP);
        const before = await snapshot(engine);
        const result = await engine.rename('m/a', 'm/a', T0_MS + 99, 1); // keepVersions 1 must not trim
        assert.deepEqual(result, { version: head.version, released: [] });
        assert.deepEqual(await snapshot(engine), before);
      });

      it('is ENOENT when the source does not exist, creating nothing', async function () {
        await engine.commit('m/x', sha(1), 1, T0_MS, KEEP);
        const before = await snapshot(engine);
        await rejectsWith(engine.rename('m/none', 'm/new', T0_MS, KEEP), 'ENOENT');
        await rejectsWith(engine.rename('m/none', 'm/x', T0_MS, KEEP), 'ENOENT');
        await rejectsWith(engine.rename('m/none', 'm/none', T0_MS, KEEP), 'ENOENT');
        assert.equal(await engine.current('m/new'), undefined);
        assert.deepEqual(await snapshot(engine), before);
      });
    });

    describe('list', function () {
      it('returns the names under a prefix in order; a/b/ does not match a/bc', async function () {
        for (const name of ['a/bc', 'b/x', 'a/b/d', 'a/b', 'a/b/c/e', 'a/a', 'a/b/c']) {
          await engine.commit(name, sha(name), 1, T0_MS, KEEP);
        }
        const all = await engine.list('', { limit: 100 });
        assert.deepEqual(all, ['a/a', 'a/b', 'a/b/c', 'a/b/c/e', 'a/b/d', 'a/bc', 'b/x']);
        assert.deepEqual(await engine.list('a/b/', { limit: 100 }), ['a/b/c', 'a/b/c/e', 'a/b/d']);
        assert.deepEqual(await engine.list('a/b', { limit: 100 }), ['a/b', 'a/b/c', 'a/b/c/e', 'a/b/d', 'a/bc']);
        assert.deepEqual(await engine.list('a/b/c/e', { limit: 100 }), ['a/b/c/e']);
        assert.deepEqual(await engine.list('c/', { limit: 100 }), []);
        assert.deepEqual(await engine.list('a/', { limit: 2 }), ['a/a', 'a/b']);
      });

      it('pages with after and limit', async function () {
        const names = Array.from({ length: 25 }, (_, i) => `m/${String(i).padStart(2, '0')}`);
        for (const name of [...names].reverse()) await engine.commit(name, sha(name), 1, T0_MS, KEEP);
        await engine.commit('l/z', sha('l/z'), 1, T0_MS, KEEP);
        await engine.commit('n/a', sha('n/a'), 1, T0_MS, KEEP);

        const pages: string[][] = [];
        let after: string | undefined;
        for (;;) {
          const page = await engine.list('m/', { after, limit: 7 });
          if (page.length === 0) break;
          pages.push(page);
          after = page[page.length - 1];
        }
        assert.deepEqual(pages.map((p) => p.length), [7, 7, 7, 4]);
        assert.deepEqual(pages.flat(), names);

        assert.deepEqual(await engine.list('m/', { limit: 0 }), []);
        assert.deepEqual(await engine.list('m/', { after: 'm/10', limit: 2 }), ['m/11', 'm/12'], 'after is exclusive');
        assert.deepEqual(await engine.list('m/', { after: 'm/105', limit: 2 }), ['m/11', 'm/12'], 'after need not be a name');
        assert.deepEqual(await engine.list('m/', { after: 'a', limit: 2 }), ['m/00', 'm/01'], 'after before the prefix');
        assert.deepEqual(await engine.list('m/', { after: 'm/', limit: 2 }), ['m/00', 'm/01']);
        assert.deepEqual(await engine.list('m/', { after: 'm/24', limit: 2 }), []);
        assert.deepEqual(await engine.list('m/', { after: 'z', limit: 2 }), []);
        assert.deepEqual(await engine.list('', { after: 'm/24', limit: 5 }), ['n/a']);
      });

      it('orders by UTF-8 bytes (code points), not by UTF-16 code units', async function () {
        const names = ['u/\u{1F600}', 'u/a', 'u/\uFF21', 'u/\u00E9'];
        for (const name of names) await engine.commit(name, sha(name), 1, T0_MS, KEEP);
        const expected = ['u/a', 'u/\u00E9', 'u/\uFF21', 'u/\u{1F600}'];
        // The test's own premise: byte order and JS order disagree on these names.
        const byBytes = [...names].sort((p, q) => Buffer.compare(Buffer.from(p), Buffer.from(q)));
        assert.deepEqual(byBytes, expected);
        assert.notDeepEqual([...names].sort(), expected);

        assert.deepEqual(await engine.list('u/', { limit: 10 }), expected);
        assert.deepEqual(await engine.list('u/', { after: 'u/\uFF21', limit: 10 }), ['u/\u{1F600}']);
        assert.deepEqual(await engine.list('u/', { after: 'u/\u00E9', limit: 1 }), ['u/\uFF21']);
      });

      it('bounds prefixes that end at the top of the code point range or below the surrogates', async function () {
        const names = ['p/\u{10FFFF}', 'p/\u{10FFFF}a', 'p/\u{10FFFF}\u{10FFFF}', 'p/\uD7FFz', 'p/\uE000', 'q/a'];
        for (const name of names) await engine.commit(name, sha(name), 1, T0_MS, KEEP);
        assert.deepEqual(await engine.list('p/\u{10FFFF}', { limit: 10 }), ['p/\u{10FFFF}', 'p/\u{10FFFF}a', 'p/\u{10FFFF}\u{10FFFF}']);
        assert.deepEqual(await engine.list('p/\uD7FF', { limit: 10 }), ['p/\uD7FFz']);
        assert.deepEqual(await engine.list('p/', { limit: 10 }), ['p/\uD7FFz', 'p/\uE000', 'p/\u{10FFFF}', 'p/\u{10FFFF}a', 'p/\u{10FFFF}\u{10FFFF}']);
      });
    });

    describe('blocks, pins and totals', function () {
      it('pins blocks and accounts unique, logical and pinned bytes', async function () {
        const [x, y, z] = [sha('x'), sha('y'), sha('z')];
        await engine.commit('m/a', x, 100, T0_MS, KEEP);
        await engine.commit('m/a', y, 30, T0_MS, KEEP);
        await engine.commit('m/b', x, 100, T0_MS, KEEP);
        await engine.commit('m/c', z, 7, T0_MS, KEEP);
        assert.deepEqual(await engine.totals(), { names: 3, versions: 4, blocks: 3, uniqueBytes: 137, logicalBytes: 237, pinnedBytes: 0 });

        await engine.setPinned(x, true);
        assert.deepEqual(await engine.block(x), { sha256: x, sizeBytes: 100, refs: 2, pinned: true });
        assert.equal((await engine.totals()).pinnedBytes, 100);
        await engine.setPinned(x, true); // pinning twice counts once
        assert.equal((await engine.totals()).pinnedBytes, 100);
        await engine.setPinned(z, true);
        assert.equal((await engine.totals()).pinnedBytes, 107);
        await engine.setPinned(x, false);
        assert.equal((await engine.block(x))?.pinned, false);
        assert.equal((await engine.totals()).pinnedBytes, 7);

        // A pin stays across reference changes.
        await engine.setPinned(y, true);
        await engine.commit('m/d', y, 30, T0_MS, KEEP);
        assert.deepEqual(await engine.block(y), { sha256: y, sizeBytes: 30, refs: 2, pinned: true });

        // The block row goes with its last reference, pinned or not; new content starts unpinned.
        assert.deepEqual((await engine.remove('m/c')).released, [z]);
        assert.equal(await engine.block(z), undefined);
        assert.equal((await engine.totals()).pinnedBytes, 30);
        await engine.commit('m/c', z, 7, T0_MS, KEEP);
        assert.equal((await engine.block(z))?.pinned, false);

        await rejectsWith(engine.setPinned(sha('none'), true), 'ENOENT');
        const snap = await checkInvariants(engine);
        assert.deepEqual(snap.totals, { names: 4, versions: 5, blocks: 3, uniqueBytes: 137, logicalBytes: 267, pinnedBytes: 30 });
      });

      it('block() and blocks() report every row', async function () {
        assert.deepEqual(await engine.blocks(), []);
        assert.equal(await engine.block(sha('x')), undefined);
        await engine.commit('m/a', sha('x'), 5, T0_MS, KEEP);
        await engine.commit('m/b', sha('y'), 6, T0_MS, KEEP);
        const blocks = (await engine.blocks()).sort((p, q) => p.sizeBytes - q.sizeBytes);
        assert.deepEqual(blocks, [
          { sha256: sha('x'), sizeBytes: 5, refs: 1, pinned: false },
          { sha256: sha('y'), sizeBytes: 6, refs: 1, pinned: false },
        ]);
      });
    });

    describe('forget', function () {
      it('removes every version of lost content and its block row; numbers are not reused', async function () {
        const [a, b, c, x] = [sha('a'), sha('b'), sha('c'), sha('x')];
        await engine.commit('m/a', a, 1, T0_MS, KEEP);
        await engine.commit('m/a', x, 9, T0_MS + 1, KEEP);
        await engine.commit('m/a', b, 2, T0_MS + 2, KEEP);
        await engine.commit('m/b', x, 9, T0_MS, KEEP);
        await engine.commit('m/c', c, 3, T0_MS, KEEP);
        await engine.commit('m/c', x, 9, T0_MS + 5, KEEP);

        assert.deepEqual(await engine.forget(x), { removedVersions: 3 });
        assert.equal(await engine.block(x), undefined);
        assert.deepEqual((await engine.versions('m/a')).map((v) => [v.version, v.sha256]), [[1, a], [3, b]]);
        assert.equal((await engine.current('m/c'))?.version, 1, 'the newest remaining version is current');
        assert.equal((await engine.versionAt('m/c', T0_MS + 5))?.version, 1);
        assert.equal(await engine.current('m/b'), undefined, 'a name without versions is gone');
        assert.deepEqual(await engine.list('m/', { limit: 10 }), ['m/a', 'm/c']);
        await checkInvariants(engine);

        assert.equal((await engine.commit('m/c', c, 3, T0_MS, KEEP)).version.version, 3, 'version 2 is not reused');
        assert.equal((await engine.commit('m/b', b, 2, T0_MS, KEEP)).version.version, 1, 'a vanished name restarts');
        await checkInvariants(engine);
      });

      it('of unknown content removes nothing', async function () {
        await engine.commit('m/a', sha(1), 1, T0_MS, KEEP);
        const before = await snapshot(engine);
        assert.deepEqual(await engine.forget(sha('unknown')), { removedVersions: 0 });
        assert.deepEqual(await snapshot(engine), before);
      });
    });

    describe('atomicity and arguments', function () {
      it('a failing mutation leaves the state unchanged', async function () {
        await engine.commit('m/a', sha(1), 10, T0_MS, KEEP);
        await engine.commit('m/a', sha(2), 20, T0_MS, KEEP);
        await engine.commit('m/b', sha(2), 20, T0_MS, KEEP);
        await engine.setPinned(sha(2), true);
        const before = await snapshot(engine);

        await rejectsWith(engine.rename('m/none', 'm/a', T0_MS, 1), 'ENOENT');
        await rejectsWith(engine.remove('m/none'), 'ENOENT');
        await rejectsWith(engine.setPinned(sha(3), true), 'ENOENT');
        await rejectsWith(engine.commit('m/a', sha(3), 30, T0_MS, 0), 'EINVAL');
        await rejectsWith(engine.rename('m/a', 'm/c', T0_MS, 0), 'EINVAL');
        // Known content with another size is a caller bug: it throws (an assertion) and changes nothing,
        // even though the same call would also have trimmed m/a and created m/c.
        await assert.rejects(engine.commit('m/a', sha(2), 21, T0_MS, 1));
        await assert.rejects(engine.commit('m/c', sha(1), 11, T0_MS, 1));
        assert.deepEqual(await snapshot(engine), before);

        if (await reopen()) assert.deepEqual(await snapshot(engine), before, 'nothing of the failed calls persisted');
      });

      it('rejects malformed arguments with EINVAL', async function () {
        const ok = sha(1);
        await rejectsWith(engine.commit('m/a', ok, 1, T0_MS, 0), 'EINVAL');
        await rejectsWith(engine.commit('m/a', ok, 1, T0_MS, 1.5), 'EINVAL');
        await rejectsWith(engine.commit('m/a', ok, 1, T0_MS, KEEP_VERSIONS_MAX + 1), 'EINVAL');
        await rejectsWith(engine.commit('m/a', ok, -1, T0_MS, KEEP), 'EINVAL');
        await rejectsWith(engine.commit('m/a', ok, 1.5, T0_MS, KEEP), 'EINVAL');
        await rejectsWith(engine.commit('m/a', ok, 1, Number.NaN, KEEP), 'EINVAL');
        await rejectsWith(engine.commit('m/a', 'abc', 1, T0_MS, KEEP), 'EINVAL');
        await rejectsWith(engine.commit('m/a', ok.toUpperCase(), 1, T0_MS, KEEP), 'EINVAL');
        // A lone surrogate has no UTF-8 form; storing it would conflate it with U+FFFD.
        await rejectsWith(engine.commit('m/\uD800', ok, 1, T0_MS, KEEP), 'EINVAL');
        await rejectsWith(engine.list('m/', { limit: -1 }), 'EINVAL');
        await rejectsWith(engine.list('m/', { limit: LIST_PAGE_MAX + 1 }), 'EINVAL');
        assert.deepEqual(await engine.totals(), { names: 0, versions: 0, blocks: 0, uniqueBytes: 0, logicalBytes: 0, pinnedBytes: 0 });
        // The boundaries themselves are accepted.
        await engine.commit('m/a', ok, 0, T0_MS, KEEP_VERSIONS_MAX);
        await engine.commit('m/b', sha(2), 1, T0_MS, 1);
      });

      it('keeps its invariants through a mixed workload', async function () {
        const rand = makeRandom(0xcafe);
        const names = ['m/a', 'm/b', 'm/c', 'm/d', 'n/a', 'n/b'];
        const shas = Array.from({ length: 8 }, (_, i) => sha(`w${i}`));
        const sizeOf = (i: number): number => 1000 * (i + 1);
        let timeMs = T0_MS;
        for (let step = 0; step < 400; step++) {
          timeMs += rand(5) - 1; // sometimes backwards, to exercise clamping
          const op = rand(20);
          let released: string[] = [];
          if (op < 11) {
            const i = rand(shas.length);
            released = (await engine.commit(names[rand(names.length)], shas[i], sizeOf(i), timeMs, 1 + rand(3))).released;
          } else if (op < 14) {
            const name = names[rand(names.length)];
            if ((await engine.current(name)) === undefined) await rejectsWith(engine.remove(name), 'ENOENT');
            else released = (await engine.remove(name)).released;
          } else if (op < 17) {
            const [from, to] = [names[rand(names.length)], names[rand(names.length)]];
            const head = await engine.current(from);
            if (head === undefined) {
              await rejectsWith(engine.rename(from, to, timeMs, 2), 'ENOENT');
            } else {
              const result = await engine.rename(from, to, timeMs, 2);
              assert.equal(result.version.sha256, head.sha256);
              assert.equal(result.version.name, to);
              released = result.released;
            }
          } else if (op < 19) {
            const target = shas[rand(shas.length)];
            if ((await engine.block(target)) === undefined) await rejectsWith(engine.setPinned(target, true), 'ENOENT');
            else await engine.setPinned(target, rand(2) === 0);
          } else {
            const target = shas[rand(shas.length)];
            const refs = (await engine.block(target))?.refs ?? 0;
            assert.deepEqual(await engine.forget(target), { removedVersions: refs });
          }
          assert.equal(new Set(released).size, released.length, 'released lists content once');
          for (const gone of released) assert.equal(await engine.block(gone), undefined, 'released content has no row');
          if (step % 20 === 19) await checkInvariants(engine);
        }
        const before = await checkInvariants(engine);
        assert.ok(before.totals.versions > 0, 'the workload leaves something to compare');
        if (await reopen()) assert.deepEqual(await checkInvariants(engine), before);
      });
    });

    describe('inode numbers', function () {
      it('a new name gets a fresh number; rewrites keep it, an explicit ino replaces it, remove and commit again gives a new one', async function () {
        const a = (await engine.commit('m/a', sha(1), 1, T0_MS, KEEP)).version.ino;
        const b = (await engine.commit('m/b', sha(1), 1, T0_MS, KEEP)).version.ino;
        assert.notEqual(a, b, 'two names with the same content are two files');
        assert.equal((await engine.commit('m/a', sha(2), 1, T0_MS + 1, KEEP)).version.ino, a, 'a rewrite keeps the number');
        const given = await engine.allocateInodes(1);
        assert.equal((await engine.commit('m/a', sha(3), 1, T0_MS + 2, KEEP, given)).version.ino, given);
        assert.equal((await engine.current('m/a'))?.ino, given);
        assert.deepEqual((await engine.versions('m/a')).map((v) => v.ino), [a, a, given], 'each version keeps the number it was committed with');
        await engine.remove('m/a');
        const again = (await engine.commit('m/a', sha(1), 1, T0_MS + 3, KEEP)).version.ino;
        assert.ok(![a, b, given].includes(again), `a re-created name is a new file, got ${again}`);
      });

      it('rename carries the number; allocateInodes never repeats a number, also across reopen', async function () {
        const src = (await engine.commit('m/src', sha(1), 1, T0_MS, KEEP)).version.ino;
        await engine.commit('m/dst', sha(2), 1, T0_MS, KEEP);
        assert.equal((await engine.rename('m/src', 'm/dst', T0_MS + 1, KEEP)).version.ino, src);
        assert.equal((await engine.current('m/dst'))?.ino, src);
        const seen = new Set<number>([src]);
        const take = async (count: number) => {
          const first = await engine.allocateInodes(count);
          for (let i = first; i < first + count; i++) {
            assert.ok(!seen.has(i), `number ${i} handed out twice`);
            assert.ok(i >= INODE_FIRST_ALLOCATED && i < INODE_ALLOCATED_LIMIT, `number ${i} outside the allocated range`);
            seen.add(i);
          }
        };
        await take(1);
        await take(1000);
        seen.add((await engine.commit('m/new', sha(3), 1, T0_MS, KEEP)).version.ino);
        if (await reopen()) await take(10);
        assert.ok(!seen.has((await engine.commit('m/newer', sha(4), 1, T0_MS, KEEP)).version.ino));
      });

      it('rejects an ino outside the allocated range and counts outside [1, INODE_RESERVE_MAX]', async function () {
        for (const bad of [0, 1, INODE_FIRST_ALLOCATED - 1, INODE_ALLOCATED_LIMIT, 1.5, -5]) {
          await rejectsWith(engine.commit('m/a', sha(1), 1, T0_MS, KEEP, bad), 'EINVAL');
        }
        for (const bad of [0, -1, 1.5, INODE_RESERVE_MAX + 1]) await rejectsWith(engine.allocateInodes(bad), 'EINVAL');
        assert.equal(await engine.current('m/a'), undefined, 'nothing committed');
      });
    });

    describe('modes', function () {
      it('keeps a name\'s mode through commits and reopen, carries it with rename, drops it with remove', async function () {
        await engine.commit('m/a', sha(1), 1, T0_MS, KEEP);
        await engine.commit('m/b', sha(2), 1, T0_MS, KEEP);
        await engine.commit('m/c', sha(3), 1, T0_MS, KEEP);
        assert.deepEqual(await engine.modes({ limit: 10 }), [], 'no mode until one is set');
        await engine.setMode('m/a', 0o600);
        await engine.setMode('m/c', 0o440);
        await engine.commit('m/a', sha(4), 1, T0_MS + 1, KEEP);
        assert.deepEqual(await engine.modes({ limit: 10 }), [['m/a', 0o600], ['m/c', 0o440]], 'a commit keeps it');
        if (await reopen()) assert.deepEqual(await engine.modes({ limit: 10 }), [['m/a', 0o600], ['m/c', 0o440]], 'kept across reopen');
        await engine.rename('m/a', 'm/b', T0_MS + 2, KEEP);
        assert.deepEqual(await engine.modes({ limit: 10 }), [['m/b', 0o600], ['m/c', 0o440]], 'the target takes the source\'s mode');
        await engine.commit('m/d', sha(5), 1, T0_MS, KEEP);
        await engine.rename('m/d', 'm/c', T0_MS + 3, KEEP);
        assert.deepEqual(await engine.modes({ limit: 10 }), [['m/b', 0o600]], 'a source without a mode leaves the target without one');
        await engine.remove('m/b');
        await engine.commit('m/b', sha(6), 1, T0_MS + 4, KEEP);
        assert.deepEqual(await engine.modes({ limit: 10 }), [], 'a name removed and created again starts without one');
      });

      it('pages modes with after and limit; setMode of a missing name is ENOENT and of a bad mode EINVAL', async function () {
        for (const n of ['m/1', 'm/2', 'm/3']) {
          await engine.commit(n, sha(n), 1, T0_MS, KEEP);
          await engine.setMode(n, 0o640);
        }
        assert.deepEqual(await engine.modes({ limit: 2 }), [['m/1', 0o640], ['m/2', 0o640]]);
        assert.deepEqual(await engine.modes({ after: 'm/2', limit: 2 }), [['m/3', 0o640]]);
        await rejectsWith(engine.setMode('m/none', 0o600), 'ENOENT');
        for (const bad of [-1, 0o10000, 1.5]) await rejectsWith(engine.setMode('m/1', bad), 'EINVAL');
        assert.deepEqual(await engine.modes({ after: 'm/0', limit: 1 }), [['m/1', 0o640]], 'unchanged by the refused calls');
      });
    });

    describe('directories', function () {
      it('keeps directories with their modes across reopen, lists them by prefix in order, forgets them on removeDir', async function () {
        await engine.makeDir('m', 0o755);
        await engine.makeDir('m/d', 0o700);
        await engine.makeDir('m/d/e', 0o750);
        await engine.makeDir('m/dx', 0o711);
        await engine.makeDir('n', 0o755);
        assert.equal(await engine.dirMode('m/d'), 0o700);
        assert.equal(await engine.dirMode('m/none'), undefined);
        assert.deepEqual(await engine.list('', { limit: 10 }), [], 'a directory is not a name');
        assert.deepEqual(await engine.dirs('m/d/', { limit: 10 }), [['m/d/e', 0o750]], 'only what starts with the prefix');
        assert.deepEqual(await engine.dirs('m/', { limit: 2 }), [['m/d', 0o700], ['m/d/e', 0o750]]);
        assert.deepEqual(await engine.dirs('m/', { after: 'm/d/e', limit: 10 }), [['m/dx', 0o711]]);
        await engine.makeDir('m/d', 0o770);
        assert.equal(await engine.dirMode('m/d'), 0o770, 'a second makeDir sets the mode');
        if (await reopen()) assert.deepEqual(await engine.dirs('', { limit: 10 }), [['m', 0o755], ['m/d', 0o770], ['m/d/e', 0o750], ['m/dx', 0o711], ['n', 0o755]], 'kept across reopen');
        await engine.removeDir('m/d/e');
        await engine.removeDir('m/d/e'); // no record: no error
        assert.equal(await engine.dirMode('m/d/e'), undefined);
        if (await reopen()) assert.deepEqual(await engine.dirs('m/', { limit: 10 }), [['m/d', 0o770], ['m/dx', 0o711]], 'the removal persists');
        for (const bad of [-1, 0o10000, 1.5]) await rejectsWith(engine.makeDir('m/bad', bad), 'EINVAL');
        assert.equal(await engine.dirMode('m/bad'), undefined, 'nothing kept by a refused call');
      });
    });

    describe('lifecycle', function () {
      it('finds everything committed after close and reopen', async function () {
        if (fixture.reopen === undefined) this.skip();
        const [a, b, c] = [sha('a'), sha('b'), sha('c')];
        await engine.commit('m/a', a, 10, T0_MS, KEEP);
        await engine.commit('m/a', b, 20, T0_MS + 10, KEEP);
        await engine.commit('m/a', c, 30, T0_MS + 20, KEEP);
        await engine.commit('m/b', b, 20, T0_MS, KEEP);
        await engine.commit('m/gone', c, 30, T0_MS, KEEP);
        await engine.remove('m/gone');
        await engine.commit('m/src', a, 10, T0_MS, KEEP);
        await engine.rename('m/src', 'm/dst', T0_MS + 30, KEEP);
        await engine.setPinned(b, true);
        await engine.forget(c); // leaves a gap: m/a keeps versions 1 and 2, its last number is 3
        await engine.sync();
        const before = await checkInvariants(engine);

        assert.ok(await reopen());
        assert.deepEqual(await checkInvariants(engine), before);
        assert.deepEqual(before.names, ['m/a', 'm/b', 'm/dst']);
        assert.deepEqual((await engine.versionAt('m/a', T0_MS + 15))?.sha256, b);
        assert.equal((await engine.block(b))?.pinned, true);
        assert.equal((await engine.commit('m/a', c, 30, T0_MS, KEEP)).version.version, 4, 'numbering survives reopen');
        assert.equal((await engine.commit('m/a', c, 30, T0_MS, KEEP)).version.timeMs, T0_MS + 10, 'clamped to the last time');
      });

      it('sync resolves with and without pending commits', async function () {
        await engine.sync();
        await engine.commit('m/a', sha(1), 1, T0_MS, KEEP);
        await engine.sync();
        await engine.sync();
        assert.equal((await engine.current('m/a'))?.sha256, sha(1));
      });

      it('close is idempotent and every later call is EBUSY', async function () {
        await engine.commit('m/a', sha(1), 1, T0_MS, KEEP);
        await engine.close();
        await engine.close();
        await rejectsWith(engine.current('m/a'), 'EBUSY');
        await rejectsWith(engine.versions('m/a'), 'EBUSY');
        await rejectsWith(engine.commit('m/a', sha(2), 2, T0_MS, KEEP), 'EBUSY');
        await rejectsWith(engine.remove('m/a'), 'EBUSY');
        await rejectsWith(engine.rename('m/a', 'm/b', T0_MS, KEEP), 'EBUSY');
        await rejectsWith(engine.list('', { limit: 10 }), 'EBUSY');
        await rejectsWith(engine.block(sha(1)), 'EBUSY');
        await rejectsWith(engine.setPinned(sha(1), true), 'EBUSY');
        await rejectsWith(engine.blocks(), 'EBUSY');
        await rejectsWith(engine.forget(sha(1)), 'EBUSY');
        await rejectsWith(engine.totals(), 'EBUSY');
        await rejectsWith(engine.sync(), 'EBUSY');
      });
    });
  });
}
