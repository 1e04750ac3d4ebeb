/**
 * Concurrency helpers keyed by content address.
 * SingleFlight: concurrent loads of one key share one execution (one disk read for N readers).
 * KeyedLock: operations on one key run one at a time (put vs. reclaim of the same content).
 */
export class SingleFlight<T> {
  private readonly inflight = new Map<string, Promise<T>>();

  do(key: string, fn: () => Promise<T>): Promise<T> {
    const running = this.inflight.get(key);
    if (running) return running;
    const p = fn().finally(() => this.inflight.delete(key));
    this.inflight.set(key, p);
    return p;
  }

  size(): number {
    return this.inflight.size;
  }
}

export class KeyedLock {
  private readonly tails = new Map<string, Promise<void>>();

  /**
   * Take `key`'s lock only if nobody holds or waits for it: the release function, or undefined. Never
   * waits, so a caller may take many keys this way without risking a deadlock with with().
   */
  tryAcquire(key: string): (() => void) | undefined {
    if (this.tails.has(key)) return undefined;
    let release!: () => void;
    const tail = new Promise<void>((r) => (release = r));
    this.tails.set(key, tail);
    return () => {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    };
  }

  async with<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = prev.then(() => mine);
    this.tails.set(key, tail);
    await prev;
    try {
      return await fn();
    } finally {
      release();
      // Drop the entry when nobody queued behind us, so the map stays bounded by contention.
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}
