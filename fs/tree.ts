/**
 * The directory tree under /kv, in memory. Store names are flat (`model/a/b/file`); directories are the
 * prefixes of names plus those made with mkdir. It is rebuilt at mount from the store's names and the
 * directories mkdir kept in the metadata, so a directory's inode number and times do not outlive the
 * daemon (they start at the mount).
 * Paths here are store-relative: '' is /kv, 'llama' is /kv/llama, 'llama/a/f' is /kv/llama/a/f.
 *
 * A directory's mtime and ctime move when an entry is added to it or removed from it (create, mkdir,
 * unlink, rmdir, rename into or out of it), as on a local filesystem; its inode number stays with it
 * across renames.
 */
import { CascadeError } from '../store/errors';

export type EntryKind = 'dir' | 'file';

export interface DirInfo {
  ino: number;
  mtimeMs: number;
  ctimeMs: number;
}

/**
 * Told at once (synchronously, after the change) of every entry added to or removed from a directory,
 * and of directories that left their paths: an engine keeps directory listings and attributes from it.
 * Paths are store-relative, as everywhere here.
 */
export interface TreeWatcher {
  added(dir: string, name: string, kind: EntryKind): void;
  removed(dir: string, name: string): void;
  /** `rel` and every directory under it are no longer at those paths (removed, or moved away). */
  gone(rel: string): void;
}

export class DirTree {
  private watcher: TreeWatcher | undefined;
  /** dir path -> (child name -> kind). Every directory on the way to an entry exists here. */
  private readonly dirs = new Map<string, Map<string, EntryKind>>([['', new Map()]]);
  /** dir path -> its inode number and times; the same keys as `dirs`. */
  private readonly infos = new Map<string, DirInfo>();

  /**
   * @param rootIno the inode number of /kv itself.
   * @param nowMs the clock for directory times.
   */
  constructor(
    rootIno: number,
    private readonly nowMs: () => number = Date.now,
  ) {
    const t = nowMs();
    this.infos.set('', { ino: rootIno, mtimeMs: t, ctimeMs: t });
  }

  /** One watcher at a time (the mounted engine). */
  watch(w: TreeWatcher | undefined): void {
    this.watcher = w;
  }

  info(rel: string): DirInfo {
    const i = this.infos.get(rel);
    if (!i) throw new CascadeError(this.kindOf(rel) === 'file' ? 'ENOTDIR' : 'ENOENT', `no directory /kv/${rel}`);
    return i;
  }

  /** utimensat on a directory. */
  setTimes(rel: string, mtimeMs: number): void {
    const i = this.info(rel);
    i.mtimeMs = mtimeMs;
    i.ctimeMs = this.nowMs();
  }

  /** An entry of `rel` was added or removed. */
  private changed(rel: string): void {
    const i = this.infos.get(rel);
    if (i === undefined) return;
    const t = this.nowMs();
    i.mtimeMs = t;
    i.ctimeMs = t;
  }

  private newDir(rel: string, ino: number): void {
    const t = this.nowMs();
    this.dirs.set(rel, new Map());
    this.infos.set(rel, { ino, mtimeMs: t, ctimeMs: t });
  }

  kindOf(rel: string): EntryKind | undefined {
    if (this.dirs.has(rel)) return 'dir';
    const { parent, base } = split(rel);
    return this.dirs.get(parent)?.get(base);
  }

  children(rel: string): Map<string, EntryKind> {
    const d = this.dirs.get(rel);
    if (!d) throw new CascadeError(this.kindOf(rel) === 'file' ? 'ENOTDIR' : 'ENOENT', `no directory /kv/${rel}`);
    return d;
  }

  /** mkdir: the parent must exist; `ino` is a fresh inode number. */
  addDir(rel: string, ino: number): void {
    const { parent, base } = split(rel);
    const p = this.dirs.get(parent);
    if (!p) throw new CascadeError(this.kindOf(parent) === 'file' ? 'ENOTDIR' : 'ENOENT', `no directory /kv/${parent}`);
    if (p.has(base)) throw new CascadeError('EEXIST', `/kv/${rel} exists`);
    p.set(base, 'dir');
    this.newDir(rel, ino);
    this.changed(parent);
    this.watcher?.added(parent, base, 'dir');
  }

  /** A file under an existing directory (create); EISDIR over a directory. */
  addFile(rel: string): void {
    const { parent, base } = split(rel);
    const p = this.dirs.get(parent);
    if (!p) throw new CascadeError(this.kindOf(parent) === 'file' ? 'ENOTDIR' : 'ENOENT', `no directory /kv/${parent}`);
    if (p.get(base) === 'dir') throw new CascadeError('EISDIR', `/kv/${rel} is a directory`);
    if (p.has(base)) return;
    p.set(base, 'file');
    this.changed(parent);
    this.watcher?.added(parent, base, 'file');
  }

  /** How many directories addNameWithParents(rel) would make. */
  missingDirs(rel: string): number {
    let missing = 0;
    for (let i = rel.indexOf('/'); i >= 0; i = rel.indexOf('/', i + 1)) if (!this.dirs.has(rel.slice(0, i))) missing++;
    return missing;
  }

  /** A name loaded from the store: its directories are made as needed, numbered by takeIno. */
  addNameWithParents(rel: string, takeIno: () => number): void {
    const parts = rel.split('/');
    let cur = '';
    for (let i = 0; i < parts.length - 1; i++) {
      const next = cur === '' ? parts[i] : `${cur}/${parts[i]}`;
      if (!this.dirs.has(next)) {
        this.dirs.get(cur)!.set(parts[i], 'dir');
        this.newDir(next, takeIno());
        this.watcher?.added(cur, parts[i], 'dir');
      }
      cur = next;
    }
    const d = this.dirs.get(cur)!;
    const base = parts[parts.length - 1];
    const had = d.has(base);
    d.set(base, 'file');
    if (!had) this.watcher?.added(cur, base, 'file');
  }

  removeFile(rel: string): void {
    const { parent, base } = split(rel);
    if (this.dirs.get(parent)?.get(base) !== 'file') return;
    this.dirs.get(parent)!.delete(base);
    this.changed(parent);
    this.watcher?.removed(parent, base);
  }

  /** A directory and its missing parents (one made by another node), numbered by takeIno. */
  addDirsWithParents(rel: string, takeIno: () => number): void {
    const parts = rel.split('/');
    let cur = '';
    for (const part of parts) {
      const next = cur === '' ? part : `${cur}/${part}`;
      if (!this.dirs.has(next)) {
        const p = this.dirs.get(cur)!;
        if (p.get(part) === 'file') throw new CascadeError('ENOTDIR', `/kv/${cur}/${part} is a file`);
        p.set(part, 'dir');
        this.newDir(next, takeIno());
        this.changed(cur);
        this.watcher?.added(cur, part, 'dir');
      }
      cur = next;
    }
  }

  /** A file renamed (over dst if it exists): both directories change. */
  moveFile(src: string, dst: string): void {
    this.removeFile(src);
    const { parent, base } = split(dst);
    const p = this.dirs.get(parent);
    if (!p) throw new CascadeError('ENOENT', `no directory /kv/${parent}`);
    if (p.get(base) === 'dir') throw new CascadeError('EISDIR', `/kv/${dst} is a directory`);
    p.set(base, 'file');
    this.changed(parent);
    this.watcher?.added(parent, base, 'file');
  }

  removeDir(rel: string): void {
    const d = this.dirs.get(rel);
    if (!d) throw new CascadeError(this.kindOf(rel) === 'file' ? 'ENOTDIR' : 'ENOENT', `no directory /kv/${rel}`);
    if (d.size > 0) throw new CascadeError('ENOTEMPTY', `/kv/${rel} is not empty`);
    const { parent, base } = split(rel);
    this.dirs.get(parent)!.delete(base);
    this.dirs.delete(rel);
    this.infos.delete(rel);
    this.changed(parent);
    this.watcher?.removed(parent, base);
    this.watcher?.gone(rel);
  }

  /** Move a directory subtree (the caller renames the names in the store). */
  moveDir(from: string, to: string): void {
    const { parent, base } = split(to);
    this.dirs.get(parent)!.set(base, 'dir');
    const { parent: fp, base: fb } = split(from);
    this.dirs.get(fp)!.delete(fb);
    for (const [path, entries] of [...this.dirs]) {
      if (path === from || path.startsWith(`${from}/`)) {
        const info = this.infos.get(path)!;
        this.dirs.delete(path);
        this.infos.delete(path);
        this.dirs.set(to + path.slice(from.length), entries);
        this.infos.set(to + path.slice(from.length), info);
      }
    }
    this.changed(parent);
    this.changed(fp);
    // A moved directory's ctime moves too (its '..' entry changed).
    this.infos.get(to)!.ctimeMs = this.nowMs();
    this.watcher?.removed(fp, fb);
    this.watcher?.added(parent, base, 'dir');
    this.watcher?.gone(from);
    this.watcher?.gone(to);
  }

  /** All file paths below a directory (for a directory rename). */
  filesUnder(rel: string): string[] {
    const out: string[] = [];
    const walk = (dir: string) => {
      for (const [name, kind] of this.dirs.get(dir) ?? []) {
        const p = `${dir}/${name}`;
        if (kind === 'file') out.push(p);
        else walk(p);
      }
    };
    walk(rel);
    return out;
  }

  dirCount(): number {
    return this.dirs.size;
  }
}

export function split(rel: string): { parent: string; base: string } {
  const i = rel.lastIndexOf('/');
  return i < 0 ? { parent: '', base: rel } : { parent: rel.slice(0, i), base: rel.slice(i + 1) };
}
