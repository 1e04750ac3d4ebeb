/**
 * The only errno table: symbolic error codes from fs/ and store/ become the negative errno numbers
 * FUSE replies with. Numbers come from os.constants.errno (the host's values), never from
 * fuse-native's own constants (its Fuse.ENOTSUP is undefined, and replying undefined kills the daemon).
 */
import { constants } from 'node:os';
import { isCascadeError, type ErrorCode } from '../../store/errors';

const E = constants.errno;

/** Positive errno per code. A Record over the union, so a new ErrorCode fails to compile until mapped. */
const ERRNO_BY_CODE: Record<ErrorCode, number> = {
  ENOENT: E.ENOENT,
  EEXIST: E.EEXIST,
  EINVAL: E.EINVAL,
  ENAMETOOLONG: E.ENAMETOOLONG,
  ENOSPC: E.ENOSPC,
  EDQUOT: E.EDQUOT,
  EPERM: E.EPERM,
  EBUSY: E.EBUSY,
  EIO: E.EIO,
  // Bytes that failed their checksum are never served; to a reader that is an I/O error.
  ECORRUPT: E.EIO,
  EISDIR: E.EISDIR,
  ENOTDIR: E.ENOTDIR,
  ENOTEMPTY: E.ENOTEMPTY,
  EBADF: E.EBADF,
  ENODATA: E.ENODATA,
  EOPNOTSUPP: E.EOPNOTSUPP,
  ERANGE: E.ERANGE,
  EFBIG: E.EFBIG,
  EACCES: E.EACCES,
  EROFS: E.EROFS,
  ESTALE: E.ESTALE,
  ENFILE: E.ENFILE,
  EMFILE: E.EMFILE,
  ENOSYS: E.ENOSYS,
};

/** Every code the table knows (tests iterate it). */
export const ERROR_CODES = Object.keys(ERRNO_BY_CODE) as ErrorCode[];

/** Codes worth a log line when they reach the kernel: they mean lost or bad data, not a normal miss. */
const LOGGED_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['EIO', 'ECORRUPT']);

/** The negative errno for a symbolic code (what the engine replies for its own refusals). */
export function errnoOf(code: ErrorCode): number {
  const errno = ERRNO_BY_CODE[code];
  // A code added at runtime without a table entry (cannot compile, but be safe): EIO, never undefined.
  return Number.isInteger(errno) && errno > 0 ? -errno : -E.EIO;
}

/**
 * Translates anything thrown by the filesystem layer into a negative errno. CascadeErrors map by code;
 * anything else is a bug somewhere below: -EIO, with its stack logged so it can be found.
 */
export function toErrno(e: unknown, log: (msg: string) => void): number {
  if (isCascadeError(e)) {
    const errno = ERRNO_BY_CODE[e.code];
    if (errno === undefined) {
      log(`unmapped error code ${String(e.code)} answered as EIO: ${e.stack ?? e.message}`);
      return -E.EIO;
    }
    if (LOGGED_CODES.has(e.code)) log(e.message);
    return -errno;
  }
  log(`unexpected error answered as EIO: ${e instanceof Error ? (e.stack ?? e.message) : describe(e)}`);
  return -E.EIO;
}

function describe(value: unknown): string {
  try {
    return `${typeof value} ${JSON.stringify(value)}`;
  } catch {
    return typeof value;
  }
}
