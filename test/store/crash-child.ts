/**
 * Child process for the crash loop: puts self-verifying blocks (first 32 bytes = SHA-256 of the rest)
 * and syncs some; prints `S <name> <sha256>` after each sync returns. Killed with SIGKILL by the parent.
 * argv: dataDir cycle seed
 */
import * as crypto from 'node:crypto';
import { Store } from '../../store/store';
import { seededBytes } from './helpers';

export function selfVerifying(seed: number, sizeBytes: number): Buffer {
  const body = seededBytes(seed, sizeBytes - 32);
  return Buffer.concat([crypto.createHash('sha256').update(body).digest(), body]);
}

async function main(): Promise<void> {
  const [dataDir, cycleArg, seedArg] = process.argv.slice(2);
  const cycle = Number(cycleArg);
  let rnd = Number(seedArg) >>> 0 || 1;
  const next = () => {
    rnd ^= rnd << 13;
    rnd >>>= 0;
    rnd ^= rnd >>> 17;
    rnd ^= rnd << 5;
    rnd >>>= 0;
    return rnd;
  };
  // A small DRAM so that eviction, flushing and write-through all happen while we are killed.
  const store = await Store.open({ dataDir, dramCapacityBytes: 2 * 1024 * 1024, prefault: false, dramPageBytes: 4096 });
  process.stdout.write('ready\n');
  for (let i = 0; ; i++) {
    const name = `m/c${cycle}/b${i}`;
    // Some blocks repeat across cycles (shared prefixes): dedup under crashes.
    const seed = next() % 4 === 0 ? 1 + (next() % 8) : cycle * 100_000 + i + 1000;
    const data = selfVerifying(seed, 33 + (next() % (96 * 1024)));
    const v = await store.put(name, data);
    if (next() % 5 === 0) {
      await store.sync(name);
      process.stdout.write(`S ${name} ${v.sha256}\n`);
    }
  }
}

if (require.main === module) {
  main().catch((e) => {
    process.stderr.write(`crash-child: ${String(e)}\n`);
    process.exit(1);
  });
}
