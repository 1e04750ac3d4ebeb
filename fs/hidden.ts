// Files libfuse hid while open (renamed to .fuse_hidden*): what their names still show, and their deletion at the last release.
import { CascadeError, isCascadeError } from '../store/errors';
import type { VersionRecord } from '../store/meta';
import type { Store } from '../store/store';
import { currentVersion, hasVersion } from './namespace';
import { kvPath } from './paths';
import type { OpenFiles, Staging } from './staging';
import { split, type DirTree } from './tree';
import type { DirWatcher, ListedEntry } from './types';

/**
 * libfuse (high-level API, without hard_remove) renames a file that is unlinked or replaced while open to
 * `.fuse_hidden<hex>` and unlinks that name at the last release. These names are not store names.
 */
export const HIDDEN_RE = /^\.fuse_hidden[0-9a-f]+$/;

/** A hidden name: the file it stands for, the version it showed when hidden, and its write session. */
export interface HiddenEntry {
  target: string;
  version: VersionRecord | undefined;
  staging: Staging | undefined;
}

export class Hidden {
  /** Hidden name -> the file it stands for, and the version it showed when hidden. */
  private readonly entries = new Map<string, HiddenEntry>();
  /**
   * Files hidden by libfuse: gone from the tree, still in the store until a rename replaces them (their
   * version history continues) or their hidden name is unlinked (then they are deleted). Keyed by the
   * file's name, valued by the hidden name that owns the delete: one name can be hidden twice (replaced
   * while open, then the file renamed there unlinked while open), and only the latest hidden name's
   * release deletes it.
   */
  readonly pendingDelete = new Map<string, string>();
  /** The engine's directory watcher (watchDirs): also told of hidden names. */
  dirWatcher: DirWatcher | undefined;

  constructor(
    private readonly store: Store,
    private readonly tree: DirTree,
    private readonly files: OpenFiles,
    private readonly log: (message: string) => void,
  ) {}

  get(rel: string): HiddenEntry | undefined {
    return this.entries.get(rel);
  }

  /** `rel` is a hidden name. */
  has(rel: string): boolean {
    return this.entries.has(rel);
  }

  /** `rel` is a hidden name, or a file hidden under one whose store copy waits for its release. */
  holds(rel: string): boolean {
    return this.entries.has(rel) || this.pendingDelete.has(rel);
  }

  /** The hidden names in directory `dir`, as a listing shows them (a lookup finds them; readdir does not). */
  listedIn(dir: string): ListedEntry[] {
    const out: ListedEntry[] = [];
    for (const h of this.entries.keys()) if (split(h).parent === dir) out.push({ name: split(h).base, kind: 'hidden' });
    return out;
  }

  /** The hidden-name table, told to the directory watcher (a lookup finds these names). */
  private set(rel: string, entry: HiddenEntry): void {
    const had = this.entries.has(rel);
    this.entries.set(rel, entry);
    const { parent, base } = split(rel);
    if (!had && this.tree.kindOf(rel) === undefined) this.dirWatcher?.added(kvPath(parent), base, 'hidden');
  }

  private delete(rel: string): void {
    const { parent, base } = split(rel);
    if (this.entries.delete(rel) && this.tree.kindOf(rel) === undefined) this.dirWatcher?.removed(kvPath(parent), base);
  }

  /**
   * A directory holding a hidden name is not empty (ENOTEMPTY, as on any libfuse filesystem): libfuse
   * builds the hidden file's path to serve its descriptor and to unlink it at the last release, so an
   * rmdir that went ahead would leave that descriptor reading ENOENT. No waiting for a release just
   * sent: libfuse holds the directory's path lock for the rmdir, so the release's unlink waits behind
   * it, and a wait here would only delay the ENOTEMPTY.
   */
  checkNone(dir: string): void {
    for (const h of this.entries.keys()) {
      if (split(h).parent === dir) throw new CascadeError('ENOTEMPTY', `/kv/${dir} holds a file unlinked while open`);
    }
  }

  /** libfuse hides `src` (open while unlinked or replaced) under `hiddenRel`. See HIDDEN_RE. */
  async hide(src: string, hiddenRel: string): Promise<void> {
    const version = await currentVersion(this.store, src);
    if (version && this.store.isPinned(version.sha256)) throw new CascadeError('EPERM', `/kv/${src} is pinned; unpin it first`);
    const st = this.files.session(src);
    if (st) this.files.orphan(st); // a file replaced or unlinked while being written is never committed
    this.set(hiddenRel, { target: src, version, staging: st });
    if (version) this.pendingDelete.set(src, hiddenRel);
    this.tree.removeFile(src);
  }

  /**
   * An unlink of `rel`, if it is a hidden name: the last release of a file unlinked while open, which
   * goes now (unless a rename replaced it). False where `rel` is no hidden name.
   */
  async unlink(rel: string): Promise<boolean> {
    const hid = this.entries.get(rel);
    if (!hid) return false;
    this.delete(rel);
    if (this.pendingDelete.get(hid.target) !== rel) return true; // replaced meanwhile: its history continues there
    this.pendingDelete.delete(hid.target);
    if (await hasVersion(this.store, hid.target)) await this.store.delete(hid.target);
    return true;
  }

  /**
   * The store's copy of a file libfuse hid after an unlink while open, removed before its hidden name's
   * last release because the name is being created again. Content pinned meanwhile (through another name
   * with the same content) stays in the store: the new file then continues its history.
   */
  async dropFile(rel: string): Promise<void> {
    try {
      if (await hasVersion(this.store, rel)) await this.store.delete(rel);
      this.pendingDelete.delete(rel);
    } catch (e) {
      if (!isCascadeError(e, 'EPERM')) throw e;
      this.log(`${rel}, unlinked while open, is pinned: the file created under its name continues its history`);
    }
  }

  /**
   * Directory `src` moved to `dst`: the files libfuse hid in it (unlinked while open) move with it, as
   * libfuse asks for them at the new path (fstat of their descriptors, the unlink at their last
   * release). Their store names stay where they were, deleted at that release.
   */
  moveDir(src: string, dst: string): void {
    for (const [rel, entry] of [...this.entries]) {
      if (!rel.startsWith(`${src}/`)) continue;
      const to = dst + rel.slice(src.length);
      this.delete(rel);
      this.set(to, entry);
      if (this.pendingDelete.get(entry.target) === rel) this.pendingDelete.set(entry.target, to);
    }
  }

  /** Unmount: the files unlinked while open go from the store now. */
  async close(): Promise<void> {
    for (const rel of this.pendingDelete.keys()) {
      try {
        if (await hasVersion(this.store, rel)) await this.store.delete(rel);
      } catch (e) {
        this.log(`delete of ${rel} (unlinked while open) at unmount failed: ${String(e)}`);
      }
    }
    this.pendingDelete.clear();
    this.entries.clear();
  }
}
