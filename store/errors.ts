/**
 * Typed errors for the store and the filesystem layer. Codes are symbolic (errno-like names) and are
 * translated to errno numbers in exactly one place, at the FUSE boundary (mount/). Nothing under
 * store/ or fs/ knows an errno number.
 */
export type ErrorCode =
  | 'ENOENT' // no such name, version or content
  | 'EEXIST' // the name exists and the caller asked for exclusivity
  | 'EINVAL' // malformed input (name, size, argument)
  | 'ENAMETOOLONG' // a name component over 255 bytes or a name over the path limit
  | 'ENOSPC' // no tier has room for the block
  | 'EDQUOT' // pinning would exceed the pin quota
  | 'EPERM' // the operation is not allowed on this object (e.g. delete of a pinned block)
  | 'EBUSY' // the store is closing or the queue is full
  | 'EIO' // an I/O error (including a failed fsync)
  | 'ECORRUPT' // stored bytes failed their checksum; never served
  // Filesystem-layer codes (fs/):
  | 'EISDIR'
  | 'ENOTDIR'
  | 'ENOTEMPTY'
  | 'EBADF'
  | 'ENODATA' // no such extended attribute
  | 'EOPNOTSUPP' // unknown extended attribute, unsupported operation
  | 'ERANGE' // the caller's buffer is too small
  | 'EFBIG' // a file over the block size limit
  | 'EACCES'
  | 'EROFS' // the virtual .cascade tree is read-only
  // Mount-engine codes (mount/):
  | 'ESTALE' // a node id the kernel should not send any more
  | 'ENFILE' // the engine's table of nodes is full
  | 'EMFILE' // too many open directories
  | 'ENOSYS'; // a FUSE operation the engine does not implement

/**
 * Codes that are answers, not faults: a lookup of a name that is not there is one per file a program
 * creates. Their stack traces cost ~20 us each (a tenth of a create's JS time) and nobody reads them.
 */
const ANSWER_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['ENOENT', 'EEXIST', 'ENODATA']);

export class CascadeError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    const limit = Error.stackTraceLimit;
    if (ANSWER_CODES.has(code)) Error.stackTraceLimit = 0;
    try {
      super(`${code}: ${message}`, options);
    } finally {
      Error.stackTraceLimit = limit;
    }
    this.name = 'CascadeError';
    this.code = code;
  }
}

export function isCascadeError(e: unknown, code?: ErrorCode): e is CascadeError {
  return e instanceof CascadeError && (code === undefined || e.code === code);
}

/**
 * Broken invariants are bugs, not input: crash loudly instead of serving wrong bytes.
 * (TigerBeetle style: assert what must hold.)
 */
export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(`invariant violated: ${message}`);
}
