/**
 * The daemon's side of the same-node client (mount/socket/client.ts): a Unix socket (abstract namespace,
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
 *
 * Who may use it: the kernel tells who connected (SO_PEERCRED, recorded at connect, not claimed by the
 * client). Only root and the daemon's own user are served: the mapping exposes the whole arena (every
 * block, whatever its file's mode), and only they may map it anyway. Anyone else gets EACCES for
 * every request and takes no hold: they read through the mount, where file modes apply. Handing them a
 * read-only descriptor would not help: the arena is one file, so the descriptor would reach every
 * block; a per-block descriptor would need a copy, which is what the mount already does. Each open is
 * also checked against the file's mode as the kernel would (root passes; the owner needs r), and holds
 * are bounded per user across connections, not only per connection.
 */
import { randomBytes } from 'node:crypto';
import * as net from 'node:net';
import { isCascadeError } from '../../store/errors';
import type { DramHold } from '../../store/store';
import type { FileAttr } from '../../fs/types';
import { mayRead, type Caller } from '../../fs/access';

export const LOCAL_PROTOCOL_VERSION = 1;
/** A request line longer than this closes the connection (paths are at most 4 KiB). */
export const LOCAL_REQUEST_MAX_BYTES = 64 * 1024;
/** Holds one connection may have open at once: a leaking client cannot pin the whole arena by count. */
export const LOCAL_HOLDS_PER_CONNECTION_MAX = 4096;
export const LOCAL_CONNECTIONS_MAX = 256;
/** sun_path is 108 bytes; an abstract name takes all of it after its leading NUL. */
const ABSTRACT_NAME_BYTES = 107;
/** Holds one user may have open across all connections: 256 connections cannot multiply the bound. */
export const LOCAL_HOLDS_PER_USER_MAX = 4096;

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
  /** The file's attributes (its mode and owner decide who may open it). */
  getattr(path: string): Promise<FileAttr>;
  /** Who connected (SO_PEERCRED of the accepted socket); throws when the kernel cannot say. */
  peer(socket: net.Socket): Caller;
  /** The daemon's user: with root, the only one served. */
  uid: number;
  region: { fd: number; lengthBytes: number };
  log(message: string): void;
}

export class LocalServer {
  private readonly connections = new Set<net.Socket>();
  private holdsOpen = 0;
  private readonly holdsByUser = new Map<number, number>();

  private constructor(
    private readonly server: net.Server,
    private readonly name: string,
    private readonly options: LocalServerOptions,
  ) {}

  static async start(options: LocalServerOptions): Promise<LocalServer> {
    // Node binds an abstract name padded with NULs to the whole sun_path (108 bytes), so a client in
    // another language that connects with just the name is refused. A name that fills sun_path itself
    // (107 bytes after the leading NUL) is the same either way.
    const stem = `cascade-${process.pid}-`;
    const name = stem + randomBytes(64).toString('hex').slice(0, ABSTRACT_NAME_BYTES - stem.length);
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
    let peer: Caller;
    try {
      peer = this.options.peer(socket);
    } catch (e) {
      // Fail closed: a connection whose caller is unknown gets nothing.
      this.options.log(`local client: cannot tell who connected (${String(e)}); closing the connection`);
      socket.destroy();
      return;
    }
    const served = peer.uid === 0 || peer.uid === this.options.uid;
    const userHolds = (delta: number) => {
      const n = (this.holdsByUser.get(peer.uid) ?? 0) + delta;
      if (n === 0) this.holdsByUser.delete(peer.uid);
      else this.holdsByUser.set(peer.uid, n);
      this.holdsOpen += delta;
    };
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
        req = JSON.parse(line) as typeof req;
      } catch {
        req = undefined as unknown as typeof req;
      }
      // null, numbers, strings and arrays parse too: only a plain object is a request.
      if (typeof req !== 'object' || req === null || Array.isArray(req)) {
        return send({ id: null, ok: false, code: 'EINVAL', message: 'a request is one JSON object per line' });
      }
      const id = typeof req.id === 'number' ? req.id : null;
      try {
        if (req.op === 'open') {
          if (typeof req.path !== 'string' || !req.path.startsWith('/')) throw new ProtocolError('EINVAL', 'open needs an absolute path within the mount');
          if (!served) {
            throw new ProtocolError(
              'EACCES',
              `the same-node client serves only root and the daemon's user (uid ${this.options.uid}); uid ${peer.uid} reads through the mount`,
            );
          }
          if (holds.size >= LOCAL_HOLDS_PER_CONNECTION_MAX) throw new ProtocolError('EBUSY', `a connection may hold at most ${LOCAL_HOLDS_PER_CONNECTION_MAX} blocks`);
          if ((this.holdsByUser.get(peer.uid) ?? 0) >= LOCAL_HOLDS_PER_USER_MAX) {
            throw new ProtocolError('EBUSY', `uid ${peer.uid} holds ${LOCAL_HOLDS_PER_USER_MAX} blocks across its connections, the most one user may`);
          }
          if (!mayRead(await this.options.getattr(req.path), peer)) throw new ProtocolError('EACCES', `${req.path}: permission denied (its mode)`);
          const h = await this.options.hold(req.path);
          if (socket.destroyed) return h.release(); // the client left while we loaded it
          const hold = nextHold++;
          holds.set(hold, h);
          userHolds(1);
          const v = h.version;
          return send({ id, ok: true, hold, sha256: v.sha256, sizeBytes: v.sizeBytes, version: v.version, committedAtMs: v.timeMs, extents: h.extents });
        }
        if (req.op === 'release') {
          const h = typeof req.hold === 'number' ? holds.get(req.hold) : undefined;
          if (h === undefined) throw new ProtocolError('EINVAL', `no hold ${String(req.hold)} on this connection`);
          holds.delete(req.hold as number);
          userHolds(-1);
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
        // handle() answers every error itself; a throw here is a bug, logged, and must not stop the chain.
        if (line.trim() !== '') chain = chain.then(() => handle(line)).catch((e: unknown) => this.options.log(`local client: request handler failed: ${String(e)}`));
      }
    });
    const cleanup = () => {
      this.connections.delete(socket);
      void chain.then(() => {
        for (const h of holds.values()) h.release();
        if (holds.size > 0) userHolds(-holds.size);
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
