/**
 * Backing files for FUSE passthrough (native engine, `--passthrough`): one unlinked file in /dev/shm
 * per block content (SHA-256), filled from the DRAM arena once and registered with the kernel, which
 * then reads it directly: reads of a passthrough open never reach the daemon. Bounded by bytes; an
 * entry in use is never evicted, and an evicted one stays readable by the files already open on it
 * (the kernel holds its own reference).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CascadeError } from '../../store/errors';

export interface BackingSession {
  openBacking(fd: number): number;
  closeBacking(backingId: number): void;
  writeArenaTo(fd: number, sizeBytes: number, extents: number[]): Promise<void>;
}

interface Entry {
  sha256: string;
  sizeBytes: number;
  fd: number;
  backingId: number;
  users: number;
}

export interface Backing {
  backingId: number;
  sha256: string;
  release(): void;
}

const SHM_DIR = '/dev/shm';

export class BackingCache {
  private readonly entries = new Map<string, Entry>(); // insertion order = least recently used first
  private readonly filling = new Map<string, Promise<Entry>>();
  private usedBytes = 0;
  private seq = 0;

  constructor(
    private readonly session: BackingSession,
    readonly capacityBytes: number,
    private readonly dir = fs.existsSync(SHM_DIR) ? SHM_DIR : '/tmp',
  ) {
    if (!Number.isSafeInteger(capacityBytes) || capacityBytes < 0) throw new CascadeError('EINVAL', `passthrough capacity ${capacityBytes} must be a whole number of bytes`);
  }

  get bytes(): number {
    return this.usedBytes;
  }

  get size(): number {
    return this.entries.size;
  }

  /** The backing file of this content, made from its arena extents if new; undefined if it cannot fit. */
  async acquire(sha256: string, sizeBytes: number, extents: number[]): Promise<Backing | undefined> {
    let e = this.entries.get(sha256);
    if (e === undefined) {
      let pending = this.filling.get(sha256);
      if (pending === undefined) {
        if (!this.makeRoom(sizeBytes)) return undefined;
        this.usedBytes += sizeBytes; // reserved now, so concurrent fills of other blocks respect the bound
        pending = this.fill(sha256, sizeBytes, extents).finally(() => this.filling.delete(sha256));
        this.filling.set(sha256, pending);
      }
      e = await pending;
    }
    // Most recently used last.
    this.entries.delete(sha256);
    this.entries.set(sha256, e);
    e.users++;
    const entry = e;
    let released = false;
    return {
      backingId: entry.backingId,
      sha256,
      release: () => {
        if (released) return;
        released = true;
        entry.users--;
        if (this.usedBytes > this.capacityBytes) this.makeRoom(0);
      },
    };
  }

  /** Closes every entry (the kernel keeps what open files still use). */
  close(): void {
    for (const e of this.entries.values()) this.drop(e);
    this.entries.clear();
  }

  private async fill(sha256: string, sizeBytes: number, extents: number[]): Promise<Entry> {
    const file = path.join(this.dir, `cascade-pt-${process.pid}-${this.seq++}`);
    let fd: number | undefined;
    try {
      fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
      fs.unlinkSync(file); // nothing left behind, whatever happens to this process
      await this.session.writeArenaTo(fd, sizeBytes, extents);
      const backingId = this.session.openBacking(fd);
      const e: Entry = { sha256, sizeBytes, fd, backingId, users: 0 };
      this.entries.set(sha256, e);
      return e;
    } catch (err) {
      this.usedBytes -= sizeBytes;
      if (fd !== undefined) fs.closeSync(fd);
      fs.rmSync(file, { force: true });
      throw err;
    }
  }

  /** Evicts unused entries, least recently used first, until `bytes` more fit. */
  private makeRoom(bytes: number): boolean {
    if (bytes > this.capacityBytes) return false;
    for (const e of [...this.entries.values()]) {
      if (this.usedBytes + bytes <= this.capacityBytes) break;
      if (e.users > 0) continue;
      this.entries.delete(e.sha256);
      this.drop(e);
    }
    return this.usedBytes + bytes <= this.capacityBytes;
  }

  private drop(e: Entry): void {
    this.usedBytes -= e.sizeBytes;
    try {
      this.session.closeBacking(e.backingId);
    } finally {
      fs.closeSync(e.fd);
    }
  }
}
