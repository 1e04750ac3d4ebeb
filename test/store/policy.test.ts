import { strict as assert } from 'node:assert';
import { LruEviction, VICTIM_SKIPS_MAX } from '../../store/policy/lru';
import { ThresholdPromotion } from '../../store/policy/promotion';
import { KeyedLock, SingleFlight } from '../../store/singleflight';
import { Mover } from '../../store/mover';

describe('policies', () => {
  it('LRU names the least recently used evictable keys first, enough to cover the need', () => {
    const lru = new LruEviction(100);
    for (const k of ['a', 'b', 'c', 'd']) lru.admitted(k);
    lru.accessed('a'); // order now b, c, d, a
    const size = () => 10;
    assert.deepEqual(lru.victims(15, size, () => true), ['b', 'c']);
    assert.deepEqual(lru.victims(15, size, (k) => k !== 'b'), ['c', 'd'], 'skips what may not be evicted');
    lru.removed('c');
    assert.deepEqual(lru.victims(100, size, () => true), ['b', 'd', 'a']);
    assert.deepEqual(lru.victims(0, size, () => true), []);
  });

  it('LRU keeps keys pushed out of its bounded order as the first victims', () => {
    const lru = new LruEviction(2);
    for (const k of ['a', 'b', 'c']) lru.admitted(k); // 'a' overflows
    assert.equal(lru.size(), 3);
    assert.deepEqual(lru.victims(1, () => 1, () => true), ['a']);
    lru.accessed('a'); // back in the order as most recent; 'b' overflows now
    assert.deepEqual(lru.victims(3, () => 1, () => true), ['b', 'c', 'a']);
  });

  it('LRU looks at a bounded number of keys per call, however many it orders (O(1) per eviction)', () => {
    const n = 100_000;
    const lru = new LruEviction(n);
    for (let i = 0; i < n; i++) lru.admitted(`k${i}`);
    let asked = 0;
    // The coldest half cannot go (dirty): the call gives up after VICTIM_SKIPS_MAX of them.
    const none = lru.victims(10, () => 1, (k) => {
      asked++;
      return Number(k.slice(1)) >= n / 2;
    });
    assert.deepEqual(none, []);
    assert.equal(asked, VICTIM_SKIPS_MAX);
    asked = 0;
    assert.deepEqual(lru.victims(3, () => 1, (k) => (asked++, k !== 'k0')), ['k1', 'k2', 'k3']);
    assert.equal(asked, 4);
  });

  it('promotion fires after the configured number of slow reads, per key', () => {
    const p = new ThresholdPromotion(3);
    assert.deepEqual([p.onSlowRead('x'), p.onSlowRead('y'), p.onSlowRead('x'), p.onSlowRead('x')], [false, false, false, true]);
    assert.equal(p.onSlowRead('x'), false, 'the count restarts after a promotion');
    p.forget('y');
    assert.equal(p.onSlowRead('y'), false);
    assert.throws(() => new ThresholdPromotion(0), /EINVAL/);
  });

  it('single-flight shares one execution among concurrent callers, then forgets it', async () => {
    const sf = new SingleFlight<number>();
    let runs = 0;
    const slow = () => new Promise<number>((r) => setTimeout(() => r(++runs), 10));
    const all = await Promise.all([sf.do('k', slow), sf.do('k', slow), sf.do('k', slow)]);
    assert.deepEqual(all, [1, 1, 1]);
    assert.equal(sf.size(), 0);
    assert.equal(await sf.do('k', slow), 2);
  });

  it('keyed lock runs one holder at a time per key, others in parallel', async () => {
    const lock = new KeyedLock();
    const log: string[] = [];
    const job = (key: string, tag: string) =>
      lock.with(key, async () => {
        log.push(`${tag}+`);
        await new Promise((r) => setTimeout(r, 5));
        log.push(`${tag}-`);
      });
    await Promise.all([job('a', 'a1'), job('a', 'a2'), job('b', 'b1')]);
    assert.ok(log.indexOf('a1-') < log.indexOf('a2+'), 'a2 waits for a1');
    assert.ok(log.indexOf('b1+') < log.indexOf('a1-'), 'b1 does not wait for a1');
  });

  it('mover refuses jobs past its bounds and runs the rest in order', async () => {
    const ran: string[] = [];
    const errors: unknown[] = [];
    const m = new Mover(2, 100, (e) => errors.push(e));
    const job = (key: string, sizeBytes: number, fail = false) => ({
      key,
      sizeBytes,
      run: async () => {
        if (fail) throw new Error('boom');
        ran.push(key);
      },
    });
    assert.equal(m.offer(job('a', 10)), true);
    assert.equal(m.offer(job('a', 10)), false, 'one job per key');
    assert.equal(m.offer(job('b', 95)), false, 'over the byte bound');
    assert.equal(m.offer(job('c', 10, true)), true);
    assert.equal(m.offer(job('d', 10)), false, 'over the job bound');
    assert.equal(m.refused, 2);
    await m.idle();
    assert.deepEqual(ran, ['a']);
    assert.equal(errors.length, 1);
    assert.equal(m.failed, 1);
  });
});
