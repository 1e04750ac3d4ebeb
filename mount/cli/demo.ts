// demo: the quick start's short tour of the store on a temporary data directory.
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Argv } from 'yargs';
import { defaultDataDir } from '../daemon/defaults';
import { formatBytes } from './size';
import { jsonOption, print, sizeArg, withStore, type CommonArgs } from './common';
import { formatStats } from './stats';

/** A short tour of the store: KV blocks, a shared system prompt deduplicated, a pin, versions, stats. */
async function demo(args: CommonArgs & { blocks: number; blockSize: string; keep: boolean }): Promise<void> {
  const dataDir = args.keep ? (args.data ?? defaultDataDir()) : fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-demo-'));
  const blockBytes = sizeArg(args.blockSize, 'block-size');
  const log = (line: string) => process.stderr.write(`${line}\n`);
  log(`cascade demo: data directory ${dataDir}${args.keep ? '' : ' (temporary)'}, DRAM ${args.dram}`);
  try {
    await withStore({ ...args, data: dataDir }, async (store) => {
      const prompt = crypto.randomBytes(blockBytes);
      // Generated before timing, so the figure is the store's, not the random generator's.
      const own = Array.from({ length: args.blocks }, () => crypto.randomBytes(blockBytes));
      const progress = process.stderr.isTTY && !args.json;
      const t0 = performance.now();
      for (let i = 0; i < args.blocks; i++) {
        // Every request starts with the same system-prompt block, then its own blocks.
        await store.put(`llama-3-8b/req-${i}/block-000`, prompt);
        await store.put(`llama-3-8b/req-${i}/block-001`, own[i]);
        if (progress) process.stderr.write(`\r  put ${2 * (i + 1)} / ${2 * args.blocks} blocks`);
      }
      const putMs = performance.now() - t0;
      if (progress) process.stderr.write('\n');
      await store.pin('llama-3-8b/req-0/block-000');
      const v1 = await store.put('llama-3-8b/req-0/block-001', crypto.randomBytes(blockBytes));
      await store.sync(v1.name);
      const t1 = performance.now();
      let readBytes = 0;
      for (let i = 0; i < args.blocks; i++) readBytes += (await store.get(`llama-3-8b/req-${i}/block-000`)).length;
      const getMs = performance.now() - t1;
      const versions = await store.versions('llama-3-8b/req-0/block-001');
      const old = await store.get('llama-3-8b/req-0/block-001', { version: 1 });
      await store.idle(); // let the flusher write everything back, so the disk tier shows it
      const stats = await store.stats();
      const summary = {
        dataDir,
        blocksPut: 2 * args.blocks + 1,
        blockBytes,
        putGBps: (2 * args.blocks * blockBytes) / (putMs / 1000) / 1e9,
        getGBps: readBytes / (getMs / 1000) / 1e9,
        versionsOfReq0Block1: versions.map((v) => ({ version: v.version, sha256: v.sha256.slice(0, 12), timeMs: v.timeMs })),
        version1Bytes: old.length,
        pinned: (await store.stat('llama-3-8b/req-0/block-000')).pinned,
        stats,
      };
      print(args, summary, () =>
        [
          `put ${summary.blocksPut} blocks of ${formatBytes(blockBytes)}: ${summary.putGBps.toFixed(2)} GB/s; read ${args.blocks} shared blocks: ${summary.getGBps.toFixed(2)} GB/s`,
          `versions of llama-3-8b/req-0/block-001: ${versions.map((v) => v.version).join(', ')} (version 1 still readable: ${formatBytes(old.length)})`,
          formatStats(stats),
        ].join('\n'),
      );
    }, {}, true);
  } finally {
    if (!args.keep) fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

export function demoCommand(y: Argv): Argv {
  return y.command(
    'demo',
    'run a short tour of the store on a temporary data directory and print what happened',
    (y) =>
      jsonOption(y)
        .option('blocks', { type: 'number', default: 64, describe: 'requests to simulate (2 blocks each)' })
        .option('block-size', { type: 'string', default: '2M', describe: 'KV block size' })
        .option('keep', { type: 'boolean', default: false, describe: 'use --data instead of a temporary directory and keep it' })
        .option('data', { type: 'string', describe: 'with --keep: the data directory to use and keep', defaultDescription: defaultDataDir() })
        .option('dram', { type: 'string', default: '512M', describe: 'DRAM tier size for the demo' }),
    (a) => demo(a as unknown as CommonArgs & { blocks: number; blockSize: string; keep: boolean }),
  );
}
