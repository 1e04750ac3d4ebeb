// Requests that change names under /kv: mkdir, rmdir, unlink and rename (of a file, or of a directory with everything in it).
import { CascadeError } from '../store/errors';
import { validateDirName } from '../store/names';
import type { Store } from '../store/store';
import type { Attrs } from './attrs';
import { HIDDEN_RE, type Hidden } from './hidden';
import { hasVersion, LIST_PAGE, type InodePool, type Namespace } from './namespace';
import { checkFileName, kvRel } from './paths';
import type { OpenFiles } from './staging';
import { split, type DirTree } from './tree';

export class TreeOps {
  constructor(
    private readonly store: Store,
    private readonly tree: DirTree,
    private readonly ns: Namespace,
    private readonly attrs: Attrs,
    private readonly files: OpenFiles,
    private readonly hidden: Hidden,
    private readonly inodes: InodePool,
    private readonly sharedNamespace: boolean,
  ) {}

  async mkdir(path: string, mode: number): Promise<void> {
    const rel = kvRel(path, 'mkdir');
    if (rel === '') throw new CascadeError('EEXIST', '/kv exists');
    validateDirName(rel);
    // Made empty with no change under it heard from the lookup on: the tree holds all of it.
    await this.ns.completing(rel, async () => {
      // With a shared namespace another node may have made it (or a file there) since the kernel looked.
      if (this.sharedNamespace && (await this.ns.kindOf(rel)) !== undefined) throw new CascadeError('EEXIST', `/kv/${rel} exists`);
      const ino = await this.inodes.take();
      this.tree.addDir(rel, ino); // EEXIST, ENOENT (no parent), ENOTDIR before anything is kept
      const perms = mode & 0o7777;
      try {
        // Kept in the metadata: an empty directory survives a restart and is seen by every node.
        await this.store.makeDir(rel, perms);
      } catch (e) {
        this.tree.removeDir(rel);
        throw e;
      }
      this.attrs.dirModes.set(rel, perms);
    });
  }

  async rmdir(path: string): Promise<void> {
    const rel = kvRel(path, 'rmdir');
    if (rel === '') throw new CascadeError('EBUSY', '/kv cannot be removed');
    if (this.tree.kindOf(rel) !== 'dir' || this.tree.children(rel).size > 0) {
      this.tree.removeDir(rel); // throws the reason: ENOENT, ENOTDIR, ENOTEMPTY
      return;
    }
    this.hidden.checkNone(rel);
    // With a shared namespace names made by other nodes count too.
    if (this.sharedNamespace) {
      const inside = (await this.store.list(`${rel}/`, { limit: 1 })).length + (await this.store.dirs(`${rel}/`, { limit: 1 })).length;
      if (inside > 0) throw new CascadeError('ENOTEMPTY', `/kv/${rel} is not empty`);
    }
    await this.store.removeDir(rel);
    this.attrs.dirModes.delete(rel);
    this.tree.removeDir(rel);
    this.ns.forgetDirs(rel);
  }

  async unlink(path: string): Promise<void> {
    const rel = kvRel(path, 'unlink');
    if (await this.hidden.unlink(rel)) return;
    const kind = await this.ns.kindOf(rel);
    if (kind === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
    if (kind === undefined) throw new CascadeError('ENOENT', `no such file: ${path}`);
    const committed = await hasVersion(this.store, rel);
    if (committed) await this.store.delete(rel); // EPERM while pinned: nothing changes then
    const st = this.files.session(rel);
    if (st) this.files.orphan(st);
    this.tree.removeFile(rel);
    this.attrs.modes.delete(rel);
    this.attrs.unsavedModes.delete(rel);
  }

  async rename(from: string, to: string): Promise<void> {
    const src = kvRel(from, 'rename');
    const dst = kvRel(to, 'rename');
    if (src === '' || dst === '') throw new CascadeError('EBUSY', '/kv cannot be renamed');
    const srcKind = await this.ns.kindOf(src);
    if (srcKind === undefined) throw new CascadeError('ENOENT', `no such file: ${from}`);
    if (src === dst) return;
    if (srcKind === 'file' && HIDDEN_RE.test(split(dst).base)) return this.hidden.hide(src, dst);
    const dstKind = await this.ns.kindOf(dst);
    const { parent } = split(dst);
    if ((await this.ns.kindOf(parent)) !== 'dir') throw new CascadeError('ENOENT', `no directory /kv/${parent}`);
    if (srcKind === 'dir') return this.renameDir(src, dst, dstKind);
    checkFileName(dst);
    if (dstKind === 'dir') throw new CascadeError('EISDIR', `${to} is a directory`);
    // Committed content moves atomically in the store (a new version of dst); a file still being written
    // moves with it, and its commit lands at the new name.
    if (await hasVersion(this.store, src)) await this.store.rename(src, dst);
    this.hidden.pendingDelete.delete(dst); // a hidden dst is replaced: its history continues here
    this.files.rename(src, dst);
    this.tree.moveFile(src, dst);
    // The store's rename moved a kept mode with the content; these follow in memory.
    const { modes, unsavedModes } = this.attrs;
    const mode = modes.get(src);
    modes.delete(src);
    if (mode !== undefined) modes.set(dst, mode);
    else modes.delete(dst);
    const unsaved = unsavedModes.delete(src);
    if (unsaved) unsavedModes.add(dst);
    else unsavedModes.delete(dst);
  }

  private async renameDir(src: string, dst: string, dstKind: 'dir' | 'file' | undefined): Promise<void> {
    if (dstKind === 'file') throw new CascadeError('ENOTDIR', `/kv/${dst} is not a directory`);
    if (dstKind === 'dir' && this.tree.children(dst).size > 0) throw new CascadeError('ENOTEMPTY', `/kv/${dst} is not empty`);
    if (dst.startsWith(`${src}/`)) throw new CascadeError('EINVAL', 'cannot move a directory into itself');
    if (dstKind === 'dir') this.hidden.checkNone(dst);
    validateDirName(dst);
    const files = this.tree.filesUnder(src);
    if (files.some((f) => this.files.isWriting(f))) throw new CascadeError('EBUSY', `files under /kv/${src} are being written`);
    // Not atomic as a whole: each file moves atomically, in order (documented).
    if (dstKind === 'dir') this.tree.removeDir(dst);
    for (const f of files) {
      const to = dst + f.slice(src.length);
      // A file libfuse hid there (unlinked while open) goes now: its hidden name's last release would
      // otherwise delete the file moved in.
      if (this.hidden.pendingDelete.has(to)) await this.hidden.dropFile(to);
      await this.store.rename(f, to);
      // The store moved the kept mode; the copy in memory follows (else the file would show 0644).
      const mode = this.attrs.modes.get(f);
      this.attrs.modes.delete(f);
      if (mode !== undefined) this.attrs.modes.set(to, mode);
    }
    // Directories made by mkdir keep their records (and modes) at their new paths.
    for (const [d, mode] of await this.dirRecords(src)) {
      const to = dst + d.slice(src.length);
      await this.store.makeDir(to, mode);
      await this.store.removeDir(d);
      this.attrs.dirModes.delete(d);
      this.attrs.dirModes.set(to, mode);
    }
    this.tree.moveDir(src, dst);
    this.hidden.moveDir(src, dst);
    this.ns.forgetDirs(src);
    this.ns.forgetDirs(dst);
  }

  /** The directory records (makeDir) of `rel` and of every directory under it, with their modes. */
  private async dirRecords(rel: string): Promise<Array<[string, number]>> {
    const out: Array<[string, number]> = [];
    const own = await this.store.dirMode(rel);
    if (own !== undefined) out.push([rel, own]);
    for (let after: string | undefined; ; ) {
      const page = await this.store.dirs(`${rel}/`, { after, limit: LIST_PAGE });
      out.push(...page);
      if (page.length < LIST_PAGE) return out;
      after = page[page.length - 1][0];
    }
  }
}
