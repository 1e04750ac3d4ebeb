/**
 * Leases behind user.cascade.cuda_ipc. A process that reads the attribute of a file gets the CUDA IPC
 * handle, offset and size of the file's content in the GPU tier, and a lease: the content stays at that
 * place (not evicted, not reclaimed, even if the name is rewritten or removed) until the same process
 * removes the attribute or exits. One lease per (process, file); reading the attribute again returns
 * the same place, or moves the lease to the file's new content if it changed. Dead processes are found
 * by polling /proc (their start time guards against a reused pid).
 */
import * as fs from 'node:fs';
import { CascadeError } from '../store/errors';
import type { GpuHold, Store } from '../store/store';
import type { VersionRecord } from '../store/meta';

/** Leases held at once, over all processes: each pins GPU memory. */
export const GPU_LEASES_MAX = 4096;
/** How often holders are checked for having exited. */
export const GPU_LEASE_CHECK_MS = 1000;

interface Lease {
  pid: number;
  /** The holder's start time (/proc/<pid>/stat field 22); undefined where /proc is not readable. */
  startTicks: string | undefined;
  hold: GpuHold;
}

/** What the attribute's value says (JSON): enough to open the handle and find the block. */
export interface CudaIpcValue {
  device: string;
  handle: string;
  offset: number;
  size: number;
  sha256: string;
  version: number;
}

export class GpuLeases {
  private readonly leases = new Map<string, Lease>();
  private readonly taking = new Map<string, Promise<Lease>>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: Store,
    private readonly procDir = '/proc',
  ) {}

  get size(): number {
    return this.leases.size;
  }

  /** Take (or return) the lease of process `pid` on `rel`'s version `v`. */
  async take(pid: number, rel: string, v: VersionRecord): Promise<CudaIpcValue> {
    if (!Number.isSafeInteger(pid) || pid <= 0) throw new CascadeError('EOPNOTSUPP', 'user.cascade.cuda_ipc needs the calling process (the native engine passes it)');
    const key = `${pid}\0${rel}`;
    for (let t = this.taking.get(key); t !== undefined; t = this.taking.get(key)) await t.catch(() => undefined);
    const held = this.leases.get(key);
    if (held && held.hold.version.sha256 === v.sha256) return valueOf(held.hold);
    if (!held && this.leases.size + this.taking.size >= GPU_LEASES_MAX) {
      throw new CascadeError('EBUSY', `${GPU_LEASES_MAX} GPU leases are held: release some (removexattr user.cascade.cuda_ipc)`);
    }
    const taking = this.store.holdInGpu(v).then((hold) => ({ pid, startTicks: this.startTicks(pid), hold }));
    this.taking.set(key, taking);
    try {
      const lease = await taking;
      held?.hold.release(); // the file changed: the lease moves to its new content
      this.leases.set(key, lease);
      this.startTimer();
      return valueOf(lease.hold);
    } finally {
      this.taking.delete(key);
    }
  }

  /** Release process `pid`'s lease on `rel`; false when it held none. */
  release(pid: number, rel: string): boolean {
    const key = `${pid}\0${rel}`;
    const lease = this.leases.get(key);
    if (!lease) return false;
    this.leases.delete(key);
    lease.hold.release();
    return true;
  }

  /** Release the leases of processes that exited; returns how many went. */
  sweep(): number {
    let gone = 0;
    for (const [key, lease] of this.leases) {
      if (this.alive(lease)) continue;
      this.leases.delete(key);
      lease.hold.release();
      gone++;
    }
    if (this.leases.size === 0) this.stopTimer();
    return gone;
  }

  close(): void {
    this.stopTimer();
    for (const lease of this.leases.values()) lease.hold.release();
    this.leases.clear();
  }

  private alive(lease: Lease): boolean {
    const now = this.startTicks(lease.pid);
    return now !== undefined && (lease.startTicks === undefined || now === lease.startTicks);
  }

  private startTicks(pid: number): string | undefined {
    try {
      const stat = fs.readFileSync(`${this.procDir}/${pid}/stat`, 'latin1');
      // Fields after the command name (which may hold spaces and parentheses): state is field 3.
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return rest[19]; // field 22, starttime
    } catch {
      return undefined;
    }
  }

  private startTimer(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.sweep(), GPU_LEASE_CHECK_MS);
    this.timer.unref();
  }

  private stopTimer(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}

function valueOf(h: GpuHold): CudaIpcValue {
  return { device: h.deviceUuid, handle: h.ipcHandle.toString('hex'), offset: h.offsetBytes, size: h.sizeBytes, sha256: h.version.sha256, version: h.version.version };
}
