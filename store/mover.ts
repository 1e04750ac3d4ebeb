/**
 * A bounded queue of background moves (promotions). Reads enqueue and return at once; moves run one at a
 * time, never inside a read. When the queue is full (jobs or bytes), a new job is refused and counted:
 * a promotion is an optimisation and may be skipped, memory may not grow without bound.
 */
import { CascadeError } from './errors';

export interface MoveJob {
  key: string;
  /** Bytes the job holds in memory until it runs. */
  sizeBytes: number;
  run: () => Promise<void>;
}

export class Mover {
  private readonly queue: MoveJob[] = [];
  private queuedBytes = 0;
  private running: Promise<void> | undefined;
  private readonly keys = new Set<string>();
  refused = 0;
  failed = 0;
  done = 0;

  constructor(
    private readonly maxJobs: number,
    private readonly maxBytes: number,
    private readonly onError: (e: unknown, job: MoveJob) => void,
  ) {
    if (!(maxJobs >= 1 && maxBytes >= 0)) throw new CascadeError('EINVAL', 'mover limits must be positive');
  }

  /** Queue a job unless one for the key is queued or the queue is full; returns whether it was queued. */
  offer(job: MoveJob): boolean {
    if (this.keys.has(job.key)) return false;
    if (this.queue.length >= this.maxJobs || this.queuedBytes + job.sizeBytes > this.maxBytes) {
      this.refused++;
      return false;
    }
    this.queue.push(job);
    this.keys.add(job.key);
    this.queuedBytes += job.sizeBytes;
    this.running ??= this.drain();
    return true;
  }

  /** Resolves when the queue is empty. */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  pending(): number {
    return this.queue.length;
  }

  private async drain(): Promise<void> {
    // Let the read that queued the job finish first.
    await new Promise<void>((r) => setImmediate(r));
    try {
      for (let job = this.queue.shift(); job; job = this.queue.shift()) {
        this.queuedBytes -= job.sizeBytes;
        try {
          await job.run();
          this.done++;
        } catch (e) {
          this.failed++;
          this.onError(e, job);
        } finally {
          this.keys.delete(job.key);
        }
      }
    } finally {
      this.running = undefined;
    }
  }
}
