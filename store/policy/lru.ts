import { LruMap } from './lru-map';
import type { EvictionPolicy } from './policy';

/**
 * Least-recently-used order of resident blocks. The store bounds it by the tier: at most as many
 * entries as blocks that fit. A key pushed out of the order anyway (many tiny blocks) is not
 * forgotten: it becomes the first victim, since it was the least recent.
 */
/** Keys that cannot be evicted passed over in one victims() call, at most. */
export const VICTIM_SKIPS_MAX = 256;

export class LruEviction implements EvictionPolicy {
  private readonly order: LruMap<string, true>;
  private readonly overflow = new Set<string>();

  constructor(maxEntries: number) {
    this.order = new LruMap<string, true>(maxEntries, (key) => this.overflow.add(key));
  }

  admitted(key: string): void {
    this.overflow.delete(key);
    this.order.set(key, true);
  }

  accessed(key: string): void {
    if (this.overflow.delete(key)) this.order.set(key, true);
    else this.order.get(key); // a get refreshes recency
  }

  removed(key: string): void {
    this.overflow.delete(key);
    this.order.delete(key);
  }

  victims(needBytes: number, footprintBytes: (key: string) => number, evictable: (key: string) => boolean): string[] {
    const out: string[] = [];
    let freed = 0;
    let skipped = 0;
    if (needBytes <= 0) return out;
    // Lazily, from the cold end; at most VICTIM_SKIPS_MAX keys that cannot go (dirty, held) are passed
    // over, so one call costs O(1) however many blocks DRAM holds. Fewer victims than asked for means
    // the caller writes through to disk instead (the flusher has not caught up).
    for (const keys of [this.overflow.values(), this.order.keys()]) {
      for (const key of keys) {
        if (!evictable(key)) {
          if (++skipped >= VICTIM_SKIPS_MAX) return out;
          continue;
        }
        out.push(key);
        freed += footprintBytes(key);
        if (freed >= needBytes) return out;
      }
    }
    return out;
  }

  size(): number {
    return this.order.size + this.overflow.size;
  }
}
