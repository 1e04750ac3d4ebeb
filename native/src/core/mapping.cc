#include "mapping.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cascade {

Status Mapping::Open(const std::string& path, Mapping** out, std::string* error) {
  *out = nullptr;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = "open " + path + ": " + strerror(errno);
    return errno == ENOENT ? Status::kStale : Status::kIo;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    *error = "fstat " + path + ": " + (st.st_size <= 0 ? std::string("empty file") : strerror(errno));
    close(fd);
    return Status::kInvalid;
  }
  void* base = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the file alive
  if (base == MAP_FAILED) {
    *error = "mmap " + path + ": " + strerror(errno);
    return Status::kIo;
  }
  *out = new Mapping(static_cast<const uint8_t*>(base), static_cast<uint64_t>(st.st_size));
  return Status::kOk;
}

Mapping::~Mapping() { munmap(const_cast<uint8_t*>(base_), lengthBytes_); }

}  // namespace cascade
