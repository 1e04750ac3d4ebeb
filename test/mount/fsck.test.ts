/**
 * `cascade fsck` as a user runs it: on a data directory written with `cascade put`, and on the data
 * directory of a real mount (refused while mounted; after the metadata is lost the mount refuses
 * with ECORRUPT naming fsck, and after `fsck --repair` it serves the files again byte-exact).
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Store } from '../../store/store';
import { rmDir, seededBytes, sha256, tmpDir } from '../store/helpers';
import { canMount, CLI, Daemon, isMounted } from './daemon';

function cascade(args: string[], input?: Buffer) {
  const r = spawnSync(process.execPath, [CLI, ...args], { input, maxBuffer: 64 << 20 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr.toString() };
}

describe('cascade fsck (CLI)', function () {
  this.timeout(120_000);
  let dir = '';
  beforeEach(() => {
    dir = tmpDir('fsck-cli');
  });
  afterEach(() => rmDir(dir));

  it('clean: exit 0; meta.sqlite deleted: commands refuse naming fsck, check exits 3, --repair exits 4 and every file reads back', () => {
    const data = path.join(dir, 'data');
    const common = ['--data', data, '--dram', '32M'];
    const fsckArgs = ['--data', data]; // fsck opens no DRAM tier: it takes no --dram
    const files = [0, 1, 2].map((i) => seededBytes(40 + i, 50_000 + i * 10_000));
    files.forEach((f, i) => assert.equal(cascade(['put', `m/f${i}`, '-', ...common], f).code, 0));
    assert.equal(cascade(['put', 'm/f0', '-', ...common], files[2]).code, 0); // a second version

    const clean = cascade(['fsck', ...fsckArgs]);
    assert.equal(clean.code, 0, clean.stderr);
    assert.match(clean.stdout.toString(), /result: clean/);

    fs.rmSync(path.join(data, 'meta.sqlite'));
    const refused = cascade(['stat', 'm/f0', ...common]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /ECORRUPT: .*missing.*run `cascade fsck --repair --data /);

    const check = cascade(['fsck', '--json', ...fsckArgs]);
    assert.equal(check.code, 3, check.stderr);
    const report = JSON.parse(check.stdout.toString()) as { metadata: { state: string }; problems: string[] };
    assert.equal(report.metadata.state, 'missing');

    const fixed = cascade(['fsck', '--repair', ...fsckArgs]);
    assert.equal(fixed.code, 4, fixed.stdout.toString() + fixed.stderr);
    assert.match(fixed.stdout.toString(), /replayed 4 journal entries .*complete: exact/);
    files.forEach((f, i) => {
      const got = cascade(['get', `m/f${i}`, ...common]);
      assert.equal(got.code, 0, got.stderr);
      assert.equal(sha256(got.stdout), sha256(i === 0 ? files[2] : f), `m/f${i}`);
    });
    assert.equal(sha256(cascade(['get', 'm/f0', '--version', '1', ...common]).stdout), sha256(files[0]));
  });

  it('refuses (exit 1, EBUSY, with the holder) while another process holds the data directory', async () => {
    const store = await Store.open({ dataDir: dir, dramCapacityBytes: 8 << 20, dram: 'memory' });
    try {
      await store.put('m/x', seededBytes(1, 1000));
      await store.syncAll();
      const r = cascade(['fsck', '--repair', '--data', dir]);
      assert.equal(r.code, 1);
      assert.match(r.stderr, new RegExp(`EBUSY: data directory ${dir} is in use by pid ${process.pid}`));
    } finally {
      await store.close();
    }
  });
});

describe('cascade fsck on a mount\'s data directory (real FUSE mount)', function () {
  this.timeout(180_000);
  let root = '';
  let daemon: Daemon | undefined;

  before(function () {
    if (!canMount()) this.skip();
    root = tmpDir('fsck-mount');
  });
  after(async () => {
    await daemon?.stop().catch(() => undefined);
    if (root) rmDir(root);
  });

  it('refused while mounted; after meta.sqlite is deleted the mount refuses naming fsck; after --repair it serves every file byte-exact', async () => {
    const mnt = path.join(root, 'mnt');
    const data = path.join(root, 'data');
    fs.mkdirSync(mnt);
    daemon = new Daemon(mnt, data);
    await daemon.start();
    const dirIn = path.join(mnt, 'kv', 'llama', 'r0');
    fs.mkdirSync(dirIn, { recursive: true });
    const contents = [0, 1, 2, 3].map((i) => seededBytes(70 + i, 1_000_000 + i));
    contents.forEach((c, i) => fs.writeFileSync(path.join(dirIn, `b${i}.bin`), c));
    // Write a temporary file and rename it over, as vLLM does.
    fs.writeFileSync(path.join(dirIn, '.b4.tmp'), contents[0]);
    fs.renameSync(path.join(dirIn, '.b4.tmp'), path.join(dirIn, 'b4.bin'));

    const busy = cascade(['fsck', '--data', data]);
    assert.equal(busy.code, 1);
    assert.match(busy.stderr, /EBUSY: data directory .* is in use by pid \d+/);

    await daemon.stop();
    daemon = undefined;
    fs.rmSync(path.join(data, 'meta.sqlite'));
    const refused = new Daemon(mnt, data);
    await assert.rejects(refused.start(), /ECORRUPT: .*cascade fsck --repair --data/);
    await refused.stop().catch(() => undefined);
    assert.equal(isMounted(mnt), false);

    const fixed = cascade(['fsck', '--repair', '--data', data]);
    assert.equal(fixed.code, 4, fixed.stdout.toString() + fixed.stderr);

    daemon = new Daemon(mnt, data);
    await daemon.start();
    contents.forEach((c, i) => assert.equal(sha256(fs.readFileSync(path.join(dirIn, `b${i}.bin`))), sha256(c), `b${i}`));
    assert.equal(sha256(fs.readFileSync(path.join(dirIn, 'b4.bin'))), sha256(contents[0]));
    assert.equal(fs.existsSync(path.join(dirIn, '.b4.tmp')), false, 'the rename was replayed too');
    await daemon.stop();
    daemon = undefined;
  });
});
