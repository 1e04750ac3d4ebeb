/**
 * The full-cache suite's workload: a KV cache in production is always full, so writes must run as fast
 * with DRAM full as with DRAM empty. One process (python3, as an inference engine's file backend would)
 * creates files in a loop: open, one write, close. The Cascade trial is a fresh `cascade mount` (the
 * native engine) with the trial's --dram (memoryBytes); the working set (blocks) is 4x what DRAM holds
 * (at least 32,768 files; trials.ts), so the last part of the run writes into a full cache, every new
 * block pushing an older one out. Files go 1,000 to a directory, so both windows see directories of the
 * same size.
 *
 * Figures: `create` = creates/s over the last quarter of what DRAM holds at the end of the working set
 * (Cascade: DRAM full), `create-empty` (Cascade only) = over the first quarter (DRAM empty); the goal is
 * create >= 0.8x create-empty. Checks: DRAM slot bytes per block byte (goal <= 2, small blocks packed).
 * The peers create the same files over the same window: a private tmpfs, and bindfs (C libfuse) over a
 * directory on the same disk as Cascade's data. One counted run each (the working set is the run).
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { slabSlotBytes } from '../../store/tiers/native-dram';
import { CascadeDaemon, mountTmpfs, startBindfsOver, trialLayout, unmountTmpfs } from '../mounts';
import type { CheckValue, FigureSamples, FullCacheTrialArgs } from '../protocol';

const KiB = 1024;
const MiB = 1024 * KiB;

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

/** What one file takes in the arena (its slab slot, or whole 64 KiB pages: the default page size). */
export function slotFor(fileBytes: number, pageBytes = 64 * KiB): number {
  return slabSlotBytes(fileBytes, pageBytes) ?? Math.ceil(fileBytes / pageBytes) * pageBytes;
}

/** The file counts of a trial: DRAM holds `holds` files; the two windows are its first and last quarter. */
function windowsOf(args: FullCacheTrialArgs): { holds: number; quarter: number; empty: [number, number]; full: [number, number] } {
  const holds = Math.floor(args.memoryBytes / slotFor(args.blockBytes));
  const quarter = Math.floor(holds / 4);
  return { holds, quarter, empty: [0, quarter], full: [args.blocks - quarter, args.blocks] };
}

const createFigure = (figure: string, label: string, files: number, perS: number): FigureSamples => ({
  figure,
  label,
  unit: 'ops/s',
  bytesPerRun: 0,
  opsPerRun: files,
  timesMs: [(files / perS) * 1000],
});

/** One full-cache trial: the creates on one system. */
export async function runFullCacheTrial(args: FullCacheTrialArgs): Promise<{ figures: FigureSamples[]; checks: Record<string, CheckValue> }> {
  const layout = trialLayout(args.scratchDir);
  const { holds, quarter, empty, full } = windowsOf(args);
  const files = args.blocks;
  const lastQuarter = `creates/s over files ${full[0]}-${full[1]} (the last quarter of what DRAM holds)`;
  const facts = { files, dramHoldsFiles: holds, dramBytes: args.memoryBytes, fileBytes: args.blockBytes };
  switch (args.system) {
    case 'cascade': {
      const cliPath = path.join(__dirname, '..', '..', 'mount', 'cli.js');
      const daemon = new CascadeDaemon(layout, { cliPath, kernelCache: false, dramBytes: args.memoryBytes, env: { CASCADE_ENGINE: 'native' } });
      await daemon.start();
      let rates: number[];
      let stats: { evictions: number; evictionsAhead: number; demotions: number; tiers: Array<{ name: string; blockBytes?: number; slotBytes?: number }> };
      try {
        rates = createFiles(path.join(layout.mountDir, 'kv', 'bench', 'full'), files, args.blockBytes, [empty, full]);
        await new Promise((r) => setTimeout(r, 300)); // stats.json snapshots are 100 ms old at most
        stats = JSON.parse(fs.readFileSync(path.join(layout.mountDir, '.cascade', 'stats.json'), 'utf8'));
      } finally {
        await daemon.stop();
      }
      const dram = stats.tiers.find((x) => x.name === 'dram');
      if (!dram) throw new Error('stats.json has no dram tier');
      return {
        figures: [
          createFigure('create', `${lastQuarter}: DRAM full, every new block pushes an older one out`, quarter, rates[1]),
          createFigure('create-empty', `creates/s over files 0-${quarter} (DRAM empty)`, quarter, rates[0]),
        ],
        checks: {
          ...facts,
          slotOverBlockBytes: (dram.slotBytes ?? 0) / Math.max(1, dram.blockBytes ?? 0),
          evictions: stats.evictions,
          evictionsAhead: stats.evictionsAhead,
          demotions: stats.demotions,
        },
      };
    }
    case 'tmpfs': {
      mountTmpfs(layout.tmpfsDir, files * args.blockBytes * 2 + 256 * MiB);
      try {
        const [rate] = createFiles(path.join(layout.tmpfsDir, 'full'), files, args.blockBytes, [full]);
        return { figures: [createFigure('create', lastQuarter, quarter, rate)], checks: facts };
      } finally {
        unmountTmpfs(layout.tmpfsDir);
      }
    }
    case 'bindfs': {
      const b = await startBindfsOver(layout, true);
      try {
        const [rate] = createFiles(path.join(layout.mountDir, 'full'), files, args.blockBytes, [full]);
        return { figures: [createFigure('create', lastQuarter, quarter, rate)], checks: { ...facts, backing: 'bindfs over a disk directory' } };
      } finally {
        await b.close();
      }
    }
  }
}
