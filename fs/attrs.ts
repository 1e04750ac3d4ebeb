// Attributes: the modes of files and directories (kept in the metadata) and the FileAttr records built from them.
import type { VersionRecord } from '../store/meta';
import type { Store } from '../store/store';
import { S_IFDIR, S_IFREG } from './paths';
import type { DirInfo } from './tree';
import type { FileAttr } from './types';

export class Attrs {
  /** Files whose mode is not 0644: those kept in the metadata, and those of files not yet committed. */
  readonly modes: Map<string, number>;
  /** Directories' modes, as mkdir gave them (kept in the metadata); one missing here is 0755. */
  readonly dirModes: Map<string, number>;
  /** Modes set before the file's first commit (saved with it). */
  readonly unsavedModes = new Set<string>();
  /** The times of the mount's own directories and files. */
  readonly mountTimeMs = Date.now();

  constructor(
    private readonly store: Store,
    private readonly uid: number,
    private readonly gid: number,
    modes: Map<string, number>,
    dirModes: Map<string, number>,
  ) {
    this.modes = modes;
    this.dirModes = dirModes;
  }

  /** A directory under /kv (its DirInfo), or one of the mount's own (an inode number; mount time). */
  dirAttr(dir: DirInfo | number, perms = 0o755): FileAttr {
    const d = typeof dir === 'number' ? { ino: dir, mtimeMs: this.mountTimeMs, ctimeMs: this.mountTimeMs } : dir;
    return {
      mode: S_IFDIR | perms,
      sizeBytes: 4096,
      nlink: 2,
      uid: this.uid,
      gid: this.gid,
      mtimeMs: d.mtimeMs,
      ctimeMs: d.ctimeMs,
      atimeMs: d.mtimeMs,
      ino: d.ino,
    };
  }

  fileAttr(sizeBytes: number, timeMs: number, perms: number, ino: number): FileAttr {
    return { mode: S_IFREG | perms, sizeBytes, nlink: 1, uid: this.uid, gid: this.gid, mtimeMs: timeMs, ctimeMs: timeMs, atimeMs: timeMs, ino };
  }

  versionAttr(v: VersionRecord): FileAttr {
    return this.fileAttr(v.sizeBytes, v.timeMs, this.modes.get(v.name) ?? 0o644, v.ino);
  }

  /** After a commit of `name`: a mode set before its first commit goes to the metadata now. */
  async saveMode(name: string): Promise<void> {
    const mode = this.modes.get(name);
    if (!this.unsavedModes.has(name) || mode === undefined) return;
    await this.store.setMode(name, mode);
    this.unsavedModes.delete(name);
  }
}
