import { LruMap } from './lru-map';
import { PROMOTION_TRACKED_MAX } from '../constants';
import { CascadeError } from '../errors';
import type { PromotionPolicy } from './policy';

/**
 * Promote a block after `afterReads` reads from a slower tier. Read counts live in a bounded LRU, so a
 * scan over many cold blocks cannot grow memory without limit.
 */
export class ThresholdPromotion implements PromotionPolicy {
  private readonly counts = new LruMap<string, number>(PROMOTION_TRACKED_MAX);

  constructor(private readonly afterReads: number) {
    if (!Number.isInteger(afterReads) || afterReads < 1) {
      throw new CascadeError('EINVAL', 'promoteAfterReads must be an integer >= 1');
    }
  }

  onSlowRead(key: string): boolean {
    const n = (this.counts.get(key) ?? 0) + 1;
    if (n >= this.afterReads) {
      this.counts.delete(key);
      return true;
    }
    this.counts.set(key, n);
    return false;
  }

  forget(key: string): void {
    this.counts.delete(key);
  }
}
