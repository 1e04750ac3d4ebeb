/**
 * Permission checks the filesystem makes itself, for requests that do not pass the kernel's
 * default_permissions check: the same-node client's opens, and link by hash. The rules are the
 * kernel's for a file: root passes, else the owner, group or other bits apply, in that order.
 */
import type { Caller, FileAttr } from './types';

export type { Caller } from './types';

const R_BITS = { owner: 0o400, group: 0o040, other: 0o004 } as const;

function allowed(attr: FileAttr, caller: Caller, bits: { owner: number; group: number; other: number }): boolean {
  if (caller.uid === 0) return true;
  if (caller.uid === attr.uid) return (attr.mode & bits.owner) !== 0;
  if (caller.gid === attr.gid) return (attr.mode & bits.group) !== 0;
  return (attr.mode & bits.other) !== 0;
}

export function mayRead(attr: FileAttr, caller: Caller): boolean {
  return allowed(attr, caller, R_BITS);
}
