/**
 * The remote DRAM tier of a cluster node: reads of blocks that another node holds in DRAM, over the
 * libfabric endpoint (native/src/core/fabric.h), and this node's side of the directory's DRAM hints.
 *
 * Mechanism only; the Store decides when to ask (after local DRAM and disk, before the shared tier)
 * and what to keep (RemotePromotion). A fetch lands in a fresh local arena slot and is checked against
 * its SHA-256 before anyone sees it, so a peer that died, evicted the block, or sent wrong bytes costs a
 * fallback to the shared tier, never wrong bytes.
 */
import { MiB } from '../constants';
import { CascadeError } from '../errors';
import type { ClusterDirectory } from '../meta';
import { ThresholdPromotion } from '../policy/promotion';
import type { NativeArenaTier } from '../tiers/native-dram';
import { nativeCode, type NativeFabricBinding, type NativeFabricFault, type NativeFabricStats } from '../../native';

export interface RemoteDramOptions {
  /** libfabric provider, FI_PROVIDER syntax (default: $FI_PROVIDER, else "tcp;ofi_rxm"). */
  provider?: string;
  /** Address this node's endpoint binds (default: the provider's first interface). */
  address?: string;
  /** Remote reads of a block on this node before it keeps a local DRAM copy (default 3). */
  promoteAfterReads?: number;
}

/** Concurrent fetches from one peer; more wait in line in C++ (bounded there too). */
const FETCHES_PER_PEER_MAX = 4;
/** Holds this node grants at once, and how long a peer may keep one it never releases. */
const HOLDS_MAX = 1024;
const HOLD_TIMEOUT_MS = 30_000;
/** A fetch may take this long, plus the block at the slowest rate still worth waiting for. */
const FETCH_TIMEOUT_BASE_MS = 2_000;
const FETCH_SLOWEST_BYTES_PER_MS = 50 * MiB / 1000;
/**
 * A peer whose fetch failed (timeout, transport) is skipped, and reads go to the shared tier, until it
 * shows it lives: a heartbeat published after the failure (every NODE_HEARTBEAT_MS), or a new
 * address (restarted). A dead peer then costs one stall (the fabric's reply bound, 500 ms), not one
 * per block; its lease runs out and it leaves the live nodes.
 */
/** How often the peers' addresses and liveness may be looked up again. */
const PEERS_REFRESH_MS = 1_000;
const PEERS_STALE_MS = 5_000;
/**
 * Holders learned with a name's resolve (Store.currentVersion), used by a fetch of that content soon
 * after instead of asking Redis again: as fresh as the resolve, at most HOLDERS_NOTED_MS old, bounded.
 */
const HOLDERS_NOTED_MS = 1_000;
/**
 * A holder the change feed named with a commit: kept longer, as it may be used long after (a load of
 * a block stored a minute ago). A stale one costs a refused hold, then a look at the directory.
 */
const HOLDERS_FED_MS = 60_000;
const HOLDERS_NOTED_MAX = 4_096;
/** DRAM hints waiting to be sent, at most (the oldest are dropped past it: hints may be missing). */
const ADVERTISE_PENDING_MAX = 100_000;
const ADVERTISE_BATCH = 512;
const ADVERTISE_DELAY_MS = 20;
export const REMOTE_PROMOTE_AFTER_READS_DEFAULT = 3;

export interface RemoteDramFigures {
  address: string;
  provider: string;
  /** Blocks read from peers' DRAM, their bytes, and fetches that fell back (absent, timeout, corrupt). */
  loads: number;
  loadBytes: number;
  fallbacks: number;
  corrupt: number;
  /** Remote-read blocks that got a local DRAM copy (read promoteAfterReads times here). */
  promotions: number;
  fabric: NativeFabricStats;
}

export class RemoteDram {
  /** Peers by node: their fabric address, whether their lease lives, and their last heartbeat's time. */
  private peers = new Map<string, { address: string; live: boolean; atMs: number }>();
  private peersAtMs = 0;
  private peersRefresh: Promise<void> | undefined;
  /** Peers whose fetch failed, by node: skipped until a heartbeat after `failedAtMs`, or a new address. */
  private readonly suspects = new Map<string, { failedAtMs: number; address: string }>();
  private readonly pending = new Map<string, boolean>(); // sha -> held
  /** sha -> holders other than this node and until when they may be used, oldest first (see HOLDERS_NOTED_MS). */
  private readonly noted = new Map<string, { holders: string[]; untilMs: number }>();
  private advertiseTimer: NodeJS.Timeout | undefined;
  private advertising: Promise<void> | undefined;
  /** Remote reads per block before a local copy is kept: the store's threshold policy (bounded LRU). */
  private readonly promotion: ThresholdPromotion;
  private closed = false;
  readonly figures = { loads: 0, loadBytes: 0, fallbacks: 0, corrupt: 0, promotions: 0 };

  private constructor(
    private readonly fabric: NativeFabricBinding,
    private readonly node: string,
    private readonly directory: ClusterDirectory,
    private readonly warn: (m: string) => void,
    promoteAfterReads: number,
  ) {
    this.promotion = new ThresholdPromotion(promoteAfterReads);
  }

  /** undefined when the addon has no libfabric (the node then reads other nodes' blocks from the shared tier). */
  static open(dram: NativeArenaTier, node: string, directory: ClusterDirectory, options: RemoteDramOptions, warn: (m: string) => void): RemoteDram | undefined {
    const promote = options.promoteAfterReads ?? REMOTE_PROMOTE_AFTER_READS_DEFAULT;
    if (!Number.isInteger(promote) || promote < 1 || promote > 1_000_000) {
      throw new CascadeError('EINVAL', `remote promotion threshold must be an integer in 1..1000000, got ${promote}`);
    }
    const provider = options.provider ?? process.env.FI_PROVIDER ?? 'tcp;ofi_rxm';
    // Tests inject a holder's faults under a real daemon this way; said loudly.
    const fault = process.env.CASCADE_FABRIC_FAULT;
    if (fault !== undefined && fault !== '' && fault !== 'piece-crc' && fault !== 'block-bytes') {
      throw new CascadeError('EINVAL', `CASCADE_FABRIC_FAULT must be piece-crc or block-bytes, got ${JSON.stringify(fault)}`);
    }
    if (fault) warn(`FAULT INJECTION ON (CASCADE_FABRIC_FAULT=${fault}): this node serves peers wrong bytes on purpose`);
    const fabric = dram.openFabric(
      provider,
      options.address ?? '',
      { fetchesPerPeerMax: FETCHES_PER_PEER_MAX, holdsMax: HOLDS_MAX, holdTimeoutMs: HOLD_TIMEOUT_MS },
      fault as NativeFabricFault | undefined,
    );
    return fabric && new RemoteDram(fabric, node, directory, warn, promote);
  }

  get address(): string {
    return this.fabric.address();
  }

  /**
   * Fill a local DRAM slot with `sha` from a peer that holds it in DRAM. false when no live peer could
   * (the caller goes on to the shared tier); ENOSPC from the DRAM tier passes through. onStreaming:
   * called with the slot's handle as the fetch starts; readers gated on it get each piece as it
   * passes its CRC (a fetch that fails sends them to JS, which reads the block elsewhere).
   */
  async fetch(dram: NativeArenaTier, sha: string, sizeBytes: number, onStreaming?: (handle: number) => void): Promise<boolean> {
    if (this.closed) return false;
    const noted = this.noted.get(sha);
    this.noted.delete(sha); // used once: a fetch that fails leaves this hint behind
    const hinted = noted !== undefined && Date.now() <= noted.untilMs ? noted.holders : undefined;
    const holders = hinted ?? (await this.lookUpHolders(sha));
    if (holders === undefined) return false;
    const tried = new Set<string>();
    if (await this.fetchFrom(dram, sha, sizeBytes, onStreaming, holders, tried)) return true;
    if (hinted === undefined) return false;
    // The hint came with a resolve up to HOLDERS_NOTED_MS ago (a version served from what this node
    // last heard is older still): ask the directory before falling back to the shared tier.
    const now = await this.lookUpHolders(sha);
    return now !== undefined && this.fetchFrom(dram, sha, sizeBytes, onStreaming, now.filter((n) => !tried.has(n)), tried);
  }

  /** The other nodes the directory says hold `sha` in DRAM; undefined when it cannot be asked. */
  private async lookUpHolders(sha: string): Promise<string[] | undefined> {
    try {
      return (await this.directory.dramHolders(sha)).filter((n) => n !== this.node);
    } catch (e) {
      this.warn(`remote DRAM: cannot look up holders of ${sha}: ${String(e)}`);
      return undefined;
    }
  }

  /** fetch() from these holders in a random order, each tried once (added to `tried`). */
  private async fetchFrom(
    dram: NativeArenaTier,
    sha: string,
    sizeBytes: number,
    onStreaming: ((handle: number) => void) | undefined,
    holders: string[],
    tried: Set<string>,
  ): Promise<boolean> {
    if (holders.length === 0) return false;
    const now = Date.now();
    // A holder this node has not heard of: look the peers up first. Known holders only: read on, and
    // refresh a stale list beside the fetch (a peer that moved fails fast and is skipped).
    if (holders.some((n) => !this.peers.has(n))) await this.refreshPeers();
    else if (now - this.peersAtMs > PEERS_STALE_MS) void this.refreshPeers();
    // Spread readers over the holders.
    const usable = (n: string) => {
      const p = this.peers.get(n);
      const s = this.suspects.get(n);
      return p?.live === true && (s === undefined || p.atMs > s.failedAtMs || s.address !== p.address);
    };
    if (holders.some((n) => !usable(n)) && this.suspects.size > 0) await this.refreshPeers(); // a suspect may have restarted
    const candidates = holders.filter(usable);
    for (let i = candidates.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [candidates[i], candidates[j]] = [candidates[j], candidates[i]];
    }
    for (const peer of candidates) {
      tried.add(peer);
      const address = this.peers.get(peer)!.address;
      try {
        // Streamed: readers get each piece once it passes its CRC-32C; the block joins DRAM only
        // once its whole SHA-256 matches (adopt checks the fill's hash).
        await dram.adopt(sha, sizeBytes, (handle) => {
          const fetching = this.fabric.fetch(address, sha, sizeBytes, handle, fetchTimeoutMs(sizeBytes), onStreaming !== undefined);
          onStreaming?.(handle); // marked filling: readers wait in C++ for each piece from now on
          return fetching;
        });
        this.figures.loads++;
        this.figures.loadBytes += sizeBytes;
        return true;
      } catch (e) {
        if (e instanceof CascadeError && e.code === 'ENOSPC') throw e;
        this.figures.fallbacks++;
        const code = e instanceof CascadeError ? e.code : nativeCode(e);
        if (code === 'ECORRUPT') this.figures.corrupt++;
        if (code === 'ESTALE') {
          // The peer no longer holds it: drop the stale hint (the peer would, too, when it evicted).
          this.directory.advertiseDram([{ sha256: sha, node: peer, held: false }]).catch(() => undefined);
        } else if (code !== 'EBUSY') {
          this.suspects.set(peer, { failedAtMs: Date.now(), address });
          this.warn(`remote DRAM: fetch of ${sha} from ${peer} failed (${(e as Error).message}); reading it elsewhere, skipping ${peer} until its next heartbeat`);
        }
      }
    }
    return false;
  }

  /**
   * The directory's DRAM holders of `sha`, read just now with a name's version (`resolve`) or named by
   * a commit on the change feed (`feed`): a fetch soon after uses the other nodes among them (none: it
   * asks the directory then).
   */
  noteHolders(sha: string, holders: readonly string[], from: 'resolve' | 'feed' = 'resolve'): void {
    if (this.closed) return;
    this.noted.delete(sha);
    const others = holders.filter((n) => n !== this.node);
    if (others.length === 0) return;
    this.noted.set(sha, { holders: others, untilMs: Date.now() + (from === 'feed' ? HOLDERS_FED_MS : HOLDERS_NOTED_MS) });
    if (this.noted.size > HOLDERS_NOTED_MAX) this.noted.delete(this.noted.keys().next().value as string);
  }

  /** Count a remote read of `sha`: true when this node should keep its copy (promoted). */
  remoteRead(sha: string): boolean {
    if (!this.promotion.onSlowRead(sha)) return false;
    this.figures.promotions++;
    return true;
  }

  /** Tell the directory (batched) that this node now holds or no longer holds `sha` in DRAM. */
  advertise(sha: string, held: boolean): void {
    if (this.closed) return;
    this.pending.delete(sha);
    this.pending.set(sha, held);
    if (this.pending.size > ADVERTISE_PENDING_MAX) this.pending.delete(this.pending.keys().next().value as string);
    this.advertiseTimer ??= setTimeout(() => {
      this.advertiseTimer = undefined;
      void this.flushAdvertisements();
    }, ADVERTISE_DELAY_MS);
  }

  private async flushAdvertisements(): Promise<void> {
    if (this.advertising) return this.advertising;
    this.advertising = (async () => {
      while (this.pending.size > 0) {
        const batch: Array<{ sha256: string; node: string; held: boolean }> = [];
        for (const [sha, held] of this.pending) {
          batch.push({ sha256: sha, node: this.node, held });
          if (batch.length >= ADVERTISE_BATCH) break;
        }
        try {
          await this.directory.advertiseDram(batch);
          for (const b of batch) if (this.pending.get(b.sha256) === b.held) this.pending.delete(b.sha256);
        } catch (e) {
          // Redis away: keep them (bounded) and try again later. Hints only: reads stay correct.
          this.warn(`remote DRAM: cannot publish DRAM hints: ${String(e)}`);
          setTimeout(() => void this.flushAdvertisements(), 1000).unref();
          return;
        }
      }
    })().finally(() => (this.advertising = undefined));
    return this.advertising;
  }

  private refreshPeers(): Promise<void> {
    if (Date.now() - this.peersAtMs < PEERS_REFRESH_MS) return Promise.resolve();
    this.peersRefresh ??= (async () => {
      try {
        const next = new Map<string, { address: string; live: boolean; atMs: number }>();
        for (const n of await this.directory.nodeStats()) {
          const stats = n.stats as { atMs?: unknown; remote?: { address?: unknown } } | undefined;
          const address = stats?.remote?.address;
          const atMs = typeof stats?.atMs === 'number' ? stats.atMs : 0;
          if (typeof address === 'string' && /^[0-9a-f]{2,1024}$/.test(address)) next.set(n.node, { address, live: n.live, atMs });
        }
        // A suspect that came back (a heartbeat after its failure, or a new address) is one no longer.
        for (const [node, s] of this.suspects) {
          const p = next.get(node);
          if (p === undefined || !p.live || p.atMs > s.failedAtMs || p.address !== s.address) this.suspects.delete(node);
        }
        this.peers = next;
        this.peersAtMs = Date.now();
      } catch (e) {
        this.warn(`remote DRAM: cannot look up peers: ${String(e)}`);
      } finally {
        this.peersRefresh = undefined;
      }
    })();
    return this.peersRefresh;
  }

  stats(): RemoteDramFigures {
    if (!this.closed) this.last = { address: this.fabric.address(), provider: this.fabric.provider(), fabric: this.fabric.stats() };
    return { ...this.last!, ...this.figures };
  }
  private last: Pick<RemoteDramFigures, 'address' | 'provider' | 'fabric'> | undefined;

  /** Stop serving peers and fetching (before the arena closes). */
  async close(): Promise<void> {
    if (this.closed) return;
    clearTimeout(this.advertiseTimer);
    await this.flushAdvertisements().catch(() => undefined);
    this.stats();
    this.closed = true;
    this.fabric.close();
  }
}

export function fetchTimeoutMs(sizeBytes: number): number {
  return FETCH_TIMEOUT_BASE_MS + Math.ceil(sizeBytes / FETCH_SLOWEST_BYTES_PER_MS);
}
