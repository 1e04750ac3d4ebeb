/**
 * kill -9 loop on a real mount: a writer (test/posix/crash_writer.py) creates, overwrites (O_TRUNC) and
 * renames files over each other with fsync, saying before each change what it is about to make
 * visible and after it what fsync acknowledged; the daemon is killed at a random moment, remounted, and
 * every file is checked: an acknowledged file has its last acknowledged content or content written to it
 * after that (never older, never torn, never empty unless written empty); a file never acknowledged is
 * absent or holds content written to it. CI: 20 cycles; `npm run test:crash:long`: 1,000
 * (CASCADE_CRASH_CYCLES), on both engines (CASCADE_ENGINE).
 */
import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { canMount, Daemon } from './daemon';

const WRITER = path.join(__dirname, '..', '..', '..', 'test', 'posix', 'crash_writer.py');
const CYCLES = Number(process.env.CASCADE_CRASH_CYCLES ?? 20);
const NAMES = 24;

interface NameState {
  /** The content the last acknowledgement confirmed (or what a remount showed), if any. */
  durable?: string;
  /** Contents announced for the name since then (any may be visible after a crash). */
  since: Set<string>;
}

function sha(file: string): string {
  return createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

describe(`kill -9 loop on a real mount (${CYCLES} cycles)`, function () {
  this.timeout(Math.max(300_000, CYCLES * 15_000));
  let root: string;
  let daemon: Daemon | undefined;

  before(function () {
    if (!canMount(['fusermount', 'python3'])) this.skip();
  });
  beforeEach(() => (root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-crashloop-'))));
  afterEach(async () => {
    await daemon?.stop('SIGKILL');
    daemon = undefined;
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('every fsync-acknowledged file survives byte-exact; nothing unacknowledged is half-visible', async function () {
    const mnt = path.join(root, 'mnt');
    const dir = path.join(mnt, 'kv', 'm');
    const state = new Map<string, NameState>();
    const totals = { cycles: 0, acked: 0, checked: 0, newerThanAck: 0, tmpLeft: 0 };
    for (let cycle = 0; cycle < CYCLES; cycle++) {
      daemon = new Daemon(mnt, path.join(root, 'data'), ['--dram', '32M']);
      await daemon.start();
      // Check what the last crash left, against what the writers said.
      for (const [name, st] of state) {
        const f = path.join(dir, name);
        const exists = fs.existsSync(f);
        if (st.durable !== undefined) {
          assert.ok(exists, `cycle ${cycle}: ${name} was acknowledged and is gone`);
        }
        if (!exists) continue;
        const got = sha(f);
        totals.checked++;
        const allowed = got === st.durable || st.since.has(got);
        assert.ok(allowed, `cycle ${cycle}: ${name} holds ${got}, neither its acknowledged content ${st.durable} nor one written since`);
        if (got !== st.durable) totals.newerThanAck++;
        st.durable = got; // on disk now: the next crash cannot take it back
        st.since.clear();
      }
      if (cycle > 0 && fs.existsSync(dir)) totals.tmpLeft += fs.readdirSync(dir).filter((n) => n.startsWith('tmp-')).length;
      // A writer, killed with the daemon after a random while.
      const writer = spawn('python3', [WRITER, dir, String(cycle + 1), String(NAMES)], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      writer.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      const exited = new Promise<void>((r) => writer.once('exit', () => r()));
      await new Promise((r) => setTimeout(r, 300 + Math.floor(Math.random() * 700)));
      // The writer goes before the dead mount is detached (it would write into the directory beneath).
      await daemon.stop('SIGKILL', async () => {
        writer.kill('SIGKILL');
        await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      });
      daemon = undefined;
      for (const line of out.split('\n')) {
        const [kind, name, hash] = line.split(' ');
        if (hash === undefined || hash.length !== 64) continue; // a line cut by the kill
        const st = state.get(name) ?? { since: new Set<string>() };
        state.set(name, st);
        if (kind === 'W') st.since.add(hash);
        if (kind === 'A') {
          st.durable = hash;
          st.since.clear();
          totals.acked++;
        }
      }
      totals.cycles++;
    }
    daemon = new Daemon(mnt, path.join(root, 'data'), ['--dram', '32M']);
    await daemon.start();
    for (const [name, st] of state) {
      if (st.durable === undefined) continue;
      const got = sha(path.join(dir, name));
      assert.ok(got === st.durable || st.since.has(got), `${name} after the last crash`);
    }
    assert.ok(totals.acked > CYCLES, `the writers got acknowledgements (${totals.acked})`);
    console.log(`      crash loop: ${JSON.stringify(totals)}`);
  });
});
