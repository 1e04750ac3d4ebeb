/**
 * The native addon's benchmark (issue 4), with and without the addon in the same run:
 *   fuse-read    whole-block reads through a real mount, addon on vs CASCADE_NATIVE=0 (pure TypeScript)
 *   client-read  the same-node client (views of the arena) vs memcpy of the same size
 *   hash         streaming SHA-256 of 1 GiB in 128 KiB pieces on a worker vs node:crypto on one core
 *   write-1g     a 1 GiB file written through the mount: throughput and the daemon's event-loop delay
 * Each trial runs in a fresh process (`--trial <json>`), which starts its own daemon where it needs one.
 * Usage: node dist/bench/native-bench.js [--quick] [--filter S] [--out FILE]
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { gbPerS, hostEnvironment, spread, f3 } from './common';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const CLI = path.join(__dirname, '..', 'mount', 'cli.js');

interface Trial {
  name: string;
  kind: 'fuse-read' | 'client-read' | 'hash' | 'write-1g';
  native: boolean;
  sizeBytes: number;
  runs: number;
}

interface Sample {
  figure: string;
  ms: number[];
  bytes: number;
  extra?: Record<string, number>;
}

function trialTable(quick: boolean): Trial[] {
  const runs = quick ? 5 : 10;
  const t: Trial[] = [];
  for (const sizeBytes of quick ? [64 * MiB] : [2 * MiB, 64 * MiB]) {
    for (const native of [true, false]) t.push({ name: `fuse-read ${sizeBytes / MiB}MiB ${native ? 'addon' : 'ts'}`, kind: 'fuse-read', native, sizeBytes, runs });
    t.push({ name: `client-read ${sizeBytes / MiB}MiB`, kind: 'client-read', native: true, sizeBytes, runs });
  }
  t.push({ name: 'hash 1GiB', kind: 'hash', native: true, sizeBytes: GiB, runs: quick ? 3 : 5 });
  for (const native of [true, false]) t.push({ name: `write-1g ${native ? 'addon' : 'ts'}`, kind: 'write-1g', native, sizeBytes: GiB, runs: quick ? 2 : 3 });
  return t;
}

// ---- daemon ---------------------------------------------------------------------------------------

class Daemon {
  proc: ChildProcess | undefined;
  constructor(
    readonly root: string,
    readonly native: boolean,
    readonly dram: string,
  ) {}
  get mnt(): string {
    return path.join(this.root, 'mnt');
  }
  async start(): Promise<void> {
    const env = { ...process.env, CASCADE_NATIVE: this.native ? '1' : '0' };
    const proc = spawn(process.execPath, [CLI, 'mount', this.mnt, '--data', path.join(this.root, 'data'), '--dram', this.dram], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    this.proc = proc;
    let err = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`mount did not come up: ${err}`)), 60_000);
      proc.stderr!.on('data', (d: Buffer) => {
        err += d.toString();
        if (err.includes('cascade: mounted')) {
          clearTimeout(timer);
          resolve();
        }
      });
      proc.on('exit', (c) => reject(new Error(`daemon exited ${c}: ${err}`)));
    });
  }
  async stop(): Promise<void> {
    const proc = this.proc;
    this.proc = undefined;
    if (proc && proc.exitCode === null) {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 30_000))]);
      if (proc.exitCode === null) proc.kill('SIGKILL');
    }
    if (fs.readFileSync('/proc/mounts', 'utf8').includes(` ${this.mnt} `)) spawnSync('fusermount', ['-uz', this.mnt]);
  }
  stats(): { eventLoop: { delayMaxMs: number; delayP99Ms: number } } {
    return JSON.parse(fs.readFileSync(path.join(this.mnt, '.cascade', 'stats.json'), 'utf8'));
  }
}

async function withDaemon<T>(native: boolean, dram: string, f: (d: Daemon) => Promise<T>): Promise<T> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-bench-native-'));
  const d = new Daemon(root, native, dram);
  try {
    await d.start();
    return await f(d);
  } finally {
    await d.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
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

async function runTrial(t: Trial): Promise<Sample[]> {
  switch (t.kind) {
    case 'fuse-read':
      return withDaemon(t.native, '1G', async (d) => {
        const dir = path.join(d.mnt, 'kv', 'bench');
        fs.mkdirSync(dir, { recursive: true });
        const blocks = Math.max(2, Math.min(8, Math.floor((256 * MiB) / t.sizeBytes)));
        const files: string[] = [];
        const contents: Buffer[] = [];
        for (let i = 0; i < blocks; i++) {
          const data = randomBytes(t.sizeBytes);
          files.push(path.join(dir, `b${i}`));
          contents.push(data);
          fs.writeFileSync(files[i], data);
        }
        const target = Buffer.alloc(t.sizeBytes);
        for (let i = 0; i < blocks; i++) {
          readWhole(files[i], target); // warm-up: every block in DRAM, code paths hot
          if (!target.equals(contents[i])) throw new Error(`wrong bytes read from ${files[i]}`);
        }
        const ms: number[] = [];
        for (let r = 0; r < t.runs; r++) ms.push(timeMs(() => files.forEach((f) => readWhole(f, target))) / blocks);
        return [{ figure: 'read', ms, bytes: t.sizeBytes }];
      });
    case 'client-read':
      return withDaemon(true, '1G', async (d) => {
        const { LocalClient } = await import('../mount/socket/client');
        const file = path.join(d.mnt, 'kv', 'bench', 'c');
        fs.mkdirSync(path.dirname(file), { recursive: true });
        const data = randomBytes(t.sizeBytes);
        fs.writeFileSync(file, data);
        const client = await LocalClient.connect(d.mnt);
        try {
          const target = Buffer.alloc(t.sizeBytes);
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
            { figure: 'memcpy', ms: memcpy, bytes: t.sizeBytes },
            { figure: 'client read (views + copy out)', ms: copy, bytes: t.sizeBytes },
            { figure: 'client open+release (views only)', ms: views, bytes: t.sizeBytes },
          ];
        } finally {
          await client.close();
        }
      });
    case 'hash': {
      const { StreamHasher } = await import('../store/hash');
      const data = randomBytes(t.sizeBytes);
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
        { figure: 'node:crypto one core', ms: ref, bytes: t.sizeBytes },
        { figure: 'streamed on a worker', ms, bytes: t.sizeBytes, extra: { maxLoopDelayMs: maxDelayMs } },
      ];
    }
    case 'write-1g': {
      const ms: number[] = [];
      const delays: number[] = [];
      const p99s: number[] = [];
      const data = randomBytes(t.sizeBytes);
      for (let r = 0; r < t.runs; r++) {
        data.writeUInt32LE(r, 0); // new content each run
        await withDaemon(t.native, '2G', async (d) => {
          const file = path.join(d.mnt, 'kv', 'bench', 'big');
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
          const s = d.stats();
          delays.push(s.eventLoop.delayMaxMs);
          p99s.push(s.eventLoop.delayP99Ms);
        });
      }
      return [{ figure: 'write+close', ms, bytes: t.sizeBytes, extra: { maxLoopDelayMsWorst: Math.max(...delays), loopDelayP99MsWorst: Math.max(...p99s) } }];
    }
  }
}

// ---- driver ---------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv[0] === '--trial') {
    const samples = await runTrial(JSON.parse(argv[1]) as Trial);
    process.stdout.write(JSON.stringify(samples) + '\n');
    return;
  }
  const quick = argv.includes('--quick');
  const filter = argv.includes('--filter') ? argv[argv.indexOf('--filter') + 1] : undefined;
  const date = new Date().toISOString().slice(0, 10);
  const out = argv.includes('--out') ? argv[argv.indexOf('--out') + 1] : path.join(__dirname, '..', '..', 'bench', 'results', `native-${date}-${os.hostname()}${quick ? '-quick' : ''}.json`);
  const trials = trialTable(quick).filter((t) => filter === undefined || t.name.includes(filter));
  const results: Array<Trial & { samples: Sample[] }> = [];
  const started = Date.now();
  for (const [i, t] of trials.entries()) {
    process.stderr.write(`[${i + 1}/${trials.length}] ${t.name} ... `);
    const r = spawnSync(process.execPath, [__filename, '--trial', JSON.stringify(t)], { encoding: 'utf8', maxBuffer: 64 * MiB, env: { ...process.env, CASCADE_NATIVE: t.native ? '1' : '0' } });
    if (r.status !== 0) throw new Error(`trial ${t.name} failed:\n${r.stderr}`);
    const samples = JSON.parse(r.stdout.trim().split('\n').pop()!) as Sample[];
    results.push({ ...t, samples });
    process.stderr.write(samples.map((s) => `${s.figure} ${f3(gbPerS(s.bytes, spread(s.ms).median))} GB/s`).join('; ') + '\n');
  }
  const rows = results.flatMap((t) =>
    t.samples.map((s) => {
      const sp = spread(s.ms);
      return { trial: t.name, figure: s.figure, medianMs: sp.median, minMs: sp.min, maxMs: sp.max, gbPerS: gbPerS(s.bytes, sp.median), extra: s.extra ?? {} };
    }),
  );
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, JSON.stringify({ schema: 'cascade-native-bench/1', date, wallTimeMs: Date.now() - started, quick, environment: hostEnvironment(), trials: results, rows }, null, 2) + '\n');
  console.log('| trial | figure | median ms (min-max) | GB/s (median) | notes |\n|---|---|---:|---:|---|');
  for (const r of rows) {
    const notes = Object.entries(r.extra).map(([k, v]) => `${k} ${f3(v)}`).join(', ');
    console.log(`| ${r.trial} | ${r.figure} | ${f3(r.medianMs)} (${f3(r.minMs)}-${f3(r.maxMs)}) | ${f3(r.gbPerS)} | ${notes} |`);
  }
  console.error(`results: ${out}`);
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exitCode = 1;
});
