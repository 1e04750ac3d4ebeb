import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as path from 'node:path';
import { isCascadeError } from '../../store/errors';
import { Store } from '../../store/store';
import { rmDir, tmpDir } from './helpers';

const CYCLES = Number(process.env.CASCADE_CRASH_CYCLES ?? 50);

function isSelfConsistent(data: Buffer): boolean {
  return data.length >= 32 && crypto.createHash('sha256').update(data.subarray(32)).digest().equals(data.subarray(0, 32));
}

/** Run the child until it has printed `ready`, let it work for `workMs`, then SIGKILL it. */
function runAndKill(dataDir: string, cycle: number, workMs: number): Promise<{ synced: Map<string, string> }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'crash-child.js'), dataDir, String(cycle), String(cycle * 7919 + 1)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const synced = new Map<string, string>();
    let out = '';
    let err = '';
    let timer: NodeJS.Timeout | undefined;
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      let nl: number;
      while ((nl = out.indexOf('\n')) >= 0) {
        const line = out.slice(0, nl);
        out = out.slice(nl + 1);
        if (line === 'ready' && !timer) timer = setTimeout(() => child.kill('SIGKILL'), workMs);
        const m = /^S (\S+) ([0-9a-f]{64})$/.exec(line);
        if (m) synced.set(m[1], m[2]);
      }
    });
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (signal === 'SIGKILL') resolve({ synced });
      else reject(new Error(`child exited by itself (code ${code}): ${err}`));
    });
  });
}

describe('Store: crash loop (SIGKILL at random points)', function () {
  this.timeout(CYCLES * 10_000 + 60_000);
  let dir = '';
  before(() => (dir = tmpDir('crash')));
  after(() => rmDir(dir));

  it(`keeps every synced block and never serves a corrupt one over ${CYCLES} kill -9 cycles`, async () => {
    const allSynced = new Map<string, string>();
    const counts = { cycles: 0, synced: 0, namesChecked: 0, readable: 0, lostUnsynced: 0, corrupt: 0, lostVersions: 0 };
    let rnd = 12345;
    for (let cycle = 0; cycle < CYCLES; cycle++) {
      rnd = (rnd * 1103515245 + 12345) & 0x7fffffff;
      const { synced } = await runAndKill(dir, cycle, 20 + (rnd % 300));
      for (const [k, v] of synced) allSynced.set(k, v);

      const store = await Store.open({ dataDir: dir, dramCapacityBytes: 8 * 1024 * 1024, prefault: false, log: () => undefined });
      try {
        counts.lostVersions += (await store.stats()).recovery.lostVersions;
        // Every synced block ever: present, byte-exact, same content address.
        for (const [name, sha] of allSynced) {
          const data = await store.get(name);
          assert.ok(isSelfConsistent(data), `${name} synced and self-consistent`);
          assert.equal(crypto.createHash('sha256').update(data).digest('hex'), sha, `${name} has its synced content`);
        }
        // Everything this cycle wrote: readable and correct, or absent; never wrong bytes.
        for (const name of await store.list(`m/c${cycle}/`)) {
          counts.namesChecked++;
          try {
            const data = await store.get(name);
            if (isSelfConsistent(data)) counts.readable++;
            else counts.corrupt++;
          } catch (e) {
            if (!isCascadeError(e)) throw e;
            if (e.code === 'ECORRUPT') counts.corrupt++;
            else counts.lostUnsynced++;
          }
        }
      } finally {
        await store.close();
      }
      counts.cycles++;
    }
    counts.synced = allSynced.size;
    process.stdout.write(`      crash loop: ${JSON.stringify(counts)}\n`);
    assert.equal(counts.corrupt, 0, 'no corrupt read served');
    assert.equal(counts.cycles, CYCLES);
    assert.ok(counts.synced > 0, 'the child synced blocks before being killed');
  });
});
