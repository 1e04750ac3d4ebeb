/**
 * mkdir -p that cannot hang. Node 20's `mkdir(p, { recursive: true })` spins forever at 100% CPU when
 * the kernel answers ENOENT for a child of a directory that exists (e.g. `/proc/x`, `/sys/x`): a
 * `cascade mount /proc/x` never returned. This walks the path one component at a time instead and
 * throws a CascadeError naming the directory it could not make.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CascadeError, type ErrorCode } from './errors';

/** Path components at most (a bound on the walk; PATH_MAX allows no more than 2048 anyway). */
const COMPONENTS_MAX = 4096;

export function mkdirAll(dir: string, mode = 0o777): void {
  const abs = path.resolve(dir);
  const missing: string[] = [];
  for (let p = abs; ; p = path.dirname(p)) {
    if (fs.existsSync(p)) break;
    missing.push(p);
    if (p === path.dirname(p) || missing.length > COMPONENTS_MAX) break;
  }
  for (const p of missing.reverse()) {
    try {
      fs.mkdirSync(p, { mode });
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') continue; // made meanwhile by someone else
      const known: ErrorCode[] = ['ENOENT', 'EACCES', 'ENOSPC', 'EROFS', 'ENOTDIR', 'ENAMETOOLONG', 'EPERM'];
      throw new CascadeError(known.includes(code as ErrorCode) ? (code as ErrorCode) : 'EIO', `cannot create directory ${p}: ${(e as Error).message}`);
    }
  }
  if (!fs.statSync(abs).isDirectory()) throw new CascadeError('ENOTDIR', `${abs} is not a directory`);
}
