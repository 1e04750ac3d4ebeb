import { strict as assert } from 'node:assert';
import { LruMap } from '../../store/policy/lru-map';

describe('LruMap', () => {
  it('keeps at most maxEntries, pushing out the least recently used and telling onEvict', () => {
    const evicted: Array<[string, number]> = [];
    const m = new LruMap<string, number>(3, (k, v) => evicted.push([k, v]));
    m.set('a', 1).set('b', 2).set('c', 3);
    assert.equal(m.get('a'), 1); // a is now the most recent
    m.set('d', 4);
    assert.deepEqual(evicted, [['b', 2]]);
    assert.deepEqual([...m.keys()], ['c', 'a', 'd']);
    assert.equal(m.size, 3);
  });

  it('peek and has leave the order alone; set of a present key refreshes it without evicting', () => {
    const evicted: string[] = [];
    const m = new LruMap<string, number>(2, (k) => evicted.push(k));
    m.set('a', 1).set('b', 2);
    assert.equal(m.peek('a'), 1);
    assert.equal(m.has('a'), true);
    m.set('c', 3);
    assert.deepEqual(evicted, ['a']);
    m.set('b', 20);
    assert.deepEqual(evicted, ['a']);
    assert.deepEqual([...m.keys()], ['c', 'b']);
    assert.equal(m.get('b'), 20);
  });

  it('delete and clear do not call onEvict, and a map that keeps going empty stays usable', () => {
    let evictions = 0;
    const m = new LruMap<number, true>(1 << 22, () => evictions++);
    // A map that keeps going empty: each delete of its only entry must not cost O(maxEntries)
    // (20,000 rounds against a 4 Mi bound would run for minutes, past the suite's timeout).
    for (let i = 0; i < 20_000; i++) {
      m.set(i, true);
      assert.equal(m.delete(i), true);
    }
    assert.equal(m.size, 0);
    assert.equal(m.delete(1), false);
    m.set(1, true);
    m.clear();
    assert.equal(m.size, 0);
    assert.equal(evictions, 0);
  });

  it('refuses a bound that is not a positive integer', () => {
    assert.throws(() => new LruMap(0));
    assert.throws(() => new LruMap(1.5));
  });
});
