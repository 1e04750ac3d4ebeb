// Extended attributes of files under /kv: pin, hash, tier, link by hash, DRAM eviction and CUDA IPC leases.
import { CascadeError } from '../store/errors';
import { validateSha256 } from '../store/names';
import type { Store } from '../store/store';
import type { Attrs } from './attrs';
import { GpuLeases } from './gpu-leases';
import { hasVersion, type Namespace } from './namespace';
import { parse } from './paths';
import type { OpenFiles } from './staging';
import type { Caller, FileAttr } from './types';
import type { Virtual } from './virtual';

export const XATTR_PINNED = 'user.cascade.pinned';
export const XATTR_SHA256 = 'user.cascade.sha256';
export const XATTR_TIER = 'user.cascade.tier';
export const XATTR_LINK = 'user.cascade.link';
/** Read-only: the content's place in the GPU tier for a same-node GPU process, with a lease (fs/gpu-leases.ts). */
export const XATTR_CUDA_IPC = 'user.cascade.cuda_ipc';
/**
 * Write-only: setting it to 1 drops the file's content from DRAM (it stays on disk). An xattr, as pins
 * are: it names one file, goes through any tool (setfattr) and both engines, and needs no new file.
 */
export const XATTR_EVICT = 'user.cascade.evict';
/** Values written to our xattrs are short ('1', a hex digest); anything longer is a mistake. */
const XATTR_VALUE_MAX_BYTES = 256;

export class Xattrs {
  /** Leases of user.cascade.cuda_ipc readers on GPU-resident content. */
  private readonly gpuLeases: GpuLeases;

  constructor(
    private readonly store: Store,
    private readonly ns: Namespace,
    private readonly files: OpenFiles,
    private readonly attrs: Attrs,
    private readonly virtual: Virtual,
    /** The mount's owner: with root, the only one who may link by hash. */
    private readonly ownerUid: number,
    /** The filesystem's getattr: a path's attributes, or its error (ENOENT, ENOTDIR). */
    private readonly getattr: (path: string) => Promise<FileAttr>,
  ) {
    this.gpuLeases = new GpuLeases(store);
  }

  close(): void {
    this.gpuLeases.close();
  }

  async get(path: string, name: string, caller?: Caller): Promise<Buffer> {
    const rel = await this.target(path, name);
    if (name === XATTR_LINK || name === XATTR_EVICT) throw new CascadeError('ENODATA', `${name} is write-only`);
    if (!(await hasVersion(this.store, rel))) throw new CascadeError('ENODATA', `${path} has no committed content yet`);
    if (name === XATTR_CUDA_IPC) {
      if (caller === undefined) throw new CascadeError('EOPNOTSUPP', `${XATTR_CUDA_IPC} needs the calling process, which this engine does not pass (use --engine native)`);
      const value = await this.gpuLeases.take(caller.pid, rel, await this.store.resolve(rel));
      return Buffer.from(JSON.stringify(value));
    }
    const info = await this.store.stat(rel);
    if (name === XATTR_PINNED) return Buffer.from(info.pinned ? '1' : '0');
    if (name === XATTR_SHA256) return Buffer.from(info.sha256);
    return Buffer.from(info.tier);
  }

  async set(path: string, name: string, value: Buffer, caller?: Caller): Promise<void> {
    const rel = await this.target(path, name);
    if (value.length > XATTR_VALUE_MAX_BYTES) throw new CascadeError('EINVAL', `value of ${name} is too long`);
    const text = value.toString('utf8').replace(/\n$/, '');
    if (name === XATTR_SHA256 || name === XATTR_TIER || name === XATTR_CUDA_IPC) throw new CascadeError('EPERM', `${name} is read-only`);
    if (name === XATTR_PINNED) {
      if (text !== '0' && text !== '1') throw new CascadeError('EINVAL', `${XATTR_PINNED} takes 1 (pin) or 0 (unpin)`);
      if (!(await hasVersion(this.store, rel))) throw new CascadeError('ENOENT', `${path} has no committed content to pin`);
      try {
        return await (text === '1' ? this.store.pin(rel) : this.store.unpin(rel));
      } finally {
        this.virtual.pinsChanged();
      }
    }
    if (name === XATTR_EVICT) {
      if (text !== '1') throw new CascadeError('EINVAL', `${XATTR_EVICT} takes 1 (drop the content from DRAM)`);
      if (!(await hasVersion(this.store, rel))) throw new CascadeError('ENOENT', `${path} has no committed content to evict`);
      // EPERM while pinned, EBUSY while held by a reader of the arena (store.evictFromDram).
      await this.store.evictFromDram(rel);
      return;
    }
    // XATTR_LINK: this file becomes that content, with no data transfer.
    const sha = text.toLowerCase();
    try {
      validateSha256(sha);
    } catch {
      throw new CascadeError('EINVAL', `${XATTR_LINK} takes a 64-character hex SHA-256`);
    }
    await this.checkMayLink(path, caller);
    const st = this.files.session(rel);
    if (st) this.files.refresh(st);
    await this.store.link(rel, sha, st?.ino);
    await this.attrs.saveMode(rel);
    // A created-but-unwritten file (touch, then link) must not commit its empty content over the link.
    if (st && !st.dirty) this.files.orphan(st);
  }

  /**
   * Link by hash reads content by its SHA-256 alone, whatever the modes of the names that hold it: only
   * root and the mount's owner (the owner of every file here, who may read them all) may do it. Others
   * get EACCES even where the kernel let them write the file (a mode with g+w or o+w). Without the
   * caller (fuse-native does not pass it), a file that only its owner may write stands for the same
   * rule: only the owner or root can have passed the kernel's write check for it.
   */
  private async checkMayLink(path: string, caller: Caller | undefined): Promise<void> {
    const owner = this.ownerUid;
    if (caller !== undefined) {
      if (caller.uid !== 0 && caller.uid !== owner) throw new CascadeError('EACCES', `${XATTR_LINK}: only root and the mount's owner (uid ${owner}) may link by hash`);
      return;
    }
    const attr = await this.getattr(path);
    if ((attr.mode & 0o022) !== 0) {
      throw new CascadeError('EACCES', `${XATTR_LINK}: ${path} may be written by others (mode ${(attr.mode & 0o7777).toString(8)}), and this engine cannot tell who asks`);
    }
  }

  async list(path: string): Promise<string[]> {
    const p = parse(path);
    if (p.kind !== 'kv' || (await this.ns.kindOf(p.rel)) !== 'file') {
      await this.getattr(path);
      return [];
    }
    return (await hasVersion(this.store, p.rel)) ? [XATTR_PINNED, XATTR_SHA256, XATTR_TIER] : [];
  }

  async remove(path: string, name: string, caller?: Caller): Promise<void> {
    const rel = await this.target(path, name);
    if (name === XATTR_CUDA_IPC) {
      // Ends the caller's lease: the block may be evicted from the GPU tier from now on.
      if (caller === undefined || !this.gpuLeases.release(caller.pid, rel)) throw new CascadeError('ENODATA', `no GPU lease of this process on ${path}`);
      return;
    }
    if (name !== XATTR_PINNED) throw new CascadeError('EPERM', `${name} cannot be removed`);
    try {
      if (await hasVersion(this.store, rel)) await this.store.unpin(rel);
    } finally {
      this.virtual.pinsChanged();
    }
  }

  /** The file an attribute request names: EOPNOTSUPP for attributes not ours and for anything but files under /kv. */
  private async target(path: string, name: string): Promise<string> {
    if (name !== XATTR_PINNED && name !== XATTR_SHA256 && name !== XATTR_TIER && name !== XATTR_LINK && name !== XATTR_CUDA_IPC && name !== XATTR_EVICT) {
      // The kernel asks for security.capability on every write: answer without touching the store
      // (the path was already looked up by the kernel).
      throw new CascadeError('EOPNOTSUPP', `unsupported extended attribute ${name}`);
    }
    const p = parse(path);
    if (p.kind !== 'kv' || (await this.ns.kindOf(p.rel)) !== 'file') {
      await this.getattr(path);
      throw new CascadeError('EOPNOTSUPP', `${name} applies to files under /kv only`);
    }
    return p.rel;
  }
}
