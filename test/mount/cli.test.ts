import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { defaultDataDir } from '../../mount/defaults';
import { formatBytes, parseSize } from '../../mount/size';
import { rmDir, seededBytes, sha256, tmpDir } from '../store/helpers';

const CLI = path.join(__dirname, '..', '..', 'mount', 'cli.js');

function cascade(args: string[], input?: Buffer) {
  const r = spawnSync(process.execPath, [CLI, ...args], { input, maxBuffer: 64 << 20 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr.toString() };
}

describe('mount/size', () => {
  it('parses human sizes and rejects nonsense', () => {
    assert.equal(parseSize('8G'), 8 * 2 ** 30);
    assert.equal(parseSize('512m'), 512 * 2 ** 20);
    assert.equal(parseSize('64KiB'), 64 * 1024);
    assert.equal(parseSize('1.5g'), 1.5 * 2 ** 30);
    assert.equal(parseSize('4096'), 4096);
    for (const bad of ['', 'x', '-1G', '8Q', '1e3']) assert.throws(() => parseSize(bad), /EINVAL/, bad);
    assert.equal(formatBytes(3 * 2 ** 20), '3.0 MiB');
  });

  it('puts the default data directory under $SCRATCH when set', () => {
    assert.equal(defaultDataDir({ SCRATCH: '/lus/me' }), '/lus/me/.cascade/data');
    assert.ok(defaultDataDir({}).endsWith('/.cascade/data'));
  });
});

describe('cascade CLI (direct data-directory access)', function () {
  this.timeout(60_000);
  const dir = tmpDir('cli');
  after(() => rmDir(dir));
  const common = ['--data', dir, '--dram', '32M'];

  it('puts from a file and from stdin, gets versions back byte-exact through a pipe', () => {
    const file = path.join(dir, 'in.bin');
    const big = seededBytes(1, 3 * 1024 * 1024 + 3);
    fs.writeFileSync(file, big);
    const put = cascade(['put', 'llama/a/b', file, ...common, '--json']);
    assert.equal(put.code, 0, put.stderr);
    assert.equal(JSON.parse(put.stdout.toString()).sha256, sha256(big));
    assert.equal(cascade(['put', 'llama/a/b', '-', ...common], Buffer.from('small')).code, 0);
    const v1 = cascade(['get', 'llama/a/b', ...common, '--version', '1']);
    assert.equal(v1.code, 0, v1.stderr);
    assert.ok(v1.stdout.equals(big), 'a 3 MiB block arrives whole through a pipe');
    assert.equal(cascade(['get', 'llama/a/b', ...common]).stdout.toString(), 'small');
    const versions = cascade(['versions', 'llama/a/b', ...common, '--json']);
    assert.deepEqual(JSON.parse(versions.stdout.toString()).map((v: { version: number }) => v.version), [1, 2]);
  });

  it('reports typed errors with exit 1 and usage errors with exit 2', () => {
    const bad = cascade(['get', 'nomodel', ...common]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /EINVAL/);
    const missing = cascade(['get', 'llama/a/b', ...common, '--version', '99']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /ENOENT/);
    assert.equal(cascade(['put', 'llama/x', '/nonexistent/file', ...common]).code, 1);
    assert.equal(cascade(['get', 'llama/a/b', '--data', dir, '--dram', 'lots']).code, 1);
    const usage = cascade(['frobnicate']);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--help/);
  });

  it('runs the demo and reports dedup savings', () => {
    const r = cascade(['demo', '--blocks', '8', '--block-size', '256K', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout.toString());
    assert.equal(out.stats.dedup.hits, 7, 'the shared prompt block was stored once');
    assert.equal(out.pinned, true);
    assert.ok(!fs.existsSync(out.dataDir), 'the temporary data directory is removed');
  });
});
