/**
 * The directory tree under /kv, in memory. Store names are flat (`model/a/b/file`); directories are the
 * prefixes of names plus those made with mkdir. It is rebuilt from the store's names at mount, so a
 * directory made by mkdir and left empty does not outlive the daemon (names always do).
 * Paths here are store-relative: '' is /kv, 'llama' is /kv/llama, 'llama/a/f' is /kv/llama/a/f.
 */
import { CascadeError } from '../store/errors';

export type EntryKind = 'dir' | 'file';

export class DirTree {
  /** dir path -> (child name -> kind). Every directory on the way to an entry exists here. */
  private readonly dirs = new Map<string, Map<string, EntryKind>>([['', new Map()]]);

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

  /** mkdir: the parent must exist. */
  addDir(rel: string): void {
    const { parent, base } = split(rel);
    const p = this.dirs.get(parent);
    if (!p) throw new CascadeError(this.kindOf(parent) === 'file' ? 'ENOTDIR' : 'ENOENT', `no directory /kv/${parent}`);
    if (p.has(base)) throw new CascadeError('EEXIST', `/kv/${rel} exists`);
    p.set(base, 'dir');
    this.dirs.set(rel, new Map());
  }

  /** A file under an existing directory (create); EISDIR over a directory. */
  addFile(rel: string): void {
    const { parent, base } = split(rel);
    const p = this.dirs.get(parent);
    if (!p) throw new CascadeError(this.kindOf(parent) === 'file' ? 'ENOTDIR' : 'ENOENT', `no directory /kv/${parent}`);
    if (p.get(base) === 'dir') throw new CascadeError('EISDIR', `/kv/${rel} is a directory`);
    p.set(base, 'file');
  }

  /** A name loaded from the store: its directories are made as needed. */
  addNameWithParents(rel: string): void {
    const parts = rel.split('/');
    let cur = '';
    for (let i = 0; i < parts.length - 1; i++) {
      const next = cur === '' ? parts[i] : `${cur}/${parts[i]}`;
      if (!this.dirs.has(next)) {
        this.dirs.get(cur)!.set(parts[i], 'dir');
        this.dirs.set(next, new Map());
      }
      cur = next;
    }
    this.dirs.get(cur)!.set(parts[parts.length - 1], 'file');
  }

  removeFile(rel: string): void {
    const { parent, base } = split(rel);
    if (this.dirs.get(parent)?.get(base) === 'file') this.dirs.get(parent)!.delete(base);
  }

  removeDir(rel: string): void {
    const d = this.dirs.get(rel);
    if (!d) throw new CascadeError(this.kindOf(rel) === 'file' ? 'ENOTDIR' : 'ENOENT', `no directory /kv/${rel}`);
    if (d.size > 0) throw new CascadeError('ENOTEMPTY', `/kv/${rel} is not empty`);
    const { parent, base } = split(rel);
    this.dirs.get(parent)!.delete(base);
    this.dirs.delete(rel);
  }

  /** Move a directory subtree (the caller renames the names in the store). */
  moveDir(from: string, to: string): void {
    const { parent, base } = split(to);
    this.dirs.get(parent)!.set(base, 'dir');
    const { parent: fp, base: fb } = split(from);
    this.dirs.get(fp)!.delete(fb);
    for (const [path, entries] of [...this.dirs]) {
      if (path === from || path.startsWith(`${from}/`)) {
        this.dirs.delete(path);
        this.dirs.set(to + path.slice(from.length), entries);
      }
    }
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
