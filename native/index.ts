/**
 * Loads the native addon once and says clearly why when it cannot. The rest of Cascade asks
 * `nativeBinding()` and runs the pure-TypeScript path when it returns undefined, so the addon is an
 * accelerator, never a requirement. `CASCADE_NATIVE=0` switches it off (to compare both paths);
 * `CASCADE_NATIVE=1` makes a missing addon an error instead of a fallback.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { NATIVE_ABI_VERSION, type NativeBinding, type NativeCode } from './types';

export * from './types';

/** Where `npm run build:native` puts the addon, from dist/native/ (compiled) or native/ (ts-node). */
const CANDIDATES = [
  path.join(__dirname, '..', '..', 'native', 'build', 'Release', 'cascade_native.node'),
  path.join(__dirname, 'build', 'Release', 'cascade_native.node'),
];

const REQUIRED_MEMBERS: ReadonlyArray<keyof NativeBinding> = [
  'abiVersion', 'features', 'Arena', 'Hasher', 'Mapping', 'MetaTable', 'GpuPool', 'gpuProbe', 'getxattr', 'setxattr', 'listxattr', 'FuseSession', 'sha256', 'sha256Sync', 'copyAsync',
  'pread', 'pwrite', 'fdatasync', 'fadvise', 'openFile', 'alignedBuffer', 'allocBuffer', 'peerCredentials',
  'detachMount',
];

export type NativeLoad = { ok: true; binding: NativeBinding; file: string } | { ok: false; reason: string };

let loaded: NativeLoad | undefined;

function load(): NativeLoad {
  const mode = process.env.CASCADE_NATIVE;
  if (mode === '0') return { ok: false, reason: 'switched off by CASCADE_NATIVE=0' };
  const file = CANDIDATES.find((f) => fs.existsSync(f));
  if (file === undefined) {
    return { ok: false, reason: `addon not built (looked for ${CANDIDATES[0]}); run \`npm run build:native\`` };
  }
  let binding: NativeBinding;
  try {
    binding = require(file) as NativeBinding;
  } catch (e) {
    return { ok: false, reason: `cannot load ${file}: ${(e as Error).message}` };
  }
  const missing = REQUIRED_MEMBERS.filter((m) => binding[m] === undefined);
  if (missing.length > 0) return { ok: false, reason: `${file} lacks ${missing.join(', ')}: rebuild it (npm run build:native)` };
  if (binding.abiVersion !== NATIVE_ABI_VERSION) {
    return { ok: false, reason: `${file} has ABI ${binding.abiVersion}, this code expects ${NATIVE_ABI_VERSION}: rebuild it` };
  }
  return { ok: true, binding, file };
}

/** The load outcome (cached). Throws only when CASCADE_NATIVE=1 demands the addon and it failed. */
export function nativeLoad(): NativeLoad {
  loaded ??= load();
  if (!loaded.ok && process.env.CASCADE_NATIVE === '1') throw new Error(`cascade: native addon required (CASCADE_NATIVE=1): ${loaded.reason}`);
  return loaded;
}

/** The binding, or undefined when it is off or cannot load (see nativeLoad().reason). */
export function nativeBinding(): NativeBinding | undefined {
  const l = nativeLoad();
  return l.ok ? l.binding : undefined;
}

/** The binding or an Error saying why not: for code paths that were asked for the native path explicitly. */
export function requireNative(what: string): NativeBinding {
  const l = nativeLoad();
  if (!l.ok) throw new Error(`${what} needs the native addon: ${l.reason}`);
  return l.binding;
}

/** The symbolic code of an error thrown by the binding, or undefined for any other error. */
export function nativeCode(e: unknown): NativeCode | undefined {
  const code = (e as { code?: unknown } | undefined)?.code;
  const codes: readonly string[] = ['EINVAL', 'ENOSPC', 'ESTALE', 'ERANGE', 'EIO', 'EBUSY', 'EBADF', 'ENOENT', 'ENOMEM', 'ECORRUPT'];
  return typeof code === 'string' && codes.includes(code) ? (code as NativeCode) : undefined;
}
