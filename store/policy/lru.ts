import { LRUCache } from 'lru-cache';
import { BLOCKS_MAX } from '../constants';
import type { EvictionPolicy } from './policy';

/** Least-recently-used order of resident blocks, kept by lru-cache (bounded by BLOCKS_MAX entries). */
export class LruEviction implements EvictionPolicy {
  private readonly order = new LRUCache<string, true>({ max: BLOCKS_MAX });

  admitted(key: string): void {
    this.order.set(key, true);
  }

  accessed(key: string): void {
    this.order.get(key); // a get refreshes recency
  }

  removed(key: string): void {
    this.order.delete(key);
  }

  victims(needBytes: number, footprintBytes: (key: string) => number, evictable: (key: string) => boolean): string[] {
    const out: string[] = [];
    let freed = 0;
    if (needBytes <= 0) return out;
    for (const key of this.order.rkeys()) {
      if (!evictable(key)) continue;
      out.push(key);
      freed += footprintBytes(key);
      if (freed >= needBytes) break;
    }
    return out;
  }

  size(): number {
    return this.order.size;
  }
}
