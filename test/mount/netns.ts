/**
 * Network namespaces for cluster tests: N namespaces, each joined by a veth pair to one bridge in the
 * host namespace, on a private /24 of its own (10.213.X.0/24; the host end is .1, namespace i is
 * .(10+i)). A daemon runs inside with `nsenter --net=...` (only the network namespace: its FUSE mount
 * stays visible to the test). Everything is named after this process's pid and removed by destroy(),
 * at exit, or by the next run when this process died without cleaning up.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';

const PREFIX = 'cscd';

function ip(args: string[]): { ok: boolean; out: string } {
  const r = spawnSync('ip', args, { encoding: 'utf8', timeout: 10_000 });
  return { ok: r.status === 0, out: `${r.stdout}${r.stderr}` };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Namespaces and bridges left by test runs whose process is gone. */
function removeStale(): void {
  for (const line of ip(['netns', 'list']).out.split('\n')) {
    const m = new RegExp(`^(${PREFIX}-(\\d+)-\\d+)`).exec(line.trim());
    if (m && !alive(Number(m[2]))) ip(['netns', 'del', m[1]]);
  }
  for (const line of ip(['-o', 'link', 'show', 'type', 'bridge']).out.split('\n')) {
    const m = new RegExp(`^\\d+: (${PREFIX}br(\\d+))[:@]`).exec(line.trim());
    if (m && !alive(Number(m[2]))) ip(['link', 'del', m[1]]);
  }
}

export class NetNamespaces {
  readonly names: string[];
  readonly addresses: string[];
  readonly hostAddress: string;
  private readonly bridge: string;
  private destroyed = false;
  private readonly onExit = () => this.destroy();

  private constructor(count: number) {
    const pid = process.pid;
    const subnet = `10.213.${pid % 250}`;
    this.bridge = `${PREFIX}br${pid}`.slice(0, 15);
    this.hostAddress = `${subnet}.1`;
    this.names = Array.from({ length: count }, (_, i) => `${PREFIX}-${pid}-${i}`);
    this.addresses = Array.from({ length: count }, (_, i) => `${subnet}.${10 + i}`);
  }

  /** undefined when this host cannot make namespaces (not root, no ip netns, a container without it). */
  static create(count: number): NetNamespaces | undefined {
    if (count < 1 || count > 16) throw new Error('1..16 namespaces');
    removeStale();
    const ns = new NetNamespaces(count);
    process.once('exit', ns.onExit);
    const steps: string[][] = [
      ['link', 'add', ns.bridge, 'type', 'bridge'],
      ['addr', 'add', `${ns.hostAddress}/24`, 'dev', ns.bridge],
      ['link', 'set', ns.bridge, 'up'],
    ];
    ns.names.forEach((name, i) => {
      const host = `${PREFIX}${process.pid % 100000}h${i}`.slice(0, 15);
      const inner = `${PREFIX}${process.pid % 100000}n${i}`.slice(0, 15);
      steps.push(
        ['netns', 'add', name],
        ['link', 'add', host, 'type', 'veth', 'peer', 'name', inner],
        ['link', 'set', host, 'master', ns.bridge],
        ['link', 'set', host, 'up'],
        ['link', 'set', inner, 'netns', name],
        ['-n', name, 'addr', 'add', `${ns.addresses[i]}/24`, 'dev', inner],
        ['-n', name, 'link', 'set', inner, 'up'],
        ['-n', name, 'link', 'set', 'lo', 'up'],
      );
    });
    for (const step of steps) {
      const r = ip(step);
      if (!r.ok) {
        ns.destroy();
        process.stderr.write(`netns: cannot set up (${step.join(' ')}: ${r.out.trim()}); skipping\n`);
        return undefined;
      }
    }
    return ns;
  }

  /** The command prefix that runs a program in namespace i (network only). */
  enter(i: number): string[] {
    return ['nsenter', `--net=/run/netns/${this.names[i]}`, '--'];
  }

  /** Namespace i can no longer reach `address` (an unreachable route: connects fail at once). */
  block(i: number, address: string): void {
    const r = ip(['-n', this.names[i], 'route', 'add', 'prohibit', `${address}/32`]);
    if (!r.ok) throw new Error(`netns: cannot block ${address} in ${this.names[i]}: ${r.out}`);
  }

  unblock(i: number, address: string): void {
    ip(['-n', this.names[i], 'route', 'del', 'prohibit', `${address}/32`]);
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    process.removeListener('exit', this.onExit);
    for (const name of this.names) if (fs.existsSync(`/run/netns/${name}`)) ip(['netns', 'del', name]); // takes its veth pair along
    ip(['link', 'del', this.bridge]);
  }
}
