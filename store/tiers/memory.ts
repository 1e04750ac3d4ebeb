/**
 * A Tier kept in the JS heap: one Buffer per block. Used by tests, and as a stand-in for the DRAM tier
 * (name 'dram') where a shared-memory arena is not wanted.
 */
import { CascadeError } from '../errors';
import { validateSha256 } from '../names';
import type { Tier, TierEntry, TierStats } from '../tier';

export interface MemoryTierOptions {
  /** 'dram' lets this tier stand in for the DRAM tier (e.g. in Store tests). */
  name?: 'memory' | 'dram';
  /** Bytes this tier may hold at most; Infinity (the default) means unbounded. */
  capacityBytes?: number;
}

export class MemoryTier implements Tier {
  readonly name: 'memory' | 'dram';
  readonly capacityBytes: number;
  readonly persistent = false;
  readonly reclaimsOnDelete = true;

  private readonly blocks = new Map<string, Buffer>();
  private usedBytes = 0;
  private closed = false;

  constructor(options: MemoryTierOptions = {}) {
    const { name = 'memory', capacityBytes = Infinity } = options;
    if (name !== 'memory' && name !== 'dram') throw new CascadeError('EINVAL', `memory tier: bad name ${String(name)}`);
    const validCapacity = capacityBytes === Infinity || (Number.isSafeInteger(capacityBytes) && capacityBytes >= 0);
    if (!validCapacity) {
      throw new CascadeError('EINVAL', `memory tier: capacityBytes must be a non-negative integer or Infinity, got ${capacityBytes}`);
    }
    this.name = name;
    this.capacityBytes = capacityBytes;
  }

  has(key: string): boolean {
    this.checkOpen();
    return this.blocks.has(key);
  }

  sizeOf(key: string): number | undefined {
    this.checkOpen();
    return this.blocks.get(key)?.length;
  }

  footprintBytes(sizeBytes: number): number {
    checkSize(sizeBytes);
    return sizeBytes;
  }

  freeBytes(): number {
    this.checkOpen();
    return this.capacityBytes - this.usedBytes;
  }

  async write(key: string, data: Uint8Array): Promise<void> {
    this.checkOpen();
    validateSha256(key);
    if (this.blocks.has(key)) return; // content addressing: same key, same bytes
    const sizeBytes = data.byteLength;
    if (sizeBytes > this.freeBytes()) {
      throw new CascadeError('ENOSPC', `${this.name} tier: ${sizeBytes} bytes needed, ${this.freeBytes()} free`);
    }
    // Copy: the caller may reuse its buffer as soon as we return.
    this.blocks.set(key, Buffer.from(data));
    this.usedBytes += sizeBytes;
  }

  async read(key: string, offsetBytes: number, target: Uint8Array): Promise<number> {
    this.checkOpen();
    checkOffset(offsetBytes);
    const block = this.blocks.get(key);
    if (block === undefined) throw new CascadeError('ENOENT', `${this.name} tier: no block ${key}`);
    if (offsetBytes >= block.length) return 0;
    const countBytes = Math.min(target.byteLength, block.length - offsetBytes);
    target.set(block.subarray(offsetBytes, offsetBytes + countBytes));
    return countBytes;
  }

  async delete(key: string): Promise<void> {
    this.checkOpen();
    const block = this.blocks.get(key);
    if (block === undefined) return;
    this.blocks.delete(key);
    this.usedBytes -= block.length;
  }

  scan(): TierEntry[] {
    this.checkOpen();
    return Array.from(this.blocks, ([key, block]) => ({ key, sizeBytes: block.length }));
  }

  async sync(): Promise<void> {
    this.checkOpen();
  }

  stats(): TierStats {
    this.checkOpen();
    return { name: this.name, capacityBytes: this.capacityBytes, usedBytes: this.usedBytes, blocks: this.blocks.size };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.blocks.clear();
    this.usedBytes = 0;
  }

  private checkOpen(): void {
    if (this.closed) throw new CascadeError('EBUSY', `${this.name} tier is closed`);
  }
}

function checkSize(sizeBytes: number): void {
  if (!Number.isSafeInteger(sizeBytes) || sizeBytes < 0) {
    throw new CascadeError('EINVAL', `size must be a non-negative integer, got ${sizeBytes}`);
  }
}

function checkOffset(offsetBytes: number): void {
  if (!Number.isSafeInteger(offsetBytes) || offsetBytes < 0) {
    throw new CascadeError('EINVAL', `offset must be a non-negative integer, got ${offsetBytes}`);
  }
}
