/**
 * The transport limit for Cascade's remote-DRAM tier on this machine, measured by real peers that run
 * as their own processes:
 *
 * - fiReadLimit: native/bench/fi_read_bench.cc, a plain C++ libfabric program (FI_EP_RDM, provider
 *   $FI_PROVIDER, default tcp;ofi_rxm). `serve` registers a buffer for remote reads and drives progress;
 *   `read` pulls whole blocks out of it with fi_read (1 MiB pieces, 16 outstanding) for a few seconds
 *   and checks the bytes. Built on first use by bench/build-fi-read-bench.sh (plain cmake, pkg-config
 *   libfabric) into native/bench/build/.
 * - iperf3Limit: iperf3 TCP between `iperf3 -s -1` and `iperf3 -c ... -J` on the same address.
 *
 * Both start and stop their own processes and leave nothing running, on errors too.
 *
 *   node -e "require('./dist/bench/transport-peers').fiReadLimit({ blockBytes: 2 << 20, seconds: 3 }).then(console.log)"
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { MiB } from '../store/constants';
import { singleLine } from './common';

const REPO = path.join(__dirname, '..', '..');
const BUILD_SCRIPT = path.join(REPO, 'bench', 'build-fi-read-bench.sh');
const FI_READ_BENCH = path.join(REPO, 'native', 'bench', 'build', 'fi_read_bench');
const DEFAULT_ADDR = '127.0.0.1';
/** How long a server gets to come up and print its address. */
const START_TIMEOUT_MS = 30_000;
/** A client gets its measuring time plus this much before it is killed. */
const CLIENT_GRACE_MS = 60_000;
/** After its stdin ends, a server gets this long to exit before SIGTERM (and as long again before SIGKILL). */
const STOP_GRACE_MS = 2_000;

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The last lines of a child's stderr, for error messages. */
const tail = (text: string) => text.trim().split('\n').slice(-3).join(' | ');

/** A loopback (or `addr`) TCP port that was free a moment ago. */
export function freePort(addr = DEFAULT_ADDR): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, addr, () => {
      const a = server.address();
      server.close(() => (a !== null && typeof a === 'object' ? resolve(a.port) : reject(new Error(`no port on ${addr}`))));
    });
  });
}

// ---- child processes ------------------------------------------------------------------------------

/** A peer server as a child: its stdout and stderr collected, its exit known. */
class PeerProcess {
  private readonly child: ChildProcess;
  stdout = '';
  stderr = '';
  exited = false;
  private exitCode: string | null = null;

  constructor(
    readonly name: string,
    command: string,
    args: string[],
  ) {
    this.child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdout?.setEncoding('utf8');
    this.child.stdout?.on('data', (d: string) => (this.stdout += d));
    this.child.stderr?.setEncoding('utf8');
    this.child.stderr?.on('data', (d: string) => (this.stderr = (this.stderr + d).slice(-4000)));
    // Nobody may write to a server that has exited: its stdin's EPIPE is not an error here.
    this.child.stdin?.on('error', () => undefined);
    this.child.on('exit', (code, signal) => {
      this.exited = true;
      this.exitCode = String(code ?? signal);
    });
    this.child.on('error', (e) => {
      this.exited = true;
      this.exitCode = e.message;
    });
  }

  /** Why it is gone, for error messages. */
  get why(): string {
    return `${this.name} exited (${this.exitCode ?? '?'})${this.stderr.trim() ? `: ${tail(this.stderr)}` : ''}`;
  }

  /** Waits until its stdout has a line matching `test` (throws if it exits or times out first). */
  async waitForLine(test: (line: string) => boolean, timeoutMs: number): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const line = this.stdout.split('\n').find((l, i, all) => i < all.length - 1 && test(l));
      if (line !== undefined) return line;
      if (this.exited) throw new Error(this.why);
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${this.name} to start`);
      await delay(10);
    }
  }

  /** Whether it exits within `ms`. */
  private async exitsWithin(ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (!this.exited && Date.now() < deadline) await delay(10);
    return this.exited;
  }

  /** stdin ends; SIGTERM after STOP_GRACE_MS if still alive; SIGKILL after as long again. Never throws. */
  async stop(): Promise<void> {
    if (this.exited) return;
    this.child.stdin?.end();
    if (await this.exitsWithin(STOP_GRACE_MS)) return;
    this.child.kill('SIGTERM');
    if (await this.exitsWithin(STOP_GRACE_MS)) return;
    this.child.kill('SIGKILL');
    await this.exitsWithin(STOP_GRACE_MS);
  }
}

/** Runs a client to its end and returns its stdout; throws on a non-zero exit or after `timeoutMs` (SIGKILL). */
function runClient(name: string, command: string, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (d: string) => (stdout += d));
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (d: string) => (stderr = (stderr + d).slice(-4000)));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`${name}: ${e.message}`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(stdout);
      else {
        const why = timedOut ? `timed out after ${timeoutMs} ms` : `exited with ${code ?? signal}`;
        // iperf3 -J reports its errors in the JSON on stdout, not on stderr.
        const said = stderr.trim() ? tail(stderr) : (/"error":\s*"([^"]*)"/.exec(stdout)?.[1] ?? '');
        reject(new Error(`${name} ${why}${said ? `: ${said}` : ''}`));
      }
    });
  });
}

// ---- libfabric fi_read ----------------------------------------------------------------------------

/** fi_read_bench's path; builds it (bench/build-fi-read-bench.sh) when missing. */
export function fiReadBench(): string {
  if (fs.existsSync(FI_READ_BENCH)) return FI_READ_BENCH;
  const r = spawnSync('bash', [BUILD_SCRIPT], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.status !== 0) throw new Error(`${BUILD_SCRIPT} failed (${r.status ?? r.signal ?? r.error?.message}): ${tail(r.stderr ?? '')}`);
  if (!fs.existsSync(FI_READ_BENCH)) throw new Error(`${BUILD_SCRIPT} did not build ${FI_READ_BENCH}`);
  return FI_READ_BENCH;
}

/** What `fi_read_bench serve` prints. Key and base stay strings: they are 64-bit values. */
interface Served {
  address: string;
  key: string;
  base: string;
  bytes: number;
}

function parseServed(line: string): Served {
  const v = JSON.parse(line) as Record<string, unknown>;
  // JSON.parse would round a key or address above 2^53: the digits are taken from the text.
  const key = /"key":(\d+)/.exec(line)?.[1];
  const base = /"base":(\d+)/.exec(line)?.[1];
  if (typeof v.address !== 'string' || !/^[0-9a-f]+$/.test(v.address) || key === undefined || base === undefined || typeof v.bytes !== 'number') {
    throw new Error(`fi_read_bench serve: unexpected output ${line}`);
  }
  return { address: v.address, key, base, bytes: v.bytes };
}

export interface FiReadLimit {
  blockBytes: number;
  /** Bytes read / the timed blocks' summed time, in 1e9 bytes/s. */
  GBps: number;
  /** Timed blocks (after one untimed warm-up block that sets up the connection). */
  blocks: number;
  meanBlockMs: number;
}

function parseRead(line: string): FiReadLimit {
  const v = JSON.parse(line) as Record<string, unknown>;
  const num = (k: string): number => {
    const x = v[k];
    if (typeof x !== 'number' || !Number.isFinite(x) || x < 0) throw new Error(`fi_read_bench read: bad ${k} in ${line}`);
    return x;
  };
  return { blockBytes: num('blockBytes'), GBps: num('GBps'), blocks: num('blocks'), meanBlockMs: num('meanBlockMs') };
}

/**
 * Reads blocks of `blockBytes` with libfabric fi_read from a server process for `seconds`, both on
 * `addr` (default 127.0.0.1). The server holds max(4 blocks, 256 MiB); reads rotate through it.
 */
export async function fiReadLimit(opts: { blockBytes: number; seconds: number; addr?: string }): Promise<FiReadLimit> {
  const bin = fiReadBench();
  const addr = opts.addr ?? DEFAULT_ADDR;
  const bytes = Math.max(opts.blockBytes * 4, 256 * MiB);
  const server = new PeerProcess('fi_read_bench serve', bin, ['serve', '--addr', addr, '--bytes', String(bytes)]);
  try {
    const served = parseServed(await server.waitForLine((l) => l.startsWith('{'), START_TIMEOUT_MS));
    // The client's stall check (10 s without a completion) also catches a server that dies mid-run.
    const out = await runClient(
      'fi_read_bench read',
      bin,
      [
        'read',
        ...['--peer', served.address, '--key', served.key, '--base', served.base, '--bytes', String(served.bytes)],
        ...['--block-bytes', String(opts.blockBytes), '--seconds', String(opts.seconds), '--addr', addr],
      ],
      opts.seconds * 1000 + CLIENT_GRACE_MS,
    );
    return parseRead(singleLine('fi_read_bench read', out));
  } catch (e) {
    // A failed read is often the server's doing: say so when it is gone.
    if (server.exited && e instanceof Error && !e.message.startsWith(server.name)) e.message += `; ${server.why}`;
    throw e;
  } finally {
    await server.stop();
  }
}

// ---- iperf3 ---------------------------------------------------------------------------------------

/**
 * iperf3 TCP from a client to a one-shot server, both on `addr` (default 127.0.0.1), for `seconds`
 * (`parallel` streams, default 1). GB/s is end.sum_received (1e9 bytes/s).
 */
export async function iperf3Limit(opts: { seconds: number; addr?: string; parallel?: number }): Promise<{ GBps: number }> {
  const addr = opts.addr ?? DEFAULT_ADDR;
  const port = String(await freePort(addr));
  // --forceflush: the "listening" line reaches the pipe at once (stdout is not a terminal).
  const server = new PeerProcess('iperf3 -s', 'iperf3', ['-s', '-1', '-B', addr, '-p', port, '--forceflush']);
  try {
    await server.waitForLine((l) => l.includes('listening'), START_TIMEOUT_MS);
    const args = ['-c', addr, '-p', port, '-t', String(opts.seconds), '-J'];
    if (opts.parallel !== undefined && opts.parallel > 1) args.push('-P', String(opts.parallel));
    const out = await runClient('iperf3 -c', 'iperf3', args, opts.seconds * 1000 + CLIENT_GRACE_MS);
    const doc = JSON.parse(out) as { error?: string; end?: { sum_received?: { bits_per_second?: unknown } } };
    if (typeof doc.error === 'string') throw new Error(`iperf3 -c: ${doc.error}`);
    const bps = doc.end?.sum_received?.bits_per_second;
    if (typeof bps !== 'number' || !Number.isFinite(bps) || bps <= 0) throw new Error('iperf3 -c: no end.sum_received.bits_per_second');
    return { GBps: bps / 8 / 1e9 };
  } finally {
    await server.stop();
  }
}
