// Open handles and write staging: a file being written is a private buffer (in JS, or the engine's native stage) until it commits.
import * as os from 'node:os';
import { GiB } from '../store/constants';
import { allocLarge, COPY_ASYNC_MIN_BYTES, copyBytes } from '../store/copy';
import { assert, CascadeError } from '../store/errors';
import { StreamHasher } from '../store/hash';
import type { VersionRecord } from '../store/meta';
import type { DramHold, Store } from '../store/store';
import type { Attrs } from './attrs';
import { hasVersion } from './namespace';
import type { DirTree } from './tree';
import type { FileAttr, Handle, SealedBlock, WriteStager } from './types';

/** The smallest JS staging buffer: a file written in 128 KiB pieces starts without a regrowth. */
const STAGING_MIN_BYTES = 128 * 1024;
/** Open handles at once; past this, open fails instead of memory growing without bound. */
const HANDLES_MAX = 65_536;

export interface Staging {
  name: string;
  data: Buffer;
  sizeBytes: number;
  /**
   * Incremental SHA-256 while writes arrive in order (on a worker thread with the native addon);
   * undefined once they do not (the store hashes the whole content at commit).
   */
  hash: StreamHasher | undefined;
  /** Held while the buffer is replaced by a larger one or committed: writes and truncates wait. */
  gate: Promise<void> | undefined;
  /** Writes since the last commit: a close() commits. */
  dirty: boolean;
  /** Created or truncated and not committed since: the last release commits (possibly empty) content. */
  pending: boolean;
  /**
   * A close() returned on the session while it was still pending and unwritten (`: > f`, or a shell
   * redirect before its command writes): from then until the commit, new readers read the file as
   * empty, as its size says, instead of the version the truncation replaced.
   */
  truncationClosed: boolean;
  /**
   * Its only descriptor was closed with everything committed; FUSE's release (which ends the session)
   * comes later, asynchronously. Until then the file is committed content to anyone else: an open for
   * writing without O_TRUNC or a truncation to a non-zero size is EPERM, as after the release.
   */
  closedClean: boolean;
  handles: number;
  /** Unlinked or replaced while open: it is never committed. */
  orphaned: boolean;
  mtimeMs: number;
  /** The file's inode number: its committed version's for a rewrite, a fresh one for a new file. */
  ino: number;
  /**
   * Staged natively (the engine's stager id): its bytes are in the DRAM arena, written and hashed in
   * C++; `data`, `sizeBytes`, `dirty` and `mtimeMs` here are then stale until refresh() or toJs().
   */
  native: number | undefined;
  /** The native stage's bytes went to the store with a commit (the stage holds none now). */
  nativeSealed: boolean;
  /** The version the last commit made (a sealed native stage's content, for toJs()). */
  committed: VersionRecord | undefined;
}

export type OpenFile =
  | { kind: 'read'; version: VersionRecord; release: () => void }
  | { kind: 'write'; staging: Staging; readable: boolean }
  | { kind: 'virtual'; data: Buffer };

export class OpenFiles {
  private readonly handles = new Map<Handle, OpenFile>();
  private nextHandle = 1;
  /** Write sessions by store name. */
  private readonly staging = new Map<string, Staging>();
  private stagingBytes = 0;
  private readonly stagingCapacityBytes: number;
  /** The engine's native write staging, when it has it and the store can take its blocks. */
  private stager: WriteStager | undefined;

  constructor(
    private readonly store: Store,
    private readonly tree: DirTree,
    private readonly attrs: Attrs,
    /** Bytes all staging buffers may hold together (default: a quarter of memory, at most 8 GiB). */
    stagingCapacityBytes: number | undefined,
    private readonly log: (message: string) => void,
  ) {
    this.stagingCapacityBytes = stagingCapacityBytes ?? Math.min(8 * GiB, Math.floor(os.totalmem() / 4));
  }

  /** stats.json's `fs` figures. */
  counts(): { openHandles: number; stagingFiles: number; stagingBytes: number } {
    return { openHandles: this.handles.size, stagingFiles: this.staging.size, stagingBytes: this.stagingBytes };
  }

  /** The write session of `rel`, if one is open. */
  session(rel: string): Staging | undefined {
    return this.staging.get(rel);
  }

  isWriting(rel: string): boolean {
    return this.staging.has(rel);
  }

  /** The open file behind `handle`, or undefined. */
  find(handle: Handle): OpenFile | undefined {
    return this.handles.get(handle);
  }

  add(file: OpenFile): Handle {
    if (this.handles.size >= HANDLES_MAX) {
      if (file.kind === 'read') file.release();
      throw new CascadeError('EBUSY', `too many open files (${HANDLES_MAX})`);
    }
    while (this.handles.has(this.nextHandle) || this.nextHandle === 0) this.nextHandle = (this.nextHandle + 1) % 0x7fffffff;
    const h = this.nextHandle++;
    this.handles.set(h, file);
    return h;
  }

  private handle(handle: Handle): OpenFile {
    const h = this.handles.get(handle);
    if (!h) throw new CascadeError('EBADF', `no open handle ${handle}`);
    return h;
  }

  /** A write handle of `rel`: a new session (created or truncated), or the open one started over. */
  openStaging(rel: string, readable: boolean, ino: number): Handle {
    let st = this.staging.get(rel);
    if (st) {
      this.resize(st, 0);
    } else {
      let native: number | undefined;
      try {
        native = this.stager?.create();
      } catch (e) {
        this.log(`native write staging unavailable for ${rel}: ${String(e)}`);
      }
      st = {
        name: rel,
        data: Buffer.alloc(0),
        sizeBytes: 0,
        hash: new StreamHasher(),
        gate: undefined,
        dirty: false,
        pending: true, // created or truncated: commits at the last release even if nothing is written
        truncationClosed: false,
        closedClean: false,
        handles: 0,
        orphaned: false,
        mtimeMs: Date.now(),
        ino,
        native,
        nativeSealed: false,
        committed: undefined,
      };
      this.staging.set(rel, st);
    }
    return this.joinStaging(st, readable);
  }

  joinStaging(st: Staging, readable: boolean): Handle {
    const h = this.add({ kind: 'write', staging: st, readable });
    st.handles++;
    st.closedClean = false;
    return h;
  }

  /** A write session's attributes: what its writers have written so far. */
  attr(st: Staging): FileAttr {
    this.refresh(st, false);
    return this.attrs.fileAttr(st.sizeBytes, st.mtimeMs, this.attrs.modes.get(st.name) ?? 0o644, st.ino);
  }

  /**
   * For the native engine: the version a read handle reads, held in the DRAM arena until release(),
   * so that its reads can be served from the arena without reaching JS. Undefined for handles that
   * are not plain committed-version reads (staging, virtual files) or smaller than minSizeBytes.
   * onLoading: see Store.holdInDram.
   */
  async holdHandle(handle: Handle, minSizeBytes = 0, onLoading?: (arenaHandle: number) => void): Promise<DramHold | undefined> {
    const h = this.handle(handle);
    if (h.kind !== 'read' || h.version.sizeBytes < minSizeBytes) return undefined;
    return this.store.holdInDram(h.version, onLoading);
  }

  contentKeyOf(handle: Handle): { key: number; sizeBytes: number } | undefined {
    const h = this.handle(handle);
    if (h.kind !== 'read') return undefined;
    const key = this.store.dramHandleOf(h.version.sha256);
    return key === undefined ? undefined : { key, sizeBytes: h.version.sizeBytes };
  }

  async read(handle: Handle, target: Buffer, offsetBytes: number): Promise<number> {
    const h = this.handle(handle);
    switch (h.kind) {
      case 'read':
        return this.store.readContent(h.version, offsetBytes, target);
      case 'virtual':
        return copyRange(h.data, h.data.length, offsetBytes, target);
      case 'write': {
        if (!h.readable) throw new CascadeError('EBADF', 'handle is open for writing only');
        const st = h.staging;
        while (st.gate) await st.gate;
        if (st.native !== undefined && !st.nativeSealed) return this.stager!.read(st.native, offsetBytes, target);
        if (st.native !== undefined) await this.toJs(st);
        return copyRange(st.data, st.sizeBytes, offsetBytes, target);
      }
    }
  }

  async write(handle: Handle, data: Buffer, offsetBytes: number): Promise<number> {
    const h = this.handle(handle);
    if (h.kind !== 'write') throw new CascadeError('EBADF', 'handle is not open for writing');
    const st = h.staging;
    const end = offsetBytes + data.length;
    while (st.gate) await st.gate;
    // A write the native stage did not take (no arena pages, or after a commit): JS stages from here.
    if (st.native !== undefined) await this.toJs(st);
    while (st.gate) await st.gate;
    if (end > st.data.length) await this.grow(st, end);
    // The kernel reuses `data` after we return: copy now.
    data.copy(st.data, offsetBytes);
    if (st.hash && offsetBytes === st.hash.lengthBytes && offsetBytes >= st.sizeBytes) {
      // A view of the staging buffer, whose bytes below the hashed length never change while hashed.
      st.hash.append(st.data.subarray(offsetBytes, end));
    } else if (st.hash && (offsetBytes < st.hash.lengthBytes || offsetBytes > st.sizeBytes)) {
      st.hash = undefined; // a rewrite or a hole: hash the whole buffer at commit
    }
    if (offsetBytes > st.sizeBytes) st.data.fill(0, st.sizeBytes, offsetBytes); // a hole reads as zeros
    st.sizeBytes = Math.max(st.sizeBytes, end);
    st.dirty = true;
    st.mtimeMs = Date.now();
    return data.length;
  }

  /** A write session truncated to sizeBytes, once nothing holds its gate. */
  async truncate(st: Staging, sizeBytes: number): Promise<void> {
    while (st.gate) await st.gate;
    if (sizeBytes !== 0) await this.toJs(st);
    return this.resize(st, sizeBytes);
  }

  async flush(handle: Handle): Promise<void> {
    const h = this.handle(handle);
    if (h.kind !== 'write') return;
    this.refresh(h.staging);
    if (h.staging.dirty) await this.commit(h.staging);
    else if (h.staging.pending) h.staging.truncationClosed = true;
    if (h.staging.handles === 1 && !h.staging.dirty && !h.staging.pending) h.staging.closedClean = true;
  }

  /** A session whose writer closed with everything committed: it takes no new writer but by O_TRUNC. */
  closedCommitted(st: Staging): boolean {
    if (!st.closedClean) return false;
    this.refresh(st);
    return !st.dirty && !st.pending;
  }

  async fsync(handle: Handle): Promise<void> {
    const h = this.handle(handle);
    if (h.kind === 'write') {
      await this.commit(h.staging);
      if (!h.staging.orphaned && (await hasVersion(this.store, h.staging.name))) await this.store.sync(h.staging.name);
    } else if (h.kind === 'read') {
      await this.store.syncAll();
    }
  }

  async release(handle: Handle): Promise<void> {
    const h = this.handles.get(handle);
    if (!h) return;
    this.handles.delete(handle);
    if (h.kind === 'read') h.release();
    if (h.kind !== 'write') return;
    const st = h.staging;
    st.handles--;
    if (st.handles > 0) return;
    try {
      await this.commit(st); // normally a no-op: flush committed it
    } catch (e) {
      this.log(`commit of ${st.name} at release failed: ${String(e)}`);
    }
    await this.dropStaging(st);
  }

  /** Unmount: commit what writers left open (a clean unmount loses nothing), and let every handle go. */
  async close(): Promise<void> {
    for (const st of [...this.staging.values()]) {
      try {
        await this.commit(st);
      } catch (e) {
        this.log(`commit of ${st.name} at unmount failed: ${String(e)}`);
      }
    }
    for (const h of this.handles.values()) if (h.kind === 'read') h.release();
    this.handles.clear();
    this.staging.clear();
  }

  /** Commit the staging buffer as a new version if it changed since the last commit. */
  async commit(st: Staging): Promise<void> {
    while (st.gate) await st.gate;
    this.refresh(st);
    if (!(st.dirty || st.pending) || st.orphaned) return;
    this.store.checkAdmission(st.sizeBytes);
    // Writes wait at the gate until the store has the content: the bytes hashed are the bytes stored.
    let open!: () => void;
    st.gate = new Promise<void>((resolve) => (open = resolve));
    const [dirty, pending] = [st.dirty, st.pending];
    try {
      if (st.native !== undefined) {
        st.dirty = false;
        st.pending = false;
        await this.commitNative(st);
      } else {
        const data = st.data.subarray(0, st.sizeBytes);
        const sha = st.hash && st.hash.lengthBytes === st.sizeBytes ? await st.hash.digest() : undefined;
        st.dirty = false;
        st.pending = false;
        st.committed = await this.store.put(st.name, data, sha, st.ino);
      }
      st.truncationClosed = false; // readers read the new version now
      await this.attrs.saveMode(st.name);
    } catch (e) {
      st.dirty = dirty;
      st.pending = pending;
      throw e;
    } finally {
      st.gate = undefined;
      open();
    }
  }

  private async dropStaging(st: Staging): Promise<void> {
    if (this.staging.get(st.name) === st) this.staging.delete(st.name);
    if (st.native !== undefined) {
      this.stager?.drop(st.native);
      st.native = undefined;
    }
    this.stagingBytes -= st.data.length;
    st.data = Buffer.alloc(0);
    // A created file whose commit failed, and that has no committed version, vanishes.
    if (!st.orphaned && st.committed === undefined && !(await hasVersion(this.store, st.name)) && !this.staging.has(st.name)) this.tree.removeFile(st.name);
  }

  /** Unlinked or replaced while open: the session is never committed, and no longer found by name. */
  orphan(st: Staging): void {
    st.orphaned = true;
    if (this.staging.get(st.name) === st) this.staging.delete(st.name);
  }

  /** A rename of `src` to `dst`: a session open there is orphaned, one open at `src` moves along. */
  rename(src: string, dst: string): void {
    const replaced = this.staging.get(dst);
    if (replaced) this.orphan(replaced);
    const st = this.staging.get(src);
    if (st) {
      this.staging.delete(src);
      st.name = dst;
      this.staging.set(dst, st);
    }
  }

  // ---- native write staging (the native engine's stager) ---------------------------------------

  useStager(stager: WriteStager | undefined): boolean {
    this.stager = stager !== undefined && this.store.dramArena() !== undefined ? stager : undefined;
    return this.stager !== undefined;
  }

  stageOf(handle: Handle): number | undefined {
    const h = this.handles.get(handle);
    return h?.kind === 'write' ? h.staging.native : undefined;
  }

  async detachStager(): Promise<void> {
    const all = new Set<Staging>([...this.staging.values()]);
    for (const h of this.handles.values()) if (h.kind === 'write') all.add(h.staging);
    for (const st of all) {
      while (st.gate) await st.gate;
      try {
        await this.toJs(st);
      } catch (e) {
        this.log(`staged bytes of ${st.name} could not be kept at unmount: ${String(e)}`);
      }
    }
    this.stager = undefined;
  }

  /** Bring size, times and the dirty flag of a native stage into the staging record. */
  refresh(st: Staging, takeDirty = true): void {
    if (st.native === undefined) return;
    const info = this.stager!.info(st.native, takeDirty);
    st.sizeBytes = info.sizeBytes;
    st.mtimeMs = info.mtimeMs;
    if (info.dirty) st.dirty = true;
  }

  /**
   * Move a native stage's bytes into JS memory (a write it did not take, a truncate, unmount): from then
   * on the file is staged as without the native engine. Behind the gate: nothing else touches it.
   */
  private async toJs(st: Staging): Promise<void> {
    const id = st.native;
    if (id === undefined) return;
    const stager = this.stager!;
    let open!: () => void;
    st.gate = new Promise<void>((resolve) => (open = resolve));
    try {
      const info = stager.freeze(id); // from here its writes reach write(), which waits at the gate
      const size = info.sizeBytes;
      await this.intoJsBuffer(st, size, async (target) => {
        if (!st.nativeSealed) {
          if (stager.read(id, 0, target) !== size) throw new CascadeError('EIO', `staged bytes of ${st.name} are incomplete`);
        } else if (size > 0) {
          // Committed since: the content is the version that commit made.
          const v = st.committed;
          if (v === undefined || v.sizeBytes !== size) throw new CascadeError('EIO', `the committed content of ${st.name} is unknown`);
          if ((await this.store.readContent(v, 0, target)) !== size) throw new CascadeError('EIO', `committed content of ${st.name} is incomplete`);
        }
      });
      st.mtimeMs = info.mtimeMs;
      if (info.dirty) st.dirty = true;
    } finally {
      st.gate = undefined;
      open();
    }
  }

  /**
   * Stage `st` in JS memory from here: a buffer for its sizeBytes of content, counted against the
   * staging limit, filled by `fill`; its native stage (if any) is dropped. The store hashes it at commit.
   */
  private async intoJsBuffer(st: Staging, sizeBytes: number, fill: (target: Buffer) => Promise<void> | void): Promise<void> {
    const capacity = Math.min(this.store.maxBlockBytes, Math.max(sizeBytes, STAGING_MIN_BYTES));
    this.checkStagingRoom(capacity);
    const data = allocLarge(capacity);
    await fill(data.subarray(0, sizeBytes));
    if (st.native !== undefined) this.stager?.drop(st.native);
    st.native = undefined;
    st.nativeSealed = false;
    st.data = data;
    this.stagingBytes += capacity;
    st.sizeBytes = sizeBytes;
    st.hash = sizeBytes === 0 ? new StreamHasher() : undefined;
  }

  /** Commit a native stage: its sealed arena block becomes the version, with no copy. Under the gate. */
  private async commitNative(st: Staging): Promise<void> {
    const stager = this.stager!;
    const id = st.native!;
    let block: SealedBlock;
    if (st.nativeSealed) {
      // Sealed by an earlier commit and not written since (writes would have moved it to JS): a
      // pending re-commit of the same content.
      const v = st.committed!;
      st.committed = await this.store.link(st.name, v.sha256, st.ino);
      return;
    }
    block = await stager.seal(id);
    stager.info(id, true); // writes that landed before the seal are in the block
    const owner = { taken: false };
    try {
      st.committed = await this.store.putSealed(st.name, block, st.ino, owner);
      st.nativeSealed = true;
      st.sizeBytes = block.sizeBytes;
    } catch (e) {
      // Keep the content for the retry at release: JS stages it from here.
      try {
        await this.intoJsBuffer(st, block.sizeBytes, (target) => this.store.readSealed(block, target));
      } catch (e2) {
        this.log(`the content of ${st.name} was lost after a failed commit: ${String(e2)}`);
      }
      throw e;
    } finally {
      if (!owner.taken) this.store.freeSealed(block);
    }
  }

  // ---- JS staging buffers -----------------------------------------------------------------------

  /**
   * Grow the buffer for a write ending at endBytes. A large copy runs on a worker (native addon) behind
   * the gate, so the event loop keeps serving while a 1 GiB file arrives.
   */
  private async grow(st: Staging, endBytes: number): Promise<void> {
    const old = st.data;
    const next = this.ensureCapacity(st, endBytes, false);
    if (next === undefined) return;
    if (st.sizeBytes < COPY_ASYNC_MIN_BYTES) {
      old.copy(next, 0, 0, st.sizeBytes);
      st.data = next;
      return;
    }
    let open!: () => void;
    st.gate = new Promise<void>((resolve) => (open = resolve));
    try {
      await copyBytes(next, 0, old.subarray(0, st.sizeBytes));
      st.data = next;
    } finally {
      st.gate = undefined;
      open();
    }
  }

  /** Make room for endBytes; copies the content itself unless `copy` is false (then returns the new buffer). */
  private ensureCapacity(st: Staging, endBytes: number, copy = true): Buffer | undefined {
    if (endBytes > this.store.maxBlockBytes) throw new CascadeError('EFBIG', `a file is at most ${this.store.maxBlockBytes} bytes`);
    if (endBytes <= st.data.length) return undefined;
    // Double, so a file written in 128 KiB pieces is copied O(log n) times, not once per write.
    const capacity = Math.min(this.store.maxBlockBytes, Math.max(endBytes, st.data.length * 2, STAGING_MIN_BYTES));
    const growth = capacity - st.data.length;
    this.checkStagingRoom(growth);
    const next = allocLarge(capacity);
    this.stagingBytes += growth;
    if (!copy) return next;
    st.data.copy(next, 0, 0, st.sizeBytes);
    st.data = next;
    return undefined;
  }

  /** ENOSPC when files being written would hold more than the staging limit with `growthBytes` more. */
  private checkStagingRoom(growthBytes: number): void {
    if (this.stagingBytes + growthBytes > this.stagingCapacityBytes) {
      throw new CascadeError('ENOSPC', `files being written hold ${this.stagingBytes} bytes; the staging limit is ${this.stagingCapacityBytes}`);
    }
  }

  resize(st: Staging, sizeBytes: number): void {
    if (st.native !== undefined) {
      // Only truncation to 0 reaches here natively (others go through toJs first): the content goes,
      // and JS stages the file from now on (its handles' writes reach write()).
      assert(sizeBytes === 0, 'a native stage is resized only to 0');
      const info = this.stager!.freeze(st.native);
      this.stager!.drop(st.native);
      st.native = undefined;
      st.sizeBytes = info.sizeBytes;
      st.mtimeMs = info.mtimeMs;
      st.dirty = st.dirty || info.dirty;
      st.hash = undefined;
    }
    if (sizeBytes > st.sizeBytes) {
      this.ensureCapacity(st, sizeBytes);
      st.data.fill(0, st.sizeBytes, sizeBytes);
    }
    if (sizeBytes !== st.sizeBytes || sizeBytes === 0) {
      if (sizeBytes === 0) {
        st.hash = new StreamHasher();
      } else if (st.hash && (sizeBytes < st.hash.lengthBytes || sizeBytes > st.sizeBytes)) {
        st.hash = undefined;
      }
      st.sizeBytes = sizeBytes;
      st.dirty = true;
      st.mtimeMs = Date.now();
    }
    if (sizeBytes === 0) st.pending = true; // O_TRUNC of a file being written starts it over
  }
}

function copyRange(src: Buffer, sizeBytes: number, offsetBytes: number, target: Buffer): number {
  if (offsetBytes >= sizeBytes) return 0;
  const n = Math.min(target.length, sizeBytes - offsetBytes);
  src.copy(target, 0, offsetBytes, offsetBytes + n);
  return n;
}
