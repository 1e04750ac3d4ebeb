/**
 * The full-cache benchmark (issue 18): a KV cache in production is always full, so writes must run as
 * fast with DRAM full as with DRAM empty. One process (python3, as an inference engine's file backend
 * would) creates files in a loop: open, one write, close. Each trial is a fresh `cascade mount` (the
 * native engine) with a given --dram; the working set is 4x what DRAM holds (at least 32,768 files), so
 * the second half of the run writes into a full cache, every new block pushing an older one out.
 * Files go 1,000 to a directory, so both windows see directories of the same size.
 *
 * For each trial: creates/s while DRAM is empty (the first quarter of what it holds) and while it is
 * full (the last quarter of the working set), their ratio (goal: >= 0.8), and the DRAM slot bytes per
 * block byte (goal: <= 2, small blocks packed). The peers, in the same run, create the same number of
 * files of the same size: a private tmpfs, and bindfs (C libfuse) over a directory on the same disk as
 * Cascade's data.
 *
 *   node dist/bench/full-cache-bench.js [--quick] [--out FILE]   -> bench/results/full-cache-<date>.json and a table
 *
 * `npm run bench` (peers-bench) runs it too, in a process of its own, and puts its table in its report.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Daemon } from '../test/mount/daemon';
import { f3, hostEnvironment } from './common';
import { mountTmpfs, unmountTmpfs } from './mount-systems';
import { slabSlotBytes } from '../store/tiers/native-dram';

const KiB = 1024;
const MiB = 1024 * KiB;

interface Trial {
  dramBytes: number;
  fileBytes: number;
}

const TRIALS: Trial[] = [
  { dramBytes: 64 * MiB, fileBytes: 4 * KiB },
  { dramBytes: 512 * MiB, fileBytes: 64 * KiB },
  { dramBytes: 2048 * MiB, fileBytes: 256 * KiB },
];
const QUICK_TRIALS: Trial[] = [
  { dramBytes: 64 * MiB, fileBytes: 4 * KiB },
  { dramBytes: 512 * MiB, fileBytes: 64 * KiB },
];
const MIN_FILES = 32_768;
/** Working set, in multiples of what DRAM holds. */
const WORKING_SET_FACTOR = 4;

/** python3 creating `count` files of `size` bytes under `dir`; creates/s over the given windows. */
function createFiles(dir: string, count: number, size: number, windows: Array<[number, number]>): number[] {
  const script = `
import json, os, sys, time
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
windows = json.loads(sys.argv[4])
os.makedirs(d, exist_ok=True)
data = [os.urandom(size) for _ in range(64)]
stamps = {}
edges = sorted({e for w in windows for e in w})
t0 = time.monotonic()
for i in range(n + 1):
    if i in edges: stamps[i] = time.monotonic()
    if i == n: break
    # Unique content per file (no dedup): a counter in the first 8 bytes.
    block = i.to_bytes(8, "little") + data[i % 64][8:]
    # 1,000 files per directory, so the empty and the full windows see directories of the same size.
    if i % 1000 == 0: os.makedirs(f"{d}/{i // 1000}", exist_ok=True)
    with open(f"{d}/{i // 1000}/{i}", "wb") as f: f.write(block)
print(json.dumps([(b - a) / (stamps[b] - stamps[a]) for a, b in windows]))
`;
  const r = spawnSync('python3', ['-c', script, dir, String(count), String(size), JSON.stringify(windows)], { encoding: 'utf8', maxBuffer: 1 << 20 });
  if (r.status !== 0) throw new Error(`python3 create loop failed in ${dir}: ${r.stderr.trim().slice(-500)}`);
  return JSON.parse(r.stdout.trim()) as number[];
}

export interface Row {
  dramBytes: number;
  fileBytes: number;
  files: number;
  dramHoldsFiles: number;
  cascade: { emptyPerS: number; fullPerS: number; fullOverEmpty: number; slotOverBlockBytes: number; evictions: number; evictionsAhead: number; demotions: number };
  tmpfsPerS: number;
  bindfsPerS: number;
  pass: { fullAtLeast0p8xEmpty: boolean; slotsAtMost2x: boolean };
}

/** What one file takes in the arena (its slab slot, or whole 64 KiB pages: the default page size). */
function slotFor(fileBytes: number, pageBytes = 64 * KiB): number {
  return slabSlotBytes(fileBytes, pageBytes) ?? Math.ceil(fileBytes / pageBytes) * pageBytes;
}

/** The markdown table of a run's rows, with each goal's PASS/FAIL. */
export function fullCacheTable(rows: Row[]): string {
  const lines = [
    '| --dram | file | files (DRAM holds) | cascade empty /s | cascade full /s | full ÷ empty (goal >= 0.8) | slots ÷ bytes (goal <= 2) | tmpfs /s | bindfs /s | evictions (ahead) |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.dramBytes / MiB} MiB | ${r.fileBytes / KiB} KiB | ${r.files} (${r.dramHoldsFiles}) | ${r.cascade.emptyPerS.toFixed(0)} | ${r.cascade.fullPerS.toFixed(0)} | ` +
        `${f3(r.cascade.fullOverEmpty)} ${r.pass.fullAtLeast0p8xEmpty ? 'PASS' : 'FAIL'} | ${f3(r.cascade.slotOverBlockBytes)} ${r.pass.slotsAtMost2x ? 'PASS' : 'FAIL'} | ` +
        `${r.tmpfsPerS.toFixed(0)} | ${r.bindfsPerS.toFixed(0)} | ${r.cascade.evictions} (${r.cascade.evictionsAhead}) |`,
    );
  }
  return lines.join('\n');
}

export interface FullCacheDoc {
  schema: string;
  date: string;
  wallTimeMs: number;
  quick: boolean;
  rows: Row[];
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const outAt = process.argv.indexOf('--out');
  const outArg = outAt >= 0 ? process.argv[outAt + 1] : undefined;
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-fullbench-'));
  const rows: Row[] = [];
  const started = Date.now();
  try {
    for (const t of quick ? QUICK_TRIALS : TRIALS) {
      const holds = Math.floor(t.dramBytes / slotFor(t.fileBytes));
      const files = Math.max(MIN_FILES, WORKING_SET_FACTOR * holds);
      const quarter = Math.floor(holds / 4);
      const windows: Array<[number, number]> = [
        [0, quarter],
        [files - quarter, files],
      ];
      const tag = `${t.dramBytes / MiB}m-${t.fileBytes / KiB}k`;
      process.stderr.write(`full-cache: --dram ${t.dramBytes / MiB} MiB, ${t.fileBytes / KiB} KiB files: ${files} files (DRAM holds ${holds})\n`);

      const mnt = path.join(root, `mnt-${tag}`);
      fs.mkdirSync(mnt);
      const daemon = new Daemon(mnt, path.join(root, `data-${tag}`), ['--dram', `${t.dramBytes / MiB}M`, '--engine', 'native']);
      await daemon.start();
      let cascadeRates: number[];
      let stats: { evictions: number; evictionsAhead: number; demotions: number; tiers: Array<{ name: string; blockBytes?: number; slotBytes?: number }> };
      try {
        cascadeRates = createFiles(path.join(mnt, 'kv', 'bench', 'full'), files, t.fileBytes, windows);
        await new Promise((r) => setTimeout(r, 300)); // stats.json snapshots are 100 ms old at most
        stats = JSON.parse(fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8'));
      } finally {
        await daemon.stop();
        fs.rmSync(path.join(root, `data-${tag}`), { recursive: true, force: true });
      }
      const dram = stats.tiers.find((x) => x.name === 'dram')!;

      const tmp = path.join(root, `tmpfs-${tag}`);
      mountTmpfs(tmp, files * t.fileBytes * 2 + 256 * MiB);
      let tmpfsRate: number;
      try {
        [tmpfsRate] = createFiles(path.join(tmp, 'full'), files, t.fileBytes, [[files - quarter, files]]);
      } finally {
        unmountTmpfs(tmp);
      }

      const src = path.join(root, `bindsrc-${tag}`);
      const bmnt = path.join(root, `bindmnt-${tag}`);
      fs.mkdirSync(src);
      fs.mkdirSync(bmnt);
      const b = spawnSync('bindfs', ['-o', 'big_writes', src, bmnt], { encoding: 'utf8' });
      if (b.status !== 0) throw new Error(`bindfs failed: ${b.stderr}`);
      let bindfsRate: number;
      try {
        [bindfsRate] = createFiles(path.join(bmnt, 'full'), files, t.fileBytes, [[files - quarter, files]]);
      } finally {
        spawnSync('fusermount', ['-uz', bmnt]);
        fs.rmSync(src, { recursive: true, force: true });
      }

      const [empty, full] = cascadeRates;
      const slotRatio = (dram.slotBytes ?? 0) / Math.max(1, dram.blockBytes ?? 0);
      rows.push({
        dramBytes: t.dramBytes,
        fileBytes: t.fileBytes,
        files,
        dramHoldsFiles: holds,
        cascade: { emptyPerS: empty, fullPerS: full, fullOverEmpty: full / empty, slotOverBlockBytes: slotRatio, evictions: stats.evictions, evictionsAhead: stats.evictionsAhead, demotions: stats.demotions },
        tmpfsPerS: tmpfsRate,
        bindfsPerS: bindfsRate,
        pass: { fullAtLeast0p8xEmpty: full >= 0.8 * empty, slotsAtMost2x: slotRatio <= 2 },
      });
    }
    const doc = { schema: 'cascade-full-cache-bench/1', date: new Date().toISOString(), wallTimeMs: Date.now() - started, environment: hostEnvironment(), quick, rows };
    const outDir = path.join(__dirname, '..', '..', 'bench', 'results');
    fs.mkdirSync(outDir, { recursive: true });
    const out = outArg ?? path.join(outDir, `full-cache-${doc.date.slice(0, 10)}${quick ? '-quick' : ''}.json`);
    fs.writeFileSync(out, JSON.stringify(doc, null, 2) + '\n');
    const lines = [fullCacheTable(rows)];
    process.stdout.write(lines.join('\n') + `\n\nresults: ${out}\n`);
  } finally {
    for (const line of fs.readFileSync('/proc/mounts', 'utf8').split('\n')) {
      const m = line.split(' ')[1];
      if (m?.startsWith(root)) spawnSync('umount', ['-l', m]);
    }
    fs.rmSync(root, { recursive: true, force: true });
  }
}

if (require.main === module) {
  main().catch((e: unknown) => {
    process.stderr.write(`full-cache-bench: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  });
}
