/**
 * `cascade mount` in a child process, for real-mount tests. The daemon must be another process: a
 * synchronous tool run against a FUSE mount served by our own event loop would deadlock.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

export const CLI = path.join(__dirname, '..', '..', 'mount', 'cli.js');

/** Root, /dev/fuse and the named tools: otherwise real-mount tests skip. */
export function canMount(tools: string[] = ['fusermount']): boolean {
  return process.getuid?.() === 0 && fs.existsSync('/dev/fuse') && tools.every((t) => spawnSync('which', [t]).status === 0);
}

export function isMounted(mnt: string): boolean {
  return fs.readFileSync('/proc/mounts', 'utf8').split('\n').some((l) => l.split(' ')[1] === mnt);
}

export class Daemon {
  proc: ChildProcess | undefined;
  stderr = '';
  /** Extra environment for the daemon (e.g. CASCADE_FAILPOINTS). */
  env: NodeJS.ProcessEnv = {};
  constructor(
    readonly mnt: string,
    readonly data: string,
    readonly extra: string[] = [],
    /** A command the daemon runs under, e.g. nsenter into a network namespace (it must exec, not fork). */
    readonly wrapper: string[] = [],
  ) {}

  async start(): Promise<void> {
    this.stderr = '';
    // 64 MiB of DRAM unless the caller sizes it (a repeated flag would become a list).
    const dram = this.extra.includes('--dram') ? [] : ['--dram', '64M'];
    const argv = [process.execPath, CLI, 'mount', this.mnt, '--data', this.data, ...dram, ...this.extra];
    const [cmd, ...args] = [...this.wrapper, ...argv];
    const proc = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...this.env } });
    this.proc = proc;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`mount did not come up: ${this.stderr}`)), 20_000);
      proc.stderr!.on('data', (d: Buffer) => {
        this.stderr += d.toString();
        if (this.stderr.includes('cascade: mounted')) {
          clearTimeout(timer);
          // A suite run for one engine (CASCADE_ENGINE) must not silently run on the other.
          const want = this.extra.includes('--engine') ? undefined : process.env.CASCADE_ENGINE;
          if ((want === 'native' || want === 'fuse-native') && !this.stderr.includes(`(engine ${want}:`)) {
            reject(new Error(`CASCADE_ENGINE=${want} but the daemon said: ${this.stderr}`));
          }
          // Nor a suite run over io_uring (CASCADE_FUSE_URING=on) on /dev/fuse.
          const uring = this.extra.includes('--fuse-uring') || this.extra.includes('--engine') ? undefined : process.env.CASCADE_FUSE_URING;
          if (uring === 'on' && !/\(engine native:[^\n]*io_uring/.test(this.stderr)) {
            reject(new Error(`CASCADE_FUSE_URING=on but the daemon said: ${this.stderr}`));
          }
          resolve();
        }
      });
      // 'close', not 'exit': by then all of its stderr has been read (the reason it gave).
      proc.on('close', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`daemon exited (${code ?? signal}) before it mounted: ${this.stderr}`));
      });
    });
  }

  /** SIGTERM (a clean unmount) or SIGKILL (a crash); always leaves the mountpoint unmounted. */
  /**
   * Stop the daemon with `signal`; then, before a mount left behind is detached, `beforeDetach` (a
   * test stops the processes using the mount there: after a lazy unmount their paths would reach the
   * directory underneath, and the next mount would find it not empty).
   */
  async stop(signal: NodeJS.Signals = 'SIGTERM', beforeDetach?: () => Promise<void>): Promise<number | null> {
    const proc = this.proc;
    this.proc = undefined;
    let code: number | null = null;
    let unclean: string | undefined;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<number | null>((r) => proc.once('exit', (c) => r(c)));
      proc.kill(signal);
      code = await Promise.race([exited, new Promise<null>((r) => setTimeout(() => r(null), 20_000))]);
      const how = proc.signalCode !== null ? `killed by ${proc.signalCode}` : proc.exitCode !== null ? `exit ${proc.exitCode}` : 'still running after 20 s';
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      // SIGTERM is the clean stop: the daemon unmounts, persists and exits 0 (a library that takes over
      // SIGTERM would break it).
      if (signal === 'SIGTERM' && (code !== 0 || isMounted(this.mnt))) {
        unclean = `daemon did not stop cleanly on SIGTERM (${how}, ${isMounted(this.mnt) ? 'still mounted' : 'unmounted'}): ${this.stderr.slice(-600)}`;
      }
    }
    await beforeDetach?.();
    if (isMounted(this.mnt)) spawnSync('fusermount', ['-uz', this.mnt]);
    if (unclean) throw new Error(unclean);
    return code;
  }
}
