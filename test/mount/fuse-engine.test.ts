/**
 * Real mounts of FuseNativeEngine over a small in-memory CascadeFsOps, exercised with real tools
 * (cat, ls, stat, dd, touch, setfattr/getfattr, python3). Everything that touches the mount runs in
 * a child process, asynchronously: this process serves the mount, so a synchronous call into it
 * from here would deadlock.
 */
import { strict as assert } from 'node:assert';
import { execFile, spawn } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { CascadeFsOps, FileAttr, FsStatfs, Handle, DirEntry } from '../../fs/types';
import { FuseNativeEngine, mountEntry, packStat, resolveMountpoint } from '../../mount/engine/fuse-native';
import { runMount } from '../../mount/daemon/main';
import { CascadeError } from '../../store/errors';
import type { Store } from '../../store/store';

const { O_TRUNC } = fs.constants;
const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const KiB = 1024;

// ---- a fake filesystem ----

interface FakeNode {
  kind: 'dir' | 'file';
  mode: number;
  data: Buffer;
  ino: number;
  uid: number;
  gid: number;
  atimeMs: number;
  mtimeMs: number;
  ctimeMs: number;
  xattrs: Map<string, Buffer>;
}

interface Call {
  op: string;
  path?: string;
  handle?: number;
  flags?: number;
  bytes?: number;
}

/** POSIX-ish, in memory, with injectable failures and delays; records what reached it. */
class FakeFs implements CascadeFsOps {
  readonly nodes = new Map<string, FakeNode>();
  readonly handles = new Map<Handle, { path: string; node: FakeNode }>();
  readonly calls: Call[] = [];
  /** `${op}:${path}` -> what that op throws (synchronously for unlink: a non-async method). */
  readonly faults = new Map<string, unknown>();
  /** path -> the size getattr claims (a live file whose content changes between stat and read). */
  readonly claimedSizes = new Map<string, number>();
  /** path -> ms each read of it waits. */
  readonly readDelaysMs = new Map<string, number>();
  closed = false;
  private nextHandle = 1;
  private nextIno = 1000;

  constructor() {
    this.nodes.set('/', this.node('dir', 0o755));
  }

  node(kind: 'dir' | 'file', perms: number, data = Buffer.alloc(0)): FakeNode {
    const now = Date.now();
    return { kind, mode: (kind === 'dir' ? S_IFDIR : S_IFREG) | perms, data, ino: this.nextIno++, uid: 0, gid: 0, atimeMs: now, mtimeMs: now, ctimeMs: now, xattrs: new Map() };
  }

  addFile(p: string, content: string | Buffer, perms = 0o644): FakeNode {
    const n = this.node('file', perms, Buffer.from(content));
    this.nodes.set(p, n);
    return n;
  }

  addDir(p: string): void {
    this.nodes.set(p, this.node('dir', 0o755));
  }

  private fault(op: string, p: string): void {
    if (this.faults.has(`${op}:${p}`)) throw this.faults.get(`${op}:${p}`);
  }

  private lookup(p: string): FakeNode {
    const n = this.nodes.get(p);
    if (!n) throw new CascadeError('ENOENT', p);
    return n;
  }

  private handle(h: Handle): { path: string; node: FakeNode } {
    const e = this.handles.get(h);
    if (!e) throw new CascadeError('EBADF', `handle ${h}`);
    return e;
  }

  private children(p: string): string[] {
    const prefix = p === '/' ? '/' : `${p}/`;
    return [...this.nodes.keys()].filter((k) => k !== p && k.startsWith(prefix) && !k.slice(prefix.length).includes('/')).map((k) => k.slice(prefix.length));
  }

  private parentDir(p: string): void {
    const parent = this.lookup(path.posix.dirname(p));
    if (parent.kind !== 'dir') throw new CascadeError('ENOTDIR', p);
  }

  private open_(p: string, node: FakeNode): Handle {
    const h = this.nextHandle++;
    this.handles.set(h, { path: p, node });
    return h;
  }

  async getattr(p: string, handle?: Handle): Promise<FileAttr> {
    this.calls.push({ op: 'getattr', path: p, handle });
    this.fault('getattr', p);
    const n = handle !== undefined ? this.handle(handle).node : this.lookup(p);
    return {
      mode: n.mode,
      sizeBytes: this.claimedSizes.get(p) ?? n.data.length,
      nlink: n.kind === 'dir' ? 2 : 1,
      uid: n.uid,
      gid: n.gid,
      mtimeMs: n.mtimeMs,
      ctimeMs: n.ctimeMs,
      atimeMs: n.atimeMs,
      ino: n.ino,
    };
  }

  async readdir(p: string): Promise<DirEntry[]> {
    this.fault('readdir', p);
    if (this.lookup(p).kind !== 'dir') throw new CascadeError('ENOTDIR', p);
    const prefix = p === '/' ? '/' : `${p}/`;
    return this.children(p).map((name) => ({ name, kind: this.lookup(prefix + name).kind === 'dir' ? 'dir' : 'file' }));
  }

  async mkdir(p: string, mode: number): Promise<void> {
    this.parentDir(p);
    if (this.nodes.has(p)) throw new CascadeError('EEXIST', p);
    this.nodes.set(p, this.node('dir', mode & 0o7777));
  }

  async rmdir(p: string): Promise<void> {
    if (this.lookup(p).kind !== 'dir') throw new CascadeError('ENOTDIR', p);
    if (this.children(p).length > 0) throw new CascadeError('ENOTEMPTY', p);
    this.nodes.delete(p);
  }

  async create(p: string, mode: number, flags: number): Promise<Handle> {
    this.calls.push({ op: 'create', path: p, flags });
    this.fault('create', p);
    this.parentDir(p);
    const n = this.node('file', mode & 0o7777);
    this.nodes.set(p, n);
    return this.open_(p, n);
  }

  async open(p: string, flags: number): Promise<Handle> {
    this.calls.push({ op: 'open', path: p, flags });
    this.fault('open', p);
    const n = this.lookup(p);
    if (flags & O_TRUNC) n.data = Buffer.alloc(0);
    return this.open_(p, n);
  }

  async read(handle: Handle, target: Buffer, offsetBytes: number): Promise<number> {
    const { path: p, node } = this.handle(handle);
    this.calls.push({ op: 'read', path: p, handle, bytes: target.length });
    const delayMs = this.readDelaysMs.get(p);
    if (delayMs) {
      this.readDelaysMs.delete(p); // once: cat's second read (at EOF) need not wait again
      await new Promise((r) => setTimeout(r, delayMs));
    }
    this.fault('read', p);
    if (offsetBytes >= node.data.length) return 0;
    return node.data.copy(target, 0, offsetBytes, Math.min(node.data.length, offsetBytes + target.length));
  }

  async write(handle: Handle, data: Buffer, offsetBytes: number): Promise<number> {
    const { path: p, node } = this.handle(handle);
    this.calls.push({ op: 'write', path: p, handle, bytes: data.length });
    this.fault('write', p);
    const end = offsetBytes + data.length;
    if (end > node.data.length) {
      const grown = Buffer.alloc(Math.max(end, node.data.length * 2));
      node.data.copy(grown);
      node.data = grown.subarray(0, end);
    }
    data.copy(node.data, offsetBytes); // copied before resolving: the buffer is libfuse's
    return data.length;
  }

  async truncate(p: string, sizeBytes: number, handle?: Handle): Promise<void> {
    this.calls.push({ op: 'truncate', path: p, handle, bytes: sizeBytes });
    const n = handle !== undefined ? this.handle(handle).node : this.lookup(p);
    const next = Buffer.alloc(sizeBytes);
    n.data.copy(next, 0, 0, Math.min(sizeBytes, n.data.length));
    n.data = next;
  }

  async flush(handle: Handle): Promise<void> {
    this.calls.push({ op: 'flush', handle });
  }

  async fsync(handle: Handle): Promise<void> {
    this.calls.push({ op: 'fsync', handle });
  }

  async release(handle: Handle): Promise<void> {
    this.calls.push({ op: 'release', handle });
    this.handles.delete(handle);
  }

  // Deliberately not async: a synchronous throw must be caught as well as a rejection.
  unlink(p: string): Promise<void> {
    this.fault('unlink', p);
    if (this.lookup(p).kind === 'dir') throw new CascadeError('EISDIR', p);
    this.nodes.delete(p);
    return Promise.resolve();
  }

  async rename(from: string, to: string): Promise<void> {
    const n = this.lookup(from);
    this.parentDir(to);
    this.nodes.delete(from);
    this.nodes.set(to, n);
  }

  async utimens(p: string, atimeMs: number, mtimeMs: number): Promise<void> {
    const n = this.lookup(p);
    n.atimeMs = atimeMs;
    n.mtimeMs = mtimeMs;
  }

  async chmod(p: string, mode: number): Promise<void> {
    const n = this.lookup(p);
    n.mode = (n.mode & ~0o7777) | (mode & 0o7777);
  }

  async statfs(): Promise<FsStatfs> {
    return { blockBytes: 4096, totalBlocks: 2 ** 40, freeBlocks: 1000, availBlocks: 900, totalFiles: 5000, freeFiles: 4000, nameMaxBytes: 255 };
  }

  async getxattr(p: string, name: string): Promise<Buffer> {
    const v = this.lookup(p).xattrs.get(name);
    if (!v) throw new CascadeError('ENODATA', `${p} ${name}`);
    return v;
  }

  async setxattr(p: string, name: string, value: Buffer): Promise<void> {
    this.fault('setxattr', p);
    this.lookup(p).xattrs.set(name, value);
  }

  async listxattr(p: string): Promise<string[]> {
    return [...this.lookup(p).xattrs.keys()];
  }

  async removexattr(p: string, name: string): Promise<void> {
    if (!this.lookup(p).xattrs.delete(name)) throw new CascadeError('ENODATA', `${p} ${name}`);
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

// ---- helpers ----

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a shell command in a child process (never synchronously: this process serves the mount). */
function sh(command: string, env: Record<string, string> = {}, timeoutMs = 30_000): Promise<Ran> {
  return new Promise((resolve) => {
    execFile('sh', ['-c', command], { env: { ...process.env, ...env }, timeout: timeoutMs, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : -1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

function mountsUnder(dir: string): string[] {
  return fs
    .readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[1])
    .filter((m) => m !== undefined && m.startsWith(dir));
}

function canMount(): boolean {
  return fs.existsSync('/dev/fuse') && process.getuid?.() === 0;
}

/** A temp dir that other users can traverse (mkdtemp makes it 0700), with an empty mountpoint. */
function makeMountDir(tag: string): { dir: string; mnt: string } {
  const dir = resolveMountpoint(fs.mkdtempSync(path.join(os.tmpdir(), `cascade-fuse-${tag}-`)));
  fs.chmodSync(dir, 0o755);
  const mnt = path.join(dir, 'mnt');
  fs.mkdirSync(mnt);
  return { dir, mnt };
}

/** Always leaves nothing mounted: the engine's own unmount, then fusermount -uz as a fallback. */
async function teardown(engine: FuseNativeEngine | undefined, dir: string): Promise<void> {
  try {
    await engine?.unmount();
  } finally {
    for (const m of mountsUnder(dir).reverse()) await sh('fusermount -uz "$M"', { M: m });
    assert.deepEqual(mountsUnder(dir), [], 'nothing left mounted');
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---- tests ----

after('no mount made by these tests is left behind', () => {
  assert.deepEqual(mountsUnder(path.join(resolveMountpoint(os.tmpdir()), 'cascade-fuse-')), []);
});

describe('mount/fuse-engine: stat packing', () => {
  it('packs a stat the way fuse-native.c reads it', () => {
    const ints = packStat({
      mode: S_IFREG | 0o644, uid: 7, gid: 8, size: 5 * 2 ** 32 + 3, nlink: 1, ino: 42, blksize: 4096, blocks: 9,
      atime: new Date(2 ** 40 + 1), mtime: new Date(1000), ctime: new Date(2000),
    });
    assert.deepEqual([...ints], [S_IFREG | 0o644, 7, 8, 3, 5, 0, 1, 42, 0, 4096, 9, 0, 1, 256, 1000, 0, 2000, 0]);
  });
});

describe('mount/fuse-engine: real mount over a fake filesystem', function () {
  this.timeout(60_000);
  let dir = '';
  let mnt = '';
  let fake: FakeFs;
  let engine: FuseNativeEngine | undefined;
  const logs: string[] = [];
  const M = () => ({ M: mnt });

  before(async function () {
    if (!canMount()) this.skip();
    ({ dir, mnt } = makeMountDir('engine'));
    fake = new FakeFs();
    fake.addFile('/hello.txt', 'hello world\n');
    fake.addDir('/dir');
    fake.addFile('/dir/inner.bin', Buffer.alloc(3 * KiB, 7));
    fake.addFile('/secret', 'root only\n', 0o600);
    fake.addFile('/xattrs', 'x');
    fake.addFile('/slow', 'slow bytes\n');
    engine = await FuseNativeEngine.mount(mnt, fake, { log: (m) => logs.push(m) });
  });

  after(async function () {
    if (!dir) return;
    await teardown(engine, dir);
  });

  it('is mounted with the intended options', () => {
    const line = fs.readFileSync('/proc/self/mounts', 'utf8').split('\n').find((l) => l.split(' ')[1] === mnt);
    assert.ok(line, 'in /proc/mounts');
    const [source, , fsType, options] = line.split(' ');
    assert.equal(source, 'cascade');
    assert.equal(fsType, 'fuse.cascade');
    assert.match(options, /default_permissions/);
    assert.match(options, /allow_other/);
    assert.equal(engine?.isMounted(), true);
  });

  it('lists, reads and stats with real tools', async () => {
    const ls = await sh('ls -a "$M" && ls "$M/dir"', M());
    assert.equal(ls.code, 0, ls.stderr);
    assert.deepEqual(ls.stdout.trim().split('\n'), ['.', '..', 'dir', 'hello.txt', 'secret', 'slow', 'xattrs', 'inner.bin']);
    const cat = await sh('cat "$M/hello.txt"', M());
    assert.equal(cat.stdout, 'hello world\n');
    const wc = await sh('wc -c < "$M/dir/inner.bin"', M());
    assert.equal(wc.stdout.trim(), String(3 * KiB));
    const st = await sh('stat -c "%s %a %F %u %g %h %i %b %B %o" "$M/hello.txt" "$M/dir"', M());
    assert.equal(st.code, 0, st.stderr);
    const ino = fake.nodes.get('/hello.txt')?.ino;
    const dirIno = fake.nodes.get('/dir')?.ino;
    assert.deepEqual(st.stdout.trim().split('\n'), [`12 644 regular file 0 0 1 ${ino} 1 512 4096`, `0 755 directory 0 0 2 ${dirIno} 0 512 4096`]);
    const missing = await sh('cat "$M/nope"', M());
    assert.match(missing.stderr, /No such file or directory/);
  });

  it('receives writes in 128 KiB pieces (big_writes) and reads of at most 128 KiB', async () => {
    const before = fake.calls.length;
    const dd = await sh('dd if=/dev/urandom of="$M/big.bin" bs=1M count=4 status=none', M());
    assert.equal(dd.code, 0, dd.stderr);
    const writes = fake.calls.slice(before).filter((c) => c.op === 'write' && c.path === '/big.bin').map((c) => c.bytes ?? 0);
    assert.equal(writes.reduce((a, b) => a + b, 0), 4 * 1024 * KiB);
    assert.equal(Math.max(...writes), 128 * KiB, `write sizes seen: ${[...new Set(writes)].join(', ')}`);
    assert.ok(writes.length <= 40, `${writes.length} write requests for 4 MiB`);
    const readBack = await sh('sha256sum < "$M/big.bin"', M());
    const expected = crypto.createHash('sha256').update(fake.nodes.get('/big.bin')?.data ?? '').digest('hex');
    assert.equal(readBack.stdout.split(' ')[0], expected, 'read back byte-exact');
    const reads = fake.calls.slice(before).filter((c) => c.op === 'read' && c.path === '/big.bin').map((c) => c.bytes ?? 0);
    assert.ok(reads.length > 0 && Math.max(...reads) <= 128 * KiB, `read sizes seen: ${[...new Set(reads)].join(', ')}`);
  });

  it('passes O_TRUNC to open (atomic_o_trunc) instead of a separate truncate', async () => {
    fake.addFile('/over.txt', 'old content that is long\n');
    const before = fake.calls.length;
    const r = await sh('echo new > "$M/over.txt" && cat "$M/over.txt"', M());
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'new\n');
    const calls = fake.calls.slice(before).filter((c) => c.path === '/over.txt');
    const open = calls.find((c) => c.op === 'open' && ((c.flags ?? 0) & O_TRUNC) !== 0);
    assert.ok(open, `open with O_TRUNC seen: ${JSON.stringify(calls)}`);
    assert.equal(calls.filter((c) => c.op === 'truncate').length, 0, 'no truncate request');
  });

  it('creates files, and passes flush, fsync and release with the handle', async () => {
    const before = fake.calls.length;
    const r = await sh('python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_CREAT|os.O_WRONLY|os.O_EXCL, 0o640); os.write(fd, b\'abc\'); os.fsync(fd); os.close(fd)" "$M/new.txt" && stat -c %a "$M/new.txt"', M());
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), '640');
    const calls = fake.calls.slice(before);
    const create = calls.find((c) => c.op === 'create' && c.path === '/new.txt');
    assert.ok(create);
    assert.equal(((create.flags ?? 0) & fs.constants.O_CREAT) !== 0, true);
    const h = fake.calls.find((c) => c.op === 'write' && c.path === '/new.txt')?.handle;
    assert.ok(h !== undefined);
    for (const op of ['fsync', 'flush', 'release']) assert.ok(calls.some((c) => c.op === op && c.handle === h), `${op} with handle ${h}`);
    assert.equal(fake.nodes.get('/new.txt')?.data.toString(), 'abc');
  });

  it('answers fstat of an open file by its handle (fgetattr)', async () => {
    const before = fake.calls.length;
    // lseek(SEEK_END) refreshes expired attributes (attr_timeout: 1 s) by handle.
    const r = await sh('python3 -c "import os,sys,time; fd=os.open(sys.argv[1], os.O_RDONLY); time.sleep(1.2); print(os.lseek(fd, 0, os.SEEK_END)); os.close(fd)" "$M/hello.txt"', M());
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), '12');
    const byHandle = fake.calls.slice(before).filter((c) => c.op === 'getattr' && c.handle !== undefined);
    assert.ok(byHandle.length > 0, 'getattr arrived with a handle');
  });

  it('reads a live file whole even when its size changed since stat (direct I/O, no stale i_size)', async () => {
    fake.addFile('/live.json', '{"counter": 123456789}\n');
    fake.claimedSizes.set('/live.json', 5);
    const r = await sh('stat -c %s "$M/live.json" && cat "$M/live.json"', M());
    assert.equal(r.stdout, '5\n{"counter": 123456789}\n', r.stderr);
  });

  it('shows CascadeError codes to tools as the matching errno', async () => {
    fake.faults.set('create:/forbidden', new CascadeError('EPERM', 'no'));
    const touch = await sh('touch "$M/forbidden"', M());
    assert.notEqual(touch.code, 0);
    assert.match(touch.stderr, /Operation not permitted/);

    fake.faults.set('setxattr:/xattrs', new CascadeError('EDQUOT', 'pin quota'));
    const pin = await sh('setfattr -n user.cascade.pinned -v 1 "$M/xattrs"', M());
    assert.match(pin.stderr, /Disk quota exceeded/);
    fake.faults.delete('setxattr:/xattrs');

    fake.addFile('/corrupt', 'bad bytes');
    fake.faults.set('read:/corrupt', new CascadeError('ECORRUPT', 'checksum mismatch'));
    const cat = await sh('cat "$M/corrupt"', M());
    assert.match(cat.stderr, /Input\/output error/);
    assert.ok(logs.some((l) => l.includes('ECORRUPT')), 'a checksum failure is logged');

    const rmdir = await sh('rmdir "$M/dir"', M());
    assert.match(rmdir.stderr, /Directory not empty/);
  });

  it('answers an unexpected Error with EIO, logs its stack, and keeps serving', async () => {
    fake.addFile('/boom', 'x');
    fake.faults.set('getattr:/boom', new Error('kaboom'));
    const st = await sh('stat "$M/boom"', M());
    assert.match(st.stderr, /Input\/output error/);
    assert.ok(logs.some((l) => /getattr \/boom: unexpected error .*kaboom/s.test(l) && /\n\s+at /.test(l)), logs.join('\n'));

    fake.addFile('/syncboom', 'x');
    fake.faults.set('unlink:/syncboom', new TypeError('thrown synchronously'));
    const rm = await sh('rm "$M/syncboom"', M());
    assert.match(rm.stderr, /Input\/output error/);

    fake.addFile('/weird', 'x');
    fake.faults.set('open:/weird', 'a thrown string');
    assert.match((await sh('cat "$M/weird"', M())).stderr, /Input\/output error/);

    const cat = await sh('cat "$M/hello.txt"', M());
    assert.equal(cat.stdout, 'hello world\n', 'the daemon is alive');
    assert.equal(engine?.isMounted(), true);
  });

  it('answers getxattr and listxattr with ERANGE for a small buffer, so Python reads long values', async () => {
    const node = fake.nodes.get('/xattrs');
    assert.ok(node);
    node.xattrs.set('user.x', Buffer.alloc(300, 0x61));
    for (let i = 0; i < 12; i++) node.xattrs.set(`user.attribute-with-a-long-name-${i}`, Buffer.from('v'));
    const py = await sh(`python3 -c "import os,sys; print(len(os.getxattr(sys.argv[1], 'user.x'))); print(len(os.listxattr(sys.argv[1])))" "$M/xattrs"`, M());
    assert.equal(py.code, 0, py.stderr);
    assert.deepEqual(py.stdout.trim().split('\n'), ['300', '13']);
    const get = await sh('getfattr --only-values -n user.x "$M/xattrs" | wc -c', M());
    assert.equal(get.stdout.trim(), '300');
    const set = await sh('setfattr -n user.cascade.pinned -v 1 "$M/xattrs" && getfattr --only-values -n user.cascade.pinned "$M/xattrs"', M());
    assert.equal(set.stdout, '1');
    assert.ok(node.xattrs.get('user.cascade.pinned')?.equals(Buffer.from('1')));
    const missing = await sh('getfattr -n user.missing "$M/xattrs"', M());
    assert.match(missing.stderr, /No such attribute/);
    const rm = await sh('setfattr -x user.x "$M/xattrs" && setfattr -x user.x "$M/xattrs"', M());
    assert.match(rm.stderr, /No such attribute/);
    assert.equal(node.xattrs.has('user.x'), false);
  });

  it('refuses hard links, symlinks, device nodes and owner changes with EPERM', async () => {
    for (const cmd of ['ln "$M/hello.txt" "$M/hard"', 'ln -s hello.txt "$M/soft"', 'mkfifo "$M/fifo"', 'chown 1:1 "$M/hello.txt"', 'chgrp 5 "$M/hello.txt"']) {
      const r = await sh(cmd, M());
      assert.notEqual(r.code, 0, cmd);
      assert.match(r.stderr, /Operation not permitted/, cmd);
    }
    const same = await sh('chown 0:0 "$M/hello.txt"', M());
    assert.equal(same.code, 0, `a chown that changes nothing succeeds: ${same.stderr}`);
  });

  it('makes, renames and removes directories and files; chmod; utimens; statfs', async () => {
    const r = await sh(
      [
        'mkdir "$M/d2"',
        'echo a > "$M/d2/a"',
        'mv "$M/d2/a" "$M/d2/b"',
        'chmod 600 "$M/d2/b"',
        'touch -d @1600000000 "$M/d2/b"',
        'stat -c "%n %a %Y %X" "$M/d2/b"',
        'rm "$M/d2/b"',
        'rmdir "$M/d2"',
        'stat -f -c "%S %b %f %a %c %d %l" "$M"',
      ].join(' && '),
      M(),
    );
    assert.equal(r.code, 0, r.stderr);
    const [st, sf] = r.stdout.trim().split('\n');
    assert.equal(st, `${mnt}/d2/b 600 1600000000 1600000000`);
    assert.equal(sf, `4096 ${2 ** 32 - 1} 1000 900 5000 4000 255`, 'block counts over 32 bits are clamped');
    assert.equal(fake.nodes.has('/d2'), false);
    const now = await sh('touch "$M/hello.txt" && stat -c %Y "$M/hello.txt"', M());
    assert.ok(Math.abs(Number(now.stdout) - Date.now() / 1000) < 60, `touch sets the time to now: ${now.stdout}`);
  });

  it('lets other users in as st_mode allows (allow_other + default_permissions)', async () => {
    const asNobody = (cmd: string) => sh(`setpriv --reuid=65534 --regid=65534 --clear-groups sh -c '${cmd}'`, M());
    const ok = await asNobody('cat "$M/hello.txt"');
    assert.equal(ok.code, 0, ok.stderr);
    const denied = await asNobody('cat "$M/secret"');
    assert.match(denied.stderr, /Permission denied/);
    const write = await asNobody('echo x > "$M/hello.txt"');
    assert.match(write.stderr, /Permission denied/);
  });

  it('has no per-op timeout: a read slower than fuse-native\'s 15 s default still succeeds', async function () {
    this.timeout(45_000);
    fake.readDelaysMs.set('/slow', 16_000);
    const t0 = Date.now();
    const r = await sh('cat "$M/slow"', M(), 40_000);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'slow bytes\n');
    assert.ok(Date.now() - t0 >= 16_000);
  });
});

describe('mount/fuse-engine: mount lifecycle', function () {
  this.timeout(60_000);
  let dir = '';
  let mnt = '';
  let engine: FuseNativeEngine | undefined;

  beforeEach(function () {
    if (!canMount()) this.skip();
    ({ dir, mnt } = makeMountDir('life'));
    engine = undefined;
  });

  afterEach(async function () {
    if (!dir) return;
    await teardown(engine, dir);
    dir = '';
  });

  it('unmounts, and tolerates an external fusermount -uz first', async () => {
    engine = await FuseNativeEngine.mount(mnt, new FakeFs());
    assert.ok(mountEntry(mnt));
    const r = await sh('fusermount -uz "$M"', { M: mnt });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(engine.isMounted(), false);
    await engine.unmount();
    await engine.unmount(); // idempotent
    assert.equal(mountEntry(mnt), undefined);
    // The same mountpoint mounts again.
    engine = await FuseNativeEngine.mount(mnt, new FakeFs());
    assert.equal((await sh('ls -a "$M"', { M: mnt })).stdout, '.\n..\n');
    await engine.unmount();
    assert.equal(mountEntry(mnt), undefined);
  });

  it('direct I/O by default (shared mmap refused); kernelCache serves through the page cache', async () => {
    const mmap = `python3 -c "import mmap,os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); print(mmap.mmap(fd, 0, access=mmap.ACCESS_READ)[:5].decode())" "$M/f"`;
    const privateMmap = mmap.replace('ACCESS_READ', 'ACCESS_COPY');
    const fake = new FakeFs();
    fake.addFile('/f', 'hello');
    engine = await FuseNativeEngine.mount(mnt, fake);
    assert.match((await sh(mmap, { M: mnt })).stderr, /No such device/);
    assert.equal((await sh(privateMmap, { M: mnt })).stdout, 'hello\n');
    await engine.unmount();
    engine = await FuseNativeEngine.mount(mnt, fake, { kernelCache: true });
    assert.equal((await sh(mmap, { M: mnt })).stdout, 'hello\n');
    const before = fake.calls.filter((c) => c.op === 'read').length;
    assert.equal((await sh('cat "$M/f" "$M/f" "$M/f"', { M: mnt })).stdout, 'hello'.repeat(3));
    assert.equal(fake.calls.filter((c) => c.op === 'read').length, before, 're-reads come from the page cache');
  });

  it('refuses a missing, non-empty or already mounted mountpoint with a clear error', async () => {
    await assert.rejects(FuseNativeEngine.mount(path.join(dir, 'absent'), new FakeFs()), /ENOENT: mountpoint .* does not exist/);
    fs.writeFileSync(path.join(dir, 'file'), 'x');
    await assert.rejects(FuseNativeEngine.mount(dir, new FakeFs()), /ENOTEMPTY: mountpoint .* is not empty/);
    engine = await FuseNativeEngine.mount(mnt, new FakeFs());
    await assert.rejects(FuseNativeEngine.mount(mnt, new FakeFs()), /EBUSY: .* is already mounted/);
  });

  it('clears a stale mount left by a daemon killed with SIGKILL', async () => {
    const script = [
      `const { FuseNativeEngine } = require(${JSON.stringify(path.join(__dirname, '..', '..', 'mount', 'engine', 'fuse-native.js'))});`,
      "const root = { mode: 0o40755, sizeBytes: 0, nlink: 2, uid: 0, gid: 0, mtimeMs: 0, ctimeMs: 0, atimeMs: 0, ino: 1 };",
      "const ops = new Proxy({}, { get: (_, op) => async (p) => { if (op === 'getattr' && p === '/') return root; if (op === 'readdir') return []; throw new Error('unsupported'); } });",
      "FuseNativeEngine.mount(process.argv[1], ops).then(() => process.stdout.write('mounted\\n'), (e) => { console.error(e); process.exit(1); });",
    ].join('\n');
    const child = spawn(process.execPath, ['-e', script, mnt], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => d.toString().includes('mounted') && resolve());
      child.on('exit', (code) => reject(new Error(`mount child exited ${code}`)));
    });
    child.kill('SIGKILL');
    await new Promise((r) => child.on('exit', r));
    const stale = await sh('stat "$M"', { M: mnt });
    assert.match(stale.stderr, /Transport endpoint is not connected/);

    const logs: string[] = [];
    engine = await FuseNativeEngine.mount(mnt, new FakeFs(), { log: (m) => logs.push(m) });
    assert.ok(logs.some((l) => l.includes('stale mount')), logs.join('\n'));
    assert.equal((await sh('ls -a "$M"', { M: mnt })).code, 0);
    assert.equal(mountsUnder(mnt).length, 1, 'the stale mount is gone, only ours remains');
  });
});

describe('mount/main: runMount', function () {
  this.timeout(60_000);
  let dir = '';

  beforeEach(function () {
    if (!canMount()) this.skip();
    dir = '';
  });

  afterEach(async function () {
    if (!dir) return;
    await teardown(undefined, dir);
    dir = '';
  });

  async function start(stop?: AbortSignal) {
    const made = makeMountDir('main');
    dir = made.dir;
    const mnt = path.join(dir, 'new', 'mnt'); // created by runMount
    const fake = new FakeFs();
    fake.addFile('/hello.txt', 'hi\n');
    const logs: string[] = [];
    let storeSeen: Store | undefined;
    const done = runMount({
      mountpoint: mnt,
      dataDir: path.join(dir, 'data'),
      dramBytes: 16 * 1024 * KiB,
      log: (m) => logs.push(m),
      stop,
      createFs: async (store) => {
        storeSeen = store;
        return fake;
      },
    });
    for (let i = 0; i < 200 && !logs.some((l) => l.includes('mounted')); i++) await new Promise((r) => setTimeout(r, 50));
    return { mnt, fake, logs, done, store: () => storeSeen };
  }

  it('mounts, serves, and on stop unmounts and closes the filesystem and the store', async () => {
    const stop = new AbortController();
    const { mnt, fake, logs, done, store } = await start(stop.signal);
    assert.ok(logs.some((l) => l.startsWith(`cascade: mounted ${mnt} (engine `) && l.endsWith(`, data ${path.join(dir, 'data')}, DRAM 16.0 MiB)`)), logs.join('\n'));
    assert.equal((await sh('cat "$M/hello.txt"', { M: mnt })).stdout, 'hi\n');
    stop.abort();
    await done;
    assert.equal(mountEntry(mnt), undefined);
    assert.equal(fake.closed, true);
    await assert.rejects(store()!.put('m/x', Buffer.from('x')), 'the store is closed');
  });

  it('notices an external unmount (cascade unmount) and shuts down', async () => {
    const { mnt, fake, done } = await start();
    assert.equal((await sh('fusermount -uz "$M"', { M: mnt })).code, 0);
    await done;
    assert.equal(fake.closed, true);
  });
});

describe('mount/cli: mount and unmount', function () {
  this.timeout(60_000);
  const CLI = path.join(__dirname, '..', '..', 'mount', 'cli.js');
  let dir = '';

  afterEach(async function () {
    if (!dir) return;
    await teardown(undefined, dir);
    dir = '';
  });

  function cascade(args: string[]): Promise<Ran> {
    return new Promise((resolve) => {
      execFile(process.execPath, [CLI, ...args], { timeout: 30_000 }, (err, stdout, stderr) => {
        resolve({ code: err ? Number((err as { code?: unknown }).code ?? -1) : 0, stdout: String(stdout), stderr: String(stderr) });
      });
    });
  }

  /** Starts `cascade mount` and resolves once it says it is mounted. */
  function daemon(args: string[]) {
    const child = spawn(process.execPath, [CLI, 'mount', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const mounted = new Promise<void>((resolve, reject) => {
      child.stderr.on('data', (d: Buffer) => {
        stderr += d.toString();
        if (stderr.includes('cascade: mounted')) resolve();
      });
      void exited.then((code) => reject(new Error(`cascade mount exited ${code}: ${stderr}`)));
    });
    return { child, mounted, exited, stderr: () => stderr };
  }

  it('reads a JSON config: flag spellings or camelCase, data relative to the file, unknown keys refused', async () => {
    const { loadMountConfig } = await import('../../mount/cli');
    const cfgDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-cfg-'));
    try {
      const file = path.join(cfgDir, 'c.json');
      fs.writeFileSync(file, JSON.stringify({ data: 'store', dram: 1048576, pinQuota: '1M', 'keep-versions': 3, kernelCache: true }));
      assert.deepEqual(loadMountConfig(file), { data: path.join(cfgDir, 'store'), dram: '1048576', 'pin-quota': '1M', 'keep-versions': 3, 'kernel-cache': true });
      fs.writeFileSync(file, JSON.stringify({ dram: '1G', drm: '2G' }));
      assert.throws(() => loadMountConfig(file), /unknown key "drm" \(known: data, dram, dram-watermarks, disk, pin-quota, keep-versions, meta-group-commit-ms, kernel-cache, page-cache, disk-page-cache, engine, cluster, node, shared, fabric, fabric-addr, remote-promote-after, verify, gpu, gpu-device, metrics, passthrough, fuse-uring, debug, log-level, log-file, quiet\)/);
      fs.writeFileSync(file, JSON.stringify({ disk: '500G' }));
      assert.deepEqual(loadMountConfig(file), { disk: '500G' });
      fs.writeFileSync(file, JSON.stringify({ gpu: '16G', gpuDevice: 1 }));
      assert.deepEqual(loadMountConfig(file), { gpu: '16G', 'gpu-device': 1 });
      fs.writeFileSync(file, JSON.stringify({ passthrough: true, debug: false }));
      assert.deepEqual(loadMountConfig(file), { passthrough: true, debug: false });
      fs.writeFileSync(file, JSON.stringify({ passthrough: 'yes' }));
      assert.throws(() => loadMountConfig(file), /"passthrough" must be true or false/);
      fs.writeFileSync(file, JSON.stringify({ 'gpu-device': -1 }));
      assert.throws(() => loadMountConfig(file), /"gpu-device" must be a device number/);
      fs.writeFileSync(file, JSON.stringify({ metaGroupCommitMs: 4 }));
      assert.deepEqual(loadMountConfig(file), { 'meta-group-commit-ms': 4 });
      fs.writeFileSync(file, JSON.stringify({ 'meta-group-commit-ms': 5000 }));
      assert.throws(() => loadMountConfig(file), /"meta-group-commit-ms" must be a whole number of milliseconds from 0 to 1000/);
      fs.writeFileSync(file, JSON.stringify({ disk: true }));
      assert.throws(() => loadMountConfig(file), /"disk" must be a size/);
      fs.writeFileSync(file, JSON.stringify({ 'kernel-cache': 'yes' }));
      assert.throws(() => loadMountConfig(file), /"kernel-cache" must be true or false/);
      fs.writeFileSync(file, '[1]');
      assert.throws(() => loadMountConfig(file), /expected a JSON object/);
      const r = await cascade(['mount', path.join(cfgDir, 'mnt'), '--config', file]);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /^cascade: EINVAL: config file .*expected a JSON object/);
    } finally {
      fs.rmSync(cfgDir, { recursive: true, force: true });
    }
  });

  it('says so when unmounting something that is not mounted', async () => {
    const r = await cascade(['unmount', path.join(os.tmpdir(), 'cascade-not-a-mount')]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /is not mounted/);
    const proc = await cascade(['unmount', '/proc']);
    assert.match(proc.stderr, /a proc mount, not a Cascade \(FUSE\) mount/);
  });

  it('mounts the real filesystem, persists across a restart, stops on `cascade unmount` and on SIGTERM', async function () {
    if (!canMount()) this.skip();
    ({ dir } = makeMountDir('cli'));
    const mnt = path.join(dir, 'mnt');
    const config = path.join(dir, 'cascade.json');
    fs.writeFileSync(config, JSON.stringify({ data: 'data', dram: '16M' }));

    const first = daemon([mnt, '--config', config, '--dram', '32M']);
    await first.mounted;
    assert.match(first.stderr(), new RegExp(`cascade: mounted ${mnt} \\(engine .*, data ${path.join(dir, 'data')}, DRAM 32.0 MiB\\)`), 'flags win over the config');
    const w = await sh('mkdir -p "$M/kv/llama" && printf block > "$M/kv/llama/b.bin" && cat "$M/kv/llama/b.bin"', { M: mnt });
    assert.equal(w.stdout, 'block', w.stderr);
    const un = await cascade(['unmount', mnt]);
    assert.equal(un.code, 0, un.stderr);
    assert.equal(await first.exited, 0, first.stderr());
    assert.match(first.stderr(), /data persisted/);

    const second = daemon([mnt, '--config', config]);
    await second.mounted;
    assert.equal((await sh('cat "$M/kv/llama/b.bin"', { M: mnt })).stdout, 'block', 'persisted across a restart');
    second.child.kill('SIGTERM');
    assert.equal(await second.exited, 0, second.stderr());
    assert.match(second.stderr(), /received SIGTERM/);
    assert.equal(mountEntry(mnt), undefined);
  });
});
