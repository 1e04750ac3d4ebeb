/**
 * SHA-256 for the store and fs/: on a worker thread through the native addon when it is loaded (the
 * event loop keeps serving while a 1 GiB block is hashed), else node:crypto on the calling thread.
 */
import * as crypto from 'node:crypto';
import { nativeBinding, type NativeHasherBinding } from '../native';
import { KiB, MiB } from './constants';
import { assert } from './errors';

/** Below this a hop to a worker costs more than hashing inline (~30 us for 64 KiB at 2 GB/s). */
export const HASH_ASYNC_MIN_BYTES = 64 * KiB;
/** A streaming hasher hands contiguous runs of at least this much to its worker. */
export const HASH_BATCH_BYTES = 4 * MiB;

export function sha256HexSync(data: Uint8Array): string {
  return crypto.createHash('sha256').update(data).digest('hex');
}

export async function sha256Hex(data: Uint8Array): Promise<string> {
  const native = nativeBinding();
  if (native === undefined || data.byteLength < HASH_ASYNC_MIN_BYTES) return sha256HexSync(data);
  return native.sha256(data);
}

/**
 * Hashes a byte stream that arrives in order, without holding the bytes: `append(view)` takes a view
 * whose bytes must not change afterwards (fs/ passes views of its staging buffer, which it never
 * rewrites below the hashed length without calling abandon()).
 */
export class StreamHasher {
  private readonly native: NativeHasherBinding | undefined;
  private readonly js: crypto.Hash | undefined;
  /** Views waiting for the worker, and their total size. */
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;
  private inFlight: Promise<void> | undefined;
  private failed: unknown;
  private fedBytes = 0;

  constructor() {
    const native = nativeBinding();
    if (native) this.native = new native.Hasher();
    else this.js = crypto.createHash('sha256');
  }

  /** Bytes appended so far. */
  get lengthBytes(): number {
    return this.fedBytes;
  }

  append(view: Uint8Array): void {
    this.fedBytes += view.byteLength;
    if (this.js) {
      this.js.update(view);
      return;
    }
    // fs/ appends consecutive pieces of one staging buffer: join them so the worker gets big runs.
    const last = this.pending[this.pending.length - 1];
    if (last !== undefined && last.buffer === view.buffer && last.byteOffset + last.byteLength === view.byteOffset) {
      this.pending[this.pending.length - 1] = new Uint8Array(last.buffer, last.byteOffset, last.byteLength + view.byteLength);
    } else {
      this.pending.push(view);
    }
    this.pendingBytes += view.byteLength;
    if (this.pendingBytes >= HASH_BATCH_BYTES && this.inFlight === undefined) this.pump();
  }

  /** The hex digest of everything appended; waits for the worker. */
  async digest(): Promise<string> {
    if (this.js) return this.js.copy().digest('hex');
    const native = this.native;
    assert(native !== undefined, 'a stream hasher has an engine');
    while (this.inFlight !== undefined || this.pendingBytes > 0) {
      if (this.inFlight === undefined) this.pump();
      await this.inFlight;
    }
    if (this.failed !== undefined) throw this.failed;
    return native.digest();
  }

  /** Hand everything pending to the worker, one update at a time, until nothing is pending. */
  private pump(): void {
    const native = this.native!;
    const views = this.pending;
    this.pending = [];
    this.pendingBytes = 0;
    this.inFlight = (async () => {
      try {
        for (const v of views) if (v.byteLength > 0) await native.update(v);
      } catch (e) {
        this.failed ??= e;
      } finally {
        this.inFlight = undefined;
      }
      if (this.pendingBytes >= HASH_BATCH_BYTES) this.pump();
    })();
  }
}
