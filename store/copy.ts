/**
 * Large memory copies off the JS thread (native addon), for callers that move hundreds of MiB at once
 * (fs/ growing a staging buffer). Without the addon, or for small copies, it copies inline.
 */
import { nativeBinding } from '../native';
import { MiB } from './constants';

/** Below this an inline copy (~0.4 ms per 8 MiB here) is cheaper than the hop to a worker and back. */
export const COPY_ASYNC_MIN_BYTES = 8 * MiB;

/** Copy `source` into `target` at `targetOffsetBytes`. Neither may change until the promise settles. */
export async function copyBytes(target: Uint8Array, targetOffsetBytes: number, source: Uint8Array): Promise<void> {
  const native = nativeBinding();
  if (native === undefined || source.byteLength < COPY_ASYNC_MIN_BYTES) {
    target.set(source, targetOffsetBytes);
    return;
  }
  await native.copyAsync(target, targetOffsetBytes, source);
}

/** Buffers at least this large come from allocLarge's native path (a freed one is unmapped off-thread). */
export const ALLOC_NATIVE_MIN_BYTES = 8 * MiB;

/**
 * An uninitialised buffer for large staging data. With the addon, memory that is unmapped on a
 * background thread once collected: freeing a 1 GiB buffer takes milliseconds, which would otherwise
 * land in a GC pause on the JS thread.
 */
export function allocLarge(sizeBytes: number): Buffer {
  const native = nativeBinding();
  if (native === undefined || sizeBytes < ALLOC_NATIVE_MIN_BYTES) return Buffer.allocUnsafe(sizeBytes);
  return native.allocBuffer(sizeBytes);
}

/** A 4 KiB-aligned buffer, as O_DIRECT I/O needs (the addon's alignedBuffer); undefined without the addon. */
export function allocAligned(sizeBytes: number): Buffer | undefined {
  return nativeBinding()?.alignedBuffer(sizeBytes);
}

/** The kernel's page size, from the addon; undefined without it. */
export function pageBytes(): number | undefined {
  const n = nativeBinding()?.pageBytes();
  return n === undefined || n <= 0 ? undefined : n;
}
