/**
 * A bounded map in least-recently-used order, on a JS Map (which iterates in insertion order: a use
 * re-inserts its key at the young end). Every operation is O(1) and memory follows the entries held.
 *
 * Not lru-cache: it preallocates arrays for `max` entries and, when a delete leaves it empty, clears
 * by refilling both (O(max)). A map that often holds one entry (a node's borrowed remote block, a
 * name's fresh version) paid about a millisecond per delete at the sizes the store uses.
 */
import { assert } from '../errors';

export class LruMap<K, V> {
  private readonly entries = new Map<K, V>();

  /** onEvict: called for an entry pushed out by a set() past maxEntries (not for delete or clear). */
  constructor(
    readonly maxEntries: number,
    private readonly onEvict?: (key: K, value: V) => void,
  ) {
    assert(Number.isSafeInteger(maxEntries) && maxEntries >= 1, 'LRU size is a positive integer');
  }

  get size(): number {
    return this.entries.size;
  }

  /** The value, made the most recent. */
  get(key: K): V | undefined {
    const v = this.entries.get(key);
    if (v === undefined) return undefined;
    this.entries.delete(key);
    this.entries.set(key, v);
    return v;
  }

  /** The value, recency unchanged. */
  peek(key: K): V | undefined {
    return this.entries.get(key);
  }

  has(key: K): boolean {
    return this.entries.has(key);
  }

  /** Set and make the most recent; the least recent goes past maxEntries. */
  set(key: K, value: V): this {
    this.entries.delete(key);
    this.entries.set(key, value);
    if (this.entries.size > this.maxEntries) {
      const [oldKey, oldValue] = this.entries.entries().next().value as [K, V];
      this.entries.delete(oldKey);
      this.onEvict?.(oldKey, oldValue);
    }
    return this;
  }

  delete(key: K): boolean {
    return this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
  }

  /** Keys from the least recent to the most recent (safe to delete from while iterating). */
  keys(): IterableIterator<K> {
    return this.entries.keys();
  }
}
