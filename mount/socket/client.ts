/**
 * The same-node client: reads Cascade blocks by path without FUSE and without copying, by mapping the
 * daemon's shared DRAM arena read-only and returning views of a block's bytes (the idea of 3FS's
 * USRBIO). Version semantics are the mount's: open() returns the version a read-only open of the file
 * would read now, and that version's bytes stay in place until release().
 *
 *   const c = await LocalClient.connect('/mnt/cascade');
 *   const b = await c.open('/mnt/cascade/kv/llama/prefix-0');   // or 'kv/llama/prefix-0'
 *   consume(b.views);            // Buffers over the arena, in block order; b.sizeBytes in all
 *   await b.release();           // after this the views may show other blocks' bytes: do not use them
 *   await c.close();
 *
 * Needs the native addon (for the mapping), a daemon with the native DRAM tier, and permission to open
 * /proc/<daemon pid>/fd/<n> (root, or the daemon's user).
 */
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { requireNative, type NativeMappingBinding } from '../../native';
import type { ClientInfo } from './server';
import { LOCAL_PROTOCOL_VERSION } from './server';

/** Requests waiting for an answer on one client, at most. */
export const LOCAL_CLIENT_PENDING_MAX = 1024;
export const LOCAL_CLIENT_TIMEOUT_MS = 30_000;
/** The arena is viewed through windows of this size (a Buffer is at most 4 GiB in Node 20). */
export const LOCAL_CLIENT_WINDOW_BYTES = 1024 * 1024 * 1024;

export class LocalClientError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface LocalBlock {
  sha256: string;
  sizeBytes: number;
  version: number;
  committedAtMs: number;
  /** Read-only views over the arena, in block order; their lengths add up to sizeBytes. */
  views: Buffer[];
  /** Let the daemon move or drop the block again. Idempotent. */
  release(): Promise<void>;
}

interface Reply {
  id: number | null;
  ok: boolean;
  code?: string;
  message?: string;
  [k: string]: unknown;
}

export class LocalClient {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();
  private buffered = '';
  private readonly windows = new Map<number, Buffer>();
  private closed = false;

  private constructor(
    readonly mountpoint: string,
    readonly info: ClientInfo,
    private readonly socket: net.Socket,
    private readonly mapping: NativeMappingBinding,
  ) {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => this.onData(chunk));
    socket.on('close', () => this.failAll(new LocalClientError('ECONNRESET', 'the daemon closed the connection')));
    socket.on('error', () => undefined); // 'close' follows and fails what is pending
  }

  /** Connect to the daemon serving `mountpoint` (reads MOUNT/.cascade/client.json). */
  static async connect(mountpoint: string): Promise<LocalClient> {
    const native = requireNative('the same-node client');
    const mnt = path.resolve(mountpoint);
    let info: ClientInfo;
    try {
      info = JSON.parse(await fs.promises.readFile(path.join(mnt, '.cascade', 'client.json'), 'utf8')) as ClientInfo;
    } catch (e) {
      throw new LocalClientError('ENOENT', `${mnt} offers no same-node client (is it a Cascade mount with the native addon?): ${(e as Error).message}`);
    }
    if (info.protocol !== LOCAL_PROTOCOL_VERSION) throw new LocalClientError('EPROTO', `daemon speaks protocol ${info.protocol}, this client ${LOCAL_PROTOCOL_VERSION}`);
    let mapping: NativeMappingBinding;
    try {
      mapping = new native.Mapping(`/proc/${info.pid}/fd/${info.arenaFd}`);
    } catch (e) {
      throw new LocalClientError('EACCES', `cannot map the daemon's arena (needs root or the daemon's user): ${(e as Error).message}`);
    }
    const socket = net.connect(info.socket.replace(/^@/, '\0'));
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', resolve);
        socket.once('error', reject);
      });
    } catch (e) {
      mapping.close();
      throw new LocalClientError('ECONNREFUSED', `cannot reach the daemon at ${info.socket}: ${(e as Error).message}`);
    }
    return new LocalClient(mnt, info, socket, mapping);
  }

  /** The block at `file`: a path under the mountpoint, or one relative to it ('kv/model/name'). */
  async open(file: string): Promise<LocalBlock> {
    const rel = this.relative(file);
    const r = await this.request({ op: 'open', path: rel });
    const extents = r.extents as Array<[number, number]>;
    const hold = r.hold as number;
    const views = extents.flatMap(([offsetBytes, lengthBytes]) => this.slice(offsetBytes, lengthBytes));
    let released = false;
    return {
      sha256: r.sha256 as string,
      sizeBytes: r.sizeBytes as number,
      version: r.version as number,
      committedAtMs: r.committedAtMs as number,
      views,
      release: async () => {
        if (released || this.closed) return;
        released = true;
        await this.request({ op: 'release', hold });
      },
    };
  }

  /** Copy a whole block into `target` (or a new Buffer) and release it: the safe, one-copy read. */
  async read(file: string, target?: Buffer): Promise<Buffer> {
    const b = await this.open(file);
    try {
      const out = target ?? Buffer.allocUnsafe(b.sizeBytes);
      if (out.length < b.sizeBytes) throw new LocalClientError('ERANGE', `target holds ${out.length} bytes, the block has ${b.sizeBytes}`);
      let at = 0;
      for (const v of b.views) at += v.copy(out, at);
      return out.subarray(0, b.sizeBytes);
    } finally {
      await b.release();
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.socket.end(); // the daemon releases every hold of this connection
    this.windows.clear();
    this.mapping.close(); // views still referenced keep the memory mapped until collected
    this.failAll(new LocalClientError('EBADF', 'client closed'));
  }

  /**
   * Views of [offsetBytes, +lengthBytes) of the arena, cut from windows made once per client: a new
   * external Buffer per block would add its size to V8's external memory and bring on full GCs.
   */
  private slice(offsetBytes: number, lengthBytes: number): Buffer[] {
    const out: Buffer[] = [];
    while (lengthBytes > 0) {
      const w = Math.floor(offsetBytes / LOCAL_CLIENT_WINDOW_BYTES);
      const start = w * LOCAL_CLIENT_WINDOW_BYTES;
      let window = this.windows.get(w);
      if (window === undefined) {
        window = this.mapping.view(start, Math.min(LOCAL_CLIENT_WINDOW_BYTES, this.mapping.lengthBytes - start));
        this.windows.set(w, window);
      }
      const within = offsetBytes - start;
      const n = Math.min(lengthBytes, window.length - within);
      if (n <= 0) throw new LocalClientError('ERANGE', `extent at ${offsetBytes} lies outside the arena`);
      out.push(window.subarray(within, within + n));
      offsetBytes += n;
      lengthBytes -= n;
    }
    return out;
  }

  private relative(file: string): string {
    const abs = path.isAbsolute(file) ? path.resolve(file) : path.join(this.mountpoint, file);
    if (abs !== this.mountpoint && !abs.startsWith(this.mountpoint + '/')) {
      throw new LocalClientError('EINVAL', `${file} is not under ${this.mountpoint}`);
    }
    return abs.slice(this.mountpoint.length) || '/';
  }

  private request(body: object): Promise<Reply> {
    if (this.closed) return Promise.reject(new LocalClientError('EBADF', 'client closed'));
    if (this.pending.size >= LOCAL_CLIENT_PENDING_MAX) return Promise.reject(new LocalClientError('EBUSY', `more than ${LOCAL_CLIENT_PENDING_MAX} requests in flight`));
    const id = this.nextId++;
    return new Promise<Reply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new LocalClientError('ETIMEDOUT', `no answer from the daemon in ${LOCAL_CLIENT_TIMEOUT_MS} ms`));
      }, LOCAL_CLIENT_TIMEOUT_MS);
      this.pending.set(id, { resolve, reject, timer });
      this.socket.write(JSON.stringify({ id, ...body }) + '\n');
    }).then((r) => {
      if (!r.ok) throw new LocalClientError(r.code ?? 'EIO', r.message ?? 'request failed');
      return r;
    });
  }

  private onData(chunk: string): void {
    this.buffered += chunk;
    let nl: number;
    while ((nl = this.buffered.indexOf('\n')) >= 0) {
      const line = this.buffered.slice(0, nl);
      this.buffered = this.buffered.slice(nl + 1);
      let r: Reply;
      try {
        r = JSON.parse(line) as Reply;
      } catch {
        continue;
      }
      const p = typeof r.id === 'number' ? this.pending.get(r.id) : undefined;
      if (!p) continue;
      this.pending.delete(r.id as number);
      clearTimeout(p.timer);
      p.resolve(r);
    }
  }

  private failAll(e: Error): void {
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(e);
    }
    this.pending.clear();
  }
}
