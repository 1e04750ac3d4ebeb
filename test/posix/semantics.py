#!/usr/bin/env python3
"""Cascade's POSIX semantics, row by row, with direct system calls.

Every row of docs/SEMANTICS.md is one function here, registered with @row(id, expected). Each row
makes its own files under MOUNT/kv/semantics/<run>/<row>/, performs the system call it is about with
Python's os module (or libc through ctypes where os has no wrapper), and checks both the result
(success or the documented errno) and what must hold afterwards (content intact, sizes, inode numbers).

    semantics.py --list                        id, expected result, engine exceptions (JSON lines)
    semantics.py --mount M --engine E [IDS..]  run rows against a mount; one JSON line per row:
                                               {"id", "ok", "want", "detail"}

Coreutils open files before they act and so hide path-based requests (truncate(1) opens the file;
truncate(2) does not): every row calls the system call itself.
"""
import argparse
import ctypes
import ctypes.util
import errno
import hashlib
import json
import mmap
import os
import socket
import stat
import sys
import time
import traceback

ROWS = []
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def row(row_id, want, **engine_want):
    """Register a row. want: 'ok' or an errno name; engine_want: per-engine exceptions (fuse_native=...)."""
    def register(fn):
        ROWS.append({"id": row_id, "want": want, "engines": {k.replace("_", "-"): v for k, v in engine_want.items()}, "fn": fn})
        return fn
    return register


class Ctx:
    def __init__(self, mount, engine, base):
        self.mount = mount
        self.engine = engine
        self.base = base

    def dir(self, row_id):
        d = os.path.join(self.base, row_id.replace(".", "_"))
        os.makedirs(d, exist_ok=True)
        return d


def expect(want, fn, *args, **kwargs):
    """Call fn; 'ok' must succeed (its result is returned), an errno name must fail with that errno."""
    try:
        result = fn(*args, **kwargs)
    except OSError as e:
        got = errno.errorcode.get(e.errno, str(e.errno))
        # Compared as numbers: EOPNOTSUPP and ENOTSUP are one errno on Linux.
        if want == "ok" or e.errno != getattr(errno, want):
            raise AssertionError(f"{fn.__name__ if hasattr(fn, '__name__') else fn}: want {want}, got {got} ({e})")
        return None
    if want != "ok":
        raise AssertionError(f"want {want}, got success ({result!r})")
    return result


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def pattern(n, seed=1):
    """n deterministic bytes (not all equal, so misplaced ranges show)."""
    out = bytearray()
    block = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < n:
        out += block
        block = hashlib.sha256(block).digest()
    return bytes(out[:n])


def libc_call(name, *args):
    r = getattr(libc, name)(*args)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


# ---- create, open ----------------------------------------------------------------------------------

@row("create.new", "ok")
def _(c, want):
    p = c.dir("create.new") + "/f"
    fd = expect(want, os.open, p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    check(os.fstat(fd).st_size == 0, "a new file has size 0")
    os.write(fd, b"abc")
    os.close(fd)
    check(read_file(p) == b"abc", "content after close")


@row("create.excl-existing", "EEXIST")
def _(c, want):
    p = c.dir("create.excl-existing") + "/f"
    write_file(p, b"old")
    expect(want, os.open, p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    check(read_file(p) == b"old", "content intact")


@row("open.missing", "ENOENT")
def _(c, want):
    expect(want, os.open, c.dir("open.missing") + "/nope", os.O_RDONLY)


@row("open.write-committed", "EPERM")
def _(c, want):
    p = c.dir("open.write-committed") + "/f"
    write_file(p, b"committed")
    expect(want, os.open, p, os.O_WRONLY)
    expect(want, os.open, p, os.O_RDWR)
    check(read_file(p) == b"committed", "content intact")


@row("open.append", "EPERM")
def _(c, want):
    p = c.dir("open.append") + "/f"
    write_file(p, b"committed")
    expect(want, os.open, p, os.O_WRONLY | os.O_APPEND)
    expect(want, os.open, p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    check(read_file(p) == b"committed", "content intact")


@row("open.trunc-rewrite", "ok")
def _(c, want):
    """After O_TRUNC the size is the new session's at once, for fstat, stat, SEEK_END."""
    p = c.dir("open.trunc-rewrite") + "/f"
    write_file(p, pattern(1_000_000))
    fd = expect(want, os.open, p, os.O_WRONLY | os.O_TRUNC)
    check(os.fstat(fd).st_size == 0, f"fstat right after O_TRUNC: {os.fstat(fd).st_size}")
    os.write(fd, b"a" * 100)
    check(os.fstat(fd).st_size == 100, f"fstat after 100 bytes: {os.fstat(fd).st_size}")
    check(os.stat(p).st_size == 100, f"stat by path during the session: {os.stat(p).st_size}")
    check(os.lseek(fd, 0, os.SEEK_END) == 100, "SEEK_END")
    os.write(fd, b"b" * 100)
    os.close(fd)
    check(read_file(p) == b"a" * 100 + b"b" * 100, "a 200-byte file, no hole")


@row("open.trunc-close-empty", "ok")
def _(c, want):
    """Found by write_model.py: a truncation closed without writes read as the old content until release."""
    p = c.dir("open.trunc-close-empty") + "/f"
    write_file(p, b"old content")
    fd = expect(want, os.open, p, os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    check(read_file(p) == b"" and os.stat(p).st_size == 0, "empty right after close()")


@row("open.directory-for-write", "EISDIR")
def _(c, want):
    expect(want, os.open, c.dir("open.directory-for-write"), os.O_WRONLY)


@row("open.readers-keep-version", "ok")
def _(c, want):
    p = c.dir("open.readers-keep-version") + "/f"
    old = pattern(300_000, 2)
    write_file(p, old)
    r = os.open(p, os.O_RDONLY)
    write_file(p, b"new content")
    during = os.open(p, os.O_RDONLY)
    got = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        got += chunk
    os.close(r)
    check(got == old, "a handle opened before a rewrite reads the old version whole")
    check(os.read(during, 100) == b"new content", "a later open reads the new version")
    os.close(during)


@row("open.reader-during-write-session", "ok")
def _(c, want):
    p = c.dir("open.reader-during-write-session") + "/f"
    write_file(p, b"committed")
    w = os.open(p, os.O_WRONLY | os.O_TRUNC)
    os.write(w, b"staged bytes")
    check(read_file(p) == b"committed", "a reader sees the committed content, never the staging buffer")
    os.close(w)
    check(read_file(p) == b"staged bytes", "after close the new version")


# ---- write, read, holes ----------------------------------------------------------------------------

@row("pwrite.out-of-order-holes", "ok")
def _(c, want):
    p = c.dir("pwrite.out-of-order-holes") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    expect(want, os.pwrite, fd, b"tail", 5000)
    os.pwrite(fd, b"head", 0)
    check(os.fstat(fd).st_size == 5004, "size is the furthest end")
    check(os.pread(fd, 5004, 0) == b"head" + b"\0" * 4996 + b"tail", "pread during the session: hole reads as zeros")
    os.close(fd)
    check(read_file(p) == b"head" + b"\0" * 4996 + b"tail", "content after close")


@row("pwrite.past-limit", "EFBIG")
def _(c, want):
    p = c.dir("pwrite.past-limit") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    expect(want, os.pwrite, fd, b"x", 2**40)
    os.close(fd)


@row("read.write-only-handle", "EBADF")
def _(c, want):
    p = c.dir("read.write-only-handle") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    expect(want, os.read, fd, 10)
    os.close(fd)


@row("write.read-only-handle", "EBADF")
def _(c, want):
    p = c.dir("write.read-only-handle") + "/f"
    write_file(p, b"x")
    fd = os.open(p, os.O_RDONLY)
    expect(want, os.write, fd, b"y")
    os.close(fd)


# ---- ftruncate, truncate ---------------------------------------------------------------------------

@row("ftruncate.grow-before-write", "ok")
def _(c, want):
    """Preallocate with ftruncate, then ranks pwrite their own ranges."""
    p = c.dir("ftruncate.grow-before-write") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    expect(want, os.ftruncate, fd, 200_000)
    check(os.fstat(fd).st_size == 200_000, "fstat after ftruncate")
    os.pwrite(fd, b"R1", 100_000)
    os.pwrite(fd, b"R0", 0)
    os.close(fd)
    data = read_file(p)
    check(len(data) == 200_000 and data[:2] == b"R0" and data[100_000:100_002] == b"R1" and data[2:100_000] == b"\0" * 99_998, "content")


@row("ftruncate.shrink-grow", "ok")
def _(c, want):
    p = c.dir("ftruncate.shrink-grow") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    body = pattern(100_000, 3)
    os.write(fd, body)
    expect(want, os.ftruncate, fd, 5000)
    check(os.fstat(fd).st_size == 5000, "shrunk")
    expect(want, os.ftruncate, fd, 8000)
    check(os.pread(fd, 8000, 0) == body[:5000] + b"\0" * 3000, "grown back: the cut bytes are zeros")
    os.close(fd)
    check(read_file(p) == body[:5000] + b"\0" * 3000, "content after close")


@row("ftruncate.past-limit", "EFBIG")
def _(c, want):
    p = c.dir("ftruncate.past-limit") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"keep")
    expect(want, os.ftruncate, fd, 2**40)
    check(os.fstat(fd).st_size == 4, "size unchanged")
    os.close(fd)
    check(read_file(p) == b"keep", "content intact")


@row("ftruncate.read-only-handle", "EINVAL")
def _(c, want):
    p = c.dir("ftruncate.read-only-handle") + "/f"
    write_file(p, b"x")
    fd = os.open(p, os.O_RDONLY)
    expect(want, os.ftruncate, fd, 0)
    os.close(fd)


@row("truncate.path-zero", "ok")
def _(c, want):
    """truncate(2) by path to 0 replaces the content, as O_TRUNC open and close would."""
    p = c.dir("truncate.path-zero") + "/f"
    write_file(p, b"committed")
    ino = os.stat(p).st_ino
    expect(want, os.truncate, p, 0)
    check(os.stat(p).st_size == 0 and read_file(p) == b"", "now empty")
    check(os.stat(p).st_ino == ino, "same inode")


@row("truncate.path-nonzero", "EPERM")
def _(c, want):
    p = c.dir("truncate.path-nonzero") + "/f"
    write_file(p, b"committed")
    expect(want, os.truncate, p, 3)
    expect(want, os.truncate, p, 100)
    check(read_file(p) == b"committed", "content intact")


@row("truncate.path-during-session", "ok")
def _(c, want):
    p = c.dir("truncate.path-during-session") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"0123456789")
    expect(want, os.truncate, p, 4)
    check(os.fstat(fd).st_size == 4, "the session shrank")
    os.close(fd)
    check(read_file(p) == b"0123", "content")


@row("truncate.directory", "EISDIR")
def _(c, want):
    expect(want, os.truncate, c.dir("truncate.directory"), 0)


# ---- close, fsync ----------------------------------------------------------------------------------

@row("fsync.write-session", "ok")
def _(c, want):
    p = c.dir("fsync.write-session") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"durable")
    expect(want, os.fsync, fd)
    expect(want, os.fdatasync, fd)
    os.close(fd)
    check(read_file(p) == b"durable", "content")


@row("close.empty-create", "ok")
def _(c, want):
    p = c.dir("close.empty-create") + "/f"
    fd = expect(want, os.open, p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.close(fd)
    check(os.stat(p).st_size == 0 and read_file(p) == b"", "an empty file exists")


# ---- rename ----------------------------------------------------------------------------------------

@row("rename.keeps-inode", "ok")
def _(c, want):
    """The inode number stays with the file, also for a descriptor opened before."""
    d = c.dir("rename.keeps-inode")
    write_file(d + "/a", b"x" * 1000)
    ino = os.stat(d + "/a").st_ino
    fd = os.open(d + "/a", os.O_RDONLY)
    expect(want, os.rename, d + "/a", d + "/b")
    check(os.stat(d + "/b").st_ino == ino, f"stat after rename: {os.stat(d + '/b').st_ino} != {ino}")
    check(os.fstat(fd).st_ino == ino, f"fstat of a descriptor opened before: {os.fstat(fd).st_ino} != {ino}")
    os.close(fd)
    check(not os.path.exists(d + "/a"), "old name gone")


@row("rename.over-existing", "ok")
def _(c, want):
    d = c.dir("rename.over-existing")
    write_file(d + "/target", b"old")
    write_file(d + "/tmp", b"new")
    ino = os.stat(d + "/tmp").st_ino
    expect(want, os.rename, d + "/tmp", d + "/target")
    check(read_file(d + "/target") == b"new", "target replaced")
    check(os.stat(d + "/target").st_ino == ino, "the target name now has the moved file's inode")
    check(not os.path.exists(d + "/tmp"), "source gone")


@row("rename.while-writing", "ok")
def _(c, want):
    d = c.dir("rename.while-writing")
    fd = os.open(d + "/part", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"first ")
    expect(want, os.rename, d + "/part", d + "/final")
    os.write(fd, b"second")
    os.close(fd)
    check(read_file(d + "/final") == b"first second", "the commit lands at the new name")
    check(not os.path.exists(d + "/part"), "old name gone")


def renameat2_both_intact(c, row_id, want, flags):
    """renameat2(a, b, flags) between two existing files; both must be intact afterwards."""
    d = c.dir(row_id)
    write_file(d + "/a", b"a")
    write_file(d + "/b", b"b")
    AT_FDCWD = -100
    expect(want, libc_call, "renameat2", AT_FDCWD, (d + "/a").encode(), AT_FDCWD, (d + "/b").encode(), flags)
    check(read_file(d + "/a") == b"a" and read_file(d + "/b") == b"b", "both intact")


@row("rename.noreplace-existing", "EEXIST")
def _(c, want):
    renameat2_both_intact(c, "rename.noreplace-existing", want, 1)  # RENAME_NOREPLACE


@row("rename.exchange", "EINVAL")
def _(c, want):
    renameat2_both_intact(c, "rename.exchange", want, 2)  # RENAME_EXCHANGE


@row("rename.directory", "ok")
def _(c, want):
    d = c.dir("rename.directory")
    os.makedirs(d + "/src/sub")
    write_file(d + "/src/sub/f", b"f")
    ino = os.stat(d + "/src").st_ino
    expect(want, os.rename, d + "/src", d + "/dst")
    check(read_file(d + "/dst/sub/f") == b"f", "files moved")
    check(os.stat(d + "/dst").st_ino == ino, "a directory keeps its inode number")
    check(not os.path.exists(d + "/src"), "old name gone")


@row("rename.directory-over-nonempty", "ENOTEMPTY")
def _(c, want):
    d = c.dir("rename.directory-over-nonempty")
    os.makedirs(d + "/a")
    os.makedirs(d + "/b")
    write_file(d + "/b/f", b"f")
    expect(want, os.rename, d + "/a", d + "/b")


@row("rename.directory-into-itself", "EINVAL")
def _(c, want):
    d = c.dir("rename.directory-into-itself")
    os.makedirs(d + "/a/b")
    expect(want, os.rename, d + "/a", d + "/a/b/c")


@row("rename.directory-with-writer", "EBUSY")
def _(c, want):
    d = c.dir("rename.directory-with-writer")
    os.makedirs(d + "/a")
    fd = os.open(d + "/a/f", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    expect(want, os.rename, d + "/a", d + "/b")
    os.close(fd)


@row("rename.out-of-namespace", "EPERM")
def _(c, want):
    d = c.dir("rename.out-of-namespace")
    write_file(d + "/f", b"f")
    expect(want, os.rename, d + "/f", c.mount + "/f")
    check(read_file(d + "/f") == b"f", "intact")


# ---- inode numbers ---------------------------------------------------------------------------------

@row("inode.rewrite-keeps", "ok")
def _(c, want):
    p = c.dir("inode.rewrite-keeps") + "/f"
    write_file(p, b"one")
    ino = os.stat(p).st_ino
    expect(want, write_file, p, b"two")
    check(os.stat(p).st_ino == ino, "an O_TRUNC rewrite keeps the inode number")


@row("inode.recreate-new", "ok")
def _(c, want):
    p = c.dir("inode.recreate-new") + "/f"
    write_file(p, b"one")
    ino = os.stat(p).st_ino
    os.unlink(p)
    expect(want, write_file, p, b"two")
    check(os.stat(p).st_ino != ino, "a file created after an unlink is a new file with a new number")


@row("inode.distinct", "ok")
def _(c, want):
    d = c.dir("inode.distinct")
    inos = set()
    for i in range(20):
        write_file(f"{d}/f{i}", b"same content")  # identical content: still 20 files
        inos.add(os.stat(f"{d}/f{i}").st_ino)
    os.mkdir(d + "/sub")
    inos.add(os.stat(d + "/sub").st_ino)
    inos.add(os.stat(d).st_ino)
    check(len(inos) == 22, f"22 distinct numbers, got {len(inos)}")


@row("inode.write-session", "ok")
def _(c, want):
    p = c.dir("inode.write-session") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    ino = os.fstat(fd).st_ino
    os.write(fd, b"x")
    check(os.stat(p).st_ino == ino, "stat during the session")
    os.close(fd)
    check(os.stat(p).st_ino == ino, "the same number after the commit")


@row("inode.past-version-distinct", "ok")
def _(c, want):
    d = c.dir("inode.past-version-distinct")
    write_file(d + "/f", b"v1")
    write_file(d + "/f", b"v2")
    rel = os.path.relpath(d + "/f", c.mount + "/kv")
    v1 = f"{c.mount}/.cascade/versions/kv/{rel}/1"
    check(read_file(v1) == b"v1", "version 1 readable")
    check(os.stat(v1).st_ino != os.stat(d + "/f").st_ino, "a past version is another file")


# ---- directories -----------------------------------------------------------------------------------

def dir_times(d):
    s = os.stat(d)
    return (s.st_mtime_ns, s.st_ctime_ns)


def moved(d, action):
    before = dir_times(d)
    time.sleep(0.02)
    action()
    after = dir_times(d)
    check(after[0] > before[0] and after[1] > before[1], f"{d}: mtime/ctime {before} -> {after}")


@row("dir.times-create", "ok")
def _(c, want):
    d = c.dir("dir.times-create")
    moved(d, lambda: write_file(d + "/f", b"x"))
    moved(d, lambda: os.mkdir(d + "/sub"))


@row("dir.times-remove", "ok")
def _(c, want):
    d = c.dir("dir.times-remove")
    write_file(d + "/f", b"x")
    os.mkdir(d + "/sub")
    moved(d, lambda: os.unlink(d + "/f"))
    moved(d, lambda: os.rmdir(d + "/sub"))


@row("dir.times-rename", "ok")
def _(c, want):
    d = c.dir("dir.times-rename")
    os.mkdir(d + "/a")
    os.mkdir(d + "/b")
    write_file(d + "/a/f", b"x")
    before_a, before_b = dir_times(d + "/a"), dir_times(d + "/b")
    time.sleep(0.02)
    os.rename(d + "/a/f", d + "/b/f")
    check(dir_times(d + "/a")[0] > before_a[0], "rename out of a directory moves its mtime")
    check(dir_times(d + "/b")[0] > before_b[0], "rename into a directory moves its mtime")


@row("dir.rewrite-keeps-times", "ok")
def _(c, want):
    d = c.dir("dir.rewrite-keeps-times")
    write_file(d + "/f", b"x")
    before = dir_times(d)
    time.sleep(0.02)
    write_file(d + "/f", b"y")
    check(dir_times(d) == before, "rewriting an existing file changes no entry of its directory")


@row("dir.utime", "ok")
def _(c, want):
    d = c.dir("dir.utime")
    expect(want, os.utime, d, (1_000_000_000, 1_000_000_000))
    check(os.stat(d).st_mtime == 1_000_000_000, "a directory keeps the time set")


@row("mkdir.exists", "EEXIST")
def _(c, want):
    expect(want, os.mkdir, c.dir("mkdir.exists"))


@row("rmdir.nonempty", "ENOTEMPTY")
def _(c, want):
    d = c.dir("rmdir.nonempty")
    write_file(d + "/f", b"x")
    expect(want, os.rmdir, d)


@row("rmdir.file", "ENOTDIR")
def _(c, want):
    p = c.dir("rmdir.file") + "/f"
    write_file(p, b"x")
    expect(want, os.rmdir, p)


@row("unlink.directory", "EISDIR")
def _(c, want):
    d = c.dir("unlink.directory")
    os.mkdir(d + "/sub")
    expect(want, os.unlink, d + "/sub")


@row("unlink.missing", "ENOENT")
def _(c, want):
    expect(want, os.unlink, c.dir("unlink.missing") + "/nope")


@row("unlink.open-file", "ok")
def _(c, want):
    p = c.dir("unlink.open-file") + "/f"
    body = pattern(200_000, 4)
    write_file(p, body)
    fd = os.open(p, os.O_RDONLY)
    expect(want, os.unlink, p)
    check(not os.path.exists(p), "the name is gone")
    check(os.pread(fd, 200_000, 0) == body, "an open handle still reads the content")
    os.close(fd)


@row("rmdir.open-unlinked-file", "ok", fuse_native="ENOTEMPTY")
def _(c, want):
    """Found by the model test on fuse-native: rmdir succeeded there, then reads of the descriptor got ENOENT."""
    d = c.dir("rmdir.open-unlinked-file") + "/sub"
    os.mkdir(d)
    body = pattern(100_000, 5)
    write_file(d + "/f", body)
    fd = os.open(d + "/f", os.O_RDONLY)
    os.unlink(d + "/f")
    expect(want, os.rmdir, d)
    check(os.pread(fd, 200_000, 0) == body, "the open descriptor still reads the whole content")
    os.close(fd)
    if want != "ok":
        # After the last close: libfuse sends the release (and unlinks the hidden name) asynchronously.
        deadline = time.monotonic() + 5
        while True:
            try:
                os.rmdir(d)
                break
            except OSError as e:
                if e.errno != errno.ENOTEMPTY or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
    check(not os.path.exists(d), "the directory is gone")


@row("fstat.unlinked-open-file", "ok")
def _(c, want):
    """Found while writing this suite: the native engine answered ENOENT to fstat of an unlinked open file."""
    d = c.dir("fstat.unlinked-open-file")
    write_file(d + "/f", b"1" * 10)
    fd = os.open(d + "/f", os.O_RDONLY)
    ino = os.fstat(fd).st_ino
    os.unlink(d + "/f")
    st = expect(want, os.fstat, fd)
    check((st.st_size, st.st_nlink, st.st_ino) == (10, 0, ino), f"size, nlink, ino = {(st.st_size, st.st_nlink, st.st_ino)}")
    os.close(fd)
    w = os.open(d + "/w", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(w, b"abc")
    os.unlink(d + "/w")
    check(os.fstat(w).st_size == 3, f"a writer's fstat after unlink: {os.fstat(w).st_size}")
    os.close(w)
    check(not os.path.exists(d + "/w"), "an unlinked file being written is never committed")


@row("fstat.replaced-open-file", "ok")
def _(c, want):
    """Found while writing this suite: fstat of a reader's descriptor showed the file renamed over it."""
    d = c.dir("fstat.replaced-open-file")
    write_file(d + "/g", b"2" * 10)
    write_file(d + "/t", b"3" * 20)
    fd = os.open(d + "/g", os.O_RDONLY)
    ino = os.fstat(fd).st_ino
    os.rename(d + "/t", d + "/g")
    st = expect(want, os.fstat, fd)
    check((st.st_size, st.st_ino) == (10, ino), f"the old file's size and inode: {(st.st_size, st.st_ino)}")
    check(os.read(fd, 100) == b"2" * 10, "the old content")
    os.close(fd)
    check(read_file(d + "/g") == b"3" * 20, "the name has the new file")


@row("readdir.lists", "ok")
def _(c, want):
    d = c.dir("readdir.lists")
    write_file(d + "/f", b"x")
    os.mkdir(d + "/sub")
    names = expect(want, os.listdir, d)
    check(sorted(names) == ["f", "sub"], f"entries {names}")
    kinds = {e.name: (e.is_file(), e.is_dir()) for e in os.scandir(d)}
    check(kinds == {"f": (True, False), "sub": (False, True)}, f"kinds {kinds}")


class Dirent(ctypes.Structure):
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64), ("d_reclen", ctypes.c_ushort),
                ("d_type", ctypes.c_ubyte), ("d_name", ctypes.c_char * 256)]


def d_types(path):
    """name -> d_type as readdir(3) returns it (os.scandir hides it)."""
    libc.opendir.restype = ctypes.c_void_p
    libc.readdir.restype = ctypes.POINTER(Dirent)
    libc.readdir.argtypes = [ctypes.c_void_p]
    libc.closedir.argtypes = [ctypes.c_void_p]
    d = libc.opendir(path.encode())
    if not d:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    out = {}
    try:
        while True:
            ent = libc.readdir(d)
            if not ent:
                break
            out[ent.contents.d_name.decode()] = ent.contents.d_type
    finally:
        libc.closedir(d)
    return out


@row("readdir.entry-types", "ok")
def _(c, want):
    """The native engine fills d_type, so scandir().is_file() costs no stat per entry."""
    d = c.dir("readdir.entry-types")
    write_file(d + "/f", b"x")
    os.mkdir(d + "/sub")
    types = expect(want, d_types, d)
    DT_DIR, DT_REG, DT_UNKNOWN = 4, 8, 0
    if c.engine == "native":
        check(types == {".": DT_DIR, "..": DT_DIR, "f": DT_REG, "sub": DT_DIR}, f"d_type {types}")
    else:  # fuse-native: libfuse 2 is handed names only
        check(types.get("f") in (DT_REG, DT_UNKNOWN) and types.get("sub") in (DT_DIR, DT_UNKNOWN), f"d_type {types}")


# ---- names -----------------------------------------------------------------------------------------

@row("name.component-too-long", "ENAMETOOLONG")
def _(c, want):
    expect(want, os.open, c.dir("name.component-too-long") + "/" + "a" * 256, os.O_CREAT | os.O_WRONLY, 0o644)


@row("name.whole-name-too-long", "ENAMETOOLONG")
def _(c, want):
    """A name below kv/ is at most 4,096 bytes; a relative path under PATH_MAX can go past that."""
    d = c.dir("name.whole-name-too-long")
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        comps = ["c" * 200] * 19  # 19 * 201 = 3,819 bytes of directories
        cur = dfd
        for comp in comps:
            os.mkdir(comp, dir_fd=cur)
            nxt = os.open(comp, os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
            if cur != dfd:
                os.close(cur)
            cur = nxt
        # From inside the deep directory, a short relative name: the whole name passes 4,096 bytes.
        expect(want, os.open, "f" * 250, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=cur)
        os.close(cur)
    finally:
        os.close(dfd)


@row("name.file-at-kv-root", "EPERM")
def _(c, want):
    expect(want, os.open, c.mount + "/kv/loose-file", os.O_CREAT | os.O_WRONLY, 0o644)


@row("name.outside-kv", "EPERM")
def _(c, want):
    expect(want, os.open, c.mount + "/elsewhere", os.O_CREAT | os.O_WRONLY, 0o644)
    expect(want, os.mkdir, c.mount + "/elsewhere-dir")


@row("name.cascade-read-only", "EROFS")
def _(c, want):
    expect(want, os.open, c.mount + "/.cascade/stats.json", os.O_WRONLY)
    expect(want, os.mkdir, c.mount + "/.cascade/x")


# ---- refused by design -----------------------------------------------------------------------------

@row("link.hard", "EPERM")
def _(c, want):
    d = c.dir("link.hard")
    write_file(d + "/f", b"x")
    expect(want, os.link, d + "/f", d + "/g")


@row("link.symbolic", "EPERM")
def _(c, want):
    expect(want, os.symlink, "target", c.dir("link.symbolic") + "/s")


@row("mknod.fifo", "EPERM")
def _(c, want):
    expect(want, os.mkfifo, c.dir("mknod.fifo") + "/p")


@row("mknod.device", "EPERM")
def _(c, want):
    expect(want, os.mknod, c.dir("mknod.device") + "/d", stat.S_IFCHR | 0o600, os.makedev(1, 3))


@row("mknod.socket-bind", "EPERM")
def _(c, want):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        expect(want, s.bind, c.dir("mknod.socket-bind") + "/sock")
    finally:
        s.close()


@row("chown.other-owner", "EPERM")
def _(c, want):
    p = c.dir("chown.other-owner") + "/f"
    write_file(p, b"x")
    st = os.stat(p)
    expect("ok", os.chown, p, st.st_uid, st.st_gid)  # to the same owner: a no-op that succeeds
    expect(want, os.chown, p, st.st_uid + 1000, st.st_gid)


@row("fallocate", "EOPNOTSUPP")
def _(c, want):
    p = c.dir("fallocate") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        expect(want, libc_call, "fallocate", fd, 0, ctypes.c_long(0), ctypes.c_long(4096))
    finally:
        os.close(fd)


# ---- modes, times, xattrs --------------------------------------------------------------------------

@row("chmod.file", "ok")
def _(c, want):
    p = c.dir("chmod.file") + "/f"
    write_file(p, b"x")
    expect(want, os.chmod, p, 0o600)
    check(stat.S_IMODE(os.stat(p).st_mode) == 0o600, "mode")


@row("utime.file-ignored", "ok")
def _(c, want):
    p = c.dir("utime.file-ignored") + "/f"
    write_file(p, b"x")
    mtime = os.stat(p).st_mtime_ns
    expect(want, os.utime, p, (1_000_000_000, 1_000_000_000))
    check(os.stat(p).st_mtime_ns == mtime, "a file's time is its version's commit time")


@row("xattr.sha256", "ok")
def _(c, want):
    p = c.dir("xattr.sha256") + "/f"
    body = pattern(5000, 5)
    write_file(p, body)
    got = expect(want, os.getxattr, p, "user.cascade.sha256").decode()
    check(got == hashlib.sha256(body).hexdigest(), "the content address")
    check(set(os.listxattr(p)) == {"user.cascade.pinned", "user.cascade.sha256", "user.cascade.tier"}, "listxattr")


@row("xattr.unknown", "EOPNOTSUPP")
def _(c, want):
    p = c.dir("xattr.unknown") + "/f"
    write_file(p, b"x")
    expect(want, os.getxattr, p, "user.other")
    expect(want, os.setxattr, p, "user.other", b"1")
    # The kernel's own question before each truncate of an existing file (answered in C++ on the native engine).
    expect(want, os.getxattr, p, "security.capability")


@row("xattr.bad-value", "EINVAL")
def _(c, want):
    p = c.dir("xattr.bad-value") + "/f"
    write_file(p, b"x")
    expect(want, os.setxattr, p, "user.cascade.pinned", b"2")
    expect(want, os.setxattr, p, "user.cascade.link", b"not-a-sha")


@row("xattr.small-buffer", "ERANGE")
def _(c, want):
    p = c.dir("xattr.small-buffer") + "/f"
    write_file(p, b"x")
    buf = ctypes.create_string_buffer(8)
    libc.getxattr.restype = ctypes.c_ssize_t

    def small():
        n = libc.getxattr(p.encode(), b"user.cascade.sha256", buf, ctypes.c_size_t(8))
        if n < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return n
    expect(want, small)


@row("unlink.pinned", "EPERM")
def _(c, want):
    p = c.dir("unlink.pinned") + "/f"
    write_file(p, b"prefix block")
    os.setxattr(p, "user.cascade.pinned", b"1")
    expect(want, os.unlink, p)
    os.setxattr(p, "user.cascade.pinned", b"0")
    os.unlink(p)


@row("xattr.link-by-hash", "ok")
def _(c, want):
    d = c.dir("xattr.link-by-hash")
    body = pattern(10_000, 6)
    write_file(d + "/src", body)
    write_file(d + "/dst", b"")
    expect(want, os.setxattr, d + "/dst", "user.cascade.link", hashlib.sha256(body).hexdigest().encode())
    check(read_file(d + "/dst") == body, "linked content")


# ---- mmap ------------------------------------------------------------------------------------------

@row("mmap.private-read", "ok")
def _(c, want):
    p = c.dir("mmap.private-read") + "/f"
    body = pattern(100_000, 7)
    write_file(p, body)
    with open(p, "rb") as f:
        m = expect(want, mmap.mmap, f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        check(m[:] == body, "mapped bytes")
        m.close()


@row("mmap.shared-read", "ok", fuse_native="ENODEV")
def _(c, want):
    """The native engine negotiates FUSE_DIRECT_IO_ALLOW_MMAP: shared read-only maps work on the default
    (direct I/O) mount, and an overwrite never shows in an existing map (libfuse 2 cannot: ENODEV)."""
    p = c.dir("mmap.shared-read") + "/f"
    one = pattern(300_000, 8)
    write_file(p, one)
    with open(p, "rb") as f:
        m = expect(want, mmap.mmap, f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        if m is None:
            return
        check(m[:] == one, "mapped bytes")
        # Overwrite (O_TRUNC, same size) and commit while mapped: the map keeps the version its file
        # opened, a new open and map see the new one (no stale page cache).
        two = pattern(300_000, 9)
        write_file(p, two)
        os.stat(p)
        check(m[:] == one, "the existing map still shows the version it mapped")
        m.close()
    with open(p, "rb") as f:
        m2 = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        check(m2[:] == two, "a new map shows the new version")
        m2.close()


@row("read.page-cache", "ok")
def _(c, want):
    """Re-reads of a committed block come from the page cache on the native engine; a reader still reads
    the version it opened while a writer rewrites the file in place and a path truncate empties it."""
    p = c.dir("read.page-cache") + "/f"
    one, two = pattern(300_000, 10), pattern(200_000, 11)
    write_file(p, one)
    for _ in range(2):
        with open(p, "rb") as f:
            check(expect(want, f.read) == one, "a re-read")
    fd = os.open(p, os.O_RDONLY)
    try:
        check(os.pread(fd, 400_000, 0) == one, "the reader's first read")
        w = os.open(p, os.O_WRONLY | os.O_TRUNC)  # in place: the page-cache reader keeps its inode
        os.write(w, two[:1000])
        check(os.stat(p).st_size == 1000, "stat shows the writer's size")
        check(os.pread(fd, 400_000, 0) == one, "the reader reads its version beside the writer")
        os.write(w, two[1000:])
        os.close(w)
        check(os.pread(fd, 400_000, 0) == one, "the reader reads its version after the rewrite committed")
        with open(p, "rb") as f:
            check(f.read() == two, "a new open reads the rewrite")
        os.truncate(p, 0)
        check(os.pread(fd, 400_000, 0) == one, "the reader reads its version after a truncate by path")
    finally:
        os.close(fd)
    with open(p, "rb") as f:
        check(f.read() == b"", "a new open reads the truncated file")


# ---- filesystem ------------------------------------------------------------------------------------

@row("statvfs", "ok")
def _(c, want):
    s = expect(want, os.statvfs, c.mount)
    check(s.f_namemax == 255 and s.f_bsize > 0 and s.f_blocks > 0, f"statvfs {s}")


@row("lock.fcntl", "ok")
def _(c, want):
    import fcntl
    p = c.dir("lock.fcntl") + "/f"
    fd = os.open(p, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    expect(want, fcntl.lockf, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.lockf(fd, fcntl.LOCK_UN)
    expect(want, fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


def want_for(r, engine):
    return r["engines"].get(engine, r["want"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="list the rows and their expected results")
    ap.add_argument("--mount", help="the Cascade mountpoint")
    ap.add_argument("--engine", default="native", help="the engine serving the mount (native or fuse-native)")
    ap.add_argument("ids", nargs="*", help="only these rows")
    a = ap.parse_args()
    ids = {r["id"] for r in ROWS}
    assert len(ids) == len(ROWS), "row ids are unique"
    if a.list:
        for r in ROWS:
            print(json.dumps({"id": r["id"], "want": r["want"], "engines": r["engines"]}))
        return 0
    if not a.mount:
        ap.error("--mount is required unless --list")
    unknown = set(a.ids) - ids
    if unknown:
        ap.error(f"no such rows: {sorted(unknown)}")
    base = os.path.join(a.mount, "kv", "semantics", f"run-{os.getpid()}-{time.time_ns()}")
    os.makedirs(base)
    ctx = Ctx(a.mount, a.engine, base)
    for r in ROWS:
        if a.ids and r["id"] not in a.ids:
            continue
        want = want_for(r, a.engine)
        try:
            r["fn"](ctx, want)
            result = {"id": r["id"], "ok": True, "want": want}
        except Exception as e:  # a row reports its failure; the suite goes on
            result = {"id": r["id"], "ok": False, "want": want, "detail": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=3)}
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
