/**
 * The DRAM tier on the native arena (native/src/core/arena.cc): the same unlinked shared-memory file as
 * ShmArenaTier, but mapped, so a read is one memcpy straight into the caller's buffer (a FUSE read
 * buffer included) with no system call, and large copies run on a worker thread, off the JS thread.
 *
 * Blocks are held by generation-checked native handles. A delete racing a copy in progress is safe: the
 * arena keeps the pages until the copy ends, and the handle is stale at once.
 */
import * as fs from 'node:fs';
import { MiB } from '../constants';
import { assert, CascadeError } from '../errors';
import { validateSha256 } from '../names';
import type { Tier, TierEntry, TierStats } from '../tier';
import { nativeCode, requireNative, type NativeArenaBinding, type NativeArenaStats, type NativeFabricBinding, type NativeFabricFault, type NativeRegion } from '../../native';
import { arenaOptions, openArenaFile, type ShmArenaOptions } from './dram';

/**
 * Copies at least this large go to a worker thread. Smaller ones (FUSE's 128 KiB reads) run inline: a
 * memcpy of 1 MiB takes ~50 us here, less than a round trip through the libuv pool.
 */
export const NATIVE_ASYNC_COPY_MIN_BYTES = 1 * MiB;

interface NativeBlock {
  handle: number;
  sizeBytes: number;
}

/**
 * The slot a small block takes in the arena (native/src/core/arena.h: blocks up to half a page share
 * pages in power-of-two slots from 4 KiB), or undefined for a block that takes whole pages.
 */
export function slabSlotBytes(sizeBytes: number, pageBytes: number): number | undefined {
  if (sizeBytes === 0) return undefined;
  for (let slot = SLAB_SLOT_MIN_BYTES; slot * 2 <= pageBytes; slot *= 2) if (sizeBytes <= slot) return slot;
  return undefined;
}
const SLAB_SLOT_MIN_BYTES = 4096;

/** Where a block's bytes are in the arena mapping: for same-node clients and later RDMA. */
export interface ArenaExtents {
  sizeBytes: number;
  /** [arenaOffsetBytes, lengthBytes] pairs in block order. */
  extents: Array<[number, number]>;
}

export class NativeArenaTier implements Tier {
  readonly name = 'dram' as const;
  readonly persistent = false;
  readonly reclaimsOnDelete = true;
  readonly capacityBytes: number;
  readonly pageBytes: number;
  readonly arenaDir: string;

  private arena: NativeArenaBinding | undefined;
  private closed = false;
  private readonly blocks = new Map<string, NativeBlock>();
  /** Arena handle -> key, for blocks the native engine opened by handle (its reads are hits). */
  private readonly keysByHandle = new Map<number, string>();
  /** Writes in flight by key: a second write of the same content waits for the first. */
  private readonly writing = new Map<string, Promise<void>>();

  private constructor(arena: NativeArenaBinding | undefined, arenaDir: string, capacityBytes: number, pageBytes: number, readonly hugePages: boolean) {
    this.arena = arena;
    this.arenaDir = arenaDir;
    this.capacityBytes = capacityBytes;
    this.pageBytes = pageBytes;
  }

  static async open(options: ShmArenaOptions): Promise<NativeArenaTier> {
    const binding = requireNative('the native DRAM tier');
    const { pageBytes, dir, prefault, hugePages, arenaBytes } = arenaOptions(options);
    if (arenaBytes === 0) return new NativeArenaTier(undefined, dir, 0, pageBytes, false); // holds nothing
    const { fd, dir: arenaDir, huge } = openArenaFile(arenaBytes, dir, hugePages);
    try {
      const arena = new binding.Arena(fd, arenaBytes, pageBytes, prefault);
      return new NativeArenaTier(arena, arenaDir, arenaBytes, pageBytes, huge);
    } catch (e) {
      throw fromNative(e, `dram tier: cannot set up a ${arenaBytes}-byte arena in ${arenaDir}`);
    } finally {
      fs.closeSync(fd); // the arena holds its own dup
    }
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
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes < 0) {
      throw new CascadeError('EINVAL', `size must be a non-negative integer, got ${sizeBytes}`);
    }
    const slot = slabSlotBytes(sizeBytes, this.pageBytes);
    return slot ?? Math.ceil(sizeBytes / this.pageBytes) * this.pageBytes;
  }

  fits(sizeBytes: number): boolean {
    this.checkOpen();
    return this.arena !== undefined && this.arena.fits(sizeBytes);
  }

  freeBytes(): number {
    this.checkOpen();
    return this.arena ? this.arena.freeBytes() : 0;
  }

  async write(key: string, data: Uint8Array): Promise<void> {
    this.checkOpen();
    validateSha256(key);
    for (let w = this.writing.get(key); w !== undefined; w = this.writing.get(key)) await w.catch(() => undefined);
    if (this.blocks.has(key)) return; // content addressing: same key, same bytes
    const arena = this.arena;
    if (arena === undefined) throw new CascadeError('ENOSPC', `dram tier: ${data.byteLength} bytes needed, the arena is empty-sized`);
    let handle: number;
    try {
      handle = arena.allocate(data.byteLength);
    } catch (e) {
      throw fromNative(e, `dram tier: ${this.footprintBytes(data.byteLength)} bytes needed, ${this.freeBytes()} free`);
    }
    const done = (async () => {
      try {
        if (data.byteLength >= NATIVE_ASYNC_COPY_MIN_BYTES) await arena.writeAsync(handle, 0, data);
        else arena.write(handle, 0, data);
      } catch (e) {
        arena.free(handle); // nothing half-written stays allocated or visible
        throw fromNative(e, `dram tier: write of ${key} failed`);
      }
      // Visible only once every byte is in place; named so remote peers can hold it (fabric).
      arena.name(handle, key);
      this.track(key, { handle, sizeBytes: data.byteLength });
    })();
    this.writing.set(key, done);
    try {
      await done;
    } finally {
      this.writing.delete(key);
    }
  }

  /**
   * Store a block whose bytes `fill` puts straight into its arena slot (a remote read lands there), then
   * check them against `key` before the block becomes visible: ECORRUPT (nothing kept) on a mismatch.
   * `fill` may return the bytes' SHA-256 when it hashed them on the way in; else they are hashed here.
   */
  async adopt(key: string, sizeBytes: number, fill: (handle: number) => Promise<string | void>): Promise<void> {
    this.checkOpen();
    validateSha256(key);
    for (let w = this.writing.get(key); w !== undefined; w = this.writing.get(key)) await w.catch(() => undefined);
    if (this.blocks.has(key)) return;
    const arena = this.arena;
    if (arena === undefined) throw new CascadeError('ENOSPC', `dram tier: ${sizeBytes} bytes needed, the arena is empty-sized`);
    let handle: number;
    try {
      handle = arena.allocate(sizeBytes);
    } catch (e) {
      throw fromNative(e, `dram tier: ${this.footprintBytes(sizeBytes)} bytes needed, ${this.freeBytes()} free`);
    }
    const done = (async () => {
      try {
        const hashed = await fill(handle);
        const got = typeof hashed === 'string' ? hashed : await arena.sha256Async(handle);
        if (got !== key) throw new CascadeError('ECORRUPT', `dram tier: fetched bytes hash to ${got}, not ${key}`);
      } catch (e) {
        arena.free(handle); // pages a late remote read could still reach stay reserved until it ends (arena Keep)
        // Bytes that are not the block (a piece's CRC, the whole SHA-256): ECORRUPT, as the check above.
        throw nativeCode(e) === 'ECORRUPT' ? new CascadeError('ECORRUPT', `dram tier: ${(e as Error).message}`, { cause: e }) : e;
      }
      arena.name(handle, key);
      this.track(key, { handle, sizeBytes });
    })();
    this.writing.set(key, done);
    try {
      await done;
    } finally {
      this.writing.delete(key);
    }
  }

  /**
   * Take a block already written into the arena (a native write stage, sealed: exactly sizeBytes,
   * hashed to `key` by the stager as its bytes arrived) as the block for `key`, with no copy. False
   * when the tier already has (or is writing) that content: the caller still owns the handle then.
   */
  adoptBlock(key: string, handle: number, sizeBytes: number): boolean {
    this.checkOpen();
    validateSha256(key);
    const arena = this.arena;
    if (arena === undefined || this.blocks.has(key) || this.writing.has(key)) return false;
    const described = arena.describe(handle); // ESTALE for a handle that is not live
    assert(described.sizeBytes === sizeBytes, 'a sealed block is exactly its size');
    arena.name(handle, key);
    this.track(key, { handle, sizeBytes });
    return true;
  }

  /** Copy a block the tier does not own (a sealed stage) out by handle; returns bytes copied. */
  readHandle(handle: number, target: Uint8Array): number {
    this.checkOpen();
    if (this.arena === undefined) throw new CascadeError('ENOENT', 'dram tier: no arena');
    return this.arena.read(handle, 0, target);
  }

  /** Free a block the tier does not own (a sealed stage nobody took). */
  freeHandle(handle: number): void {
    if (this.closed || this.arena === undefined) return;
    try {
      this.arena.free(handle);
    } catch (e) {
      if (nativeCode(e) !== 'ESTALE') throw e;
    }
  }

  /** The arena binding, for the native FUSE engine's write stages (they allocate blocks in it). */
  /** Readers of a block being filled wait for its whole SHA-256 (true) or for their pieces' CRC-32C. */
  setStrictVerify(strict: boolean): void {
    this.arena?.setStrictVerify(strict);
  }

  arenaBinding(): NativeArenaBinding | undefined {
    this.checkOpen();
    return this.arena;
  }

  /** A libfabric endpoint with this arena registered for remote reads; undefined without libfabric. */
  openFabric(
    provider: string,
    node: string,
    limits: { fetchesPerPeerMax: number; holdsMax: number; holdTimeoutMs: number },
    fault?: NativeFabricFault,
  ): NativeFabricBinding | undefined {
    this.checkOpen();
    const binding = requireNative('the remote DRAM tier');
    if (binding.Fabric === undefined || this.arena === undefined) return undefined;
    try {
      return new binding.Fabric(this.arena, provider, node, limits.fetchesPerPeerMax, limits.holdsMax, limits.holdTimeoutMs, fault);
    } catch (e) {
      throw fromNative(e, `remote DRAM tier: cannot open libfabric provider ${JSON.stringify(provider)}${node ? ` on ${node}` : ''}`);
    }
  }

  async read(key: string, offsetBytes: number, target: Uint8Array): Promise<number> {
    this.checkOpen();
    if (!Number.isSafeInteger(offsetBytes) || offsetBytes < 0) {
      throw new CascadeError('EINVAL', `offset must be a non-negative integer, got ${offsetBytes}`);
    }
    const block = this.blocks.get(key);
    if (block === undefined || this.arena === undefined) throw new CascadeError('ENOENT', `dram tier: no block ${key}`);
    try {
      const n =
        target.byteLength >= NATIVE_ASYNC_COPY_MIN_BYTES
          ? await this.arena.readAsync(block.handle, offsetBytes, target)
          : this.arena.read(block.handle, offsetBytes, target);
      assert(n === Math.max(0, Math.min(target.byteLength, block.sizeBytes - offsetBytes)), 'arena read fills what the block has');
      return n;
    } catch (e) {
      // A block deleted while an async copy was queued has a stale handle: it is gone, not corrupt.
      if (nativeCode(e) === 'ESTALE') throw new CascadeError('ENOENT', `dram tier: block ${key} was deleted during the read`);
      throw fromNative(e, `dram tier: read of ${key} failed`);
    }
  }

  async delete(key: string): Promise<void> {
    this.checkOpen();
    const block = this.blocks.get(key);
    if (block === undefined || this.arena === undefined) return;
    this.blocks.delete(key);
    this.keysByHandle.delete(block.handle);
    this.arena.free(block.handle);
  }

  scan(): TierEntry[] {
    this.checkOpen();
    return Array.from(this.blocks, ([key, block]) => ({ key, sizeBytes: block.sizeBytes }));
  }

  async sync(): Promise<void> {
    this.checkOpen(); // memory: nothing to make durable
  }

  stats(): TierStats {
    this.checkOpen();
    const a = this.arena?.stats();
    return {
      name: this.name,
      capacityBytes: this.capacityBytes,
      // The Tier contract: the footprint of live blocks, i.e. their slots (slab pages may have free slots).
      usedBytes: a?.slotBytes ?? 0,
      blocks: this.blocks.size,
      blockBytes: a?.blockBytes ?? 0,
      slotBytes: a?.slotBytes ?? 0,
      badPieceTables: a?.badPieceTables ?? 0,
      prefaultedBytes: a?.prefaultedBytes ?? 0,
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.writing.values()]);
    this.blocks.clear();
    this.keysByHandle.clear();
    this.arena?.close(); // unmaps once copies in flight are done; tmpfs frees the memory with the last fd
    this.arena = undefined;
  }

  private track(key: string, block: NativeBlock): void {
    this.blocks.set(key, block);
    this.keysByHandle.set(block.handle, key);
  }

  /** The arena handle of a block held here (generation-checked: stale once the block is freed). */
  handleOf(key: string): number | undefined {
    this.checkOpen();
    return this.blocks.get(key)?.handle;
  }

  /** The key of the block behind a live arena handle, or undefined when that block is gone. */
  keyOfHandle(handle: number): string | undefined {
    this.checkOpen();
    return this.keysByHandle.get(handle);
  }

  /** Where a block's bytes lie in the arena mapping, or undefined when the block is not here. */
  extentsOf(key: string): ArenaExtents | undefined {
    this.checkOpen();
    const block = this.blocks.get(key);
    if (block === undefined || this.arena === undefined) return undefined;
    const { sizeBytes, extents } = this.arena.describe(block.handle);
    const pairs: Array<[number, number]> = [];
    for (let i = 0; i < extents.length; i += 2) pairs.push([extents[i], extents[i + 1]]);
    return { sizeBytes, extents: pairs };
  }

  /** The arena mapping (address for RDMA registration, fd for same-node clients). */
  region(): NativeRegion | undefined {
    this.checkOpen();
    return this.arena?.region();
  }

  arenaStats(): NativeArenaStats | undefined {
    this.checkOpen();
    return this.arena?.stats();
  }

  private checkOpen(): void {
    if (this.closed) throw new CascadeError('EBUSY', 'dram tier is closed');
  }
}

/** A binding error becomes a CascadeError with the same meaning; anything else passes through. */
function fromNative(e: unknown, message: string): Error {
  if (e instanceof CascadeError) return e;
  const code = nativeCode(e);
  if (code === undefined) return e instanceof Error ? e : new Error(String(e));
  const mapped = code === 'ENOSPC' || code === 'ENOMEM' ? 'ENOSPC' : code === 'EINVAL' || code === 'ERANGE' ? 'EINVAL' : 'EIO';
  return new CascadeError(mapped, `${message}: ${(e as Error).message}`, { cause: e });
}
