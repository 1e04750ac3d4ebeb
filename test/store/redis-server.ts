/**
 * Real Redis servers for tests, on loopback ports, each in its own temporary directory: one server,
 * or a Redis Cluster of 3 masters (redis-server --cluster-enabled yes + redis-cli --cluster create).
 * Persistence as the metadata engine needs it: appendonly yes, appendfsync always.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { rmDir, tmpDir } from './helpers';

const START_TIMEOUT_MS = 15_000;

export function haveRedis(): boolean {
  return spawnSync('which', ['redis-server']).status === 0 && spawnSync('which', ['redis-cli']).status === 0;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

async function waitFor(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function cli(port: number, ...args: string[]): string {
  const r = spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { encoding: 'utf8', timeout: 10_000 });
  return (r.stdout ?? '') + (r.stderr ?? '');
}

export class RedisServers {
  readonly ports: number[] = [];
  private readonly procs: ChildProcess[] = [];
  private readonly dir = tmpDir('redis');

  private constructor(
    readonly cluster: boolean,
    private readonly alsoBind: string[],
  ) {}

  /** One server, or a cluster of `masters` masters; on loopback, and on `alsoBind` addresses too. */
  static async start(cluster = false, alsoBind: string[] = [], masters = 3): Promise<RedisServers> {
    const s = new RedisServers(cluster, alsoBind);
    try {
      for (let i = 0; i < (cluster ? masters : 1); i++) await s.spawnOne(i);
      if (cluster) {
        const out = spawnSync(
          'redis-cli',
          ['--cluster', 'create', ...s.ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0', '--cluster-yes'],
          { encoding: 'utf8', timeout: 30_000 },
        );
        if (out.status !== 0) throw new Error(`redis-cli --cluster create failed: ${out.stdout}${out.stderr}`);
        await waitFor('the cluster to be ok', () => s.ports.every((p) => cli(p, 'cluster', 'info').includes('cluster_state:ok')));
      }
      return s;
    } catch (e) {
      await s.stop();
      throw e;
    }
  }

  private async spawnOne(i: number, port?: number): Promise<void> {
    const p = port ?? (await freePort());
    const dir = path.join(this.dir, String(i));
    fs.mkdirSync(dir, { recursive: true });
    const args = ['--port', String(p), '--bind', '127.0.0.1', ...this.alsoBind, '--protected-mode', 'no', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always'];
    if (this.cluster) args.push('--cluster-enabled', 'yes', '--cluster-config-file', path.join(dir, 'nodes.conf'));
    const proc = spawn('redis-server', args, { stdio: 'ignore' });
    this.procs[i] = proc;
    this.ports[i] = p;
    await waitFor(`redis-server on ${p}`, () => cli(p, 'ping').includes('PONG'));
  }

  /** Kill server i (SIGKILL: no clean shutdown, the AOF is what survives). */
  /** Stop (SIGSTOP) or resume (SIGCONT) server i: its clients' connections stay open, unanswered. */
  pause(paused: boolean, i = 0): void {
    this.procs[i]?.kill(paused ? 'SIGSTOP' : 'SIGCONT');
  }

  async kill(i = 0): Promise<void> {
    const p = this.procs[i];
    if (p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => p.once('exit', () => resolve()));
    p.kill('SIGKILL');
    await exited;
  }

  /** Start server i again on its port and directory (it reloads its AOF). */
  async restart(i = 0): Promise<void> {
    await this.kill(i);
    await this.spawnOne(i, this.ports[i]);
  }

  get nodes(): Array<{ host: string; port: number }> {
    return this.ports.map((port) => ({ host: '127.0.0.1', port }));
  }

  /** Stops every server (SIGTERM, then SIGKILL after 5 s) and removes their files. */
  async stop(): Promise<void> {
    await Promise.all(
      this.procs.map(
        (p) =>
          new Promise<void>((resolve) => {
            if (p.exitCode !== null || p.signalCode !== null) return resolve();
            const timer = setTimeout(() => p.kill('SIGKILL'), 5_000);
            p.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            p.kill('SIGTERM');
          }),
      ),
    );
    rmDir(this.dir);
  }
}
