// The tree outside /kv: the root, /.cascade's JSON files (stats, pins, client) and its read-only versions/ and at/ views.
import * as os from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { CascadeError } from '../store/errors';
import type { VersionRecord } from '../store/meta';
import type { Store } from '../store/store';
import type { Attrs } from './attrs';
import type { Namespace } from './namespace';
import { derivedIno, INO, S_IFREG, type MetaFileName, type VirtualParsed } from './paths';
import type { OpenFiles } from './staging';
import { split } from './tree';
import type { DirEntry, FileAttr } from './types';

/** Event-loop delay sampling interval (stats.json eventLoop). */
const LOOP_DELAY_SAMPLE_MS = 20;
/**
 * stats.json is re-rendered when its snapshot is older than this: fresh for every `cat`, and the same
 * snapshot for the getattr and open of one read, so the size a page-cache reader trusts matches.
 */
const STATS_SNAPSHOT_MS = 100;
/**
 * Files pins.json lists at most (about 150 bytes of JSON each: 10 MiB at most); past it the file says
 * how many there are. Pins are bounded by the quota, but one pinned block (a shared system prompt) may be
 * the content of any number of names.
 */
const PINS_LISTED_MAX = 65_536;

export interface VirtualOptions {
  /** What /.cascade/client.json shows (absent: no such file). */
  clientInfo?: () => object | undefined;
  /** The mount engine's name and counters, shown in stats.json as `engine`. */
  engineInfo?: () => object | undefined;
}

export class Virtual {
  private statsSnapshot: { atMs: number; data: Buffer } | undefined;
  private pinsSnapshot: { atMs: number; generation: number; data: Buffer } | undefined;
  private pinsRendering: { generation: number; data: Promise<Buffer> } | undefined;
  /** Moves with every pin and unpin through the mount: a pins.json rendered before one is stale. */
  private pinsGeneration = 0;
  // How long requests wait for the JS thread: every FUSE op is served on it. Shown in stats.json.
  // Sampled every LOOP_DELAY_SAMPLE_MS (each sample is a timer that wakes the JS thread: at 1 ms an idle
  // daemon would wake 1,000 times a second, a CPU's share on a small node); a sample is the whole interval.
  private readonly loopDelay = monitorEventLoopDelay({ resolution: LOOP_DELAY_SAMPLE_MS });

  constructor(
    private readonly store: Store,
    private readonly ns: Namespace,
    private readonly attrs: Attrs,
    private readonly files: OpenFiles,
    private readonly options: VirtualOptions,
  ) {
    this.loopDelay.enable();
  }

  /** A pin or unpin went through the mount: `cascade pin` then `cascade pins` must see it. */
  pinsChanged(): void {
    this.pinsGeneration++;
  }

  close(): void {
    this.loopDelay.disable();
  }

  async attr(p: VirtualParsed, path: string): Promise<FileAttr> {
    switch (p.kind) {
      case 'root':
        return this.attrs.dirAttr(INO.root);
      case 'meta':
        return this.attrs.dirAttr(INO.meta);
      case 'atroot':
        return this.attrs.dirAttr(INO.at);
      case 'stats':
        return this.attrs.fileAttr((await this.metaFile(p.file)).length, Date.now(), 0o444, p.file === 'stats.json' ? INO.stats : p.file === 'pins.json' ? INO.pins : INO.client);
      case 'versions':
      case 'at': {
        const target = await this.resolve(p);
        if (target === 'dir') return this.attrs.dirAttr(p.rel === undefined ? (p.kind === 'versions' ? INO.versions : derivedIno(path)) : derivedIno(path));
        // A past version is a file of its own: read-only, with its own number.
        return { ...this.attrs.versionAttr(target), mode: S_IFREG | 0o444, ino: derivedIno(`${target.name}#${target.version}`) };
      }
    }
  }

  async list(p: VirtualParsed, path: string): Promise<DirEntry[]> {
    const dir = (name: string): DirEntry => ({ name, kind: 'dir' });
    const file = (name: string): DirEntry => ({ name, kind: 'file' });
    switch (p.kind) {
      case 'root':
        return [dir('kv'), dir('.cascade')];
      case 'meta':
        return [file('stats.json'), file('pins.json'), ...(this.options.clientInfo?.() ? [file('client.json')] : []), dir('versions'), dir('at')];
      case 'atroot':
        return []; // any unix-ms below it is valid; there is nothing to list
      case 'stats':
        throw new CascadeError('ENOTDIR', `${path} is a file`);
      case 'versions':
      case 'at': {
        if (p.rel === undefined) return [dir('kv')];
        const kind = await this.ns.kindOf(p.rel);
        // A file's place under versions/ and at/ is a directory of versions, or a file (at/).
        if (kind === 'dir') return this.ns.entries(p.rel).map((e) => (p.kind === 'versions' && e.kind === 'file' ? dir(e.name) : e));
        if (kind === 'file' && p.kind === 'versions') return (await this.store.versions(p.rel)).map((v) => file(String(v.version)));
        throw new CascadeError(kind === 'file' ? 'ENOTDIR' : 'ENOENT', `no directory ${path}`);
      }
    }
  }

  /** What a read-only open of `p` reads: a JSON file's bytes, or a past version. */
  async open(p: VirtualParsed, path: string): Promise<Buffer | VersionRecord> {
    if (p.kind === 'stats') return this.metaFile(p.file);
    const target = p.kind === 'versions' || p.kind === 'at' ? await this.resolve(p) : 'dir';
    if (target === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
    return target;
  }

  /** A path under /.cascade/versions or /.cascade/at: a directory, or the version it names. */
  async resolve(p: Extract<VirtualParsed, { kind: 'versions' | 'at' }>): Promise<'dir' | VersionRecord> {
    if (p.rel === undefined) return 'dir';
    const kind = await this.ns.kindOf(p.rel);
    if (kind === 'dir') return 'dir';
    if (p.kind === 'at') {
      if (kind !== 'file') throw new CascadeError('ENOENT', `no such file: /kv/${p.rel}`);
      return this.store.resolve(p.rel, { atMs: p.timeMs });
    }
    if (kind === 'file') return 'dir'; // versions/kv/<file> lists version numbers
    const { parent, base } = split(p.rel);
    if ((await this.ns.kindOf(parent)) !== 'file' || !/^[1-9]\d{0,15}$/.test(base)) throw new CascadeError('ENOENT', `no such version: ${p.rel}`);
    return this.store.resolve(parent, { version: Number(base) });
  }

  private async metaFile(file: MetaFileName): Promise<Buffer> {
    if (file === 'stats.json') return this.stats();
    if (file === 'pins.json') return this.pins();
    const info = this.options.clientInfo?.();
    if (info === undefined) throw new CascadeError('ENOENT', 'no same-node client service on this mount');
    return Buffer.from(JSON.stringify(info, null, 2) + '\n');
  }

  private async stats(): Promise<Buffer> {
    if (!this.statsSnapshot || Date.now() - this.statsSnapshot.atMs >= STATS_SNAPSHOT_MS) {
      const s = await this.store.stats();
      const d = this.loopDelay;
      // Beyond the sampling interval: how late the JS thread came to a timer.
      const late = (ns: number): number => (Number.isFinite(ns) ? Math.max(0, ns / 1e6 - LOOP_DELAY_SAMPLE_MS) : 0);
      const eventLoop = { delayMaxMs: late(d.max), delayP99Ms: late(d.percentile(99)), delayMeanMs: late(d.mean) };
      // daemon: who serves this mount (`cascade mounts` lists it; `cascade unmount` waits for the pid).
      const daemon = { pid: process.pid, host: os.hostname(), mountedAtMs: this.attrs.mountTimeMs, dataDir: this.store.dataDir };
      const body = { daemon, ...s, fs: this.files.counts(), eventLoop, engine: this.options.engineInfo?.() };
      this.statsSnapshot = { atMs: Date.now(), data: Buffer.from(JSON.stringify(body, null, 2) + '\n') };
    }
    return this.statsSnapshot.data;
  }

  /**
   * pins.json: the pin figures and the files whose content is pinned. Rendered in the daemon from the
   * store's pins, not by a client walking MOUNT/kv with one getxattr per file: that walk takes ~150 us
   * a file (15 s for 100k), this ~8 us a name, and nothing at all with no pins. Kept like stats.json's
   * snapshot, so the getattr and the open of one read see the same bytes; one rendering at a time (a
   * 100k-name rendering takes most of a second).
   */
  private async pins(): Promise<Buffer> {
    const generation = this.pinsGeneration;
    const snap = this.pinsSnapshot;
    if (snap && snap.generation === generation && Date.now() - snap.atMs < STATS_SNAPSHOT_MS) return snap.data;
    if (this.pinsRendering?.generation === generation) return this.pinsRendering.data;
    const rendering = (async () => {
      const { names, total } = await this.store.pinnedNames(PINS_LISTED_MAX);
      const { pinned } = await this.store.stats();
      const body = { pinned, files: names, total, truncated: total > names.length };
      const data = Buffer.from(JSON.stringify(body, null, 2) + '\n');
      if (this.pinsGeneration === generation) this.pinsSnapshot = { atMs: Date.now(), generation, data };
      return data;
    })().finally(() => {
      if (this.pinsRendering?.data === rendering) this.pinsRendering = undefined;
    });
    this.pinsRendering = { generation, data: rendering };
    return rendering;
  }
}
