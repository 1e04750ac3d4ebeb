import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { isCascadeError, type ErrorCode } from '../../store/errors';

export function tmpDir(tag: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `cascade-${tag}-`));
}

export function rmDir(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
}

/** Deterministic bytes from a seed (xorshift32), fast enough for MiBs. */
export function seededBytes(seed: number, sizeBytes: number): Buffer {
  const buf = Buffer.allocUnsafe(sizeBytes);
  let x = seed >>> 0 || 0x9e3779b9;
  const words = Math.floor(sizeBytes / 4);
  for (let i = 0; i < words; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    buf.writeUInt32LE(x, i * 4);
  }
  for (let i = words * 4; i < sizeBytes; i++) buf[i] = (i * 31 + seed) & 0xff;
  return buf;
}

export function sha256(data: Uint8Array): string {
  return crypto.createHash('sha256').update(data).digest('hex');
}

/** Assert that `fn` rejects with a CascadeError of `code`. */
export async function rejectsWith(fn: () => Promise<unknown>, code: ErrorCode): Promise<void> {
  try {
    await fn();
  } catch (e) {
    if (isCascadeError(e, code)) return;
    throw new Error(`expected ${code}, got ${String(e)}`);
  }
  throw new Error(`expected ${code}, but it succeeded`);
}
