/**
 * Limits of the store. Every queue, buffer and size has one; units are named last.
 * Defaults here are used when a StoreConfig leaves a field out.
 */
import { assert } from './errors';

export const KiB = 1024;
export const MiB = 1024 * KiB;
export const GiB = 1024 * MiB;

/** POSIX NAME_MAX: one path component. */
export const NAME_COMPONENT_MAX_BYTES = 255;
/** POSIX PATH_MAX for a whole name below the mount. */
export const NAME_MAX_BYTES = 4096;
/** A name is `<model>/<path...>`: nesting is allowed, but bounded. */
export const NAME_MAX_DEPTH = 64;

/**
 * Inode numbers below this are the mount's own fixed ones (root, /kv, /.cascade and its files); files
 * and directories get numbers from the metadata engine's counter, which starts here.
 */
export const INODE_FIRST_ALLOCATED = 1024;
/** Numbers one allocateInodes() call may reserve. */
export const INODE_RESERVE_MAX = 1 << 20;
/**
 * Allocated numbers stay below this; numbers from here up are derived (hashed) ones for read-only
 * views such as /.cascade/versions, so the two kinds never collide. 2^52 keeps both exact in a double.
 */
export const INODE_ALLOCATED_LIMIT = 2 ** 52;

/** Largest block a put accepts (Node buffers reach 4 GiB; KV blocks are MiBs). */
export const BLOCK_MAX_BYTES_DEFAULT = 2 * GiB;

/** Versions kept per name (older ones are trimmed and their content reclaimed if unreferenced). */
export const KEEP_VERSIONS_DEFAULT = 8;
export const KEEP_VERSIONS_MAX = 1024;

/** DRAM arena allocation unit. 64 KiB keeps extent lists short for MiB-sized KV blocks. */
export const DRAM_PAGE_BYTES_DEFAULT = 64 * KiB;
/** Pin quota, as a fraction of DRAM capacity, when not configured. */
export const PIN_QUOTA_FRACTION_DEFAULT = 0.5;

/** Disk segments are sealed past this size; a larger block gets a segment of its own. */
export const SEGMENT_TARGET_BYTES_DEFAULT = 256 * MiB;
/** Records start on this boundary so that O_DIRECT reads of payloads stay aligned. */
export const RECORD_ALIGN_BYTES = 4 * KiB;
/** Record header: magic, format, kind, length, sha256, header checksum (padded to RECORD_ALIGN_BYTES). */
export const RECORD_HEADER_BYTES = 64;
/** A sealed segment is compacted when at least this fraction of its bytes is dead. */
export const COMPACT_DEAD_FRACTION_DEFAULT = 0.5;

/** Mover queue: pending promotion jobs and the bytes they hold. Promotions past this are skipped. */
export const MOVER_QUEUE_MAX_JOBS = 64;
export const MOVER_QUEUE_MAX_BYTES = 512 * MiB;
/** Disk reads that cause a promotion to DRAM. 1 is the default chosen by the store suite's promotion trials (npm run bench:store; bench/README.md). */
export const PROMOTE_AFTER_READS_DEFAULT = 1;
/** Whole-block reads of a block (from any tier) before it is copied into the GPU tier. */
export const GPU_PROMOTE_AFTER_READS_DEFAULT = 2;
/** Entries tracked by the promotion counter (bounded LRU of read counts). */
export const PROMOTION_TRACKED_MAX = 65536;
/** How many names a list call returns at most in one page. */
export const LIST_PAGE_MAX = 100_000;

assert(RECORD_HEADER_BYTES <= RECORD_ALIGN_BYTES, 'header fits in one aligned unit');
assert(DRAM_PAGE_BYTES_DEFAULT % 4096 === 0, 'DRAM pages are page aligned');
assert(BLOCK_MAX_BYTES_DEFAULT <= 4 * GiB, 'a block fits in one Node buffer');
assert(PIN_QUOTA_FRACTION_DEFAULT > 0 && PIN_QUOTA_FRACTION_DEFAULT <= 1, 'pin quota fraction in (0,1]');
