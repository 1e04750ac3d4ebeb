/*
 * read_block.c: read one KV block from a Cascade mount with plain POSIX calls (open, fstat, read,
 * close), as any C or C++ inference engine can, with the error handling a real reader needs.
 *
 * Build: cc -O2 -o read_block read_block.c
 * Run:   ./read_block MNT/kv/llama-3-8b/req-0/block-000.bin [OUT]
 *
 * It reads the whole block into one page-aligned buffer, prints its size and read rate to stderr, and
 * with OUT writes the bytes there (to compare: sha256sum OUT; getfattr -n user.cascade.sha256 BLOCK).
 * Exit status: 0 ok, 1 an error (printed with its errno), 2 bad usage.
 *
 * What Cascade guarantees here: an open file keeps reading the version it opened, even if the block
 * is overwritten, renamed over or deleted meanwhile, so the size from fstat() holds until close().
 * A read never returns wrong bytes: stored bytes that fail their SHA-256 check give EIO. As on any
 * file, read() may return fewer bytes than asked (and EINTR), hence the loop.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int fail(const char *what, const char *path) {
  fprintf(stderr, "read_block: %s %s: %s\n", what, path, strerror(errno));
  return 1;
}

/* Reads exactly n bytes unless the file ends first; returns the count, or -1 with errno set. */
static ssize_t read_all(int fd, uint8_t *buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = read(fd, buf + done, n - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break; /* end of file */
    done += (size_t)r;
  }
  return (ssize_t)done;
}

static int write_all(const char *path, const uint8_t *buf, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("open", path);
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, buf + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      errno = e;
      return fail("write", path);
    }
    done += (size_t)w;
  }
  /* close() can report a failed write (on Cascade it commits the new version). */
  if (close(fd) != 0) return fail("close", path);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s BLOCK [OUT]\n", argv[0]);
    return 2;
  }
  const char *path = argv[1];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);

  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail("open", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return fail("fstat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    fprintf(stderr, "read_block: %s is not a regular file\n", path);
    close(fd);
    return 1;
  }
  size_t size = (size_t)st.st_size;
  /* Page-aligned, as O_DIRECT readers and GPU pinned-memory registration want. */
  void *mem = NULL;
  int err = posix_memalign(&mem, 4096, size > 0 ? size : 1);
  if (err != 0) {
    close(fd);
    errno = err;
    return fail("allocate a buffer for", path);
  }
  uint8_t *buf = mem;
  ssize_t got = read_all(fd, buf, size);
  if (got < 0) {
    int e = errno;
    close(fd);
    free(buf);
    errno = e;
    return fail("read", path);
  }
  if ((size_t)got != size) {
    fprintf(stderr, "read_block: %s: the file ended after %zd of %zu bytes\n", path, got, size);
    close(fd);
    free(buf);
    return 1;
  }
  if (close(fd) != 0) {
    free(buf);
    return fail("close", path);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf(stderr, "read_block: %s: %zu bytes in %.3f ms (%.2f GB/s)\n", path, size, s * 1e3, s > 0 ? (double)size / s / 1e9 : 0.0);

  int rc = argc == 3 ? write_all(argv[2], buf, size) : 0;
  free(buf);
  return rc;
}
