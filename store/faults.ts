/**
 * Storage fault injection for tests: a DiskIo that fails chosen calls with a chosen errno, on purpose.
 * A daemon takes the spec from CASCADE_FAILPOINTS (so real-mount tests can inject under a real mount);
 * unset, the real I/O is used untouched. Spec: comma-separated `POINT=ERRNO[@PROBABILITY][#COUNT]`, e.g.
 * `disk.read=EIO@0.3` (30% of segment reads fail), `disk.fdatasync=EIO#2` (the first two fail),
 * `disk.write=ENOSPC@0.5#10` (half of the writes, at most 10). Points: disk.read, disk.write,
 * disk.fdatasync. CASCADE_FAILPOINTS_SEED makes the random choices repeatable.
 */
import { CascadeError } from './errors';
import type { DiskIo } from './tiers/disk';

export const FAIL_POINTS = ['disk.read', 'disk.write', 'disk.fdatasync'] as const;
export type FailPoint = (typeof FAIL_POINTS)[number];
const ERRNOS = ['EIO', 'ENOSPC', 'EROFS', 'EDQUOT'] as const;
/** Entries one spec may hold (each names a point; a point may appear once). */
const FAILPOINT_ENTRIES_MAX = FAIL_POINTS.length;

export interface FailRule {
  errno: (typeof ERRNOS)[number];
  /** Chance that a call fails, in (0, 1]. */
  probability: number;
  /** Failures left (Infinity: no limit). */
  remaining: number;
}

export type FailRules = Partial<Record<FailPoint, FailRule>>;

/** Parse a spec; EINVAL naming the bad entry (a daemon refuses to start rather than inject the wrong faults). */
export function parseFailpoints(spec: string): FailRules {
  const rules: FailRules = {};
  const entries = spec.split(',').map((e) => e.trim()).filter((e) => e.length > 0);
  if (entries.length > FAILPOINT_ENTRIES_MAX) throw new CascadeError('EINVAL', `CASCADE_FAILPOINTS: at most ${FAILPOINT_ENTRIES_MAX} entries`);
  for (const entry of entries) {
    const m = /^([a-z.]+)=([A-Z]+)(?:@([0-9.]+))?(?:#([0-9]+))?$/.exec(entry);
    const bad = (why: string) => new CascadeError('EINVAL', `CASCADE_FAILPOINTS: ${JSON.stringify(entry)}: ${why} (form POINT=ERRNO[@PROBABILITY][#COUNT])`);
    if (!m) throw bad('malformed');
    const [, point, errno, p, count] = m;
    if (!(FAIL_POINTS as readonly string[]).includes(point)) throw bad(`unknown point (known: ${FAIL_POINTS.join(', ')})`);
    if (!(ERRNOS as readonly string[]).includes(errno)) throw bad(`unsupported errno (known: ${ERRNOS.join(', ')})`);
    const probability = p === undefined ? 1 : Number(p);
    if (!(probability > 0 && probability <= 1)) throw bad('probability must be in (0, 1]');
    if (rules[point as FailPoint]) throw bad('point given twice');
    rules[point as FailPoint] = { errno: errno as FailRule['errno'], probability, remaining: count === undefined ? Infinity : Number(count) };
  }
  return rules;
}

/** mulberry32: a small seeded PRNG so that runs repeat. Returns floats in [0, 1). Tests use it too. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A DiskIo that fails calls as `rules` say and otherwise calls `base`; counts what it injected. */
export class FaultyDiskIo implements DiskIo {
  readonly injected: Record<FailPoint, number> = { 'disk.read': 0, 'disk.write': 0, 'disk.fdatasync': 0 };
  private readonly random: () => number;

  constructor(
    private readonly base: DiskIo,
    public rules: FailRules,
    seed = 1,
  ) {
    this.random = seededRandom(seed);
  }

  read(fd: number, buf: Uint8Array, offset: number, length: number, position: number): Promise<number> {
    return this.fail('disk.read') ?? this.base.read(fd, buf, offset, length, position);
  }
  write(fd: number, buf: Uint8Array, offset: number, length: number, position: number): Promise<number> {
    return this.fail('disk.write') ?? this.base.write(fd, buf, offset, length, position);
  }
  fdatasync(fd: number): Promise<void> {
    return this.fail('disk.fdatasync') ?? this.base.fdatasync(fd);
  }

  private fail(point: FailPoint): Promise<never> | undefined {
    const rule = this.rules[point];
    if (!rule || rule.remaining <= 0 || this.random() >= rule.probability) return undefined;
    rule.remaining--;
    this.injected[point]++;
    // Shaped like a failed system call (Node's errors carry code and syscall).
    return Promise.reject(Object.assign(new Error(`${rule.errno}: injected by CASCADE_FAILPOINTS (${point})`), { code: rule.errno, syscall: point }));
  }
}

/** The DiskIo a daemon uses: faulty as CASCADE_FAILPOINTS says, else undefined (the real I/O). */
export function failpointsFromEnv(base: DiskIo, env: NodeJS.ProcessEnv = process.env): FaultyDiskIo | undefined {
  const spec = env.CASCADE_FAILPOINTS;
  if (spec === undefined || spec.trim() === '') return undefined;
  const seed = env.CASCADE_FAILPOINTS_SEED === undefined ? Date.now() : Number(env.CASCADE_FAILPOINTS_SEED);
  if (!Number.isSafeInteger(seed)) throw new CascadeError('EINVAL', 'CASCADE_FAILPOINTS_SEED must be an integer');
  return new FaultyDiskIo(base, parseFailpoints(spec), seed);
}
