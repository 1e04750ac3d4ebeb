/**
 * The kernel settings the FUSE engines read (and `--fuse-uring on` writes): where they live, and one
 * way to read them. The benchmark records them and puts enable_uring back as it found it.
 */
import * as fs from 'node:fs';

/** fs.fuse.max_pages_limit (Linux 6.13+): the largest FUSE request, in pages. */
export const MAX_PAGES_LIMIT_PATH = '/proc/sys/fs/fuse/max_pages_limit';
/** The fuse module's enable_uring (Linux 6.14+): Y lets a server take requests through io_uring. */
export const FUSE_URING_PARAM_PATH = '/sys/module/fuse/parameters/enable_uring';

/** A kernel setting's value, trimmed; undefined where this kernel has no such file. */
export function readKernelParam(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
}
