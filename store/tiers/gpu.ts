/**
 * The GPU (HBM) tier: blocks in one pool of device memory, allocated once at open (no cudaMalloc per
 * block). A slot allocator hands each block one contiguous run of slots, so a same-node GPU process can
 * reach it as (the pool's IPC handle, offset, size). Copies go through the device's pinned staging
 * buffers (native/src/core/gpu.cc). The device sits behind GpuDevice, so the tier and the store's
 * policy are tested everywhere with a fake device in host memory; the real one needs libcuda.so.1 and
 * a GPU at run time, never at build time.
 *
 * The tier is a cache: the store puts only copies of blocks that are also in DRAM or on disk here.
 */
import { MiB } from '../constants';
import { assert, CascadeError } from '../errors';
import { validateSha256 } from '../names';
import type { Tier, TierEntry, TierStats } from '../tier';
import { ExtentAllocator } from './dram';
import { nativeBinding } from '../../native';
import type { NativeGpuDevice, NativeGpuPoolBinding } from '../../native/types';

/** What the tier needs from a device: a pool of bytes it can copy into and out of. */
export interface GpuDevice {
  readonly capacityBytes: number;
  /** Copy `source` into the pool at `offsetBytes`; resolves once the bytes are on the device. */
  write(offsetBytes: number, source: Uint8Array): Promise<void>;
  /** Fill `target` from the pool at `offsetBytes`. */
  read(offsetBytes: number, target: Uint8Array): Promise<void>;
  /** The pool's CUDA IPC handle (64 bytes); undefined where the device cannot export one. */
  ipcHandle(): Buffer | undefined;
  describe(): GpuDeviceFigures;
  close(): void;
}

export interface GpuDeviceFigures {
  ordinal: number;
  name: string;
  uuid: string;
  totalBytes: number;
  bytesToDevice: number;
  bytesFromDevice: number;
}

/** Slot size of the pool (allocation unit): KV blocks are MiB-sized; smaller ones waste up to a slot. */
export const GPU_SLOT_BYTES_DEFAULT = 64 * 1024;
/** Each direction's two pinned staging buffers are this large. */
export const GPU_STAGING_BYTES_DEFAULT = 8 * MiB;

/** Whether a GPU can be used here, and why not: loads libcuda.so.1 on first call. */
export function probeGpu(): { available: boolean; reason: string; devices: NativeGpuDevice[] } {
  const b = nativeBinding();
  if (!b) return { available: false, reason: 'the native addon is not loaded', devices: [] };
  return b.gpuProbe();
}

/** The real device: one GpuPool of the native addon. */
export class CudaGpuDevice implements GpuDevice {
  private constructor(
    private readonly pool: NativeGpuPoolBinding,
    readonly capacityBytes: number,
  ) {}

  /** Reserve `capacityBytes` on device `ordinal`. Throws CascadeError with the driver's reason. */
  static open(ordinal: number, capacityBytes: number, stagingBytes = GPU_STAGING_BYTES_DEFAULT): CudaGpuDevice {
    const b = nativeBinding();
    if (!b) throw new CascadeError('EOPNOTSUPP', 'the GPU tier needs the native addon');
    try {
      return new CudaGpuDevice(new b.GpuPool(ordinal, capacityBytes, stagingBytes), capacityBytes);
    } catch (e) {
      const code = (e as { code?: string }).code;
      throw new CascadeError(code === 'ENOSPC' ? 'ENOSPC' : code === 'EINVAL' ? 'EINVAL' : 'EIO', `GPU pool: ${(e as Error).message}`);
    }
  }

  write(offsetBytes: number, source: Uint8Array): Promise<void> {
    return this.pool.write(offsetBytes, source);
  }
  read(offsetBytes: number, target: Uint8Array): Promise<void> {
    return this.pool.read(offsetBytes, target);
  }
  ipcHandle(): Buffer | undefined {
    try {
      return this.pool.ipcHandle();
    } catch {
      return undefined;
    }
  }
  describe(): GpuDeviceFigures {
    const i = this.pool.info();
    return { ordinal: i.ordinal, name: i.name, uuid: i.uuid, totalBytes: i.totalBytes, bytesToDevice: i.bytesToDevice, bytesFromDevice: i.bytesFromDevice };
  }
  close(): void {
    this.pool.close();
  }
}

interface Slot {
  startSlot: number;
  slotCount: number;
  sizeBytes: number;
  /** Copies out of the slot in flight; a delete frees the slot when they end. */
  readers: number;
  deleted: boolean;
}

export interface GpuTierOptions {
  slotBytes?: number;
}

export class GpuTier implements Tier {
  readonly name = 'gpu' as const;
  readonly capacityBytes: number;
  readonly persistent = false;
  readonly reclaimsOnDelete = true;
  readonly slotBytes: number;

  private readonly slots: ExtentAllocator;
  private readonly blocks = new Map<string, Slot>();
  /** Writes in flight: a second write of the same content waits for the first. */
  private readonly writing = new Map<string, Promise<void>>();
  private blockBytes = 0;
  private closed = false;

  constructor(
    readonly device: GpuDevice,
    options: GpuTierOptions = {},
  ) {
    const slotBytes = options.slotBytes ?? GPU_SLOT_BYTES_DEFAULT;
    if (!Number.isSafeInteger(slotBytes) || slotBytes < 4096 || slotBytes % 4096 !== 0) {
      throw new CascadeError('EINVAL', `gpu tier: slotBytes must be a positive multiple of 4096, got ${slotBytes}`);
    }
    this.slotBytes = slotBytes;
    const slotCount = Math.floor(device.capacityBytes / slotBytes);
    this.capacityBytes = slotCount * slotBytes;
    this.slots = new ExtentAllocator(slotCount);
  }

  has(key: string): boolean {
    this.checkOpen();
    return this.blocks.has(key);
  }

  sizeOf(key: string): number | undefined {
    this.checkOpen();
    return this.blocks.get(key)?.sizeBytes;
  }

  footprintBytes(sizeBytes: number): number {
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes < 0) throw new CascadeError('EINVAL', `size must be a non-negative integer, got ${sizeBytes}`);
    return Math.max(1, Math.ceil(sizeBytes / this.slotBytes)) * this.slotBytes;
  }

  freeBytes(): number {
    this.checkOpen();
    return this.slots.freePages * this.slotBytes;
  }

  /** A block needs one contiguous run of slots. */
  fits(sizeBytes: number): boolean {
    this.checkOpen();
    return this.slots.largestFreePages() * this.slotBytes >= this.footprintBytes(sizeBytes);
  }

  async write(key: string, data: Uint8Array): Promise<void> {
    this.checkOpen();
    validateSha256(key);
    for (let w = this.writing.get(key); w !== undefined; w = this.writing.get(key)) await w.catch(() => undefined);
    if (this.blocks.has(key)) return; // content addressing
    const slotCount = this.footprintBytes(data.byteLength) / this.slotBytes;
    const extent = this.slots.allocateContiguous(slotCount);
    if (extent === undefined) {
      throw new CascadeError('ENOSPC', `gpu tier: no run of ${slotCount} free slots for ${data.byteLength} bytes (${this.freeBytes()} bytes free)`);
    }
    const copy = this.device.write(extent.startPage * this.slotBytes, data);
    this.writing.set(key, copy);
    try {
      await copy;
    } catch (e) {
      this.slots.release([extent]);
      throw new CascadeError('EIO', `gpu tier: copy to the device failed: ${(e as Error).message}`);
    } finally {
      this.writing.delete(key);
    }
    if (this.closed) return;
    // Visible only now: a reader never sees a slot whose bytes are still on their way.
    this.blocks.set(key, { startSlot: extent.startPage, slotCount, sizeBytes: data.byteLength, readers: 0, deleted: false });
    this.blockBytes += data.byteLength;
  }

  async read(key: string, offsetBytes: number, target: Uint8Array): Promise<number> {
    this.checkOpen();
    if (!Number.isSafeInteger(offsetBytes) || offsetBytes < 0) throw new CascadeError('EINVAL', `offset must be a non-negative integer, got ${offsetBytes}`);
    const slot = this.blocks.get(key);
    if (slot === undefined) throw new CascadeError('ENOENT', `gpu tier: no block ${key}`);
    if (offsetBytes >= slot.sizeBytes || target.byteLength === 0) return 0;
    const count = Math.min(target.byteLength, slot.sizeBytes - offsetBytes);
    slot.readers++;
    try {
      await this.device.read(slot.startSlot * this.slotBytes + offsetBytes, count === target.byteLength ? target : target.subarray(0, count));
    } catch (e) {
      throw new CascadeError('EIO', `gpu tier: copy from the device failed: ${(e as Error).message}`);
    } finally {
      if (--slot.readers === 0 && slot.deleted) this.slots.release([{ startPage: slot.startSlot, pageCount: slot.slotCount }]);
    }
    return count;
  }

  async delete(key: string): Promise<void> {
    this.checkOpen();
    const slot = this.blocks.get(key);
    if (slot === undefined) return;
    this.blocks.delete(key);
    this.blockBytes -= slot.sizeBytes;
    slot.deleted = true;
    // A copy out of the slot still running keeps it until it ends (never overwritten under a reader).
    if (slot.readers === 0) this.slots.release([{ startPage: slot.startSlot, pageCount: slot.slotCount }]);
  }

  /** Where a block lies in the pool (for IPC readers), or undefined. */
  locate(key: string): { offsetBytes: number; sizeBytes: number } | undefined {
    this.checkOpen();
    const slot = this.blocks.get(key);
    return slot && { offsetBytes: slot.startSlot * this.slotBytes, sizeBytes: slot.sizeBytes };
  }

  scan(): TierEntry[] {
    this.checkOpen();
    return Array.from(this.blocks, ([key, s]) => ({ key, sizeBytes: s.sizeBytes }));
  }

  async sync(): Promise<void> {
    this.checkOpen();
  }

  stats(): TierStats {
    this.checkOpen();
    const usedSlots = this.capacityBytes / this.slotBytes - this.slots.freePages;
    assert(usedSlots >= 0, 'gpu slots in use are counted');
    return {
      name: 'gpu',
      capacityBytes: this.capacityBytes,
      usedBytes: usedSlots * this.slotBytes,
      blocks: this.blocks.size,
      blockBytes: this.blockBytes,
      slotBytes: usedSlots * this.slotBytes,
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.writing.values()]);
    this.blocks.clear();
    this.device.close();
  }

  private checkOpen(): void {
    if (this.closed) throw new CascadeError('EBUSY', 'gpu tier is closed');
  }
}

/** A device in host memory behind the same interface: for tests of the tier and the store's policy. */
export class HostMemoryGpuDevice implements GpuDevice {
  private readonly bytes: Buffer;
  private toDevice = 0;
  private fromDevice = 0;
  private closed = false;

  constructor(readonly capacityBytes: number) {
    this.bytes = Buffer.alloc(capacityBytes);
  }
  async write(offsetBytes: number, source: Uint8Array): Promise<void> {
    this.check(offsetBytes, source.byteLength);
    await new Promise<void>((r) => setImmediate(r)); // asynchronous like the real copy
    this.bytes.set(source, offsetBytes);
    this.toDevice += source.byteLength;
  }
  async read(offsetBytes: number, target: Uint8Array): Promise<void> {
    this.check(offsetBytes, target.byteLength);
    await new Promise<void>((r) => setImmediate(r));
    target.set(this.bytes.subarray(offsetBytes, offsetBytes + target.byteLength));
    this.fromDevice += target.byteLength;
  }
  /** 64 zero bytes: shaped like a CUDA IPC handle so leases can be tested; no process can open it. */
  ipcHandle(): Buffer | undefined {
    return Buffer.alloc(64);
  }
  describe(): GpuDeviceFigures {
    return { ordinal: 0, name: 'host memory (test device)', uuid: 'GPU-00000000-0000-0000-0000-000000000000', totalBytes: this.capacityBytes, bytesToDevice: this.toDevice, bytesFromDevice: this.fromDevice };
  }
  close(): void {
    this.closed = true;
  }
  private check(offsetBytes: number, lengthBytes: number): void {
    if (this.closed) throw new CascadeError('EBADF', 'device is closed');
    if (offsetBytes < 0 || offsetBytes + lengthBytes > this.capacityBytes) throw new CascadeError('ERANGE', 'copy lies outside the pool');
  }
}
