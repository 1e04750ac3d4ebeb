/**
 * The mount table and mountpoint paths, shared by the FUSE engine and the file-based client (which must
 * not load fuse-native just to find a mount).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

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
