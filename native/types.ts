/**
 * The exact shape of the compiled binding (native/build/Release/cascade_native.node). Keep in step with
 * native/src/binding/*.cc; native/index.ts checks at load time that every member below exists.
 *
 * Every function validates its arguments again in C++ and throws an Error with `code` set to one of
 * NativeCode; nothing else crosses the boundary (no C++ exceptions, no aborts on bad input).
 */

export type NativeCode = 'EINVAL' | 'ENOSPC' | 'ESTALE' | 'ERANGE' | 'EIO' | 'EBUSY' | 'EBADF' | 'ENOENT' | 'ENOMEM' | 'ECORRUPT';

export interface NativeFeatures {
  /** The GPU tier's driver loader (always built; gpuProbe() says whether a device is usable). */
  gpu: boolean;
  /** Built with CASCADE_WITH_LIBFABRIC (RDMA parts). */
  libfabric: boolean;
  /** Built with liburing (FUSE over io_uring in the native engine). */
  uring: boolean;
  /** Built with CASCADE_ASAN. */
  asan: boolean;
  /** OPENSSL_VERSION_TEXT of the libcrypto the hashing was compiled against. */
  openssl: string;
}

export interface NativeArenaStats {
  capacityBytes: number;
  pageBytes: number;
  /** Pages held by live blocks and by freed blocks whose copies are still running. */
  usedBytes: number;
  freeBytes: number;
  largestFreeBytes: number;
  freeExtents: number;
  liveBlocks: number;
  allocations: number;
  frees: number;
  /** Calls rejected because the handle's block was freed (or never existed). */
  staleRejects: number;
  noSpaceFailures: number;
  /** Frees whose pages waited for a copy in progress. */
  deferredFrees: number;
  /** Record loads whose piece table was damaged or wrong while the payload's SHA-256 held: loaded whole instead of piece by piece. */
  badPieceTables: number;
  /** With prefault: bytes of the arena whose page tables are filled so far (in the background; all at open where fallocate is not offered). */
  prefaultedBytes: number;
  copiesInFlight: number;
  namedBlocks: number;
  holdsActive: number;
  /** Bytes of live blocks, and the bytes their slots and pages take (the difference is padding). */
  blockBytes: number;
  slotBytes: number;
  /** Pages carved into slots for blocks up to half a page. */
  slabPages: number;
}

/** The arena's one mapping: what RDMA registration needs (address, length) and what clients map (fd). */
export interface NativeRegion {
  address: bigint;
  lengthBytes: number;
  fd: number;
}

export interface NativeArenaBinding {
  /** A handle for a new block of `sizeBytes` (its bytes are unspecified until written). ENOSPC when full. */
  allocate(sizeBytes: number): number;
  /** Release a block; the handle is stale from now on (ESTALE). */
  free(handle: number): void;
  /** Copy `source` into the block at `offsetBytes` (ERANGE past the block's end). On the calling thread. */
  write(handle: number, offsetBytes: number, source: Uint8Array): void;
  /** Copy from the block into `target`, clipped at the block's end; returns bytes copied. On the calling thread. */
  read(handle: number, offsetBytes: number, target: Uint8Array): number;
  /** As write(), on a worker thread. The buffer must not change until the promise settles. */
  writeAsync(handle: number, offsetBytes: number, source: Uint8Array): Promise<void>;
  /** As read(), on a worker thread. */
  readAsync(handle: number, offsetBytes: number, target: Uint8Array): Promise<number>;
  /** Size and extents (flat [arenaOffsetBytes, lengthBytes, ...], block order) of a live block. */
  describe(handle: number): { sizeBytes: number; extents: number[] };
  stats(): NativeArenaStats;
  /** stats().freeBytes, without building the whole stats object. */
  freeBytes(): number;
  region(): NativeRegion;
  /** Whether a block of sizeBytes can be allocated now (a free slot of its size class, or free pages). */
  fits(sizeBytes: number): boolean;
  /** Give a live block its content name (hex SHA-256): remote peers hold it by that name (Fabric). */
  name(handle: number, sha256: string): void;
  /** SHA-256 (hex) of a live block's bytes, hashed on a worker thread. */
  sha256Async(handle: number): Promise<string>;
  /**
   * Read the block's whole size from `fd` at `fileOffsetBytes` into it on a worker thread, hashing as
   * the bytes land; resolves to their SHA-256 (hex). EIO on a read error or a file that ends early.
   * aheadBytes (at most 64 MiB, else EINVAL): the kernel is also asked to read that much past the
   * block (the next records of a segment read in order); 0 for none.
   */
  fillFromFileAsync(handle: number, fd: number, fileOffsetBytes: number, aheadBytes: number): Promise<string>;
  /**
   * As fillFromFileAsync, for a whole disk record at recordOffsetBytes: its header page is checked
   * against the block (sha256, the slot's size) first, and the resolved hash is sha256, or the promise
   * rejects: ECORRUPT for a record that is not the block's or fails its checks, EIO for a read error. With a piece table in the header each piece is checked (CRC-32C) as it lands and
   * published to readers gated on the block (FuseSession.setLoadingReadSource) before the whole hash.
   */
  fillRecordAsync(handle: number, fd: number, recordOffsetBytes: number, sha256: string, aheadBytes: number): Promise<string>;
  /**
   * Strict verification (`--verify sha256`): readers of a block being filled wait for its whole
   * SHA-256, not for their pieces' CRC-32C. Off by default.
   */
  setStrictVerify(strict: boolean): void;
  /** Unmap (after copies in flight finish). Later calls throw EBADF. */
  close(): void;
}

export interface NativeFabricStats {
  /** Fetches whose reads all completed (before the caller's hash check), and their bytes. */
  fetches: number;
  fetchedBytes: number;
  /** Absent at the peer, timed out, refused, transport errors. */
  fetchFailures: number;
  fetchesAbsent: number;
  fetchesInFlight: number;
  /** Holds this node granted to peers, refused (absent or busy), expired unreleased, active now. */
  holdsGranted: number;
  holdsRefused: number;
  holdsExpired: number;
  holdsActive: number;
  /** Bytes of the blocks held for peers. */
  servedBytes: number;
  /** Malformed or unknown messages dropped. */
  badMessages: number;
  /** Messages a peer never took (gone): the fetches they belonged to timed out. */
  sendsDropped: number;
  /** Fetched pieces that failed their CRC-32C (each failed its fetch; nothing of it was served). */
  piecesCorrupt: number;
  /** Fetched blocks whose pieces passed their CRCs but whose whole SHA-256 differs from the name (not kept). */
  blocksCorrupt: number;
}

/**
 * Tests only: what a holder does wrong on purpose. 'piece-crc': the first piece's CRC-32C it sends is
 * wrong (a piece corrupted in transit); 'block-bytes': a byte of the held block is flipped in its memory
 * before its CRCs are taken (CRCs right, SHA-256 wrong).
 */
export type NativeFabricFault = '' | 'piece-crc' | 'block-bytes';

/** One libfabric endpoint with the DRAM arena registered for remote reads (native/src/core/fabric.h). */
export interface NativeFabricBinding {
  /** This endpoint's address, hex: what peers pass to fetch(). */
  address(): string;
  /** The provider in use, e.g. "tcp;ofi_rxm". */
  provider(): string;
  /**
   * Fill the local arena block `handle` (sizeBytes long) with the block named `sha256` from the peer's
   * arena (hold, fi_read, release). Resolves with the SHA-256 (hex) of the bytes that landed, hashed
   * piece by piece while they arrived, once it equals the name. Rejects ESTALE when the peer does not
   * hold it, EBUSY when too many fetches wait, ECORRUPT when a piece fails its CRC-32C or the block its
   * SHA-256, EIO on timeouts and transport errors. stream: the block is marked filling before this
   * returns, and each piece reaches readers gated on it (FuseSession.setLoadingReadSource) as it passes
   * its CRC-32C from the peer's piece table.
   */
  fetch(peer: string, sha256: string, sizeBytes: number, handle: number, timeoutMs: number, stream?: boolean): Promise<string>;
  stats(): NativeFabricStats;
  /** Stop the progress thread and deregister (pending fetches reject EBADF). Idempotent. */
  close(): void;
}

export interface NativeHasherBinding {
  /** Feed bytes on a worker thread. One at a time: a second call before this settles throws EBUSY. */
  update(data: Uint8Array): Promise<void>;
  updateSync(data: Uint8Array): void;
  /** Hex SHA-256 of everything fed so far; the hasher stays usable. EBUSY while an update runs. */
  digest(): string;
  reset(): void;
  readonly bytesHashed: number;
  readonly busy: boolean;
}

export interface NativeMappingBinding {
  /** A Buffer over [offsetBytes, offsetBytes + lengthBytes) of the mapping; read-only memory. */
  view(offsetBytes: number, lengthBytes: number): Buffer;
  /** Drop this object's hold; the memory is unmapped when the last view is collected. */
  close(): void;
  readonly lengthBytes: number;
}

export interface FuseSessionOptions {
  /** Absolute, symlink-free path of an existing empty directory. */
  mountpoint: string;
  /** Owner of the mount's root as the kernel records it (user_id=, group_id=). */
  uid: number;
  gid: number;
  /** Worker threads reading /dev/fuse (1..64; default 4). */
  threads?: number;
  /** Pages per request, 1..256 (256: 1 MiB reads and writes; the default). */
  maxPages?: number;
  allowOther?: boolean;
  /** Ask the kernel for FUSE passthrough (7.40+, CAP_SYS_ADMIN). */
  passthrough?: boolean;
  /** The DRAM arena's fd: mapped read-only so reads of held blocks are served from it. */
  arenaFd?: number;
  /**
   * The DRAM arena itself (then arenaFd is unused): reads of held blocks are served from it, and
   * WRITEs of handles attached to a stage land in it, hashed on C++ threads (native writes).
   */
  arena?: NativeArenaBinding;
  /** With arena: the largest file a stage grows to (bigger writes reach JS, which answers EFBIG). */
  maxBlockBytes?: number;
  /** With arena: threads hashing staged writes (1..8; default 2). */
  hashThreads?: number;
  /** Native metadata: LOOKUP, GETATTR and FORGET answered from this table (JS keeps it current). */
  meta?: NativeMetaTableBinding;
  /** With meta and arena: read-only opens of cached files whose block is in the arena answered in C++. */
  nativeOpens?: boolean;
  /** open_out flags of those opens (FOPEN_DIRECT_IO or FOPEN_KEEP_CACHE, as JS answers its own). */
  openFlags?: number;
  /**
   * Read-only opens of committed content read through the kernel's page cache where that is safe
   * (readOpenFlags): one content per inode at a time; everything else keeps openFlags.
   */
  pageCache?: boolean;
  /** Track the content of every read open (readOpenFlags) without the page cache (implied by pageCache). */
  trackReads?: boolean;
  /** The kernel's cache lifetimes the workers tell (as JS does). */
  entryValidMs?: number;
  attrValidMs?: number;
  /**
   * FUSE over io_uring where the kernel offers it (Linux 6.14+, fuse.enable_uring=Y) and the addon was
   * built with liburing: one queue per possible CPU instead of read()/writev() on /dev/fuse.
   */
  uring?: boolean;
  /** Requests each io_uring queue holds at once (1..256; default 16). */
  uringDepth?: number;
}

/**
 * The native engine's node table and attribute cache (native/src/engine/meta.h). Node ids name paths
 * for the kernel; attributes JS publishes let the workers answer LOOKUP, GETATTR and read-only opens.
 */
export interface NativeMetaTableBinding {
  /** The node for an absolute path, its lookup count raised by one. ENFILE at the node limit. */
  remember(path: string): number;
  forget(id: number, count: number): void;
  /** The node's path; ESTALE for a node the kernel forgot. */
  pathOf(id: number): string;
  isDetached(id: number): boolean;
  idOf(path: string): number | undefined;
  removed(path: string): void;
  renamed(from: string, to: string): void;
  size(): number;
  /** Read before resolving a path; a publish with an older generation is refused. */
  generation(): number;
  /** Cache path's 88-byte struct fuse_attr (and its arena block, 0 for none); false when refused. */
  publish(path: string, attr: Uint8Array, isFile: boolean, sizeBytes: number, blockHandle: number, generation: number): boolean;
  invalidate(path: string, subtree: boolean): void;
  invalidateAll(): void;
  /**
   * Keep every entry name of directory `dir` (one JS alone changes), each with its type (as listAdd):
   * a LOOKUP of a name not in it is then answered ENOENT in C++, and OPENDIR/READDIR from it. False (nothing kept) past the table's listedNamesMax names in all.
   * The caller keeps it exact with listAdd/listRemove before answering each change, and unlist.
   */
  list(dir: string, names: string[], types: Uint8Array): boolean;
  /**
   * type: 8 a file, 4 a directory (READDIR's d_type), 0 a name LOOKUP finds but READDIR skips. False
   * when the table was full and dropped dir's listing (no-op and true for a directory not listed).
   */
  listAdd(dir: string, name: string, type: number): boolean;
  listRemove(dir: string, name: string): void;
  /** Forget dir's listing (subtree: and those of every directory under it). */
  unlist(dir: string, subtree: boolean): void;
  stats(): NativeMetaStats;
}

export interface NativeMetaStats {
  nodes: number;
  attrs: number;
  lookupHits: number;
  lookupMisses: number;
  /** LOOKUPs answered ENOENT: the name is not in its directory's listing. */
  lookupAbsent: number;
  listedDirs: number;
  listedNames: number;
  attrHits: number;
  attrMisses: number;
  publishes: number;
  refusedPublishes: number;
  invalidations: number;
}

/** A staged file as the engine sees it (native/src/engine/stage.h). */
export interface NativeStageInfo {
  sizeBytes: number;
  mtimeMs: number;
  /** Written since the dirty flag was last taken. */
  dirty: boolean;
  /** Its WRITEs reach JS now (no arena pages were left, or it was frozen or sealed). */
  forwarding: boolean;
}

/** A sealed stage: an arena block of exactly sizeBytes, hashed; the caller now owns the handle. */
export interface NativeSealedBlock {
  handle: number;
  sizeBytes: number;
  sha256: string;
}

export interface FuseNegotiated {
  done: boolean;
  major: number;
  minor: number;
  maxWriteBytes: number;
  maxPages: number;
  maxReadaheadBytes: number;
  passthrough: boolean;
  /** FUSE_DIRECT_IO_ALLOW_MMAP (7.39+): shared mmap works on direct-I/O files. */
  directIoMmap: boolean;
  arena: boolean;
  /** Requests come through io_uring queues. */
  uring: boolean;
  /** io_uring was asked for and is not in use: why. */
  uringWhyNot?: string;
}

export interface FuseSessionStats {
  requests: number;
  forwarded: number;
  servedReads: number;
  servedReadBytes: number;
  /** Reads of a block still loading from disk, served once their pieces were checked; those JS answered instead. */
  gatedReads: number;
  gatedToJs: number;
  servedFlushes: number;
  /** WRITEs taken by stages in C++ (no JS), and their bytes. */
  servedWrites: number;
  servedWriteBytes: number;
  /** Files staged natively now. */
  stagedFiles: number;
  replyErrors: number;
  /** Requests answered in C++ from the native metadata table. */
  servedLookups: number;
  /** Of those, LOOKUPs of names not in a listed directory, answered ENOENT. */
  servedAbsentLookups: number;
  servedGetattrs: number;
  servedForgets: number;
  servedOpens: number;
  servedReleases: number;
  /** Read-only opens given the page cache, and tracked ones given direct I/O (a writer open, or read through JS). */
  pageCacheOpens: number;
  pageCacheDirect: number;
  /** Page-cache opens whose node the kernel might have held smaller (a writer's size): its attributes were made stale first. */
  pageCacheAttrNotices: number;
  /** Read opens of a content other than the one open on their node (each got a new node: ESTALE, retried). */
  readOpenConflicts: number;
  /** Directories opened, and READDIRs answered, from the table's listings. */
  servedOpendirs: number;
  servedReaddirs: number;
  /** Spins after an answer (a back-to-back stream of small requests) that found the next request, and that gave up and blocked. */
  spinHits: number;
  spinTimeouts: number;
  /** Read-only opens answered in C++ that are open now. */
  nativeOpens: number;
  /** Native opens the store's recency never heard of (its list was full). */
  touchedDropped: number;
  /** io_uring queues (0 without), requests through them, answers JS gave (handed to a queue thread), errors. */
  uringQueues: number;
  /** Brief waits of JS for its next request (takeNext), and requests handed to it that way. */
  jsWaits: number;
  jsHandedOver: number;
  uringRequests: number;
  uringCrossThreadReplies: number;
  uringErrors: number;
  /** Registrations the kernel refused (the connection then stays on /dev/fuse). */
  uringRegisterErrors: number;
  /** Requests waiting for JS's answer now: each holds a ring entry of its CPU's queue. */
  uringWaitingForJs: number;
}

/**
 * The native FUSE engine (native/src/engine): mounts with mount(2) on construction (root only), answers
 * INIT and arena-backed READs itself, and hands every other request to onRequest as the raw message
 * (fuse_in_header first; INIT, FORGET and BATCH_FORGET need no answer).
 */
export interface NativeFuseSessionBinding {
  /** Answer request `unique`: errno 0 sends the payload; otherwise a positive errno. False: the request is gone (interrupted). */
  reply(unique: number, errno: number, payload?: Uint8Array | Uint8Array[]): boolean;
  /** Serve READs of `fh` from these arena extents (flat [arenaOffsetBytes, lengthBytes, ...]) until cleared or released. */
  setReadSource(fh: number, sizeBytes: number, extents: number[]): void;
  clearReadSource(fh: number): void;
  /**
   * Serve READs of `fh` from arena block `handle` while it is filled (Arena.fillRecordAsync): each
   * waits for its bytes to be checked, and goes to JS if the fill fails or stalls. The block's pages
   * stay reserved until the source is cleared or replaced (setReadSource) or the handle released.
   */
  setLoadingReadSource(fh: number, handle: number): void;
  /** `fh` was opened read-only: its FLUSH is answered in C++ (a no-op) until it is released. */
  markReadOnly(fh: number): void;
  /**
   * The open_out flags of read-only handle fh of node nodeid reading committed content contentKey (the
   * arena handle of its block; 0: none) of sizeBytes: FOPEN_KEEP_CACHE or 0 (through the page cache,
   * where cacheable), else the session's openFlags (direct I/O). Counted on the node until the handle's RELEASE. Null
   * (nothing counted) when another content is open on the node: every open may fill the inode's one
   * page cache (mmap), so the name needs a new node.
   */
  readOpenFlags(nodeid: number, fh: number, contentKey: number, sizeBytes: number, cacheable: boolean): number | null;
  /** The attribute lifetime (ms) for a reply giving nodeid sizeBytes: 0 while a page-cache open of it reads more. */
  attrValidMs(nodeid: number, sizeBytes: number): number;
  /**
   * A writer of nodeid is about to be answered: true, and the node takes no page-cache open until
   * writerReleased(nodeid), if no page-cache open of it is open; false otherwise (the writer must not
   * share the inode: the kernel's one size per inode would cut those readers' reads).
   */
  tryWriterOpen(nodeid: number): boolean;
  writerReleased(nodeid: number): void;
  /** Whether any open of the node reads through the page cache now. */
  hasPageCacheOpens(nodeid: number): boolean;
  /** The node at path takes no page-cache open for holdMs (a writer was sent to look the path up again). */
  holdOffPageCache(path: string, holdMs: number): void;
  /**
   * A JS write handle of node nodeid whose writes go to a stage: its fstat is answered in C++ from attr
   * (88-byte struct fuse_attr, as JS answers it) with the stage's size and time, until its release or
   * clearStagedAttr (the node detached or its bytes moved to JS: JS answers again).
   */
  setStagedAttr(fh: number, nodeid: number, attr: Uint8Array): void;
  clearStagedAttr(fh: number): void;
  /** Copy a block's bytes from the arena into `fd` from offset 0, on a worker thread (a passthrough backing file). */
  writeArenaTo(fd: number, sizeBytes: number, extents: number[]): Promise<void>;
  /** Register a file for passthrough; returns its backing id. */
  openBacking(fd: number): number;
  closeBacking(backingId: number): void;
  negotiated(): FuseNegotiated;
  stats(): FuseSessionStats;
  /** Detach the mount, stop the workers, close /dev/fuse. Idempotent. */
  unmount(): void;
  /** Arena handles of the blocks opened natively since the last call (for the store's recency and hits). */
  drainTouched(): number[];
  /**
   * Requests that came while JS, with no request in progress, waited briefly for the next one (in
   * order; often none). It waits only while requests come back to back and none is queued for the
   * event loop; the rest arrive through the request callback as before.
   */
  takeNext(): Buffer[];
  /** Native writes (options.arena): a new empty stage's id. ENOSPC when too many files are staged. */
  stageCreate(): number;
  /** WRITEs of `fh` land in stage `id` from now on (until the handle is released or the stage dropped). */
  stageAttach(fh: number, id: number): void;
  /** The stage's size and times; takeDirty clears its dirty flag. */
  stageInfo(id: number, takeDirty?: boolean): NativeStageInfo;
  /** The stage takes no more writes (they reach JS); its size is final. */
  stageFreeze(id: number): NativeStageInfo;
  /** Copy the stage's bytes from offsetBytes into target; returns bytes copied. ESTALE once sealed. */
  stageRead(id: number, offsetBytes: number, target: Uint8Array): number;
  /** Hash (waits for the hashers) and hand over the content as an arena block; writes reach JS from now on. */
  stageSeal(id: number): Promise<NativeSealedBlock>;
  /** As stageSeal, now on this thread when the hashers are done (or the file is tiny); else undefined. */
  stageTrySeal(id: number): NativeSealedBlock | undefined;
  /** Forget the stage, freeing its block if it still owns one. */
  stageDrop(id: number): void;
}

export interface NativeGpuDevice {
  ordinal: number;
  name: string;
  /** "GPU-xxxxxxxx-...", as nvidia-smi and CUDA_VISIBLE_DEVICES spell it. */
  uuid: string;
  totalBytes: number;
}

/** What gpuProbe() found: the CUDA driver (libcuda.so.1, loaded at run time) and its devices. */
export interface NativeGpuProbe {
  available: boolean;
  /** Why not, when unavailable. */
  reason: string;
  devices: NativeGpuDevice[];
}

export interface NativeGpuPoolInfo extends NativeGpuDevice {
  capacityBytes: number;
  stagingBytes: number;
  bytesToDevice: number;
  bytesFromDevice: number;
}

/** One allocation of device memory; blocks are offsets into it (the slot allocator lives in TypeScript). */
export interface NativeGpuPoolBinding {
  /** H2D through pinned staging, on a worker thread. ERANGE outside the pool, EIO when the driver fails. */
  write(offsetBytes: number, source: Uint8Array): Promise<void>;
  /** D2H through pinned staging into `target` (its whole length). */
  read(offsetBytes: number, target: Uint8Array): Promise<void>;
  /** The pool's CUDA IPC memory handle (64 bytes). EIO when the device cannot export one. */
  ipcHandle(): Buffer;
  info(): NativeGpuPoolInfo;
  /** Frees the device memory once copies in flight settle. Idempotent. */
  close(): void;
}

export interface NativeBinding {
  abiVersion: number;
  features: NativeFeatures;
  Arena: new (fd: number, capacityBytes: number, pageBytes: number, prefault: boolean) => NativeArenaBinding;
  Hasher: new () => NativeHasherBinding;
  Mapping: new (path: string) => NativeMappingBinding;
  /**
   * Present when built with libfabric (features.libfabric). provider: FI_PROVIDER syntax; node: the
   * address to bind ('' = the provider's first interface).
   */
  Fabric?: new (
    arena: NativeArenaBinding,
    provider: string,
    node: string,
    fetchesPerPeerMax: number,
    holdsMax: number,
    holdTimeoutMs: number,
    fault?: NativeFabricFault,
  ) => NativeFabricBinding;
  MetaTable: new (nodesMax: number, attrsMax: number, listedNamesMax?: number) => NativeMetaTableBinding;
  /** getxattr(2) by path; throws an Error whose `code` is the errno's name (ENODATA, ENOENT, ENOTCONN...). */
  getxattr(path: string, name: string): Buffer;
  /** setxattr(2) by path (flags 0); errors as getxattr. */
  setxattr(path: string, name: string, value: Uint8Array): void;
  /** listxattr(2) by path; errors as getxattr. */
  listxattr(path: string): string[];
  /** Loads libcuda.so.1 on first call and lists its devices; never throws. */
  gpuProbe(): NativeGpuProbe;
  /** A pool of `capacityBytes` on `device`; EINVAL/ENOSPC/EIO with the driver's reason. */
  GpuPool: new (device: number, capacityBytes: number, stagingBytes: number) => NativeGpuPoolBinding;
  FuseSession: new (options: FuseSessionOptions, onRequest: (request: Buffer) => void, onInit: (ok: boolean, why: string) => void) => NativeFuseSessionBinding;
  sha256(data: Uint8Array): Promise<string>;
  sha256Sync(data: Uint8Array): string;
  /** memmove of `source` into `target` at `targetOffsetBytes`, on a worker thread. */
  copyAsync(target: Uint8Array, targetOffsetBytes: number, source: Uint8Array): Promise<void>;
  /** Reads until `target` is full or end of file; returns bytes read. */
  pread(fd: number, target: Uint8Array, offsetBytes: number): Promise<number>;
  pwrite(fd: number, source: Uint8Array, offsetBytes: number): Promise<void>;
  fdatasync(fd: number): Promise<void>;
  fadvise(fd: number, offsetBytes: number, lengthBytes: number, advice: 'normal' | 'sequential' | 'random' | 'willneed' | 'dontneed' | 'noreuse'): void;
  /** open(2) with O_CLOEXEC, and O_DIRECT when `direct` (buffers, offsets, lengths must then be 4 KiB aligned). */
  openFile(path: string, write: boolean, create: boolean, direct: boolean): number;
  /**
   * A Buffer over fresh anonymous memory (zero pages until written), unmapped on a background thread
   * once collected, so freeing a large one never stalls the JS thread.
   */
  allocBuffer(lengthBytes: number): Buffer;
  /**
   * The process at the other end of a connected Unix socket, as the kernel recorded it at connect
   * (SO_PEERCRED): ENOTSOCK/EBADF/EINVAL otherwise.
   */
  peerCredentials(fd: number): { pid: number; uid: number; gid: number };
  /**
   * umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW): a lazy unmount without a child process (root only:
   * EPERM otherwise; EINVAL when path is not a mount point).
   */
  detachMount(path: string): void;
  /** A 4 KiB-aligned Buffer (for O_DIRECT). */
  alignedBuffer(lengthBytes: number): Buffer;
  /** The kernel's page size in bytes (sysconf(_SC_PAGESIZE)); 0 if unknown. */
  pageBytes(): number;
  /** CRC-32C of each 2^pieceShift-byte piece of data (a disk record's piece table), on this thread / a worker. */
  crc32cPieces(data: Uint8Array, pieceShift: number): Uint32Array;
  crc32cPiecesAsync(data: Uint8Array, pieceShift: number): Promise<Uint32Array>;
  /** The piece size (log2) of a disk record's table for a block of sizeBytes; 0: none. */
  recordPieceShift(sizeBytes: number): number;
}

/** The ABI this TypeScript expects; a binding built from other sources is refused at load. */
export const NATIVE_ABI_VERSION = 11;
