#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

namespace cascade {

namespace {
// Linux moves at most 0x7ffff000 bytes per call; ask for no more.
constexpr uint64_t kIoChunkBytes = uint64_t{1} << 30;
}  // namespace

Status PreadFully(int fd, uint8_t* target, uint64_t lengthBytes, uint64_t offsetBytes, uint64_t* readBytes, int* err) {
  uint64_t done = 0;
  while (done < lengthBytes) {
    const ssize_t n = pread(fd, target + done, std::min(kIoChunkBytes, lengthBytes - done), static_cast<off_t>(offsetBytes + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      *readBytes = done;
      return errno == EINVAL ? Status::kInvalid : Status::kIo;
    }
    if (n == 0) break;  // end of file
    done += static_cast<uint64_t>(n);
  }
  *readBytes = done;
  return Status::kOk;
}

Status PwriteFully(int fd, const uint8_t* source, uint64_t lengthBytes, uint64_t offsetBytes, int* err) {
  uint64_t done = 0;
  while (done < lengthBytes) {
    const ssize_t n = pwrite(fd, source + done, std::min(kIoChunkBytes, lengthBytes - done), static_cast<off_t>(offsetBytes + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return errno == ENOSPC || errno == EDQUOT ? Status::kNoSpace : errno == EINVAL ? Status::kInvalid : Status::kIo;
    }
    done += static_cast<uint64_t>(n);
  }
  return Status::kOk;
}

Status Fdatasync(int fd, int* err) {
  if (fdatasync(fd) != 0) {
    *err = errno;
    return Status::kIo;
  }
  return Status::kOk;
}

Status Fadvise(int fd, uint64_t offsetBytes, uint64_t lengthBytes, const std::string& advice, int* err) {
  int a;
  if (advice == "normal") a = POSIX_FADV_NORMAL;
  else if (advice == "sequential") a = POSIX_FADV_SEQUENTIAL;
  else if (advice == "random") a = POSIX_FADV_RANDOM;
  else if (advice == "willneed") a = POSIX_FADV_WILLNEED;
  else if (advice == "dontneed") a = POSIX_FADV_DONTNEED;
  else if (advice == "noreuse") a = POSIX_FADV_NOREUSE;
  else return Status::kInvalid;
  const int rc = posix_fadvise(fd, static_cast<off_t>(offsetBytes), static_cast<off_t>(lengthBytes), a);
  if (rc != 0) {
    *err = rc;
    return rc == EINVAL ? Status::kInvalid : Status::kIo;
  }
  return Status::kOk;
}

int OpenFile(const std::string& path, bool write, bool create, bool direct, int* err) {
  int flags = O_CLOEXEC | (write ? O_RDWR : O_RDONLY);
  if (create) flags |= O_CREAT;
  if (direct) flags |= O_DIRECT;
  const int fd = open(path.c_str(), flags, 0600);
  if (fd < 0) *err = errno;
  return fd;
}

bool DirectAligned(const uint8_t* buffer, uint64_t lengthBytes, uint64_t offsetBytes) {
  return reinterpret_cast<uintptr_t>(buffer) % kDirectAlignBytes == 0 && lengthBytes % kDirectAlignBytes == 0 &&
         offsetBytes % kDirectAlignBytes == 0;
}

}  // namespace cascade
