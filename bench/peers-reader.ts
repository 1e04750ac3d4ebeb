/**
 * One concurrent reader of the contention workload, as a worker thread of a peers trial (its own JS
 * thread, so 4 readers really run at once): files through plain synchronous reads, or Redis values
 * through its own client connection. It reads every block `rounds` times after the trial says "go" and
 * reports its own monotonic start and end (process.hrtime, CLOCK_MONOTONIC: comparable across threads
 * and with the h5py readers' time.monotonic_ns), the bytes read and the SHA-256 of the last block read
 * (after the timed region).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Redis } from 'ioredis';
import { readTarget, readWhole, sha256Hex } from './common';

export interface ReaderJob {
  kind: 'file' | 'redis';
  /** File paths, or Redis keys. */
  items: string[];
  port: number;
  sizeBytes: number;
  rounds: number;
}

export interface ReaderReport {
  startNs: string;
  endNs: string;
  bytes: number;
  lastSha256: string;
}

async function main(job: ReaderJob): Promise<void> {
  const port = parentPort;
  if (!port) throw new Error('peers-reader runs as a worker thread');
  const redis = job.kind === 'redis' ? new Redis({ port: job.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null }) : undefined;
  await redis?.connect();
  const target = readTarget(job.sizeBytes);
  let last: Uint8Array = target.subarray(0, 0);
  await new Promise<void>((resolve) => {
    port.once('message', () => resolve());
    port.postMessage('ready');
  });
  let bytes = 0;
  const start = process.hrtime.bigint();
  for (let r = 0; r < job.rounds; r++) {
    for (const item of job.items) {
      if (redis) {
        const v = await redis.getBuffer(item);
        if (v === null) throw new Error(`redis: ${item} is missing`);
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
  port.postMessage(report);
}

main(workerData as ReaderJob).catch((e: unknown) => {
  throw e instanceof Error ? e : new Error(String(e));
});
