// stats and cluster status: the figures of a store, a mount or a cluster's nodes, and how they are printed.
import type { Argv } from 'yargs';
import type { NodeFigures, StoreStats } from '../../store/store';
import { readStats, type MountStats } from './mounted';
import { formatBytes } from './size';
import { dualOptions, jsonOption, mountFor, MODES_EPILOG, print, UsageError, withStore, type DualArgs } from './common';

export function formatStats(stats: StoreStats): string {
  return [
    ...stats.tiers.map(
      (t) => `tier ${t.name}: ${t.blocks} blocks, ${formatBytes(t.usedBytes)} of ${Number.isFinite(t.capacityBytes) ? formatBytes(t.capacityBytes) : 'unbounded'}`,
    ),
    `names ${stats.names}, versions ${stats.versions}`,
    `dedup: ${stats.dedup.hits} duplicate puts stored once, saved ${formatBytes(stats.dedup.savedBytes)} (logical ${formatBytes(stats.dedup.logicalBytes)}, stored ${formatBytes(stats.dedup.uniqueBytes)})`,
    `pinned: ${stats.pinned.blocks} block(s), ${formatBytes(stats.pinned.bytes)} of a ${formatBytes(stats.pinned.quotaBytes)} quota`,
    `hits: gpu ${stats.hits.gpu ?? 0}, dram ${stats.hits.dram}, disk ${stats.hits.disk}, misses ${stats.misses}; evictions ${stats.evictions}, promotions ${stats.promotions}, demotions ${stats.demotions}, flushed ${stats.flushedBlocks}`,
    formatGpu(stats.gpu),
  ].join('\n');
}

function formatGpu(g: StoreStats['gpu'] | undefined): string {
  if (!g) return 'gpu: unknown (an older daemon)';
  if (!g.available) return `gpu: unavailable: ${g.reason ?? 'unknown reason'}`;
  const d = g.device;
  return (
    `gpu: ${d ? `${d.name} ${d.uuid}` : 'device'}, ${g.blocks} blocks, ${formatBytes(g.usedBytes)} of ${formatBytes(g.capacityBytes)}; ` +
    `leases ${g.leases}, promotions ${g.promotions}, evictions ${g.evictions} (${g.demotions} copied down to DRAM)`
  );
}

async function clusterStatus(args: { cluster: string; json: boolean }): Promise<void> {
  const { parseRedisUrl, RedisMeta } = await import('../../store/meta/redis');
  const meta = await RedisMeta.connect(parseRedisUrl(args.cluster));
  try {
    const nodes = await meta.nodeStats();
    const totals = await meta.totals();
    print(args, { namespace: meta.namespace, totals, nodes }, () => {
      const lines = [`namespace ${meta.namespace}: ${totals.names} names, ${totals.blocks} blocks, ${formatBytes(totals.uniqueBytes)} stored (${formatBytes(totals.logicalBytes)} before dedup)`];
      if (nodes.length === 0) lines.push('no node has joined');
      for (const { node, live, stats } of nodes) {
        const f = stats as Partial<NodeFigures> | undefined;
        const tier = (name: string) => f?.tiers?.find((t) => t.name === name);
        const dram = tier('dram');
        const disk = tier('disk');
        lines.push(
          `node ${node}: ${live ? 'live' : 'gone'}` +
            (f?.atMs
              ? ` (${f.host} pid ${f.pid}, ${((Date.now() - f.atMs) / 1000).toFixed(1)} s ago): DRAM ${formatBytes(dram?.usedBytes ?? 0)} of ${formatBytes(dram?.capacityBytes ?? 0)}, ` +
                `disk ${formatBytes(disk?.usedBytes ?? 0)} in ${disk?.blocks ?? 0} blocks; hits dram ${f.hits?.dram ?? 0}, remote ${f.hits?.remote ?? 0}, disk ${f.hits?.disk ?? 0}, shared ${f.hits?.shared ?? 0}; ` +
                `${f.sharedLoads ?? 0} blocks (${formatBytes(f.sharedLoadBytes ?? 0)}) loaded from the shared tier; ` +
                (f.remote
                  ? `remote DRAM (${f.remote.provider}): ${f.remote.loads} blocks (${formatBytes(f.remote.loadBytes)}) fetched, ${f.remote.fallbacks} fallbacks, ${f.remote.promotions} kept, ` +
                    `${f.remote.fabric.holdsGranted} served (${formatBytes(f.remote.fabric.servedBytes)}); `
                  : 'remote DRAM off; ') +
                `promotions ${f.promotions ?? 0}, dedup hits ${f.dedupHits ?? 0}`
              : ' (no figures)'),
        );
      }
      return lines.join('\n');
    });
  } finally {
    await meta.close();
  }
}

function formatMountStats(mount: string, stats: MountStats): string {
  const d = stats.daemon;
  const e = stats.engine;
  const lines = [`mount ${mount}${d ? ` (daemon pid ${d.pid} on ${d.host}, data ${d.dataDir})` : ''}`, formatStats(stats)];
  if (e?.name) {
    const answered = [['lookups', e.servedLookups], ['getattrs', e.servedGetattrs], ['opens', e.servedOpens], ['reads', e.servedReads]].filter(([, n]) => typeof n === 'number');
    lines.push(`engine ${e.name}${answered.length ? `: answered in C++ without JS: ${answered.map(([k, n]) => `${k} ${n}`).join(', ')}` : ''}`);
  }
  if (stats.fs) lines.push(`open files ${stats.fs.openHandles}; being written ${stats.fs.stagingFiles} (${formatBytes(stats.fs.stagingBytes)})`);
  return lines.join('\n');
}

async function statsInMount(a: DualArgs & { target?: string }): Promise<void> {
  const root = mountFor(a);
  const stats = await readStats(root);
  print(a, { mount: root, ...stats }, () => formatMountStats(root, stats));
}


export function statsCommand(y: Argv): Argv {
  return y.command(
    'stats [target]',
    'tier occupancy, hits, dedup savings: of the mount holding PATH (default: the current directory, or --mount MNT), or of --data DIR',
    (y) =>
      jsonOption(dualOptions(y))
        .positional('target', { type: 'string', describe: 'any path in a mount', defaultDescription: 'the current directory' })
        .example('$0 stats --mount /mnt/cascade --json', 'MOUNT/.cascade/stats.json, parsed')
        .example('$0 stats --data $SCRATCH/cascade', 'a data directory, no mount')
        .epilog(MODES_EPILOG),
    (a) => {
      if (a.data === undefined) return statsInMount(a);
      if (a.target !== undefined) throw new UsageError('stats --data DIR takes no PATH');
      return withStore(a, async (store) => {
        const stats = await store.stats();
        print(a, stats, () => formatStats(stats));
      });
    },
  );
}

export function clusterStatusCommand(y: Argv): Argv {
  return y.command(
    'cluster status',
    'the nodes of a cluster: alive or not, their tiers, hits (DRAM, own disk, shared tier from other nodes), promotions and dedup',
    (y) =>
      jsonOption(y)
        .option('cluster', { type: 'string', demandOption: true, describe: 'redis://HOST:PORT[/NAMESPACE], as given to `cascade mount --cluster`' })
        .example('$0 cluster status --cluster redis://head:6379/job42', 'every node of job 42'),
    (a) => clusterStatus(a as unknown as { cluster: string; json: boolean }),
  );
}
