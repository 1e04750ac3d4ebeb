/**
 * Policies are pure objects: they take events and name victims or decisions. They do no I/O and know
 * no tier; the Store carries out what they decide (policy separate from mechanism).
 */

export interface EvictionPolicy {
  /** A block became resident in the tier the policy orders. */
  admitted(key: string): void;
  /** A read was served from that tier. */
  accessed(key: string): void;
  /** The block left the tier. */
  removed(key: string): void;
  /**
   * Keys to evict, most evictable first, whose footprints add up to at least `needBytes`, choosing only
   * keys for which `evictable` holds. Returns fewer if no more qualify (the caller then cannot admit).
   */
  victims(needBytes: number, footprintBytes: (key: string) => number, evictable: (key: string) => boolean): string[];
}

export interface PromotionPolicy {
  /** A read of `key` was served from a slower tier: should the block be copied up? */
  onSlowRead(key: string): boolean;
  forget(key: string): void;
}
