/**
 * One concurrent reader of the contention and rename-race workloads, as a worker thread of a peers
 * trial (its own JS thread, so 4 readers really run at once). It reports its own monotonic start and
 * end (process.hrtime, CLOCK_MONOTONIC: comparable across threads and with the h5py readers'
 * time.monotonic_ns).
 *
 * - contention (`file`, `redis`, `cascade-client`): reads every block `rounds` times after the trial says
 *   "go" (files through plain synchronous reads; Redis values through its own client connection;
 *   Cascade blocks through its own same-node client, LocalClient.read: open + copy into a reused buffer
 *   + release) and reports the bytes read and the SHA-256 of the last block read (after the timed region).
 * - `rename-race`: `opens` times open + whole read (1 MiB calls) + close of one file that a writer on the
 *   trial's main thread keeps replacing by rename; each read is compared byte for byte with the two
 *   versions the writer alternates (an exact comparison: stronger than comparing SHA-256, and cheap
 *   enough not to slow the readers down). When done (also after an error) it adds 1 to the shared
 *   `done` counter: the writer stops when every reader is done.
 */
import * as fs from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { Redis } from 'ioredis';
import { IO_CHUNK_BYTES, readTarget, readWhole, sha256Hex } from './common';

export interface ReaderJob {
  kind: 'file' | 'redis' | 'cascade-client' | 'rename-race';
  /** File paths; Redis keys; paths relative to the mount (cascade-client); rename-race: the one file. */
  items: string[];
  port: number;
  sizeBytes: number;
  rounds: number;
  /** cascade-client: the mount whose daemon the client connects to. */
  mountpoint?: string;
  /** rename-race: opens this reader makes. */
  opens?: number;
  /** rename-race: the two versions the writer alternates. */
  versions?: [Uint8Array, Uint8Array];
  /** rename-race: an Int32Array(1) over a SharedArrayBuffer, +1 per reader done. */
  done?: SharedArrayBuffer;
}

export interface ReaderReport {
  startNs: string;
  endNs: string;
  bytes: number;
  lastSha256: string;
}

export interface RaceReport {
  startNs: string;
  endNs: string;
  /** Attempted opens (ENOENT included). */
  opens: number;
  enoent: number;
  /** Reads that returned fewer or more bytes than a version has. */
  short: number;
  /** Reads of the full length equal to neither version. */
  mixed: number;
  /** Reads equal to the first / second version. */
  readsOfA: number;
  readsOfB: number;
  /** Errors other than ENOENT (open, read or close), and the first one's text. */
  otherErrors: number;
  firstError: string | null;
}

function handshake(port: NonNullable<typeof parentPort>): Promise<void> {
  return new Promise<void>((resolve) => {
    port.once('message', () => resolve());
    port.postMessage('ready');
  });
}

const errorCode = (e: unknown) => (e as { code?: unknown } | undefined)?.code;

async function renameRace(job: ReaderJob, port: NonNullable<typeof parentPort>): Promise<void> {
  const done = new Int32Array(job.done!);
  const [a, b] = job.versions!.map((v) => Buffer.from(v.buffer, v.byteOffset, v.byteLength));
  const file = job.items[0];
  const target = readTarget(job.sizeBytes);
  const r: RaceReport = { startNs: '0', endNs: '0', opens: 0, enoent: 0, short: 0, mixed: 0, readsOfA: 0, readsOfB: 0, otherErrors: 0, firstError: null };
  const other = (e: unknown) => {
    r.otherErrors++;
    r.firstError ??= e instanceof Error ? e.message.slice(0, 300) : String(e);
  };
  try {
    await handshake(port);
    const start = process.hrtime.bigint();
    for (let i = 0; i < job.opens!; i++) {
      r.opens++;
      let fd: number;
      try {
        fd = fs.openSync(file, 'r');
      } catch (e) {
        if (errorCode(e) === 'ENOENT') r.enoent++;
        else other(e);
        continue;
      }
      let n = 0;
      let failed = false;
      try {
        for (;;) {
          const got = fs.readSync(fd, target, n, Math.min(IO_CHUNK_BYTES, target.length - n), n);
          if (got === 0) break;
          n += got;
          if (n === target.length) break; // longer than any version: counted as short (wrong length)
        }
      } catch (e) {
        failed = true;
        other(e);
      } finally {
        try {
          fs.closeSync(fd);
        } catch (e) {
          other(e);
        }
      }
      if (failed) continue;
      const got = target.subarray(0, n);
      if (n !== a.length) r.short++;
      else if (got.equals(a)) r.readsOfA++;
      else if (got.equals(b)) r.readsOfB++;
      else r.mixed++;
    }
    r.startNs = start.toString();
    r.endNs = process.hrtime.bigint().toString();
  } finally {
    Atomics.add(done, 0, 1);
  }
  port.postMessage(r);
}

async function main(job: ReaderJob): Promise<void> {
  const port = parentPort;
  if (!port) throw new Error('reader-thread runs as a worker thread');
  if (job.kind === 'rename-race') return renameRace(job, port);
  const redis = job.kind === 'redis' ? new Redis({ port: job.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null }) : undefined;
  await redis?.connect();
  const client = job.kind === 'cascade-client' ? await (await import('../mount/socket/client')).LocalClient.connect(job.mountpoint!) : undefined;
  const target = readTarget(job.sizeBytes);
  let last: Uint8Array = target.subarray(0, 0);
  await handshake(port);
  let bytes = 0;
  const start = process.hrtime.bigint();
  for (let r = 0; r < job.rounds; r++) {
    for (const item of job.items) {
      if (redis) {
        const v = await redis.getBuffer(item);
        if (v === null) throw new Error(`redis: ${item} is missing`);
        bytes += v.length;
        last = v;
      } else if (client) {
        const v = await client.read(item, target);
        bytes += v.length;
        last = v;
      } else {
        const n = readWhole(item, target);
        bytes += n;
        last = target.subarray(0, n);
      }
    }
  }
  const end = process.hrtime.bigint();
  const report: ReaderReport = { startNs: start.toString(), endNs: end.toString(), bytes, lastSha256: sha256Hex(last) };
  redis?.disconnect();
  await client?.close();
  port.postMessage(report);
}

main(workerData as ReaderJob).catch((e: unknown) => {
  throw e instanceof Error ? e : new Error(String(e));
});
