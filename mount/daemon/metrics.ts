/**
 * `cascade mount --metrics HOST:PORT`: Prometheus text on http://HOST:PORT/metrics, through prom-client
 * (the Node client Prometheus itself lists; it brings the process metrics and the exposition format).
 *
 * Two kinds of figures. Requests JS serves are observed as they are answered (latency histogram by
 * FUSE opcode, errors by opcode and errno). Everything else is read at scrape time from the store's
 * stats and the engine's counters (tiers, hits, dedup, pins, queues, requests the native engine
 * answered in C++), so serving requests costs nothing extra for them.
 */
import * as http from 'node:http';
import * as os from 'node:os';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { CascadeError } from '../../store/errors';
import type { StoreStats } from '../../store/store';

/** Called once per answered request: the FUSE opcode's name, seconds from arrival to reply, the errno (0: ok). */
export type RequestObserver = (op: string, seconds: number, errno: number) => void;

export interface MetricsSources {
  stats(): Promise<StoreStats>;
  /** The engine's own counters (native: the session's and the metadata table's), when it has them. */
  engine?(): Record<string, unknown> | undefined;
}

/** Request latency buckets, seconds: 25 µs (a cached answer) to 10 s (a write waiting for room). */
const LATENCY_BUCKETS_S = [25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10];
/** Label values kept per label (opcodes and errnos are few; the bound is a guard). */
const LABEL_VALUES_MAX = 128;

const ERRNO_NAMES = new Map<number, string>(Object.entries(os.constants.errno).map(([name, n]) => [n, name]));

export class MountMetrics {
  readonly registry = new Registry();
  private readonly latency: Histogram<'op'>;
  private readonly errors: Counter<'op' | 'errno'>;
  private readonly ops = new Set<string>();
  private sources: MetricsSources | undefined;
  private server: http.Server | undefined;

  constructor() {
    const r = this.registry;
    collectDefaultMetrics({ register: r, prefix: 'cascade_' });
    this.latency = new Histogram({ name: 'cascade_fuse_request_duration_seconds', help: 'FUSE requests answered in JS, by opcode: time from arrival to reply', labelNames: ['op'], buckets: LATENCY_BUCKETS_S, registers: [r] });
    this.errors = new Counter({ name: 'cascade_fuse_errors_total', help: 'FUSE requests answered with an error, by opcode and errno', labelNames: ['op', 'errno'], registers: [r] });
    const self = this;
    // Store figures, read at scrape time. Totals the store keeps are exposed as counters whose value is
    // set from the store's (prom-client counters only go up; these never go down either).
    const gauge = (name: string, help: string, labelNames: string[], collect: (g: Gauge<string>, s: StoreStats) => void) =>
      new Gauge({
        name,
        help,
        labelNames,
        registers: [r],
        async collect() {
          const s = await self.storeStats();
          if (s) collect(this, s);
        },
      });
    const total = (name: string, help: string, labelNames: string[], values: (s: StoreStats) => Array<[Record<string, string>, number]>) =>
      new Counter({
        name,
        help,
        labelNames,
        registers: [r],
        async collect() {
          const s = await self.storeStats();
          if (!s) return;
          this.reset(); // the store's counters are the truth: each scrape copies them
          for (const [labels, n] of values(s)) this.inc(labels, n);
        },
      });
    gauge('cascade_tier_used_bytes', 'Bytes held by live blocks in each tier', ['tier'], (g, s) => s.tiers.forEach((t) => g.set({ tier: t.name }, t.usedBytes)));
    gauge('cascade_tier_capacity_bytes', 'Capacity of each tier (+Inf: unbounded)', ['tier'], (g, s) => s.tiers.forEach((t) => g.set({ tier: t.name }, t.capacityBytes)));
    gauge('cascade_tier_blocks', 'Blocks in each tier', ['tier'], (g, s) => s.tiers.forEach((t) => g.set({ tier: t.name }, t.blocks)));
    total('cascade_hits_total', 'Reads served, by the tier that served them (native-engine opens of DRAM blocks included)', ['tier'], (s) =>
      Object.entries(s.hits).map(([tier, n]) => [{ tier }, n]),
    );
    const plain: Array<[string, string, (s: StoreStats) => number]> = [
      ['cascade_misses_total', 'Reads of content in no tier (lost after a crash or a failed fsync)', (s) => s.misses],
      ['cascade_evictions_total', 'Blocks evicted from DRAM', (s) => s.evictions],
      ['cascade_promotions_total', 'Blocks copied up into DRAM', (s) => s.promotions],
      ['cascade_promotions_refused_total', 'Promotions skipped because the mover queue was full', (s) => s.promotionsRefused],
      ['cascade_demotions_total', 'Writes that went straight to disk because DRAM had no room', (s) => s.demotions],
      ['cascade_flushed_blocks_total', 'Blocks written from DRAM to disk', (s) => s.flushedBlocks],
      ['cascade_dedup_hits_total', 'Puts of content already stored (stored once)', (s) => s.dedup.hits],
      ['cascade_dedup_saved_bytes_total', 'Bytes not stored again thanks to dedup', (s) => s.dedup.savedBytes],
      ['cascade_disk_sync_failures_total', 'Failed fdatasyncs of the disk tier', (s) => s.diskSyncFailures],
      ['cascade_gpu_promotions_total', 'Blocks copied into the GPU tier', (s) => s.gpu.promotions],
      ['cascade_gpu_evictions_total', 'Blocks evicted from the GPU tier', (s) => s.gpu.evictions],
    ];
    for (const [name, help, value] of plain) total(name, help, [], (s) => [[{}, value(s)]]);
    const levels: Array<[string, string, (s: StoreStats) => number]> = [
      ['cascade_dirty_blocks', 'Blocks in DRAM not yet written to disk (the flusher queue)', (s) => s.dirtyBlocks],
      ['cascade_dedup_ratio', 'Logical bytes over stored bytes (1: no duplicates)', (s) => (s.dedup.uniqueBytes > 0 ? s.dedup.logicalBytes / s.dedup.uniqueBytes : 1)],
      ['cascade_pinned_bytes', 'Bytes of pinned blocks', (s) => s.pinned.bytes],
      ['cascade_pinned_blocks', 'Pinned blocks', (s) => s.pinned.blocks],
      ['cascade_pin_quota_bytes', 'The pin quota', (s) => s.pinned.quotaBytes],
      ['cascade_names', 'File names', (s) => s.names],
      ['cascade_versions', 'Versions kept', (s) => s.versions],
      ['cascade_gpu_available', '1 when the GPU tier runs', (s) => (s.gpu.available ? 1 : 0)],
      ['cascade_gpu_leases', 'CUDA IPC leases held by processes', (s) => s.gpu.leases],
    ];
    for (const [name, help, value] of levels) gauge(name, help, [], (g, s) => g.set(value(s)));
    // The native engine's requests answered in C++ (never seen by JS), from its session counters.
    new Counter({
      name: 'cascade_fuse_native_answered_total',
      help: 'FUSE requests the native engine answered in C++ without JS, by kind',
      labelNames: ['kind'],
      registers: [r],
      collect() {
        const e = self.sources?.engine?.();
        if (!e) return;
        this.reset();
        for (const [key, value] of Object.entries(e)) {
          if (typeof value !== 'number' || !/^(served|native)[A-Z]/.test(key)) continue;
          this.inc({ kind: key }, value);
        }
      },
    });
  }

  /** Snapshots of the store's stats, one per scrape (collectors share it). */
  private pending: Promise<StoreStats | undefined> | undefined;
  private storeStats(): Promise<StoreStats | undefined> {
    if (!this.sources) return Promise.resolve(undefined);
    this.pending ??= this.sources.stats().catch(() => undefined);
    return this.pending;
  }

  /** The request observer engines call (see RequestObserver). */
  readonly observe: RequestObserver = (op, seconds, errno) => {
    if (!this.ops.has(op)) {
      if (this.ops.size >= LABEL_VALUES_MAX) op = 'OTHER';
      else this.ops.add(op);
    }
    this.latency.observe({ op }, seconds);
    if (errno !== 0) this.errors.inc({ op, errno: ERRNO_NAMES.get(Math.abs(errno)) ?? String(Math.abs(errno)) });
  };

  /** Where the figures come from, once the store and the engine are up (scrapes before that see the process only). */
  attach(sources: MetricsSources): void {
    this.sources = sources;
  }

  /** Serve /metrics; resolves with the bound address (port 0 picks one). Fails at once if it cannot bind. */
  listen(host: string, port: number): Promise<{ host: string; port: number }> {
    const server = http.createServer((req, res) => {
      if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('cascade: GET /metrics\n');
        return;
      }
      this.pending = undefined; // a fresh snapshot per scrape
      this.registry.metrics().then(
        (body) => res.writeHead(200, { 'content-type': this.registry.contentType }).end(body),
        (e: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`cascade: ${(e as Error).message}\n`),
      );
    });
    server.requestTimeout = 10_000;
    server.maxConnections = 64; // a scraper or two, not a crowd
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once('error', (e: NodeJS.ErrnoException) =>
        reject(new CascadeError(e.code === 'EADDRINUSE' ? 'EBUSY' : 'EINVAL', `--metrics ${host}:${port}: ${e.message}`)),
      );
      server.listen(port, host, () => {
        const a = server.address();
        resolve({ host, port: typeof a === 'object' && a ? a.port : port });
      });
    });
  }

  close(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    if (!s) return Promise.resolve();
    s.closeAllConnections();
    return new Promise((resolve) => s.close(() => resolve()));
  }
}
