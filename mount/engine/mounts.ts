/**
 * The mount table and mountpoint paths, shared by the FUSE engine and the file-based client (which must
 * not load fuse-native just to find a mount).
 */
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CascadeError } from '../../store/errors';

export interface MountTableEntry {
  source: string;
  target: string;
  fsType: string;
}

/**
 * Absolute and symlink-free: the form /proc/mounts uses. followLast=false resolves the parent only,
 * never touching the path itself (stat of a mount whose daemon hangs would hang too); a missing last
 * component is kept as given.
 */
export function resolveMountpoint(mountpoint: string, followLast = true): string {
  const abs = path.resolve(mountpoint);
  if (followLast) {
    try {
      return fs.realpathSync(abs);
    } catch {
      // Missing, or a stale mount (ENOTCONN): resolve the parent only.
    }
  }
  try {
    return path.join(fs.realpathSync(path.dirname(abs)), path.basename(abs));
  } catch {
    return abs;
  }
}

/** /proc/self/mounts, parsed; empty where there is no /proc. */
export function readMountTable(): MountTableEntry[] {
  let table: string;
  try {
    table = fs.readFileSync('/proc/self/mounts', 'utf8');
  } catch {
    return [];
  }
  const out: MountTableEntry[] = [];
  for (const line of table.split('\n')) {
    const [source, target, fsType] = line.split(' ');
    if (fsType !== undefined) out.push({ source: unescapeMountField(source), target: unescapeMountField(target), fsType });
  }
  return out;
}

/** The mount at exactly this path (the topmost if stacked). */
export function mountEntry(mountpoint: string): { source: string; fsType: string } | undefined {
  let found: { source: string; fsType: string } | undefined;
  for (const e of readMountTable()) if (e.target === mountpoint) found = { source: e.source, fsType: e.fsType };
  return found;
}

/** /proc/mounts writes space, tab, newline and backslash as octal escapes. */
function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

// ---- fusermount and mountpoint checks (both engines) ----

/** `fusermount -uz`: a lazy unmount, which works even when the daemon is dead or files are open. */
export function fusermountUnmount(mountpoint: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile('fusermount', ['-uz', mountpoint], (err, _stdout, stderr) => {
      if (!err) return resolve();
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        return reject(new CascadeError('ENOENT', 'fusermount not found: install the Debian package "fuse" (scripts/setup.sh)'));
      }
      reject(new CascadeError('EIO', `fusermount -uz ${mountpoint} failed: ${String(stderr).trim() || err.message}`));
    });
  });
}

/**
 * Clears a FUSE mount whose daemon died (every access fails with ENOTCONN). Returns whether it did.
 * Asynchronous stat: safe even if this very process serves the mount.
 */
export async function clearStaleMount(mountpoint: string, log: (msg: string) => void): Promise<boolean> {
  try {
    await fs.promises.stat(mountpoint);
    return false;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOTCONN') return false;
  }
  log(`clearing a stale mount at ${mountpoint} (its daemon is gone)`);
  await fusermountUnmount(mountpoint);
  return true;
}

export async function checkMountpoint(mnt: string): Promise<void> {
  let entries: string[];
  try {
    entries = await fs.promises.readdir(mnt);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new CascadeError('ENOENT', `mountpoint ${mnt} does not exist`);
    if (code === 'ENOTDIR') throw new CascadeError('ENOTDIR', `mountpoint ${mnt} is not a directory`);
    throw e;
  }
  // libfuse 2 refuses a non-empty mountpoint with a bare "fuse failed"; say why instead.
  if (entries.length > 0) throw new CascadeError('ENOTEMPTY', `mountpoint ${mnt} is not empty`);
}
