// Node ids and their paths for the native engine: one table in C++, shared with its workers, which also holds the attributes and listings they answer from.
import { requireNative } from '../../native';
import type { NativeMetaTableBinding } from '../../native/types';
import { CascadeError } from '../../store/errors';

/** Nodes the kernel may hold at once (it forgets them under memory pressure). */
export const NODES_MAX = 4 * 1024 * 1024;
/** Attribute cache entries the native table keeps at most (then it starts over: misses go to JS). */
export const ATTRS_MAX = 256 * 1024;
/**
 * Entry names the native table keeps in directory listings, in all (about 100 bytes each in C++): past
 * it, a directory is not listed (or stops being) and its negative lookups go to JS.
 */
export const LISTED_NAMES_MAX = 1024 * 1024;

/**
 * Node id <-> path, and the attribute cache the C++ workers answer LOOKUP, GETATTR and read-only opens
 * from (native/src/engine/meta.h): one table in C++, so a lookup answered there and a FORGET or rename
 * handled here count on the same nodes. The root is node 1 and is never forgotten.
 */
export class NodeTable {
  readonly native: NativeMetaTableBinding;

  constructor(maxNodes = NODES_MAX, maxAttrs = ATTRS_MAX, maxListedNames = LISTED_NAMES_MAX) {
    this.native = new (requireNative('the native FUSE engine').MetaTable)(maxNodes, maxAttrs, maxListedNames);
  }

  get size(): number {
    return this.native.size();
  }

  pathOf(id: number): string {
    return typed(() => this.native.pathOf(id));
  }

  idOf(p: string): number | undefined {
    return this.native.idOf(p);
  }

  /** Whether the node's name was unlinked or replaced (it lives on through open files only). */
  isDetached(id: number): boolean {
    return this.native.isDetached(id);
  }

  /** A lookup that succeeded: the node for `p`, its lookup count raised by one. */
  remember(p: string): number {
    return typed(() => this.native.remember(p));
  }

  forget(id: number, count: number): void {
    this.native.forget(id, count);
  }

  /** After unlink/rmdir: the name no longer leads to the node (which keeps its path until forgotten). */
  removed(p: string): void {
    this.native.removed(p);
  }

  /** After a rename: `from` and everything under it now live under `to`; a node that was at `to` is detached. */
  renamed(from: string, to: string): void {
    this.native.renamed(from, to);
  }
}

/** A native error (code ESTALE, ENFILE, ...) as the typed error fs/ and the errno table know. */
function typed<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === 'ESTALE' || code === 'ENFILE' || code === 'EINVAL') throw new CascadeError(code, (e as Error).message);
    throw e;
  }
}

/** The path of `name` in directory `parent`; a name that is empty, a dot entry or holds a slash is EINVAL. */
export function childPath(parent: string, name: string): string {
  if (name === '' || name === '.' || name === '..' || name.includes('/')) throw new CascadeError('EINVAL', `bad name ${JSON.stringify(name)}`);
  return parent === '/' ? `/${name}` : `${parent}/${name}`;
}
