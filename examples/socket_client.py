#!/usr/bin/env python3
"""Read KV blocks through Cascade's same-node socket: no FUSE request and no copy in the daemon.

The protocol of mount/socket/server.ts (what mount/socket/client.ts does in TypeScript), in plain Python:

1. MOUNT/.cascade/client.json says where the daemon is:
       {"protocol": 1, "socket": "@cascade-<pid>-<hex>", "pid": N, "arenaFd": N, "arenaBytes": N}
2. Map the daemon's DRAM arena read-only through /proc/<pid>/fd/<arenaFd>. The kernel lets only root
   and the daemon's own user open that.
3. Connect to the Unix socket in the abstract namespace: the name after '@', with a leading NUL
   byte. The name fills sun_path (107 bytes), so connecting with just the name works.
4. One JSON object per line each way:
       -> {"id": 1, "op": "open", "path": "/kv/m/a"}
       <- {"id": 1, "ok": true, "hold": 7, "sha256": "...", "sizeBytes": N, "version": N,
           "committedAtMs": N, "extents": [[offset, length], ...]}
   The block's bytes are those extents of the arena, in order. While the hold is open they stay put,
   even if the file is overwritten, deleted or evicted meanwhile.
5.     -> {"id": 2, "op": "release", "hold": 7}       <- {"id": 2, "ok": true}
   Errors: {"id": N, "ok": false, "code": "ENOENT", "message": "..."}. Closing the connection
   releases every hold it has.

Who may connect: the daemon asks the kernel who connected (SO_PEERCRED), whatever the client claims.
It serves root and its own user. Anyone else gets EACCES and reads through the mount, where file
modes apply.

Usage:
    python3 examples/socket_client.py MNT/kv/llama-3-8b/req-0/block-000.bin [MORE...] [--out FILE]

For each file it prints `<path> version=N bytes=N sha256=<hex> verified`. Each block is hashed in
place in the arena and checked against the daemon's SHA-256. With --out (one file only) it writes
the bytes there. Exit status 1 on any failure.
"""
import argparse
import hashlib
import json
import mmap
import os
import socket
import sys


class CascadeError(Exception):
    def __init__(self, code, message):
        # The daemon's messages often start with their code already.
        super().__init__(message if message.startswith(code) else f"{code}: {message}")
        self.code = code


def find_mount(path):
    """The mountpoint above `path`: the nearest ancestor that is a mount point."""
    d = os.path.dirname(os.path.abspath(path))
    while not os.path.ismount(d):
        d = os.path.dirname(d)
    return d


class SameNodeClient:
    def __init__(self, mount):
        self.mount = os.path.abspath(mount)
        try:
            with open(os.path.join(self.mount, ".cascade", "client.json")) as f:
                info = json.load(f)
        except OSError as e:
            raise CascadeError("ENOENT", f"{self.mount} offers no same-node client (not a Cascade mount, or no native addon): {e}")
        if info["protocol"] != 1:
            raise CascadeError("EPROTO", f"the daemon speaks protocol {info['protocol']}, this client 1")
        fd = os.open(f"/proc/{info['pid']}/fd/{info['arenaFd']}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.arena = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)  # the whole file
        finally:
            os.close(fd)  # the mapping keeps it
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(30)
        self.sock.connect("\0" + info["socket"].lstrip("@"))
        self.replies = self.sock.makefile("rb")
        self.next_id = 1

    def request(self, **body):
        rid = self.next_id
        self.next_id += 1
        self.sock.sendall((json.dumps({"id": rid, **body}) + "\n").encode())
        line = self.replies.readline()
        if not line:
            raise CascadeError("ECONNRESET", "the daemon closed the connection")
        reply = json.loads(line)
        if reply.get("id") != rid:
            raise CascadeError("EPROTO", f"reply to request {reply.get('id')}, expected {rid}")
        if not reply["ok"]:
            raise CascadeError(reply.get("code", "EIO"), reply.get("message", "request failed"))
        return reply

    def read(self, path, out=None):
        """Hash the block in place (and copy it to `out`, a binary file, if given); returns the open reply."""
        rel = "/" + os.path.relpath(os.path.abspath(path), self.mount)
        block = self.request(op="open", path=rel)
        try:
            digest = hashlib.sha256()
            with memoryview(self.arena) as arena:
                for offset, length in block["extents"]:
                    view = arena[offset : offset + length]  # no copy: the daemon's pages
                    digest.update(view)
                    if out is not None:
                        out.write(view)
                    view.release()
            block["hashed"] = digest.hexdigest()
        finally:
            self.request(op="release", hold=block["hold"])
        return block

    def close(self):
        self.replies.close()
        self.sock.close()  # releases any hold still open
        self.arena.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="KV block files under one Cascade mount")
    ap.add_argument("--out", help="write the (one) block's bytes to this file")
    args = ap.parse_args()
    if args.out and len(args.files) != 1:
        ap.error("--out takes one file")
    mount = find_mount(args.files[0])
    client = SameNodeClient(mount)
    failed = False
    try:
        for path in args.files:
            try:
                if args.out:
                    with open(args.out, "wb") as out:
                        block = client.read(path, out)
                else:
                    block = client.read(path)
            except CascadeError as e:
                print(f"socket_client: {path}: {e}", file=sys.stderr)
                failed = True
                continue
            if block["hashed"] != block["sha256"]:
                print(f"socket_client: {path}: arena bytes hash to {block['hashed']}, the daemon said {block['sha256']}", file=sys.stderr)
                failed = True
                continue
            print(f"{path} version={block['version']} bytes={block['sizeBytes']} sha256={block['sha256']} verified")
    finally:
        client.close()
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (CascadeError, OSError) as e:
        print(f"socket_client: {e}", file=sys.stderr)
        sys.exit(1)
