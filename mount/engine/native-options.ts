// The native engine's options, and the kernel settings it reads or sets when it mounts: request size, FUSE over io_uring, allow_other.
import * as fs from 'node:fs';
import type { NativeArenaBinding } from '../../native/types';
import type { RequestObserver } from '../daemon/metrics';
import type { FuseUringMode } from '../daemon/defaults';
import { FUSE_URING_PARAM_PATH, MAX_PAGES_LIMIT_PATH, readKernelParam } from './kernel-params';

export interface NativeEngineOptions {
  /** Keep the kernel page cache across opens (see FuseEngineOptions.kernelCache). Default: direct I/O. */
  kernelCache?: boolean;
  /**
   * Read-only opens of committed content held in the DRAM arena read through the kernel's page cache,
   * one content per inode at a time (FuseSession.readOpenFlags); writers and every other open keep
   * direct I/O (default true; off with kernelCache or passthrough, which choose for every open).
   */
  pageCache?: boolean;
  /** Worker threads reading /dev/fuse (default 4). */
  threads?: number;
  /** Pages per request (default: fuseRequestPages(), up to 1,024 = 4 MiB as the kernel allows). */
  maxPages?: number;
  /** The DRAM arena's fd, for reads served in C++ straight from it. */
  arenaFd?: number;
  /**
   * The DRAM arena itself (the store's; then arenaFd is unused): reads are served from it, and writes
   * of new files land in it natively, hashed in C++ (native writes), with maxBlockBytes the largest.
   */
  arena?: NativeArenaBinding;
  maxBlockBytes?: number;
  /**
   * FUSE passthrough for reads of committed versions: the kernel reads a shared-memory copy of the
   * block directly, so reads never reach the daemon. While a file is open this way, opening it for
   * writing fails with EBUSY (the kernel cannot mix passthrough and other opens of one inode): write
   * a temporary file and rename it over instead, as vLLM, LMCache and SGLang do.
   */
  passthrough?: boolean;
  /** Bound on the shared-memory copies passthrough reads from (default 1 GiB). */
  passthroughCacheBytes?: number;
  /**
   * FUSE over io_uring: requests come through one io_uring queue per CPU instead of read()/writev() on
   * /dev/fuse. auto (the default): where the kernel offers it (fuse.enable_uring=Y, Linux 6.14+); on:
   * as root, also turn that parameter on first; off: never.
   */
  uring?: FuseUringMode;
  /** Told of every request JS answers (metrics: mount/daemon/metrics.ts). */
  observe?: RequestObserver;
  log?: (msg: string) => void;
}

/** Pages per FUSE request asked for by default: 4 MiB, so a 2 MiB block is one READ, not two. */
export const REQUEST_PAGES_WANTED = 1024;
/** The kernel's cap when it has no max_pages_limit sysctl (before 6.13): 1 MiB. */
const KERNEL_MAX_PAGES_FIXED = 256;

/**
 * Pages per request to ask the kernel for: REQUEST_PAGES_WANTED, capped by the kernel's
 * fs.fuse.max_pages_limit (root may raise it: `sysctl fs.fuse.max_pages_limit=1024`). Asking for
 * more than the cap gains nothing and sizes every worker's buffer for requests that never come.
 */
export function fuseRequestPages(limitPath = MAX_PAGES_LIMIT_PATH): { pages: number; limitPages: number } {
  let limitPages = KERNEL_MAX_PAGES_FIXED; // no such sysctl: an older kernel, fixed at 256 pages
  const v = Number.parseInt(readKernelParam(limitPath) ?? '', 10);
  if (Number.isInteger(v) && v > 0) limitPages = v;
  return { pages: Math.min(REQUEST_PAGES_WANTED, limitPages), limitPages };
}

/**
 * Turns on the fuse module's enable_uring parameter (root only), so the kernel offers io_uring to
 * servers that ask; it changes nothing for servers that do not. Says what it did or why it could not.
 */
export function enableFuseUring(log: (msg: string) => void): void {
  const value = readKernelParam(FUSE_URING_PARAM_PATH);
  if (value === undefined) {
    log(`--fuse-uring on: this kernel has no ${FUSE_URING_PARAM_PATH} (FUSE over io_uring needs Linux 6.14+ built with CONFIG_FUSE_IO_URING)`);
    return;
  }
  if (value === 'Y') return;
  try {
    fs.writeFileSync(FUSE_URING_PARAM_PATH, 'Y');
    log(`--fuse-uring on: set ${FUSE_URING_PARAM_PATH} to Y`);
  } catch (e) {
    log(`--fuse-uring on: cannot set ${FUSE_URING_PARAM_PATH} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}; root can: echo Y > ${FUSE_URING_PARAM_PATH})`);
  }
}

/** Whether /etc/fuse.conf lets users who are not root mount with allow_other. */
export function fuseConfAllowsOther(): boolean {
  try {
    return /^\s*user_allow_other\s*$/m.test(fs.readFileSync('/etc/fuse.conf', 'utf8'));
  } catch {
    return false;
  }
}
