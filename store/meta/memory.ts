/**
 * MemoryMeta: the metadata engine on plain Maps. It is the reference for the semantics that every engine
 * shares (test/store/meta-conformance runs against all of them) and the engine unit tests use.
 *
 * The helpers at the top (name order, prefix bounds, argument checks) are exported because every engine
 * must order and check exactly the same way; store/meta/sqlite.ts imports them.
 */
import { INODE_ALLOCATED_LIMIT, INODE_FIRST_ALLOCATED, INODE_RESERVE_MAX, KEEP_VERSIONS_MAX, LIST_PAGE_MAX } from '../constants';
import { assert, CascadeError } from '../errors';
import type { BlockRecord, CommitResult, ListOptions, MetaEngine, MetaTotals, VersionRecord } from '../meta';
import { validateSha256 } from '../names';

// ---------------------------------------------------------------------------------------------------
// Shared by every engine
// ---------------------------------------------------------------------------------------------------

/**
 * Name order is UTF-8 byte order, which is Unicode code point order. It is what SQLite's BINARY collation
 * gives (memcmp of the UTF-8 text) and what a byte-keyed store would give. It differs from JS `<` (UTF-16
 * code unit order) only when a character above U+FFFF meets one in U+E000..U+FFFF at the first difference:
 * JS puts the surrogate pair first, code point order puts it last. Compared here without allocating.
 */
export function compareNames(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    // At the first differing unit of two well-formed strings, moving surrogates above U+E000..U+FFFF
    // turns code unit order into code point order.
    if (x >= 0xd800 && y >= 0xd800) {
      x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
      y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
    }
    return x - y;
  }
  return a.length - b.length;
}

const MAX_CODE_POINT = 0x10ffff;

/**
 * The smallest string greater than every string that starts with `prefix` (in code point order), or
 * undefined when there is none (empty prefix, or only U+10FFFF). list() scans [prefix, bound).
 */
export function prefixUpperBound(prefix: string): string | undefined {
  const codePoints = Array.from(prefix, (c) => c.codePointAt(0) as number);
  while (codePoints.length > 0) {
    const last = codePoints.pop() as number;
    if (last === MAX_CODE_POINT) continue; // cannot increment: carry into the previous character
    // Skip the surrogate range: no character lies there, so U+D7FF is followed by U+E000.
    const next = last === 0xd7ff ? 0xe000 : last + 1;
    return String.fromCodePoint(...codePoints, next);
  }
  return undefined;
}

// A lone surrogate has no UTF-8 form: SQLite would store U+FFFD, so two names could collide.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Names are validated by store/names.ts; an engine checks only what it needs to store them faithfully. */
export function checkName(name: string, what = 'name'): void {
  if (typeof name !== 'string' || LONE_SURROGATE.test(name)) {
    throw new CascadeError('EINVAL', `${what} must be a well-formed string`);
  }
}

export function checkTimeMs(timeMs: number): void {
  if (!Number.isSafeInteger(timeMs)) throw new CascadeError('EINVAL', `timeMs must be an integer, got ${timeMs}`);
}

/** Permission bits only: what chmod can set on a file here. */
export function checkMode(mode: number): void {
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) throw new CascadeError('EINVAL', `bad mode ${String(mode)}`);
}

export function checkKeepVersions(keepVersions: number): void {
  if (!Number.isInteger(keepVersions) || keepVersions < 1 || keepVersions > KEEP_VERSIONS_MAX) {
    throw new CascadeError('EINVAL', `keepVersions must be an integer in [1, ${KEEP_VERSIONS_MAX}], got ${keepVersions}`);
  }
}

export function checkCommitArgs(name: string, sha256: string, sizeBytes: number, timeMs: number, keepVersions: number): void {
  checkName(name);
  validateSha256(sha256);
  if (!Number.isSafeInteger(sizeBytes) || sizeBytes < 0) {
    throw new CascadeError('EINVAL', `sizeBytes must be a non-negative integer, got ${sizeBytes}`);
  }
  checkTimeMs(timeMs);
  checkKeepVersions(keepVersions);
}

/** An ino passed to commit(): an allocated number (never a derived or fixed one). */
export function checkIno(ino: number | undefined): void {
  if (ino === undefined) return;
  if (!Number.isSafeInteger(ino) || ino < INODE_FIRST_ALLOCATED || ino >= INODE_ALLOCATED_LIMIT) {
    throw new CascadeError('EINVAL', `ino must be an allocated inode number, got ${ino}`);
  }
}

export function checkInodeCount(count: number): void {
  if (!Number.isInteger(count) || count < 1 || count > INODE_RESERVE_MAX) {
    throw new CascadeError('EINVAL', `count must be an integer in [1, ${INODE_RESERVE_MAX}], got ${count}`);
  }
}

/** The next counter value after reserving `count` from `next`; ENOSPC when the range is used up. */
export function advanceInodes(next: number, count: number): number {
  if (next + count > INODE_ALLOCATED_LIMIT) throw new CascadeError('ENOSPC', 'inode numbers are used up');
  return next + count;
}

export function checkListArgs(prefix: string, options: ListOptions): void {
  checkName(prefix, 'prefix');
  if (options.after !== undefined) checkName(options.after, 'after');
  if (!Number.isInteger(options.limit) || options.limit < 0 || options.limit > LIST_PAGE_MAX) {
    throw new CascadeError('EINVAL', `limit must be an integer in [0, ${LIST_PAGE_MAX}], got ${options.limit}`);
  }
}

export function closedError(kind: string): CascadeError {
  return new CascadeError('EBUSY', `the ${kind} metadata engine is closed`);
}

// ---------------------------------------------------------------------------------------------------
// The engine
// ---------------------------------------------------------------------------------------------------

interface NameEntry {
  /** Highest version number given to this name; numbers are never reused while the name exists. */
  lastVersion: number;
  /** Retained versions, oldest first; never empty (a name without versions is deleted). */
  versions: VersionRecord[];
  /** Permission bits set by setMode(). */
  mode?: number;
}

interface BlockEntry {
  sizeBytes: number;
  refs: number;
  pinned: boolean;
}

export class MemoryMeta implements MetaEngine {
  readonly kind = 'memory';
  private readonly names = new Map<string, NameEntry>();
  private readonly blockTable = new Map<string, BlockEntry>();
  /** list() cache: names in compareNames order; dropped whenever a name appears or goes. */
  private sortedNames: string[] | undefined;
  /** Directories made by makeDir -> their modes. */
  private readonly dirTable = new Map<string, number>();
  private nextIno = INODE_FIRST_ALLOCATED;
  private closed = false;

  async current(name: string): Promise<VersionRecord | undefined> {
    this.checkOpen();
    checkName(name);
    const versions = this.names.get(name)?.versions;
    return versions === undefined ? undefined : { ...versions[versions.length - 1] };
  }

  async version(name: string, version: number): Promise<VersionRecord | undefined> {
    this.checkOpen();
    checkName(name);
    const found = this.names.get(name)?.versions.find((v) => v.version === version);
    return found === undefined ? undefined : { ...found };
  }

  async versionAt(name: string, timeMs: number): Promise<VersionRecord | undefined> {
    this.checkOpen();
    checkName(name);
    const versions = this.names.get(name)?.versions ?? [];
    // timeMs never decreases along versions, so the newest match is the last one from the end.
    for (let i = versions.length - 1; i >= 0; i--) {
      if (versions[i].timeMs <= timeMs) return { ...versions[i] };
    }
    return undefined;
  }

  async versions(name: string): Promise<VersionRecord[]> {
    this.checkOpen();
    checkName(name);
    return (this.names.get(name)?.versions ?? []).map((v) => ({ ...v }));
  }

  async commit(name: string, sha256: string, sizeBytes: number, timeMs: number, keepVersions: number, ino?: number): Promise<CommitResult> {
    this.checkOpen();
    checkCommitArgs(name, sha256, sizeBytes, timeMs, keepVersions);
    checkIno(ino);
    const known = this.blockTable.get(sha256);
    assert(known === undefined || known.sizeBytes === sizeBytes, `block ${sha256} committed with size ${sizeBytes}, known as ${known?.sizeBytes}`);
    // Everything is checked; nothing below can throw, so the mutation is all-or-nothing.
    const versions = this.names.get(name)?.versions;
    const fileIno = ino ?? versions?.[versions.length - 1].ino ?? this.takeInodes(1);
    const released: string[] = [];
    const version = this.addVersion(name, sha256, sizeBytes, timeMs, keepVersions, fileIno, released);
    return { version: { ...version }, released };
  }

  async allocateInodes(count: number): Promise<number> {
    this.checkOpen();
    checkInodeCount(count);
    return this.takeInodes(count);
  }

  async remove(name: string): Promise<{ released: string[] }> {
    this.checkOpen();
    checkName(name);
    if (!this.names.has(name)) throw new CascadeError('ENOENT', `no such name: ${name}`);
    const released: string[] = [];
    this.dropName(name, released);
    return { released };
  }

  async rename(from: string, to: string, timeMs: number, keepVersions: number): Promise<CommitResult> {
    this.checkOpen();
    checkName(from, 'from');
    checkName(to, 'to');
    checkTimeMs(timeMs);
    checkKeepVersions(keepVersions);
    const fromVersions = this.names.get(from)?.versions;
    if (fromVersions === undefined) throw new CascadeError('ENOENT', `no such name: ${from}`);
    const head = fromVersions[fromVersions.length - 1];
    if (from === to) return { version: { ...head }, released: [] };
    const released: string[] = [];
    // Add to `to` first: the moved content gains a reference before `from` drops its own.
    const version = this.addVersion(to, head.sha256, head.sizeBytes, timeMs, keepVersions, head.ino, released);
    (this.names.get(to) as NameEntry).mode = this.names.get(from)?.mode;
    this.dropName(from, released);
    return { version: { ...version }, released };
  }

  async setMode(name: string, mode: number): Promise<void> {
    this.checkOpen();
    checkName(name);
    checkMode(mode);
    const entry = this.names.get(name);
    if (entry === undefined) throw new CascadeError('ENOENT', `no such name: ${name}`);
    entry.mode = mode;
  }

  async modes(options: ListOptions): Promise<Array<[string, number]>> {
    this.checkOpen();
    checkListArgs('', options);
    const out: Array<[string, number]> = [];
    let after = options.after;
    // Page through the names in order; only a few usually have a mode.
    for (;;) {
      const page = await this.list('', { after, limit: 1024 });
      for (const name of page) {
        const mode = this.names.get(name)?.mode;
        if (mode !== undefined) out.push([name, mode]);
        if (out.length >= options.limit) return out;
      }
      if (page.length < 1024) return out;
      after = page[page.length - 1];
    }
  }

  async makeDir(name: string, mode: number): Promise<void> {
    this.checkOpen();
    checkName(name);
    checkMode(mode);
    this.dirTable.set(name, mode);
  }

  async removeDir(name: string): Promise<void> {
    this.checkOpen();
    checkName(name);
    this.dirTable.delete(name);
  }

  async dirMode(name: string): Promise<number | undefined> {
    this.checkOpen();
    checkName(name);
    return this.dirTable.get(name);
  }

  async dirs(prefix: string, options: ListOptions): Promise<Array<[string, number]>> {
    this.checkOpen();
    checkListArgs(prefix, options);
    const after = options.after;
    return [...this.dirTable]
      .filter(([n]) => n.startsWith(prefix) && (after === undefined || compareNames(n, after) > 0))
      .sort(([a], [b]) => compareNames(a, b))
      .slice(0, options.limit);
  }

  async list(prefix: string, options: ListOptions): Promise<string[]> {
    this.checkOpen();
    checkListArgs(prefix, options);
    if (this.sortedNames === undefined) this.sortedNames = [...this.names.keys()].sort(compareNames);
    const sorted = this.sortedNames;
    const after = options.after;
    const exclusive = after !== undefined && compareNames(after, prefix) >= 0;
    const start = exclusive ? upperIndex(sorted, after) : lowerIndex(sorted, prefix);
    const out: string[] = [];
    for (let i = start; i < sorted.length && out.length < options.limit; i++) {
      if (!sorted[i].startsWith(prefix)) break;
      out.push(sorted[i]);
    }
    return out;
  }

  async block(sha256: string): Promise<BlockRecord | undefined> {
    this.checkOpen();
    const entry = this.blockTable.get(sha256);
    return entry === undefined ? undefined : { sha256, ...entry };
  }

  async setPinned(sha256: string, pinned: boolean): Promise<void> {
    this.checkOpen();
    const entry = this.blockTable.get(sha256);
    if (entry === undefined) throw new CascadeError('ENOENT', `no such block: ${sha256}`);
    entry.pinned = pinned;
  }

  async blocks(): Promise<BlockRecord[]> {
    this.checkOpen();
    const shas = [...this.blockTable.keys()].sort();
    return shas.map((sha256) => ({ sha256, ...(this.blockTable.get(sha256) as BlockEntry) }));
  }

  async forget(sha256: string): Promise<{ removedVersions: number }> {
    this.checkOpen();
    const entry = this.blockTable.get(sha256);
    // Plan first, then mutate, so that a failed invariant leaves everything as it was.
    const plan: Array<[string, NameEntry, VersionRecord[]]> = [];
    let removedVersions = 0;
    for (const [name, nameEntry] of this.names) {
      const kept = nameEntry.versions.filter((v) => v.sha256 !== sha256);
      if (kept.length === nameEntry.versions.length) continue;
      removedVersions += nameEntry.versions.length - kept.length;
      plan.push([name, nameEntry, kept]);
    }
    assert(removedVersions === (entry?.refs ?? 0), `block ${sha256} has refs ${entry?.refs ?? 0} but ${removedVersions} versions`);
    for (const [name, nameEntry, kept] of plan) {
      if (kept.length === 0) {
        this.names.delete(name);
        this.sortedNames = undefined;
      } else {
        nameEntry.versions = kept;
      }
    }
    this.blockTable.delete(sha256);
    return { removedVersions };
  }

  async totals(): Promise<MetaTotals> {
    this.checkOpen();
    const totals: MetaTotals = { names: this.names.size, versions: 0, blocks: this.blockTable.size, uniqueBytes: 0, logicalBytes: 0, pinnedBytes: 0 };
    for (const entry of this.names.values()) {
      totals.versions += entry.versions.length;
      for (const v of entry.versions) totals.logicalBytes += v.sizeBytes;
    }
    for (const block of this.blockTable.values()) {
      totals.uniqueBytes += block.sizeBytes;
      if (block.pinned) totals.pinnedBytes += block.sizeBytes;
    }
    return totals;
  }

  async sync(): Promise<void> {
    this.checkOpen(); // nothing to make durable: memory is the whole store
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  private checkOpen(): void {
    if (this.closed) throw closedError(this.kind);
  }

  private takeInodes(count: number): number {
    const first = this.nextIno;
    this.nextIno = advanceInodes(first, count);
    return first;
  }

  /** Appends a version (arguments already checked) and trims to keepVersions. Cannot throw. */
  private addVersion(
    name: string,
    sha256: string,
    sizeBytes: number,
    timeMs: number,
    keepVersions: number,
    ino: number,
    released: string[],
  ): VersionRecord {
    let entry = this.names.get(name);
    if (entry === undefined) {
      entry = { lastVersion: 0, versions: [] };
      this.names.set(name, entry);
      this.sortedNames = undefined;
    }
    const previous = entry.versions[entry.versions.length - 1];
    const record: VersionRecord = {
      name,
      version: entry.lastVersion + 1,
      sha256,
      sizeBytes,
      timeMs: previous === undefined ? timeMs : Math.max(timeMs, previous.timeMs),
      ino,
    };
    entry.lastVersion = record.version;
    entry.versions.push(record);
    // Reference the new content before trimming, so content shared by old and new is never released.
    const block = this.blockTable.get(sha256);
    if (block === undefined) this.blockTable.set(sha256, { sizeBytes, refs: 1, pinned: false });
    else block.refs++;
    while (entry.versions.length > keepVersions) this.unref((entry.versions.shift() as VersionRecord).sha256, released);
    return record;
  }

  private dropName(name: string, released: string[]): void {
    const entry = this.names.get(name) as NameEntry;
    for (const v of entry.versions) this.unref(v.sha256, released);
    this.names.delete(name);
    this.sortedNames = undefined;
  }

  private unref(sha256: string, released: string[]): void {
    const block = this.blockTable.get(sha256) as BlockEntry;
    block.refs--;
    if (block.refs === 0) {
      this.blockTable.delete(sha256);
      released.push(sha256);
    }
  }
}

/** First index whose name is >= key. */
function lowerIndex(sorted: string[], key: string): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareNames(sorted[mid], key) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** First index whose name is > key. */
function upperIndex(sorted: string[], key: string): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareNames(sorted[mid], key) <= 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
