// Blocking file I/O that the binding runs on worker threads: whole-range pread/pwrite (looping over
// short transfers and EINTR), fdatasync, posix_fadvise, and O_DIRECT opens. Never called on the JS thread.
#pragma once

#include <cstdint>
#include <string>

#include "status.h"

namespace cascade {

// O_DIRECT needs the buffer, the offset and the length aligned to the device's logical block; 4 KiB
// covers every device we target.
constexpr uint64_t kDirectAlignBytes = 4096;

Status PreadFully(int fd, uint8_t* target, uint64_t lengthBytes, uint64_t offsetBytes, uint64_t* readBytes, int* err);
Status PwriteFully(int fd, const uint8_t* source, uint64_t lengthBytes, uint64_t offsetBytes, int* err);
Status Fdatasync(int fd, int* err);
// advice: "normal" | "sequential" | "random" | "willneed" | "dontneed" | "noreuse".
Status Fadvise(int fd, uint64_t offsetBytes, uint64_t lengthBytes, const std::string& advice, int* err);
// Opens a file; direct adds O_DIRECT. Returns the fd or -1 with *err set.
int OpenFile(const std::string& path, bool write, bool create, bool direct, int* err);
bool DirectAligned(const uint8_t* buffer, uint64_t lengthBytes, uint64_t offsetBytes);

}  // namespace cascade
