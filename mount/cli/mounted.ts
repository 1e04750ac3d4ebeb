/**
 * A client of a MOUNTED Cascade that talks to it through files only (DESIGN.md, "User-facing
 * contract"), so it works from any process, as any tool would: xattrs `user.cascade.*` for sha256,
 * tier, pins and eviction, `MOUNT/.cascade/versions/kv/<name>/<N>` for versions, `MOUNT/.cascade/stats.json`
 * for statistics, `MOUNT/.cascade/pins.json` for the pinned files, and plain reads for warmup (the store
 * promotes a block into DRAM after a disk read).
 *
 * Node has no xattr API: the native addon's getxattr/setxattr do it (one system call each); without the
 * addon, getfattr/setfattr from the Debian package "attr" (installed by scripts/setup.sh; ~0.2 s per
 * spawn). Throws CascadeError only.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { readMountTable, resolveMountpoint } from '../engine/mounts';
import { MiB } from '../../store/constants';
import { CascadeError, isCascadeError, type ErrorCode } from '../../store/errors';
import type { StoreStats } from '../../store/store';
import { nativeBinding, type NativeBinding } from '../../native';

export const MOUNT_FS_TYPE = 'fuse.cascade';
export const XATTR_PINNED = 'user.cascade.pinned';
export const XATTR_SHA256 = 'user.cascade.sha256';
export const XATTR_TIER = 'user.cascade.tier';
/** Write-only: 1 drops the file's content from DRAM (fs/xattrs.ts). */
export const XATTR_EVICT = 'user.cascade.evict';
const STATS_REL = path.join('.cascade', 'stats.json');
const PINS_REL = path.join('.cascade', 'pins.json');
/** A pins.json larger than this is refused (the daemon lists at most 65,536 files: about 10 MiB). */
const PINS_FILE_MAX_BYTES = 64 * MiB;
/**
 * How long evict retries a file that a reader holds in DRAM (EBUSY): FUSE sends a reader's release
 * after its close() has returned, so a file read and closed just before is still held for a moment.
 */
const EVICT_BUSY_WAIT_MS = 1000;
const EVICT_BUSY_POLL_MS = 20;
/** Pinned files a walk of MOUNT/kv lists at most (as pins.json does); past it, it counts them. */
const PINS_WALK_LISTED_MAX = 65_536;
const VERSIONS_REL = path.join('.cascade', 'versions', 'kv');
/** Warmup reads in pieces of this size into one reused buffer (FUSE splits them further). */
const WARMUP_READ_BYTES = 1 * MiB;
/**
 * Files read at once: the daemon overlaps their disk reads (measured cold, 40 x 4 MiB: 0.4 GB/s with
 * one, 0.6 GB/s with 4; 8 is no better).
 */
const WARMUP_CONCURRENCY = 4;
/** How long warmup waits for the daemon's mover to finish promotions after the last read. */
const WARMUP_SETTLE_MS = 3000;
const WARMUP_POLL_MS = 100;
/** ... and gives up sooner when no promotion landed for this long (DRAM full: more waiting won't help). */
const WARMUP_STALL_MS = 1000;
/**
 * stats.json is a snapshot the daemon re-renders at most once a second, and an open of a stale one
 * returns it and starts a refresh: so read, give the refresh this long, read again.
 */
const STATS_REFRESH_WAIT_MS = 150;
/** Paths per getfattr call, bounded by bytes so argv stays far below the kernel's limit. */
const GETFATTR_ARGV_BYTES = 64 * 1024;
/** Tries for a consistent stat when a commit lands between reading the version and the xattrs. */
const STAT_TRIES = 3;

/** A path resolved against the mount it lives in. */
export interface MountTarget {
  /** The mount root, absolute and symlink-free (as /proc/self/mounts spells it). */
  mount: string;
  /** The target, absolute. */
  path: string;
  /** The target relative to the mount root ('' for the root itself). */
  rel: string;
}

/** A file under MOUNT/kv: its store name is `<model>/<path...>`. */
export interface MountFile extends MountTarget {
  name: string;
}

/** The same fields as the store's own stat (`cascade stat --data`), plus where the file is. */
export interface PathStat {
  path: string;
  mount: string;
  name: string;
  version: number;
  sha256: string;
  sizeBytes: number;
  tier: string;
  pinned: boolean;
  /** Commit time of the current version (the file's mtime). */
  timeMs: number;
}

export interface PathVersion {
  version: number;
  sizeBytes: number;
  /** Commit time (the version entry's mtime). */
  timeMs: number;
  current: boolean;
  /** Known for the current version only: the mount exposes sha256 as an xattr of the live file. */
  sha256?: string;
  /** Where this version reads back: MOUNT/.cascade/versions/kv/<name>/<N>. */
  path: string;
}

/** stats.json: the store's statistics plus the filesystem layer's own counters. */
export type MountStats = StoreStats & {
  fs?: { openHandles: number; stagingFiles: number; stagingBytes: number };
  /** Who serves the mount (absent from older daemons). */
  daemon?: { pid: number; host: string; mountedAtMs: number; dataDir: string };
  /** The FUSE engine's name and counters. */
  engine?: { name?: string; servedLookups?: number; servedGetattrs?: number; servedOpens?: number; servedReads?: number; nativeOpens?: number };
};

export interface WarmupProgress {
  files: number;
  totalFiles: number;
  bytes: number;
  totalBytes: number;
}

export interface WarmupResult {
  files: number;
  bytes: number;
  readSeconds: number;
  GBps: number;
  /** Files per tier after the reads ('none': no committed content, e.g. still being written). */
  tiers: Record<string, number>;
  inDram: number;
  /** Files that are not in DRAM afterwards (first 100). */
  notInDram: string[];
  /** Files that disappeared between listing and reading (KV caches delete blocks all the time). */
  vanished: number;
  errors: { path: string; message: string }[];
}

// ---- finding the mount -------------------------------------------------------------------------

/** Absolute and symlink-free where it exists; a missing last component is kept as given. */
const absolute = (p: string): string => resolveMountpoint(p);

function cascadeMountPoints(): string[] {
  return readMountTable()
    .filter((e) => e.fsType === MOUNT_FS_TYPE)
    .map((e) => e.target);
}

function isInside(abs: string, root: string): boolean {
  return abs === root || abs.startsWith(root.endsWith('/') ? root : `${root}/`);
}

/** A directory that looks like a Cascade mount root: the walk-up fallback when the mount table has none. */
function looksLikeMountRoot(dir: string): boolean {
  try {
    return fs.statSync(path.join(dir, STATS_REL)).isFile() && fs.statSync(path.join(dir, 'kv')).isDirectory();
  } catch {
    return false;
  }
}

/**
 * The root of the Cascade mount holding `p`, or undefined. The mount table first (fstype fuse.cascade;
 * the innermost mount wins), then a walk up to a directory holding `.cascade/stats.json` and `kv/`.
 */
export function findMountRoot(p: string): string | undefined {
  const abs = absolute(p);
  let best: string | undefined;
  for (const m of cascadeMountPoints()) if (isInside(abs, m) && (best === undefined || m.length > best.length)) best = m;
  if (best !== undefined) return best;
  for (let dir = abs; ; dir = path.dirname(dir)) {
    if (looksLikeMountRoot(dir)) return dir;
    if (dir === path.dirname(dir)) return undefined;
  }
}

export function notInMountError(what: string): CascadeError {
  return new CascadeError('EINVAL', `${what}: not inside a cascade mount; pass --data DIR to use a data directory directly`);
}

/** The root of the mount at `mnt` itself (for --mount). */
export function mountRootAt(mnt: string): string {
  const abs = absolute(mnt);
  if (cascadeMountPoints().includes(abs) || looksLikeMountRoot(abs)) return abs;
  throw new CascadeError('EINVAL', `${mnt} is not a cascade mount (no ${MOUNT_FS_TYPE} mount there; see \`cascade mount --help\`)`);
}

/**
 * Resolves a command-line argument. Without `mnt` it is a path that must lie inside a mount. With
 * `mnt` (--mount), an absolute path must lie inside that mount, and anything else is a store name
 * under MNT/kv/ (so `--mount /mnt/cascade llama/r0/b0` is /mnt/cascade/kv/llama/r0/b0).
 */
export function resolveTarget(arg: string, mnt?: string): MountTarget {
  if (mnt !== undefined) {
    const mount = mountRootAt(mnt);
    const abs = path.isAbsolute(arg) ? absolute(arg) : path.join(mount, 'kv', arg);
    if (!isInside(abs, mount)) throw new CascadeError('EINVAL', `${arg} is not inside the mount ${mount}`);
    return { mount, path: abs, rel: path.relative(mount, abs) };
  }
  const abs = absolute(arg);
  const mount = findMountRoot(abs);
  if (mount === undefined) throw notInMountError(arg);
  return { mount, path: abs, rel: path.relative(mount, abs) };
}

/** The target as a file under MOUNT/kv/<model>/: the only paths that have versions, pins and tiers. */
export function asMountFile(t: MountTarget): MountFile {
  const parts = t.rel.split(path.sep);
  if (parts[0] !== 'kv' || parts.length < 3) {
    throw new CascadeError('EINVAL', `${t.path} is not a file under ${path.join(t.mount, 'kv')}/<model>/`);
  }
  const st = statOrThrow(t.path);
  if (st.isDirectory()) throw new CascadeError('EISDIR', `${t.path} is a directory; name a file`);
  return { ...t, name: parts.slice(1).join('/') };
}

// ---- errors --------------------------------------------------------------------------------------

/** ENOTCONN: the daemon died and the kernel still holds the mount. */
function daemonGone(p: string): CascadeError {
  return new CascadeError('EIO', `${p}: the daemon serving this mount is gone; run \`cascade unmount\` on it, then mount again`);
}

const FS_CODES: Partial<Record<string, ErrorCode>> = { ENOENT: 'ENOENT', ENOTDIR: 'ENOTDIR', EISDIR: 'EISDIR', EACCES: 'EACCES', EPERM: 'EPERM', EIO: 'EIO', ENOSPC: 'ENOSPC' };

function fsError(e: unknown, p: string): CascadeError {
  const code = (e as NodeJS.ErrnoException).code ?? '';
  if (code === 'ENOTCONN') return daemonGone(p);
  if (code === 'ENOENT') return new CascadeError('ENOENT', `${p}: no such file or directory`);
  return new CascadeError(FS_CODES[code] ?? 'EIO', `${p}: ${e instanceof Error ? e.message : String(e)}`);
}

function statOrThrow(p: string): fs.Stats {
  try {
    return fs.statSync(p);
  } catch (e) {
    throw fsError(e, p);
  }
}

/** The C-locale strerror texts getfattr/setfattr print, as our codes. */
const STRERROR_CODES: Record<string, ErrorCode> = {
  'No such file or directory': 'ENOENT',
  'No such attribute': 'ENODATA',
  'No data available': 'ENODATA',
  'Disk quota exceeded': 'EDQUOT',
  'Operation not supported': 'EOPNOTSUPP',
  'Invalid argument': 'EINVAL',
  'Operation not permitted': 'EPERM',
  'Permission denied': 'EACCES',
  'No space left on device': 'ENOSPC',
  'Is a directory': 'EISDIR',
  'Device or resource busy': 'EBUSY',
};

/** The strerror at the end of the first line of an attr tool's stderr (`tool: PATH: strerror`). */
function lastStrerror(stderr: string): string {
  const line = stderr.split('\n').find((l) => l.trim() !== '') ?? '';
  return line.slice(line.lastIndexOf(': ') + 2).trim();
}

// ---- xattrs via getfattr/setfattr ------------------------------------------------------------------

interface ToolResult {
  status: number;
  stdout: string;
  stderr: string;
}

function runAttrTool(tool: 'getfattr' | 'setfattr', args: string[]): ToolResult {
  // LC_ALL=C: English strerror texts (parsed above). latin1: each byte of a path one char (see unescape).
  const r = spawnSync(tool, args, { env: { ...process.env, LC_ALL: 'C' }, encoding: 'latin1', maxBuffer: 256 * MiB });
  if (r.error) {
    if ((r.error as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new CascadeError('ENOENT', `${tool} not found: install the Debian package "attr" (scripts/setup.sh)`);
    }
    throw new CascadeError('EIO', `${tool} failed to run: ${r.error.message}`);
  }
  return { status: r.status ?? -1, stdout: r.stdout, stderr: Buffer.from(r.stderr, 'latin1').toString('utf8') };
}

/**
 * getfattr writes unprintable bytes of names and values as `\ooo` (octal) and may pass others through
 * raw; read as latin1, both are bytes, and the bytes are UTF-8.
 */
function unescapeAttr(text: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '\\' && /^[0-7]{3}$/.test(text.slice(i + 1, i + 4))) {
      bytes.push(parseInt(text.slice(i + 1, i + 4), 8));
      i += 3;
    } else {
      bytes.push(text.charCodeAt(i) & 0xff);
    }
  }
  return Buffer.from(bytes).toString('utf8');
}

/** `getfattr -e text` output: `# file: PATH` then `name="value"` lines, per file. */
function parseGetfattr(stdout: string): Map<string, Map<string, string>> {
  const out = new Map<string, Map<string, string>>();
  let current: Map<string, string> | undefined;
  for (const line of stdout.split('\n')) {
    if (line.startsWith('# file: ')) {
      current = new Map();
      out.set(unescapeAttr(line.slice('# file: '.length)), current);
    } else if (current && line !== '') {
      const eq = line.indexOf('=');
      const name = unescapeAttr(eq < 0 ? line : line.slice(0, eq));
      let raw = eq < 0 ? '' : line.slice(eq + 1);
      if (raw.length >= 2 && raw.startsWith('"') && raw.endsWith('"')) raw = raw.slice(1, -1);
      current.set(name, unescapeAttr(raw));
    }
  }
  return out;
}

/** The addon's xattr calls, when it loads (else the attr tools are used). */
function nativeXattrs(): Pick<NativeBinding, 'getxattr' | 'setxattr'> | undefined {
  try {
    return nativeBinding();
  } catch {
    return undefined; // CASCADE_NATIVE=1 without an addon: the tools still work
  }
}

/** An error of the addon's xattr calls, as a strerror text (its code is the errno's name). */
function nativeStrerror(e: unknown): string {
  const code = (e as { code?: string }).code ?? '';
  if (code === 'ENOTCONN') return 'Transport endpoint is not connected';
  return Object.entries(STRERROR_CODES).find(([, c]) => c === code)?.[0] ?? (e as Error).message;
}

function xattrError(f: MountFile, strerror: string, doing: string): CascadeError {
  const code = STRERROR_CODES[strerror];
  if (strerror === 'Transport endpoint is not connected') return daemonGone(f.path);
  if (code === 'EOPNOTSUPP') return new CascadeError(code, `${f.path}: no Cascade attributes here (is this file under MOUNT/kv?)`);
  return new CascadeError(code ?? 'EIO', `${f.path}: ${doing}: ${strerror || 'failed'}`);
}

/** pinned, sha256 and tier of one file: three getxattr calls, or one getfattr. */
function readCascadeXattrs(f: MountFile): { pinned: boolean; sha256: string; tier: string } {
  const x = nativeXattrs();
  if (x) {
    const get = (name: string): string => {
      try {
        return x.getxattr(f.path, name).toString('utf8');
      } catch (e) {
        if ((e as { code?: string }).code === 'ENODATA') {
          throw new CascadeError('ENOENT', `${f.path} has no committed version yet (it is still being written)`);
        }
        throw xattrError(f, nativeStrerror(e), 'reading its attributes');
      }
    };
    return { sha256: get(XATTR_SHA256), tier: get(XATTR_TIER), pinned: get(XATTR_PINNED) === '1' };
  }
  const r = runAttrTool('getfattr', ['--absolute-names', '-d', '-m', '^user\\.cascade\\.', '-e', 'text', '--', f.path]);
  if (r.status !== 0) throw xattrError(f, lastStrerror(r.stderr), 'reading its attributes');
  const attrs = parseGetfattr(r.stdout).get(f.path);
  const sha256 = attrs?.get(XATTR_SHA256);
  const tier = attrs?.get(XATTR_TIER);
  const pinned = attrs?.get(XATTR_PINNED);
  // The mount lists no attributes for a file that has no committed content yet.
  if (sha256 === undefined || tier === undefined || pinned === undefined) {
    throw new CascadeError('ENOENT', `${f.path} has no committed version yet (it is still being written)`);
  }
  return { pinned: pinned === '1', sha256, tier };
}

/** The tier of each path (undefined: no committed content, or gone), in as few getfattr calls as argv allows. */
export function readTiers(paths: string[]): Map<string, string | undefined> {
  return readXattrOf(paths, XATTR_TIER);
}

/** One xattr of each path (undefined: no committed content, or gone), in as few getfattr calls as argv allows. */
function readXattrOf(paths: string[], name: string): Map<string, string | undefined> {
  const out = new Map<string, string | undefined>();
  const x = nativeXattrs();
  if (x) {
    for (const p of paths) {
      try {
        out.set(p, x.getxattr(p, name).toString('utf8'));
      } catch (e) {
        if ((e as { code?: string }).code === 'ENOTCONN') throw daemonGone(p);
        out.set(p, undefined); // no committed content, or gone
      }
    }
    return out;
  }
  for (let i = 0; i < paths.length; ) {
    const batch: string[] = [];
    let argvBytes = 0;
    while (i < paths.length && (batch.length === 0 || argvBytes + Buffer.byteLength(paths[i]) + 1 <= GETFATTR_ARGV_BYTES)) {
      argvBytes += Buffer.byteLength(paths[i]) + 1;
      batch.push(paths[i++]);
    }
    // Exit status 1 when any path has no value: the others are still on stdout.
    const r = runAttrTool('getfattr', ['--absolute-names', '-n', name, '-e', 'text', '--', ...batch]);
    if (/Transport endpoint is not connected/.test(r.stderr)) throw daemonGone(batch[0]);
    const parsed = parseGetfattr(r.stdout);
    for (const p of batch) out.set(p, parsed.get(p)?.get(name));
  }
  return out;
}

// ---- commands ------------------------------------------------------------------------------------

function versionsDir(f: MountFile): string {
  return path.join(f.mount, VERSIONS_REL, ...f.name.split('/'));
}

function versionNumbers(f: MountFile): number[] {
  let entries: string[];
  try {
    entries = fs.readdirSync(versionsDir(f));
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new CascadeError('ENOENT', `${f.path} has no committed version yet`);
    throw fsError(e, versionsDir(f));
  }
  const numbers = entries.filter((n) => /^[1-9]\d*$/.test(n)).map(Number).sort((a, b) => a - b);
  if (numbers.length === 0) throw new CascadeError('ENOENT', `${f.path} has no committed version yet`);
  return numbers;
}

/** version (the highest entry of the versions tree), sha256, size, tier, pinned, commit time. */
export function statPath(f: MountFile): PathStat {
  for (let attempt = 1; ; attempt++) {
    const before = versionNumbers(f).at(-1)!;
    const x = readCascadeXattrs(f);
    const st = statOrThrow(f.path);
    const after = versionNumbers(f).at(-1)!;
    // A commit between the reads would pair one version's number with another's hash: read again.
    if (before === after || attempt >= STAT_TRIES) {
      return { path: f.path, mount: f.mount, name: f.name, version: after, sha256: x.sha256, sizeBytes: st.size, tier: x.tier, pinned: x.pinned, timeMs: st.mtimeMs };
    }
  }
}

/** Sets an xattr of a file: undefined when it worked, else the strerror text of the failure. */
function trySetXattr(f: MountFile, name: string, value: string): string | undefined {
  const x = nativeXattrs();
  if (x) {
    try {
      x.setxattr(f.path, name, Buffer.from(value));
      return undefined;
    } catch (e) {
      return nativeStrerror(e);
    }
  }
  const r = runAttrTool('setfattr', ['-n', name, '-v', value, '--', f.path]);
  return r.status === 0 ? undefined : lastStrerror(r.stderr);
}

/** Pins (never evicted from memory; bounded by the mount's pin quota) or unpins a file. */
export function setPinned(f: MountFile, pinned: boolean): void {
  const strerror = trySetXattr(f, XATTR_PINNED, pinned ? '1' : '0');
  if (strerror === undefined) return;
  switch (STRERROR_CODES[strerror]) {
    case 'EDQUOT':
      throw new CascadeError('EDQUOT', `${f.path}: pinning it would exceed the pin quota (see pinned in \`cascade stats\`; mount with a larger --pin-quota)`);
    case 'ENOSPC':
      throw new CascadeError('ENOSPC', `${f.path}: no room in DRAM to pin it`);
    case 'ENOENT':
      throw new CascadeError('ENOENT', `${f.path} has no committed version to ${pinned ? 'pin' : 'unpin'}`);
    default:
      throw xattrError(f, strerror, pinned ? 'pin' : 'unpin');
  }
}

export interface EvictResult {
  path: string;
  /** The tier the file's content was in before and after: dram, then disk, when it was evicted. */
  tierBefore: string;
  tierAfter: string;
  evicted: boolean;
}

/**
 * Drops a file's content from the mount's DRAM (user.cascade.evict); it stays on disk and the next
 * read loads it again. EPERM when it is pinned; EBUSY when a reader still holds it in DRAM after
 * EVICT_BUSY_WAIT_MS (a file open on the native engine reads the DRAM copy directly).
 */
export async function evictFile(f: MountFile): Promise<EvictResult> {
  const tierBefore = readCascadeXattrs(f).tier;
  const deadline = Date.now() + EVICT_BUSY_WAIT_MS;
  for (;;) {
    const strerror = trySetXattr(f, XATTR_EVICT, '1');
    if (strerror === undefined) break;
    const code = STRERROR_CODES[strerror];
    if (code === 'EBUSY' && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, EVICT_BUSY_POLL_MS));
      continue;
    }
    switch (code) {
      case 'EPERM':
        // The daemon's answer for a pinned file; the kernel's for a caller who may not write it.
        if (readCascadeXattrs(f).pinned) throw new CascadeError('EPERM', `${f.path} is pinned; unpin it first (cascade unpin ${f.path})`);
        throw xattrError(f, strerror, 'evict');
      case 'EBUSY':
        throw new CascadeError('EBUSY', `${f.path} is held in DRAM by a reader (a file open on the native engine, or a same-node client), or has no copy on disk yet; close its readers, then evict again`);
      case 'EOPNOTSUPP':
        throw new CascadeError('EOPNOTSUPP', `${f.path}: this mount's daemon cannot evict (it predates ${XATTR_EVICT}); remount with this version of cascade`);
      case 'ENOENT':
        throw new CascadeError('ENOENT', `${f.path} has no committed version to evict`);
      default:
        throw xattrError(f, strerror, 'evict');
    }
  }
  const tierAfter = readTiers([f.path]).get(f.path) ?? 'none';
  return { path: f.path, tierBefore, tierAfter, evicted: tierBefore === 'dram' && tierAfter !== 'dram' };
}

export interface PinnedFile {
  path: string;
  name: string;
  sizeBytes: number;
  sha256: string;
}

export interface PinsListing {
  mount: string;
  /** The store's figures: distinct pinned blocks (one block may be the content of several files), their bytes, the quota. */
  pinned: { blocks: number; bytes: number; quotaBytes: number };
  /** The files whose current content is pinned, in name order. */
  files: PinnedFile[];
  /** How many files are pinned: more than `files` holds when truncated. */
  total: number;
  truncated: boolean;
}

/** The first `maxBytes` of a file, refusing a larger one (a virtual file is sized by its daemon). */
function readFileBounded(file: string, maxBytes: number): Buffer {
  const fd = fs.openSync(file, 'r');
  try {
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(WARMUP_READ_BYTES);
      const n = fs.readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) return Buffer.concat(chunks, total);
      total += n;
      if (total > maxBytes) throw new CascadeError('EIO', `${file} is over ${maxBytes} bytes`);
      chunks.push(chunk.subarray(0, n));
    }
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The pinned files of a mount and its pin quota, from MOUNT/.cascade/pins.json: the daemon renders it
 * from the store's pins (~8 us a name, nothing with no pins), where a walk of MOUNT/kv costs a
 * getxattr through FUSE per file (~150 us: 15 s for 100k files). A daemon without pins.json (older
 * than this client) is walked instead.
 */
export async function listPins(mount: string): Promise<PinsListing> {
  const file = path.join(mount, PINS_REL);
  let text: string;
  try {
    text = readFileBounded(file, PINS_FILE_MAX_BYTES).toString('utf8');
  } catch (e) {
    if (isCascadeError(e)) throw e;
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return walkPins(mount);
    throw fsError(e, file);
  }
  let parsed: { pinned?: PinsListing['pinned']; files?: Array<{ name: string; sizeBytes: number; sha256: string }>; total?: number; truncated?: boolean };
  try {
    parsed = JSON.parse(text) as typeof parsed;
  } catch (e) {
    throw new CascadeError('EIO', `${file}: not JSON (${e instanceof Error ? e.message : String(e)})`);
  }
  if (!parsed.pinned || !Array.isArray(parsed.files) || typeof parsed.total !== 'number') throw new CascadeError('EIO', `${file}: no pinned, files and total in it`);
  const files = parsed.files.map((f) => ({ path: path.join(mount, 'kv', ...f.name.split('/')), name: f.name, sizeBytes: f.sizeBytes, sha256: f.sha256 }));
  return { mount, pinned: parsed.pinned, files, total: parsed.total, truncated: parsed.truncated === true };
}

/**
 * listPins for a daemon without pins.json: every file under MOUNT/kv, a directory at a time, its
 * user.cascade.pinned read through FUSE (slow: see listPins). Memory stays bounded by the pins listed.
 */
export async function walkPins(mount: string, maxFiles = PINS_WALK_LISTED_MAX): Promise<PinsListing> {
  const files: PinnedFile[] = [];
  let total = 0;
  const visit = (dir: string): void => {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return; // removed meanwhile
      throw fsError(e, dir);
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const here = entries.filter((e) => e.isFile()).map((e) => path.join(dir, e.name));
    const pinned = readXattrOf(here, XATTR_PINNED);
    for (const p of here) {
      if (pinned.get(p) !== '1') continue;
      total++;
      if (files.length >= maxFiles) continue;
      const rel = path.relative(path.join(mount, 'kv'), p);
      const sha256 = readXattrOf([p], XATTR_SHA256).get(p);
      let sizeBytes: number;
      try {
        sizeBytes = fs.statSync(p).size;
      } catch {
        continue; // removed meanwhile
      }
      if (sha256 !== undefined) files.push({ path: p, name: rel.split(path.sep).join('/'), sizeBytes, sha256 });
    }
    for (const e of entries) if (e.isDirectory()) visit(path.join(dir, e.name));
  };
  visit(path.join(mount, 'kv'));
  const { pinned } = await readStats(mount);
  return { mount, pinned, files, total, truncated: total > files.length };
}

/** The retained versions, oldest first, from the versions tree. */
export function listVersions(f: MountFile): PathVersion[] {
  const dir = versionsDir(f);
  const numbers = versionNumbers(f);
  const current = numbers.at(-1);
  let currentSha: string | undefined;
  try {
    currentSha = readCascadeXattrs(f).sha256;
  } catch {
    currentSha = undefined; // being replaced right now: list the versions without it
  }
  const out: PathVersion[] = [];
  for (const n of numbers) {
    const p = path.join(dir, String(n));
    let st: fs.Stats;
    try {
      st = fs.statSync(p);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue; // dropped by retention meanwhile
      throw fsError(e, p);
    }
    out.push({ version: n, sizeBytes: st.size, timeMs: st.mtimeMs, current: n === current, ...(n === current && currentSha ? { sha256: currentSha } : {}), path: p });
  }
  return out;
}

function readStatsOnce(file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (e) {
    throw fsError(e, file);
  }
}

/** MOUNT/.cascade/stats.json, fresh (see STATS_REFRESH_WAIT_MS). */
export async function readStats(mount: string): Promise<MountStats> {
  const file = path.join(mount, STATS_REL);
  readStatsOnce(file);
  await new Promise((r) => setTimeout(r, STATS_REFRESH_WAIT_MS));
  const text = readStatsOnce(file).toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new CascadeError('EIO', `${file}: not JSON (${e instanceof Error ? e.message : String(e)})`);
  }
  if (typeof parsed !== 'object' || parsed === null || !Array.isArray((parsed as { tiers?: unknown }).tiers)) {
    throw new CascadeError('EIO', `${file}: no tiers in it (is the daemon starting up?)`);
  }
  return parsed as MountStats;
}

/** A file warmup reads, and the mount it is in. */
export interface WarmupFile {
  path: string;
  sizeBytes: number;
  mount: string;
}

/** Files under the targets (directories recursively, in name order), without duplicates. */
export function collectFiles(targets: MountTarget[]): WarmupFile[] {
  const files: WarmupFile[] = [];
  const seen = new Set<string>();
  const visit = (p: string, mount: string): void => {
    const st = statOrThrow(p);
    if (st.isDirectory()) {
      let names: string[];
      try {
        names = fs.readdirSync(p).sort();
      } catch (e) {
        throw fsError(e, p);
      }
      for (const n of names) visit(path.join(p, n), mount);
    } else if (st.isFile() && !seen.has(p)) {
      seen.add(p);
      files.push({ path: p, sizeBytes: st.size, mount });
    }
  };
  for (const t of targets) {
    const top = t.rel.split(path.sep)[0];
    // The versions and at trees would read every old version into DRAM: only the live files count.
    if (top === '.cascade') throw new CascadeError('EINVAL', `${t.path}: warmup takes files or directories under ${path.join(t.mount, 'kv')}, not the virtual .cascade tree`);
    visit(t.rel === '' ? path.join(t.mount, 'kv') : t.path, t.mount);
  }
  return files;
}

/** Warmup of more than a mount's free DRAM: what it would load, and what the mount has. */
export interface DramShortfall {
  mount: string;
  /** Bytes of the files warmup reads in this mount. */
  totalBytes: number;
  /** Of them, bytes not in DRAM already; undefined where totalBytes alone is over the DRAM tier. */
  loadBytes?: number;
  freeBytes: number;
  capacityBytes: number;
}

/**
 * The mounts whose free DRAM (stats.json) the warmup of `files` would exceed: loading more evicts other
 * blocks, and past the DRAM tier's size not all of these stay. Costs one stats read per mount, and a
 * getxattr per file only where the total is over the free bytes but within the tier (then the files
 * already in DRAM are not counted as loads).
 */
export async function dramShortfalls(files: WarmupFile[]): Promise<DramShortfall[]> {
  const byMount = new Map<string, WarmupFile[]>();
  for (const f of files) {
    const list = byMount.get(f.mount);
    if (list) list.push(f);
    else byMount.set(f.mount, [f]);
  }
  const out: DramShortfall[] = [];
  for (const [mount, mine] of byMount) {
    const totalBytes = mine.reduce((sum, f) => sum + f.sizeBytes, 0);
    const dram = (await readStats(mount)).tiers.find((t) => t.name === 'dram');
    if (dram === undefined) continue;
    const freeBytes = Math.max(0, dram.capacityBytes - dram.usedBytes);
    if (totalBytes <= freeBytes) continue;
    if (totalBytes > dram.capacityBytes) {
      out.push({ mount, totalBytes, freeBytes, capacityBytes: dram.capacityBytes });
      continue;
    }
    const tiers = readTiers(mine.map((f) => f.path));
    const loadBytes = mine.filter((f) => tiers.get(f.path) !== 'dram').reduce((sum, f) => sum + f.sizeBytes, 0);
    if (loadBytes > freeBytes) out.push({ mount, totalBytes, loadBytes, freeBytes, capacityBytes: dram.capacityBytes });
  }
  return out;
}

/**
 * Reads every file whole through the mount, which makes the daemon promote what it read from disk
 * into DRAM, then waits for its mover to finish and reports the tiers the files are in.
 */
export async function warmup(targets: MountTarget[], onProgress?: (p: WarmupProgress) => void): Promise<WarmupResult> {
  return warmupFiles(collectFiles(targets), onProgress);
}

/** warmup() of files already listed (collectFiles). */
export async function warmupFiles(files: WarmupFile[], onProgress?: (p: WarmupProgress) => void): Promise<WarmupResult> {
  const totalBytes = files.reduce((s, f) => s + f.sizeBytes, 0);
  const progress: WarmupProgress = { files: 0, totalFiles: files.length, bytes: 0, totalBytes };
  const read: string[] = [];
  const errors: { path: string; message: string }[] = [];
  let vanished = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    const buf = Buffer.allocUnsafe(WARMUP_READ_BYTES); // reused for every read of this worker
    while (next < files.length) {
      const f = files[next++];
      try {
        const fh = await fs.promises.open(f.path, 'r');
        try {
          for (;;) {
            const { bytesRead } = await fh.read(buf, 0, buf.length, null);
            if (bytesRead === 0) break;
            progress.bytes += bytesRead;
            onProgress?.(progress);
          }
        } finally {
          await fh.close();
        }
        read.push(f.path);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === 'ENOTCONN') throw daemonGone(f.path);
        if (code === 'ENOENT') vanished++;
        else errors.push({ path: f.path, message: e instanceof Error ? e.message : String(e) });
      }
      progress.files++;
      onProgress?.(progress);
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: Math.min(WARMUP_CONCURRENCY, files.length) }, worker));
  const readSeconds = (performance.now() - t0) / 1000;

  // Promotions run on the daemon's mover queue after the reads return: poll until they are done.
  const tiers = readTiers(read);
  const deadline = Date.now() + WARMUP_SETTLE_MS;
  let lastPending = Infinity;
  let lastChangeMs = Date.now();
  for (;;) {
    const pending = read.filter((p) => tiers.get(p) === 'disk');
    if (pending.length < lastPending) [lastPending, lastChangeMs] = [pending.length, Date.now()];
    if (pending.length === 0 || Date.now() >= deadline || Date.now() - lastChangeMs >= WARMUP_STALL_MS) break;
    await new Promise((r) => setTimeout(r, WARMUP_POLL_MS));
    for (const [p, tier] of readTiers(pending)) tiers.set(p, tier);
  }
  const counts: Record<string, number> = {};
  for (const p of read) {
    const tier = tiers.get(p) ?? 'none';
    counts[tier] = (counts[tier] ?? 0) + 1;
  }
  const notInDram = read.filter((p) => tiers.get(p) !== 'dram');
  return {
    files: read.length,
    bytes: progress.bytes,
    readSeconds,
    GBps: readSeconds > 0 ? progress.bytes / readSeconds / 1e9 : 0,
    tiers: counts,
    inDram: read.length - notInDram.length,
    notInDram: notInDram.slice(0, 100),
    vanished,
    errors,
  };
}
