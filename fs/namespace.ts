// What each name under /kv is: the tree loaded at mount, inode numbers for new entries, and with a shared namespace the store's answers and other nodes' changes.
import { assert, isCascadeError } from '../store/errors';
import { LruMap } from '../store/policy/lru-map';
import type { NameChange, VersionRecord } from '../store/meta';
import { validateDirName } from '../store/names';
import type { Store } from '../store/store';
import { INO, kvPath, parse, type Parsed } from './paths';
import { DirTree } from './tree';
import type { DirEntry, RemoteWatcher } from './types';

/** Names read per page when the tree is built at mount, and when a directory is read from the store. */
export const LIST_PAGE = 10_000;
/** Names a cluster node remembers as absent (see Namespace.absent). */
const ABSENT_NAMES_MAX = 65_536;
/** Directories a cluster node knows every entry of (see Namespace.complete). */
const COMPLETE_DIRS_MAX = 65_536;

/** A watch of one directory's names while it is listed or made (Namespace.completing). */
interface DirWatch {
  prefix: string;
  /** A change to a name at or under the directory was heard meanwhile (or the feed reset). */
  changed: boolean;
}
/** Inode numbers reserved from the store at a time for new files and directories. */
const INODE_BATCH = 1024;

/**
 * Inode numbers for new files and directories, reserved from the store in batches. take() waits for a
 * refill when the batch is used up; concurrent takers share one refill.
 */
export class InodePool {
  private next = 0;
  private end = 0;
  private refilling: Promise<void> | undefined;
  constructor(private readonly store: Store) {}

  async take(): Promise<number> {
    while (this.next >= this.end) {
      this.refilling ??= this.store.allocateInodes(INODE_BATCH).then(
        (first) => {
          this.next = first;
          this.end = first + INODE_BATCH;
          this.refilling = undefined;
        },
        (e: unknown) => {
          this.refilling = undefined;
          throw e;
        },
      );
      await this.refilling;
    }
    return this.next++;
  }
}

/** The tree of the store's names at mount, with the modes the metadata keeps for files and directories. */
export async function loadTree(store: Store): Promise<{ tree: DirTree; modes: Map<string, number>; dirModes: Map<string, number> }> {
  const tree = new DirTree(INO.kv);
  let after: string | undefined;
  for (;;) {
    const page = await store.list('', { after, limit: LIST_PAGE });
    // Directories get numbers from the store's counter too, reserved per page (at most 63 per name).
    const seen = new Set<string>();
    let missing = 0;
    for (const name of page) {
      for (let i = name.indexOf('/'); i >= 0; i = name.indexOf('/', i + 1)) {
        const dir = name.slice(0, i);
        if (!seen.has(dir) && tree.kindOf(dir) !== 'dir') missing++;
        seen.add(dir);
      }
    }
    let next = missing > 0 ? await store.allocateInodes(missing) : 0;
    const end = next + missing;
    for (const name of page) {
      tree.addNameWithParents(name, () => {
        assert(next < end, 'more directories than counted at mount');
        return next++;
      });
    }
    if (page.length < LIST_PAGE) break;
    after = page[page.length - 1];
  }
  // Directories made by mkdir, kept in the metadata (also the empty ones), with their modes.
  const dirModes = new Map<string, number>();
  for (after = undefined; ; ) {
    const page = await store.dirs('', { after, limit: LIST_PAGE });
    let missing = 0;
    for (const [dir] of page) missing += tree.kindOf(dir) === 'dir' ? 0 : tree.missingDirs(`${dir}/\0`);
    let next = missing > 0 ? await store.allocateInodes(missing) : 0;
    for (const [dir, mode] of page) {
      dirModes.set(dir, mode);
      // A file of the same name wins (another node may have written one there meanwhile).
      if (tree.kindOf(dir) !== undefined) continue;
      tree.addDirsWithParents(dir, () => next++);
    }
    if (page.length < LIST_PAGE) break;
    after = page[page.length - 1][0];
  }
  // Modes set by chmod are kept in the metadata; most files have none (0644).
  const modes = new Map<string, number>();
  for (after = undefined; ; ) {
    const page = await store.modes({ after, limit: LIST_PAGE });
    for (const [name, mode] of page) modes.set(name, mode);
    if (page.length < LIST_PAGE) break;
    after = page[page.length - 1][0];
  }
  return { tree, modes, dirModes };
}

/** The committed version of `rel`, or undefined where it has none. */
export async function currentVersion(store: Store, rel: string): Promise<VersionRecord | undefined> {
  try {
    return await store.resolve(rel);
  } catch (e) {
    if (isCascadeError(e, 'ENOENT')) return undefined;
    throw e;
  }
}

export async function hasVersion(store: Store, rel: string): Promise<boolean> {
  return (await currentVersion(store, rel)) !== undefined;
}

/** What this node holds of a name that another node's change must not take from the tree. */
export interface LocalUse {
  /** A write session is open on it. */
  writing(rel: string): boolean;
  /** libfuse hid it while open, or its hidden copy waits to be deleted (fs/hidden.ts). */
  hidden(rel: string): boolean;
}

export class Namespace {
  /**
   * Shared namespace with the change feed: names another node had not made when last looked up, until
   * a change to them is heard (or the feed resets); and the count of changes heard, so that a lookup
   * answered while one came in is not remembered.
   */
  private readonly absent = new LruMap<string, true>(ABSENT_NAMES_MAX);
  /**
   * Shared namespace with the change feed: directories whose every entry the tree holds, because this
   * node listed them from the store (syncDir) or made them empty (mkdir) with no change under them
   * heard meanwhile, and follows every change since. A name the tree lacks in one is absent without
   * asking the store. A change the tree cannot follow at once (a directory made elsewhere, a name
   * in a directory the tree lacks) drops the directories above it; a feed reset drops them all.
   */
  private readonly complete = new LruMap<string, true>(COMPLETE_DIRS_MAX);
  /** Directories being listed or made (completing): changes heard under them are noted. */
  private readonly watches = new Set<DirWatch>();
  private changeSeq = 0;
  /** The engine's watcher of other nodes' changes (watchRemote), and how this stops hearing the store's. */
  private remoteWatcher: RemoteWatcher | undefined;
  private unwatchStore: (() => void) | undefined;

  constructor(
    private readonly store: Store,
    private readonly tree: DirTree,
    /** Directories' modes (Attrs.dirModes): lookups and listings of other nodes' directories fill it. */
    private readonly dirModes: Map<string, number>,
    private readonly inodes: InodePool,
    private readonly sharedNamespace: boolean,
    private readonly local: LocalUse,
  ) {
    if (sharedNamespace && store.namesWatched) {
      this.unwatchStore = store.watchNames({
        change: (c) => this.changedElsewhere(c),
        reset: () => {
          this.changeSeq++;
          this.absent.clear();
          this.complete.clear();
          for (const w of this.watches) w.changed = true;
          this.remoteWatcher?.reset();
        },
      });
    }
  }

  watchRemote(w: RemoteWatcher | undefined): boolean {
    if (this.unwatchStore === undefined) return false;
    this.remoteWatcher = w;
    return true;
  }

  /** Stop hearing other nodes' changes (unmount). */
  close(): void {
    this.unwatchStore?.();
    this.remoteWatcher = undefined;
  }

  /**
   * Another node changed `c`: the tree follows (a name removed or renamed away leaves it, unless this
   * node is writing or hiding it), and the engine drops what it cached of the paths.
   */
  private changedElsewhere(c: NameChange): void {
    this.changeSeq++;
    // The name, and the directories above it (which may exist through it now).
    for (const n of c.kind === 'renamed' ? [c.name, c.to] : [c.name]) {
      for (let i = n.length; i > 0; i = n.lastIndexOf('/', i - 1)) this.absent.delete(n.slice(0, i));
      for (const w of this.watches) if (n.startsWith(w.prefix) || `${n}/` === w.prefix) w.changed = true;
    }
    const w = this.remoteWatcher;
    const leaves = (rel: string) => {
      if (this.tree.kindOf(rel) === 'file' && !this.local.writing(rel) && !this.local.hidden(rel)) this.tree.removeFile(rel);
    };
    switch (c.kind) {
      case 'file':
        if (c.version !== undefined) this.adoptNow(c.name);
        this.followed(c.name);
        w?.changed(kvPath(c.name), false);
        break;
      case 'removed':
        leaves(c.name);
        w?.changed(kvPath(c.name), false);
        break;
      case 'renamed':
        leaves(c.name);
        if (c.version !== undefined) this.adoptNow(c.to);
        this.followed(c.to);
        w?.changed(kvPath(c.name), false);
        w?.changed(kvPath(c.to), false);
        break;
      case 'dirMade':
        this.followed(c.name);
        w?.changed(kvPath(c.name), false);
        break;
      case 'dirRemoved':
        this.complete.delete(c.name);
        if (this.tree.kindOf(c.name) === 'dir' && this.tree.children(c.name).size === 0) this.tree.removeDir(c.name);
        this.dirModes.delete(c.name);
        w?.changed(kvPath(c.name), true);
        break;
    }
  }

  /**
   * For the engine caches: path parsed, where this node alone changes names, or where the store hears
   * every change other nodes make (watchRemote).
   */
  parseLocal(path: string): Parsed | undefined {
    if (this.sharedNamespace && this.remoteWatcher === undefined) return undefined;
    try {
      return parse(path);
    } catch {
      return undefined;
    }
  }

  /**
   * What `rel` is: the tree's answer, or with a shared namespace, on a miss, the store's (a name made
   * by another node joins the tree, with its directories).
   */
  async kindOf(rel: string, resolved?: { version?: VersionRecord }): Promise<'dir' | 'file' | undefined> {
    const known = this.tree.kindOf(rel);
    if (known !== undefined || !this.sharedNamespace || rel === '' || !validDirName(rel)) return known;
    // Absent a moment ago, and no other node has made it since (the change feed would have said);
    // or in a directory whose every entry the tree holds.
    if (this.absent.has(rel) || this.inCompleteDir(rel)) return undefined;
    const seq = this.changeSeq;
    const found = await this.store.lookup(rel);
    // The caller's request may use the version just read instead of asking the store again.
    if (resolved) resolved.version = found.version;
    const kind = found.version !== undefined ? 'file' : found.dir ? 'dir' : undefined;
    if (kind === undefined) {
      // Remembered only where no change came in meanwhile (its message may have come before the answer).
      if (this.unwatchStore !== undefined && this.changeSeq === seq) this.absent.set(rel, true);
      return undefined;
    }
    if (found.dirMode !== undefined) this.dirModes.set(rel, found.dirMode);
    await this.adopt(rel, kind);
    return this.tree.kindOf(rel);
  }

  /** A directory's entries in the tree. */
  entries(rel: string): DirEntry[] {
    return [...this.tree.children(rel)].map(([name, kind]) => ({ name, kind }));
  }

  /**
   * Another node made `rel` (a file or a directory): where the tree does not hold it now, the
   * directories above it no longer have every entry in the tree.
   */
  private followed(rel: string): void {
    if (this.tree.kindOf(rel) !== undefined || this.complete.size === 0) return;
    for (let i = rel.lastIndexOf('/'); i > 0; i = rel.lastIndexOf('/', i - 1)) this.complete.delete(rel.slice(0, i));
    this.complete.delete('');
  }

  /**
   * Run `body`, which lists or makes directory `rel`, noting changes under it from the start (before
   * any lookup `body` sends): when it succeeds with none heard, the tree holds every entry of `rel`
   * (see `complete`).
   */
  async completing<T>(rel: string, body: () => Promise<T>): Promise<T> {
    const w: DirWatch = { prefix: rel === '' ? '' : `${rel}/`, changed: false };
    this.watches.add(w);
    let result: T;
    try {
      result = await body();
    } finally {
      this.watches.delete(w);
    }
    if (!w.changed && this.unwatchStore !== undefined && this.tree.kindOf(rel) === 'dir') this.complete.set(rel, true);
    return result;
  }

  /** A directory removed or moved here: what was known complete of it and below it is dropped. */
  forgetDirs(rel: string): void {
    for (const d of [...this.complete.keys()]) if (d === rel || d.startsWith(`${rel}/`)) this.complete.delete(d);
  }

  /** Whether the tree holds every entry of the directory that would hold `rel` (see `complete`). */
  private inCompleteDir(rel: string): boolean {
    const slash = rel.lastIndexOf('/');
    const parent = slash < 0 ? '' : rel.slice(0, slash);
    return this.complete.has(parent) && (parent === '' || this.tree.kindOf(parent) === 'dir');
  }

  /**
   * A file another node just committed, into the tree where its directory is known here: lookups and
   * existence checks of it are then answered here, as of this node's own names (the store has its
   * version from the same message). Elsewhere its first lookup asks the store.
   */
  private adoptNow(rel: string): void {
    if (this.tree.kindOf(rel) !== undefined || this.tree.missingDirs(rel) > 0) return;
    this.tree.addNameWithParents(rel, () => {
      throw new Error('no directory to make');
    });
  }

  /** A file or directory another node made: into the tree, with its missing directories numbered. */
  private async adopt(rel: string, kind: 'dir' | 'file'): Promise<void> {
    const path = kind === 'dir' ? `${rel}/\0` : rel; // a directory: as the parent of a placeholder
    const inos: number[] = [];
    for (let i = this.tree.missingDirs(path); i > 0; i--) inos.push(await this.inodes.take());
    if (this.tree.kindOf(rel) !== undefined) return; // another request adopted it meanwhile
    if (kind === 'dir') this.tree.addDirsWithParents(rel, () => inos.shift()!);
    else this.tree.addNameWithParents(rel, () => inos.shift()!);
  }

  /**
   * Shared namespace: bring a directory's entries in line with the store (names made or removed by
   * other nodes). Directories made here with mkdir and files being written here stay.
   */
  syncDir(rel: string): Promise<void> {
    return this.completing(rel, () => this.listDir(rel));
  }

  private async listDir(rel: string): Promise<void> {
    const prefix = rel === '' ? '' : `${rel}/`;
    const files = new Set<string>();
    const dirs = new Set<string>();
    let after: string | undefined;
    for (;;) {
      const page = await this.store.list(prefix, { after, limit: LIST_PAGE });
      for (const name of page) {
        const rest = name.slice(prefix.length);
        const slash = rest.indexOf('/');
        if (slash < 0) files.add(rest);
        else dirs.add(rest.slice(0, slash));
      }
      if (page.length < LIST_PAGE) break;
      after = page[page.length - 1];
    }
    for (after = undefined; ; ) {
      const page = await this.store.dirs(prefix, { after, limit: LIST_PAGE });
      for (const [name, mode] of page) {
        const rest = name.slice(prefix.length);
        const slash = rest.indexOf('/');
        dirs.add(slash < 0 ? rest : rest.slice(0, slash));
        this.dirModes.set(name, mode);
      }
      if (page.length < LIST_PAGE) break;
      after = page[page.length - 1][0];
    }
    if (this.tree.kindOf(rel) !== 'dir') return;
    for (const [name, kind] of [...this.tree.children(rel)]) {
      const child = prefix + name;
      if (kind === 'file' && !files.has(name) && !this.local.writing(child)) this.tree.removeFile(child);
    }
    for (const name of files) if (this.tree.kindOf(prefix + name) === undefined) await this.adopt(prefix + name, 'file');
    for (const name of dirs) if (this.tree.kindOf(prefix + name) === undefined) await this.adopt(prefix + name, 'dir');
  }
}

function validDirName(rel: string): boolean {
  try {
    validateDirName(rel);
    return true;
  } catch {
    return false;
  }
}
