/**
 * The composition root of `cascade mount`: store -> filesystem -> FUSE engine, then serve in the
 * foreground until SIGINT/SIGTERM/SIGHUP or an external unmount (`cascade unmount`), and always shut
 * down in order: unmount, close the filesystem, close the store (a clean close persists everything).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import type * as net from 'node:net';
import type { CascadeFsOps } from '../../fs/types';
import { Store, type StoreConfig } from '../../store/store';
import type { RemoteDramOptions } from '../../store/cluster/remote';
import { CascadeError } from '../../store/errors';
import { requireNative } from '../../native';
import type { EngineChoice, FuseUringMode, VerifyMode } from './defaults';
import { LocalServer } from '../socket/server';
import { checkMountpoint, clearStaleMount, resolveMountpoint } from '../engine/mounts';
import { formatBytes } from '../cli/size';
import { MountMetrics } from './metrics';
import type { LogLine } from './log';
import { mkdirAll } from '../../store/mkdir';

export interface MountOptions {
  mountpoint: string;
  dataDir: string;
  dramBytes: number;
  pinQuotaBytes?: number;
  /** Free DRAM kept ahead of need, fractions of --dram (StoreConfig.dramWatermarks). */
  dramWatermarks?: { low: number; high: number };
  /** Bound on the disk tier (default: the filesystem's own limit). */
  diskBytes?: number;
  /** The GPU tier: pool size and device (StoreConfig.gpu); off when undefined. */
  gpu?: { capacityBytes: number; device: number };
  /** Serve Prometheus metrics on http://host:port/metrics (mount/daemon/metrics.ts). */
  metrics?: { host: string; port: number };
  keepVersions?: number;
  /** StoreConfig.metaGroupCommitMs (default GROUP_COMMIT_DELAY_MS, 4 ms; 0: every close commits on its own). */
  metaGroupCommitMs?: number;
  kernelCache?: boolean;
  /** Native engine: read-only opens of held blocks through the page cache (NativeEngineOptions.pageCache; default true). */
  pageCache?: boolean;
  /** Disk tier writes through the page cache instead of O_DIRECT (StoreConfig.diskPageCache). */
  diskPageCache?: boolean;
  /** libfuse's per-request trace on stderr. */
  debug?: boolean;
  /** Which FUSE engine serves the mount (default auto). */
  engine?: EngineChoice;
  /** Native engine: FUSE passthrough for reads of committed versions. */
  passthrough?: boolean;
  /** Native engine: FUSE over io_uring (FUSE_URING_MODES; default auto). */
  fuseUring?: FuseUringMode;
  /** When loading blocks' bytes may be read (StoreConfig.verify); default crc32c. */
  verify?: VerifyMode;
  /**
   * One node of a cluster: metadata in Redis (`redis://host:port[/namespace]`, several hosts for a
   * Redis Cluster), this node's segments in `<shared>/nodes/<node>/` on the shared tier.
   */
  cluster?: { url: string; node: string; sharedDir: string; remote?: RemoteDramOptions | false };
  /** Where the daemon's lines go; level info unless said (mount/daemon/log.ts). */
  log: LogLine;
  /** Tests: stop without a signal. */
  stop?: AbortSignal;
  /** Tests: a filesystem instead of fs/cascade-fs over the store. */
  createFs?: (store: Store) => Promise<CascadeFsOps>;
}

/** How often the mount table is checked for an external unmount. */
const MOUNT_POLL_MS = 500;
const STOP_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/**
 * Runs the mount; resolves after a clean shutdown. A second signal during shutdown exits the process
 * (code 1) as soon as the mount is detached, without waiting for the store to persist.
 */
export async function runMount(opts: MountOptions): Promise<void> {
  const log = opts.log;
  const mnt = resolveMountpoint(opts.mountpoint);

  let engine: MountedEngine | undefined;
  let shuttingDown = false;
  let requestStop: (why: string) => void = () => {};
  const stopRequested = new Promise<string>((resolve) => (requestStop = resolve));
  const onSignal = (signal: NodeJS.Signals) => {
    if (!shuttingDown) {
      shuttingDown = true;
      return requestStop(`received ${signal}`);
    }
    log(`cascade: ${signal} again: exiting now without waiting for data to be persisted`);
    void (engine?.unmount() ?? Promise.resolve()).finally(() => process.exit(1));
  };
  const onAbort = () => {
    shuttingDown = true;
    requestStop('stop requested');
  };
  for (const s of STOP_SIGNALS) process.on(s, onSignal);
  opts.stop?.addEventListener('abort', onAbort);
  if (opts.stop?.aborted) onAbort();
  let poll: NodeJS.Timeout | undefined;
  let metrics: MountMetrics | undefined;
  // A mount that fails takes back the directories it created (the data directory only if it made it:
  // nothing of the user's can be in it then).
  const created = { mnt: !fs.existsSync(mnt), data: !opts.cluster && !fs.existsSync(opts.dataDir) };
  let mountedOnce = false;

  try {
    await clearStaleMount(mnt, (m) => log(`cascade: ${m}`));
    mkdirAll(mnt);
    // Everything that can fail cheaply fails before the store fills its DRAM (seconds, gigabytes).
    await preflight(mnt, opts);
    if (opts.metrics) {
      metrics = new MountMetrics();
      const at = await metrics.listen(opts.metrics.host, opts.metrics.port);
      log(`cascade: metrics on http://${at.host.includes(':') ? `[${at.host}]` : at.host}:${at.port}/metrics`);
    }
    const clusterConfig = opts.cluster ? await openCluster(opts.cluster) : undefined;
    const store = await Store.open({
      dataDir: opts.dataDir,
      dramCapacityBytes: opts.dramBytes,
      pinQuotaBytes: opts.pinQuotaBytes,
      dramWatermarks: opts.dramWatermarks,
      diskCapacityBytes: opts.diskBytes,
      diskPageCache: opts.diskPageCache,
      verify: opts.verify,
      gpu: opts.gpu,
      keepVersions: opts.keepVersions,
      metaGroupCommitMs: opts.metaGroupCommitMs,
      log: (m) => log(`cascade: ${m}`, 'warn'),
      ...clusterConfig,
    });
    try {
      let local: LocalServer | undefined;
      const fsOps = await (opts.createFs ?? ((st: Store) => defaultCreateFs(st, log, () => local?.info(), () => engine?.info())))(store);
      try {
        local = await startLocalServer(store, fsOps, log);
        if (!shuttingDown) {
          const mounted = await mountEngine(mnt, fsOps, store, opts, metrics);
          metrics?.attach({ stats: () => store.stats(), engine: () => mounted.engine.info() as Record<string, unknown> });
          engine = mounted.engine;
          const where = opts.cluster
            ? `cluster ${opts.cluster.url}, node ${opts.cluster.node}, shared tier ${opts.cluster.sharedDir}`
            : `data ${opts.dataDir}`;
          mountedOnce = true;
          log(`cascade: mounted ${mnt} (engine ${mounted.description}, ${where}, DRAM ${formatBytes(opts.dramBytes)}${store.gpu ? `, GPU ${formatBytes(store.gpu.capacityBytes)} on ${store.gpu.device.describe().name}` : ''})`);
          const live = engine;
          poll = setInterval(() => {
            if (!live.isMounted()) requestStop(`${mnt} was unmounted`);
          }, MOUNT_POLL_MS);
        }
        const why = await stopRequested;
        shuttingDown = true;
        log(`cascade: ${why}; shutting down`);
      } finally {
        clearInterval(poll);
        try {
          await engine?.unmount();
          await local?.close();
        } finally {
          await fsOps.close();
        }
      }
    } finally {
      await store.close();
    }
    log(`cascade: unmounted ${mnt}; data persisted in ${opts.cluster ? `${opts.cluster.sharedDir}/nodes/${opts.cluster.node}` : opts.dataDir}`);
  } catch (e) {
    if (!mountedOnce) {
      if (created.mnt) await fs.promises.rmdir(mnt).catch(() => undefined); // only if still empty
      if (created.data) fs.rmSync(opts.dataDir, { recursive: true, force: true });
    }
    throw e;
  } finally {
    await metrics?.close();
    for (const s of STOP_SIGNALS) process.off(s, onSignal);
    opts.stop?.removeEventListener('abort', onAbort);
  }
}

/** The Redis metadata engine (loaded only for a cluster) and the store's cluster settings. */
async function openCluster(c: NonNullable<MountOptions['cluster']>): Promise<Pick<StoreConfig, 'metaEngine' | 'cluster'>> {
  const { parseRedisUrl, RedisMeta } = await import('../../store/meta/redis');
  const meta = await RedisMeta.connect(parseRedisUrl(c.url));
  return { metaEngine: meta, cluster: { node: c.node, sharedDir: c.sharedDir, directory: meta, remote: c.remote } };
}

/** The real filesystem layer, loaded on first use: tests inject their own and never load it. */
async function defaultCreateFs(
  store: Store,
  log: LogLine,
  clientInfo: () => object | undefined,
  engineInfo: () => object | undefined,
): Promise<CascadeFsOps> {
  const { createCascadeFs } = await import('../../fs/cascade-fs');
  // Files belong to whoever runs the daemon; other users get what st_mode allows them.
  return createCascadeFs(store, {
    uid: process.getuid?.() ?? 0,
    gid: process.getgid?.() ?? 0,
    log: (m) => log(`cascade: ${m}`, 'warn'),
    clientInfo,
    engineInfo,
    sharedNamespace: store.clustered,
  });
}

/** The same-node client service, where the DRAM tier is a shared mapping (the native arena). */
async function startLocalServer(store: Store, fsOps: CascadeFsOps, log: LogLine): Promise<LocalServer | undefined> {
  const region = store.dramRegion();
  if (region === undefined || fsOps.holdForClient === undefined) {
    log('cascade: same-node client off (needs the native addon\'s DRAM arena)');
    return undefined;
  }
  const hold = fsOps.holdForClient.bind(fsOps);
  const native = requireNative('the same-node client');
  return LocalServer.start({
    hold,
    getattr: (p) => fsOps.getattr(p),
    peer: (socket) => native.peerCredentials(socketFd(socket)),
    uid: process.getuid?.() ?? 0,
    region,
    log: (m) => log(`cascade: ${m}`, 'warn'),
  });
}

/** The descriptor of an accepted Unix socket (Node keeps it on the socket's internal handle). */
function socketFd(socket: net.Socket): number {
  const fd = (socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  if (typeof fd !== 'number' || !Number.isInteger(fd) || fd < 0) throw new CascadeError('EINVAL', 'the accepted socket has no descriptor');
  return fd;
}

/** What runMount needs of either engine. */
interface MountedEngine {
  isMounted(): boolean;
  unmount(): Promise<void>;
  /** Name and counters for stats.json. */
  info(): object;
}

/**
 * Mounts with the chosen engine. `auto` takes the native engine where it can run and falls back to
 * fuse-native (saying why) where it cannot or where its mount fails; `native` fails instead.
 */
/** The checks a mount can fail before it opens the store: the mountpoint, and that some engine can run. */
async function preflight(mnt: string, opts: MountOptions): Promise<void> {
  if (opts.createFs) return; // tests that inject a filesystem check their own setup
  await checkMountpoint(mnt);
  if (!fs.existsSync('/dev/fuse')) {
    throw new CascadeError('ENOENT', '/dev/fuse is missing: load the fuse kernel module (modprobe fuse) or run where FUSE is available');
  }
  const root = process.getuid?.() === 0;
  if (!root) {
    try {
      fs.accessSync('/dev/fuse', fs.constants.R_OK | fs.constants.W_OK);
    } catch {
      throw new CascadeError('EACCES', '/dev/fuse is not open to this user (ask the administrator for mode 0666, as Debian sets it, or mount as root)');
    }
  }
  // An arena larger than memory would be killed while it is filled (OOM, or SIGBUS when /dev/shm is full).
  const memoryBytes = Math.min(os.totalmem(), process.constrainedMemory?.() || Infinity);
  const shm = fs.existsSync('/dev/shm') ? fs.statfsSync('/dev/shm') : undefined;
  const shmFreeBytes = shm ? shm.bavail * shm.bsize : Infinity;
  if (opts.dramBytes > memoryBytes || opts.dramBytes > shmFreeBytes) {
    throw new CascadeError(
      'EINVAL',
      `--dram ${formatBytes(opts.dramBytes)} is more than this machine can hold (memory ${formatBytes(memoryBytes)}${shm ? `, free in /dev/shm ${formatBytes(shmFreeBytes)}` : ''}): give a smaller --dram`,
    );
  }
  if (opts.engine === 'native') {
    const { NativeFuseEngine } = await import('../engine/native');
    const why = NativeFuseEngine.unavailable();
    if (why !== undefined) throw new CascadeError('EOPNOTSUPP', `--engine native cannot run: ${why}`);
  }
}

async function mountEngine(mnt: string, fsOps: CascadeFsOps, store: Store, opts: MountOptions, metrics: MountMetrics | undefined): Promise<{ engine: MountedEngine; description: string }> {
  const log = (m: string) => opts.log(`cascade: ${m}`);
  // What the engines say while they serve: problems (a lost request, a fallback, a stack).
  const warn = (m: string) => opts.log(`cascade: ${m}`, 'warn');
  const choice = opts.engine ?? 'auto';
  if (choice !== 'fuse-native') {
    const { NativeFuseEngine, fuseRequestPages, REQUEST_PAGES_WANTED } = await import('../engine/native');
    const why = NativeFuseEngine.unavailable();
    if (why === undefined) {
      try {
        const e = await NativeFuseEngine.mount(mnt, fsOps, {
          kernelCache: opts.kernelCache,
          pageCache: opts.pageCache,
          arenaFd: store.dramRegion()?.fd,
          // Native writes: new files are staged in the arena and hashed in C++; native opens of
          // blocks in the arena.
          arena: store.dramArena(),
          maxBlockBytes: store.maxBlockBytes,
          passthrough: opts.passthrough,
          uring: opts.fuseUring,
          observe: metrics?.observe,
          log: warn,
        });
        const n = e.negotiated();
        if (opts.debug) log('--debug traces requests with the fuse-native engine only');
        const reads = n?.arena === true ? 'reads of DRAM blocks served from the arena' : 'every read through JS (no shared-memory arena)';
        const pt = (n?.passthrough === true && opts.passthrough === true ? ', passthrough' : '') + (n?.uring === true ? ', io_uring' : '');
        const req = fuseRequestPages();
        const capped = req.pages < REQUEST_PAGES_WANTED ? ` (capped by fs.fuse.max_pages_limit=${req.limitPages}; raise it to ${REQUEST_PAGES_WANTED} for ${(REQUEST_PAGES_WANTED * 4) / 1024} MiB)` : '';
        return { engine: e, description: `native: FUSE 7.${n?.minor ?? '?'}, ${((n?.maxWriteBytes ?? 0) / 1024) | 0} KiB requests${capped}, ${reads}${pt}` };
      } catch (e) {
        if (choice === 'native') throw e;
        log(`the native engine could not mount (${(e as Error).message}); using fuse-native`);
      }
    } else if (choice === 'native') {
      throw new CascadeError('EOPNOTSUPP', `--engine native cannot run: ${why}`);
    } else {
      log(`using fuse-native: the native engine cannot run (${why})`);
    }
  }
  if (opts.passthrough) log('--passthrough needs the native engine: ignored');
  if (opts.fuseUring === 'on') log('--fuse-uring needs the native engine: ignored');
  const { FuseNativeEngine } = await import('../engine/fuse-native');
  const e = await FuseNativeEngine.mount(mnt, fsOps, { kernelCache: opts.kernelCache, debug: opts.debug, observe: metrics?.observe, log: warn });
  return { engine: e, description: 'fuse-native: libfuse 2, 128 KiB requests' };
}
