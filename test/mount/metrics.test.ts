/**
 * `cascade mount --metrics`: a real mount scraped over HTTP while files are written and read; the
 * counters move (requests by opcode, hits, tier bytes, dedup), errors are counted by errno, and a
 * port in use fails the mount before it mounts anything.
 */
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseListen } from '../../mount/cli';
import { canMount, Daemon, isMounted } from './daemon';

function scrape(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`HTTP ${res.statusCode}: ${body}`))));
      })
      .on('error', reject);
  });
}

/** The value of one sample line, e.g. value(text, 'cascade_hits_total{tier="dram"}'); 0 when absent. */
function value(text: string, sample: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
  return line === undefined ? 0 : Number(line.slice(sample.length + 1));
}

describe('metrics (--metrics)', function () {
  this.timeout(60_000);
  let root: string;
  let daemon: Daemon | undefined;

  before(function () {
    if (!canMount(['fusermount'])) this.skip();
  });
  beforeEach(() => (root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-metrics-'))));
  afterEach(async () => {
    await daemon?.stop();
    daemon = undefined;
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('parses HOST:PORT, :PORT and PORT, and refuses nonsense', function () {
    assert.deepEqual(parseListen('0.0.0.0:9400'), { host: '0.0.0.0', port: 9400 });
    assert.deepEqual(parseListen(':9400'), { host: '127.0.0.1', port: 9400 });
    assert.deepEqual(parseListen('9400'), { host: '127.0.0.1', port: 9400 });
    assert.deepEqual(parseListen('[::1]:0'), { host: '::1', port: 0 });
    for (const bad of ['', 'x', 'host:', 'host:99999', '1.2.3.4:-1']) assert.throws(() => parseListen(bad), /--metrics takes/);
  });

  it('serves Prometheus text whose counters move with the traffic', async function () {
    daemon = new Daemon(path.join(root, 'mnt'), path.join(root, 'data'), ['--metrics', '127.0.0.1:0']);
    await daemon.start();
    const url = /metrics on (http:\/\/\S+\/metrics)/.exec(daemon.stderr)?.[1];
    assert.ok(url, daemon.stderr);
    const before = await scrape(url);
    assert.match(before, /^# HELP cascade_tier_used_bytes /m);
    assert.match(before, /^cascade_process_resident_memory_bytes /m, 'process figures too');
    const d = path.join(daemon.mnt, 'kv', 'm');
    fs.mkdirSync(d);
    const block = Buffer.alloc(1 << 20, 7);
    for (let i = 0; i < 5; i++) fs.writeFileSync(path.join(d, `f${i}`), block); // the same content: dedup
    for (let i = 0; i < 5; i++) assert.ok(fs.readFileSync(path.join(d, `f${i}`)).equals(block));
    assert.throws(() => fs.readFileSync(path.join(d, 'missing')), /ENOENT/);
    // Opens the native engine answers in C++ reach the store's counters every 250 ms.
    let after = await scrape(url);
    for (let i = 0; i < 20 && value(after, 'cascade_hits_total{tier="dram"}') < 5; i++) {
      await new Promise((r) => setTimeout(r, 100));
      after = await scrape(url);
    }
    assert.ok(value(after, 'cascade_fuse_request_duration_seconds_count{op="CREATE"}') >= 5, 'creates observed');
    const lookup = process.env.CASCADE_ENGINE === 'fuse-native' ? 'GETATTR' : 'LOOKUP'; // libfuse 2 asks by path
    assert.ok(value(after, `cascade_fuse_errors_total{op="${lookup}",errno="ENOENT"}`) >= 1, 'the failed lookup counted by errno');
    assert.ok(value(after, 'cascade_hits_total{tier="dram"}') >= 5, 'reads counted as DRAM hits (native opens included)');
    assert.ok(value(after, 'cascade_tier_used_bytes{tier="dram"}') >= 1 << 20);
    assert.ok(value(after, 'cascade_dedup_hits_total') >= 4, 'four duplicate puts');
    assert.ok(value(after, 'cascade_dedup_ratio') >= 4.9);
    assert.equal(value(after, 'cascade_gpu_available'), 0);
    const notFound = await scrape(url.replace('/metrics', '/other')).catch((e: Error) => e.message);
    assert.match(notFound, /HTTP 404/);
  });

  it('a port in use fails the mount at once, before anything is mounted', async function () {
    const blocker = http.createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
    const port = (blocker.address() as { port: number }).port;
    try {
      daemon = new Daemon(path.join(root, 'mnt'), path.join(root, 'data'), ['--metrics', `127.0.0.1:${port}`]);
      await assert.rejects(daemon.start(), /EBUSY.*--metrics 127\.0\.0\.1:\d+/);
      assert.equal(isMounted(daemon.mnt), false);
      daemon = undefined;
    } finally {
      blocker.close();
    }
  });
});
