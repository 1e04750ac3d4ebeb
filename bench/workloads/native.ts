/**
 * The native suite's workloads: the native addon with and without it (CASCADE_NATIVE=0, pure
 * TypeScript) in the same run, each in a trial process of its own (trial.ts):
 *   fuse-read    whole-block reads through a real mount, addon on (`addon`) vs off (`ts`)
 *   client-read  the same-node client (views of the arena) vs memcpy of the same size
 *   hash         streaming SHA-256 of 1 GiB in 128 KiB pieces on a worker vs node:crypto on one core
 *   write-1g     a 1 GiB file written through the mount: throughput and the daemon's event-loop delay
 * Warm-ups happen inside each workload (every block read once and checked before the timed runs).
 */
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CascadeDaemon, trialLayout, type TrialLayout } from '../mounts';
import type { CheckValue, FigureSamples, NativeTrialArgs } from '../protocol';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

interface Sample {
  figure: string;
  ms: number[];
  bytes: number;
  extra?: Record<string, number>;
}

/** A fresh Cascade daemon in the trial's scratch layout, with the addon on or off, for the length of `f`. */
async function withDaemon<T>(t: NativeTrialArgs, native: boolean, dramBytes: number, f: (d: TrialLayout) => Promise<T>): Promise<T> {
  const layout = trialLayout(t.scratchDir);
  const cliPath = path.join(__dirname, '..', '..', 'mount', 'cli.js');
  const daemon = new CascadeDaemon(layout, { cliPath, kernelCache: false, dramBytes, env: { CASCADE_NATIVE: native ? '1' : '0' } });
  await daemon.start();
  try {
    return await f(layout);
  } finally {
    await daemon.stop();
    fs.rmSync(layout.dataDir, { recursive: true, force: true });
  }
}

/** The daemon's event-loop delay from its stats file. */
function daemonLoopStats(mountDir: string): { delayMaxMs: number; delayP99Ms: number } {
  const stats = JSON.parse(fs.readFileSync(path.join(mountDir, '.cascade', 'stats.json'), 'utf8')) as { eventLoop: { delayMaxMs: number; delayP99Ms: number } };
  return stats.eventLoop;
}

// ---- trials (in the child process) ----------------------------------------------------------------

function timeMs(f: () => void): number {
  const t0 = process.hrtime.bigint();
  f();
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

async function timeMsAsync(f: () => Promise<void>): Promise<number> {
  const t0 = process.hrtime.bigint();
  await f();
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

/** Whole-file read with a fresh open each time, like an engine loading a block. */
function readWhole(file: string, target: Buffer): number {
  const fd = fs.openSync(file, 'r');
  try {
    let at = 0;
    for (;;) {
      const n = fs.readSync(fd, target, at, target.length - at, at);
      if (n === 0) break;
      at += n;
    }
    return at;
  } finally {
    fs.closeSync(fd);
  }
}

async function samples(t: NativeTrialArgs): Promise<Sample[]> {
  const native = t.system === 'addon';
  switch (t.workload) {
    case 'fuse-read':
      return withDaemon(t, native, GiB, async (d) => {
        const dir = path.join(d.mountDir, 'kv', 'bench');
        fs.mkdirSync(dir, { recursive: true });
        const blocks = Math.max(2, Math.min(8, Math.floor((256 * MiB) / t.blockBytes)));
        const files: string[] = [];
        const contents: Buffer[] = [];
        for (let i = 0; i < blocks; i++) {
          const data = randomBytes(t.blockBytes);
          files.push(path.join(dir, `b${i}`));
          contents.push(data);
          fs.writeFileSync(files[i], data);
        }
        const target = Buffer.alloc(t.blockBytes);
        for (let i = 0; i < blocks; i++) {
          readWhole(files[i], target); // warm-up: every block in DRAM, code paths hot
          if (!target.equals(contents[i])) throw new Error(`wrong bytes read from ${files[i]}`);
        }
        const ms: number[] = [];
        for (let r = 0; r < t.runs; r++) ms.push(timeMs(() => files.forEach((f) => readWhole(f, target))) / blocks);
        return [{ figure: 'read', ms, bytes: t.blockBytes }];
      });
    case 'client-read':
      return withDaemon(t, true, GiB, async (d) => {
        const { LocalClient } = await import('../../mount/socket/client');
        const file = path.join(d.mountDir, 'kv', 'bench', 'c');
        fs.mkdirSync(path.dirname(file), { recursive: true });
        const data = randomBytes(t.blockBytes);
        fs.writeFileSync(file, data);
        const client = await LocalClient.connect(d.mountDir);
        try {
          const target = Buffer.alloc(t.blockBytes);
          const source = Buffer.from(data);
          target.fill(1);
          const got = await client.read(file, target); // warm-up and check
          if (!got.equals(data)) throw new Error('client read wrong bytes');
          const memcpy: number[] = [];
          const copy: number[] = [];
          const views: number[] = [];
          for (let r = 0; r < t.runs; r++) {
            memcpy.push(timeMs(() => source.copy(target)));
            copy.push(await timeMsAsync(async () => void (await client.read(file, target))));
            views.push(
              await timeMsAsync(async () => {
                const b = await client.open(file);
                await b.release();
              }),
            );
          }
          return [
            { figure: 'memcpy', ms: memcpy, bytes: t.blockBytes },
            { figure: 'client read (views + copy out)', ms: copy, bytes: t.blockBytes },
            { figure: 'client open+release (views only)', ms: views, bytes: t.blockBytes },
          ];
        } finally {
          await client.close();
        }
      });
    case 'hash': {
      const { StreamHasher } = await import('../../store/hash');
      const data = randomBytes(t.blockBytes);
      const piece = 128 * 1024;
      const ms: number[] = [];
      const ref: number[] = [];
      let maxDelayMs = 0;
      for (let r = 0; r < t.runs; r++) {
        ref.push(timeMs(() => void createHash('sha256').update(data).digest('hex')));
        // The JS thread appends 128 KiB pieces as FUSE writes would arrive; the worker hashes behind it.
        let last = process.hrtime.bigint();
        const tick = setInterval(() => {
          const now = process.hrtime.bigint();
          maxDelayMs = Math.max(maxDelayMs, Number(now - last) / 1e6 - 1);
          last = now;
        }, 1);
        ms.push(
          await timeMsAsync(async () => {
            const h = new StreamHasher();
            for (let at = 0; at < data.length; at += piece) {
              h.append(data.subarray(at, at + piece));
              if ((at / piece) % 64 === 0) await new Promise((res) => setImmediate(res)); // let timers run
            }
            await h.digest();
          }),
        );
        clearInterval(tick);
      }
      return [
        { figure: 'node:crypto one core', ms: ref, bytes: t.blockBytes },
        { figure: 'streamed on a worker', ms, bytes: t.blockBytes, extra: { maxLoopDelayMs: maxDelayMs } },
      ];
    }
    case 'write-1g': {
      const ms: number[] = [];
      const delays: number[] = [];
      const p99s: number[] = [];
      const data = randomBytes(t.blockBytes);
      for (let r = 0; r < t.runs; r++) {
        data.writeUInt32LE(r, 0); // new content each run
        await withDaemon(t, native, 2 * GiB, async (d) => {
          const file = path.join(d.mountDir, 'kv', 'bench', 'big');
          fs.mkdirSync(path.dirname(file), { recursive: true });
          ms.push(
            timeMs(() => {
              const fd = fs.openSync(file, 'w');
              for (let at = 0; at < data.length; at += MiB) fs.writeSync(fd, data, at, MiB, at);
              fs.closeSync(fd); // the commit: hash, arena write, metadata
            }),
          );
          const check = createHash('sha256').update(data).digest('hex');
          const xattr = spawnSync('getfattr', ['--only-values', '-n', 'user.cascade.sha256', file], { encoding: 'utf8' }).stdout.trim();
          if (xattr !== check) throw new Error(`committed content hash ${xattr} != ${check}`);
          await new Promise((res) => setTimeout(res, 150)); // a fresh stats snapshot
          const s = daemonLoopStats(d.mountDir);
          delays.push(s.delayMaxMs);
          p99s.push(s.delayP99Ms);
        });
      }
      return [{ figure: 'write+close', ms, bytes: t.blockBytes, extra: { maxLoopDelayMsWorst: Math.max(...delays), loopDelayP99MsWorst: Math.max(...p99s) } }];
    }
  }
}

/** One native-suite trial; the addon switch also applies to this process (the hasher, the client). */
export async function runNativeTrial(args: NativeTrialArgs): Promise<{ figures: FigureSamples[]; checks: Record<string, CheckValue> }> {
  process.env.CASCADE_NATIVE = args.system === 'addon' ? '1' : '0';
  const out = await samples(args);
  const checks: Record<string, CheckValue> = {};
  for (const s of out) for (const [k, v] of Object.entries(s.extra ?? {})) checks[k] = v;
  return { figures: out.map((s) => ({ figure: s.figure, label: s.figure, unit: 'GB/s', bytesPerRun: s.bytes, opsPerRun: 1, timesMs: s.ms })), checks };
}
