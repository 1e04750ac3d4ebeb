/**
 * The same-node client's server without a mount: who it serves (the kernel's SO_PEERCRED, faked here
 * per connection), the file-mode check, the per-user hold bound, and a seeded fuzz of malformed
 * requests that must never take the server down.
 */
import * as assert from 'node:assert/strict';
import * as net from 'node:net';
import { spawnSync } from 'node:child_process';
import type { Caller } from '../../fs/access';
import type { FileAttr } from '../../fs/types';
import { LOCAL_HOLDS_PER_USER_MAX, LocalServer } from '../../mount/socket/server';
import { CascadeError } from '../../store/errors';
import type { DramHold } from '../../store/store';

const DAEMON_UID = 1234;

interface Reply {
  id: number | null;
  ok: boolean;
  code?: string;
  message?: string;
  hold?: number;
}

/** One connection speaking the line protocol. */
class Conn {
  private buffered = '';
  private readonly waiting: Array<(r: Reply) => void> = [];
  private readonly replies: Reply[] = [];
  closed = false;
  private constructor(readonly socket: net.Socket) {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      this.buffered += chunk;
      let nl: number;
      while ((nl = this.buffered.indexOf('\n')) >= 0) {
        const r = JSON.parse(this.buffered.slice(0, nl)) as Reply;
        this.buffered = this.buffered.slice(nl + 1);
        const w = this.waiting.shift();
        if (w) w(r);
        else this.replies.push(r);
      }
    });
    socket.on('close', () => (this.closed = true));
    socket.on('error', () => undefined);
  }
  static async open(server: LocalServer): Promise<Conn> {
    const socket = net.connect(server.info().socket.replace(/^@/, '\0'));
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    return new Conn(socket);
  }
  next(): Promise<Reply> {
    const r = this.replies.shift();
    if (r) return Promise.resolve(r);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('no reply within 5 s')), 5_000);
      this.waiting.push((x) => {
        clearTimeout(t);
        resolve(x);
      });
    });
  }
  async ask(req: object): Promise<Reply> {
    this.socket.write(JSON.stringify(req) + '\n');
    return this.next();
  }
  close(): void {
    this.socket.destroy();
  }
}

function attr(mode: number): FileAttr {
  return { mode: 0o100000 | mode, sizeBytes: 1, nlink: 1, uid: DAEMON_UID, gid: DAEMON_UID, mtimeMs: 0, ctimeMs: 0, atimeMs: 0, ino: 9 };
}

describe('same-node client server (mount/local-server), without a mount', function () {
  this.timeout(60_000);
  let server: LocalServer;
  /** The caller the next accepted connection is attributed to (the test's stand-in for SO_PEERCRED). */
  let nextPeer: Caller | Error = { uid: DAEMON_UID, gid: DAEMON_UID, pid: 1 };
  const modes = new Map<string, number>();
  let holdsTaken = 0;
  let holdsReleased = 0;
  const logged: string[] = [];

  before(async function () {
    server = await LocalServer.start({
      hold: async (p: string): Promise<DramHold> => {
        if (!modes.has(p)) throw new CascadeError('ENOENT', `${p} not found`);
        holdsTaken++;
        let released = false;
        return {
          version: { name: p.slice(4), version: 1, sha256: 'a'.repeat(64), sizeBytes: 1, timeMs: 0, ino: 9 },
          extents: [[0, 1]],
          release: () => {
            assert.equal(released, false, 'a hold is released once');
            released = true;
            holdsReleased++;
          },
        } as unknown as DramHold;
      },
      getattr: async (p: string) => {
        const m = modes.get(p);
        if (m === undefined) throw new CascadeError('ENOENT', `${p} not found`);
        return attr(m);
      },
      peer: () => {
        if (nextPeer instanceof Error) throw nextPeer;
        return nextPeer;
      },
      uid: DAEMON_UID,
      region: { fd: 0, lengthBytes: 0 },
      log: (m) => logged.push(m),
    });
    modes.set('/kv/m/open', 0o644);
    modes.set('/kv/m/secret', 0o000);
    modes.set('/kv/m/ownerless', 0o044); // group and others may read; the owner may not (as in the kernel)
  });

  after(async function () {
    await server?.close();
  });

  it('names its abstract socket with all of sun_path, so a client that connects with the bare name reaches it', function () {
    const name = server.info().socket;
    assert.equal(name.length, 1 + 107);
    // Python connects with exactly the bytes it is given (no padding): the name must fill sun_path.
    const r = spawnSync('python3', ['-c', `import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(b'\\0' + sys.argv[1].encode()); print('ok')`, name.slice(1)], {
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'ok');
  });

  it('serves the daemon\'s user and root; refuses anyone else with EACCES and takes no hold', async function () {
    for (const uid of [DAEMON_UID, 0]) {
      nextPeer = { uid, gid: uid, pid: 1 };
      const c = await Conn.open(server);
      const r = await c.ask({ id: 1, op: 'open', path: '/kv/m/open' });
      assert.equal(r.ok, true, `uid ${uid}: ${r.message}`);
      c.close();
    }
    nextPeer = { uid: 4321, gid: DAEMON_UID, pid: 1 }; // even in the file's group
    const c = await Conn.open(server);
    const before = holdsTaken;
    const r = await c.ask({ id: 2, op: 'open', path: '/kv/m/open' });
    assert.equal(r.code, 'EACCES');
    assert.match(r.message ?? '', /uid 4321 reads through the mount/);
    assert.equal(holdsTaken, before);
    c.close();
  });

  it('checks each open against the file\'s mode as the kernel would: root passes, the owner needs r', async function () {
    nextPeer = { uid: DAEMON_UID, gid: DAEMON_UID, pid: 1 };
    const owner = await Conn.open(server);
    assert.equal((await owner.ask({ id: 1, op: 'open', path: '/kv/m/secret' })).code, 'EACCES');
    assert.equal((await owner.ask({ id: 2, op: 'open', path: '/kv/m/ownerless' })).code, 'EACCES');
    assert.equal((await owner.ask({ id: 3, op: 'open', path: '/kv/m/missing' })).code, 'ENOENT');
    owner.close();
    nextPeer = { uid: 0, gid: 0, pid: 1 };
    const root = await Conn.open(server);
    assert.equal((await root.ask({ id: 4, op: 'open', path: '/kv/m/secret' })).ok, true);
    root.close();
  });

  it('closes a connection whose caller the kernel cannot name, serving nothing', async function () {
    nextPeer = new Error('SO_PEERCRED failed');
    const c = await Conn.open(server);
    c.socket.write(JSON.stringify({ id: 1, op: 'open', path: '/kv/m/open' }) + '\n');
    for (let i = 0; i < 100 && !c.closed; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(c.closed, true);
    assert.ok(logged.some((m) => /cannot tell who connected/.test(m)));
  });

  it(`bounds holds per user across connections (${LOCAL_HOLDS_PER_USER_MAX}), and frees them when connections close`, async function () {
    nextPeer = { uid: DAEMON_UID, gid: DAEMON_UID, pid: 1 };
    const a = await Conn.open(server);
    const b = await Conn.open(server);
    const fromA = Math.floor(LOCAL_HOLDS_PER_USER_MAX / 2);
    const open = (c: Conn, n: number, first: number) =>
      Promise.all(Array.from({ length: n }, (_, i) => c.ask({ id: first + i, op: 'open', path: '/kv/m/open' })));
    // Pipelined: requests of one connection are answered in order.
    assert.ok((await open(a, fromA, 0)).every((r) => r.ok));
    assert.ok((await open(b, LOCAL_HOLDS_PER_USER_MAX - fromA, 0)).every((r) => r.ok));
    assert.equal(server.openHolds, LOCAL_HOLDS_PER_USER_MAX);
    const over = await b.ask({ id: -1, op: 'open', path: '/kv/m/open' });
    assert.equal(over.code, 'EBUSY');
    assert.match(over.message ?? '', /across its connections/);
    // Root is another user: its own bound.
    nextPeer = { uid: 0, gid: 0, pid: 1 };
    const r = await Conn.open(server);
    assert.equal((await r.ask({ id: 1, op: 'open', path: '/kv/m/open' })).ok, true);
    r.close();
    a.close();
    b.close();
    for (let i = 0; i < 250 && server.openHolds > 0; i++) await new Promise((res) => setTimeout(res, 20));
    assert.equal(server.openHolds, 0);
    assert.equal(holdsReleased, holdsTaken, 'every hold taken was released exactly once');
  });

  it('survives a seeded fuzz of malformed requests and still answers a good one on the same server', async function () {
    let seed = 0x5eed;
    const rand = () => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed / 2 ** 32;
    };
    const junk = (): string => {
      const n = Math.floor(rand() * 200);
      return Buffer.from(Array.from({ length: n }, () => Math.floor(rand() * 256))).toString('latin1');
    };
    const values = [null, true, 0, -1, 1e308, NaN, 'x', '/', '/kv', '/kv/m/open', '../../etc/passwd', [], {}, [1, 2], { a: 1 }, 'é\u0000', 2 ** 53];
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
    const requests: string[] = [];
    for (let i = 0; i < 2_000; i++) {
      const kind = rand();
      if (kind < 0.3) requests.push(junk().replace(/\n/g, ' '));
      else if (kind < 0.4) requests.push('{'.repeat(Math.floor(rand() * 5_000)));
      else if (kind < 0.5) requests.push(JSON.stringify(pick(values)));
      else {
        const req: Record<string, unknown> = {};
        for (const k of ['id', 'op', 'path', 'hold', '__proto__', 'constructor']) if (rand() < 0.6) req[k] = pick([...values, 'open', 'release']);
        requests.push(JSON.stringify(req));
      }
    }
    nextPeer = { uid: DAEMON_UID, gid: DAEMON_UID, pid: 1 };
    let answered = 0;
    for (let batch = 0; batch < requests.length; batch += 200) {
      const c = await Conn.open(server);
      const lines = requests.slice(batch, batch + 200);
      c.socket.write(lines.join('\n') + '\n');
      // Every line that is not blank gets exactly one reply, in order, on a connection that stays open.
      for (const line of lines) {
        if (line.trim() === '') continue;
        const r = await c.next();
        assert.equal(typeof r.ok, 'boolean', `reply to ${JSON.stringify(line).slice(0, 80)}`);
        answered++;
      }
      assert.equal(c.closed, false);
      c.close();
    }
    assert.ok(answered > 1_900, `${answered} replies`);
    // A line that never ends past the request limit closes its connection, not the server.
    const big = await Conn.open(server);
    big.socket.write('x'.repeat(200 * 1024));
    for (let i = 0; i < 100 && !big.closed; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(big.closed, true, 'an endless line closes the connection');
    const good = await Conn.open(server);
    const r = await good.ask({ id: 7, op: 'open', path: '/kv/m/open' });
    assert.equal(r.ok, true);
    assert.equal((await good.ask({ id: 8, op: 'release', hold: r.hold })).ok, true);
    good.close();
    for (let i = 0; i < 250 && server.openHolds > 0; i++) await new Promise((res) => setTimeout(res, 20));
    assert.equal(server.openHolds, 0, 'fuzzed opens released their holds at close');
    assert.equal(holdsReleased, holdsTaken);
  });
});
