// Mount paths: what an absolute path names (parse), the mount's fixed inode numbers, and derived ones.
import { INODE_ALLOCATED_LIMIT, NAME_COMPONENT_MAX_BYTES } from '../store/constants';
import { CascadeError } from '../store/errors';
import { validateName } from '../store/names';

export const S_IFDIR = 0o040000;
export const S_IFREG = 0o100000;

/** The mount's own directories and files have fixed inode numbers (below INODE_FIRST_ALLOCATED). */
export const INO = { root: 1, kv: 2, meta: 3, stats: 4, client: 5, versions: 6, at: 7, pins: 8 } as const;

/** The virtual files in /.cascade. */
export type MetaFileName = 'stats.json' | 'client.json' | 'pins.json';

export type Parsed =
  | { kind: 'root' }
  | { kind: 'kv'; rel: string } // '' is /kv itself
  | { kind: 'meta' } // /.cascade
  | { kind: 'stats'; file: MetaFileName } // the virtual files in /.cascade
  | { kind: 'versions'; rel: string | undefined } // /.cascade/versions (undefined) or .../versions/kv/<rel>
  | { kind: 'atroot' } // /.cascade/at
  | { kind: 'at'; timeMs: number; rel: string | undefined }; // /.cascade/at/<ms> (undefined) or .../kv/<rel>

/** Every path outside /kv: the root and the /.cascade tree (fs/virtual.ts). */
export type VirtualParsed = Exclude<Parsed, { kind: 'kv' }>;

/**
 * An inode number for a read-only view (a past version, a directory under /.cascade/versions): derived
 * from its path, in [2^52, 2^53), where no allocated number lies.
 */
export function derivedIno(text: string): number {
  return INODE_ALLOCATED_LIMIT + (fnv1a53(text) % INODE_ALLOCATED_LIMIT);
}

function fnv1a53(text: string): number {
  // A stable hash of a string; 2^53 keeps it exact in a JS number.
  let h1 = 0x811c9dc5;
  let h2 = 0x01000193;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193) >>> 0;
    h2 = Math.imul(h2 ^ c, 0x5bd1e995) >>> 0;
  }
  return ((h2 & 0x1fffff) * 0x100000000 + h1) || 1;
}

/** The mount path of a store-relative directory ('' is /kv). */
export function kvPath(rel: string): string {
  return rel === '' ? '/kv' : `/kv/${rel}`;
}

/** The store-relative name `op` may change at `path`: EROFS under /.cascade, EPERM outside /kv. */
export function kvRel(path: string, op: string): string {
  if (path === '/.cascade' || path.startsWith('/.cascade/')) throw new CascadeError('EROFS', `${op}: ${path} is read-only`);
  // The root holds only kv and .cascade: making anything else there is refused, not "not found".
  if (path !== '/kv' && !path.startsWith('/kv/') && path !== '/' && path !== '') {
    throw new CascadeError('EPERM', `${op}: only /kv/<model>/... is writable`);
  }
  const p = parse(path);
  if (p.kind === 'kv') return p.rel;
  if (p.kind === 'root') throw new CascadeError('EPERM', `${op}: only /kv/<model>/... is writable`);
  throw new CascadeError('EROFS', `${op}: ${path} is read-only`);
}

/** A file's store name: under a model directory, and valid as a store name. */
export function checkFileName(rel: string): void {
  if (!rel.includes('/')) throw new CascadeError('EPERM', `/kv/${rel}: files live under /kv/<model>/`);
  validateName(rel);
}

/** Split an absolute mount path into what it names. Components are validated where they are used. */
export function parse(path: string): Parsed {
  if (path === '/' || path === '') return { kind: 'root' };
  const parts = path.split('/').slice(1);
  if (parts.some((x) => x === '')) throw new CascadeError('EINVAL', `bad path ${path}`);
  for (const part of parts) {
    if (Buffer.byteLength(part) > NAME_COMPONENT_MAX_BYTES) throw new CascadeError('ENAMETOOLONG', `a component of ${path} is over 255 bytes`);
  }
  if (parts[0] === 'kv') return { kind: 'kv', rel: parts.slice(1).join('/') };
  if (parts[0] !== '.cascade') throw new CascadeError('ENOENT', `no such file: ${path}`);
  if (parts.length === 1) return { kind: 'meta' };
  if ((parts[1] === 'stats.json' || parts[1] === 'client.json' || parts[1] === 'pins.json') && parts.length === 2) return { kind: 'stats', file: parts[1] };
  if (parts[1] === 'versions') {
    if (parts.length === 2) return { kind: 'versions', rel: undefined };
    if (parts[2] !== 'kv') throw new CascadeError('ENOENT', `no such file: ${path}`);
    return { kind: 'versions', rel: parts.slice(3).join('/') };
  }
  if (parts[1] === 'at') {
    if (parts.length === 2) return { kind: 'atroot' };
    if (!/^\d{1,16}$/.test(parts[2])) throw new CascadeError('ENOENT', `${parts[2]} is not a unix time in ms`);
    const timeMs = Number(parts[2]);
    if (parts.length === 3) return { kind: 'at', timeMs, rel: undefined };
    if (parts[3] !== 'kv') throw new CascadeError('ENOENT', `no such file: ${path}`);
    return { kind: 'at', timeMs, rel: parts.slice(4).join('/') };
  }
  throw new CascadeError('ENOENT', `no such file: ${path}`);
}
