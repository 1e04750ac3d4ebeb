/**
 * The daemon's side of the same-node client (mount/local-client.ts): a Unix socket (abstract namespace,
 * so nothing is left on disk) over which a local process asks for a block by path and gets where its
 * bytes lie in the shared DRAM arena. The process maps the arena read-only through
 * /proc/<daemon pid>/fd/<arena fd> (the kernel lets only a process that may ptrace the daemon open that:
 * root or the same user) and reads the bytes in place, without FUSE and without a copy.
 *
 * Protocol: one JSON object per line each way.
 *   -> {"id":1,"op":"open","path":"/kv/m/a"}   <- {"id":1,"ok":true,"hold":7,"sha256":..,"sizeBytes":..,"version":..,"extents":[[off,len],..]}
 *   -> {"id":2,"op":"release","hold":7}         <- {"id":2,"ok":true}
 *   errors: {"id":..,"ok":false,"code":"ENOENT","message":..}
 * While a hold is open the block stays in the arena (not evicted, not reclaimed) and its version is the
 * one a read-only open would have read at that moment. A closed connection releases all its holds.
 */
import { randomBytes } from 'node:crypto';
import * as net from 'node:net';
import { isCascadeError } from '../store/errors';
import type { DramHold } from '../store/store';

export const LOCAL_PROTOCOL_VERSION = 1;
/** A request line longer than this closes the connection (paths are at most 4 KiB). */
export const LOCAL_REQUEST_MAX_BYTES = 64 * 1024;
/** Holds one connection may have open at once: a leaking client cannot pin the whole arena by count. */
export const LOCAL_HOLDS_PER_CONNECTION_MAX = 4096;
export const LOCAL_CONNECTIONS_MAX = 256;

export interface ClientInfo {
  protocol: number;
  /** Abstract socket name, written with a leading '@' (the kernel's '\0'). */
  socket: string;
  pid: number;
  arenaFd: number;
  arenaBytes: number;
}

export interface LocalServerOptions {
  hold(path: string): Promise<DramHold>;
  region: { fd: number; lengthBytes: number };
  log(message: string): void;
}

export class LocalServer {
  private readonly connections = new Set<net.Socket>();
  private holdsOpen = 0;

  private constructor(
    private readonly server: net.Server,
    private readonly name: string,
    private readonly options: LocalServerOptions,
  ) {}

  static async start(options: LocalServerOptions): Promise<LocalServer> {
    const name = `cascade-${process.pid}-${randomBytes(6).toString('hex')}`;
    const server = net.createServer();
    server.maxConnections = LOCAL_CONNECTIONS_MAX;
    const s = new LocalServer(server, name, options);
    server.on('connection', (socket) => s.serve(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen('\0' + name, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (e) => options.log(`local client socket: ${e.message}`));
    return s;
  }

  info(): ClientInfo {
    return { protocol: LOCAL_PROTOCOL_VERSION, socket: '@' + this.name, pid: process.pid, arenaFd: this.options.region.fd, arenaBytes: this.options.region.lengthBytes };
  }

  /** Holds open across all connections (statistics and tests). */
  get openHolds(): number {
    return this.holdsOpen;
  }

  async close(): Promise<void> {
    for (const c of this.connections) c.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private serve(socket: net.Socket): void {
    this.connections.add(socket);
    const holds = new Map<number, DramHold>();
    let nextHold = 1;
    let buffered = '';
    let chain = Promise.resolve(); // requests of one connection are answered in order
    const send = (reply: object) => {
      if (!socket.destroyed) socket.write(JSON.stringify(reply) + '\n');
    };
    const handle = async (line: string) => {
      let req: { id?: unknown; op?: unknown; path?: unknown; hold?: unknown };
      try {
        req = JSON.parse(line);
      } catch {
        return send({ id: null, ok: false, code: 'EINVAL', message: 'a request is one JSON object per line' });
      }
      const id = typeof req.id === 'number' ? req.id : null;
      try {
        if (req.op === 'open') {
          if (typeof req.path !== 'string' || !req.path.startsWith('/')) throw new ProtocolError('EINVAL', 'open needs an absolute path within the mount');
          if (holds.size >= LOCAL_HOLDS_PER_CONNECTION_MAX) throw new ProtocolError('EBUSY', `a connection may hold at most ${LOCAL_HOLDS_PER_CONNECTION_MAX} blocks`);
          const h = await this.options.hold(req.path);
          if (socket.destroyed) return h.release(); // the client left while we loaded it
          const hold = nextHold++;
          holds.set(hold, h);
          this.holdsOpen++;
          const v = h.version;
          return send({ id, ok: true, hold, sha256: v.sha256, sizeBytes: v.sizeBytes, version: v.version, committedAtMs: v.timeMs, extents: h.extents });
        }
        if (req.op === 'release') {
          const h = typeof req.hold === 'number' ? holds.get(req.hold) : undefined;
          if (h === undefined) throw new ProtocolError('EINVAL', `no hold ${String(req.hold)} on this connection`);
          holds.delete(req.hold as number);
          this.holdsOpen--;
          h.release();
          return send({ id, ok: true });
        }
        throw new ProtocolError('EINVAL', `unknown op ${String(req.op)}`);
      } catch (e) {
        if (e instanceof ProtocolError || isCascadeError(e)) return send({ id, ok: false, code: (e as { code: string }).code, message: (e as Error).message });
        this.options.log(`local client request failed: ${String(e)}`);
        return send({ id, ok: false, code: 'EIO', message: 'internal error (logged by the daemon)' });
      }
    };
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      buffered += chunk;
      if (buffered.length > LOCAL_REQUEST_MAX_BYTES && !buffered.includes('\n')) {
        send({ id: null, ok: false, code: 'EINVAL', message: `request over ${LOCAL_REQUEST_MAX_BYTES} bytes` });
        socket.destroy();
        return;
      }
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        if (line.trim() !== '') chain = chain.then(() => handle(line));
      }
    });
    const cleanup = () => {
      this.connections.delete(socket);
      void chain.then(() => {
        for (const h of holds.values()) h.release();
        this.holdsOpen -= holds.size;
        holds.clear();
      });
    };
    socket.on('close', cleanup);
    socket.on('error', () => socket.destroy());
  }
}

class ProtocolError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}
