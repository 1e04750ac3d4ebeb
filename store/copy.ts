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
