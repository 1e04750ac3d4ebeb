// The FUSE kernel protocol as this engine speaks it: Debian's <linux/fuse.h> (7.38 in bookworm) plus
// the 7.40 additions for passthrough, which the running kernel (6.9+) understands. Only what the
// engine uses is added; the layouts are the kernel's (include/uapi/linux/fuse.h).
#pragma once

#include <linux/fuse.h>
#include <sys/ioctl.h>

#include <cstdint>

namespace cascade::engine {

// The protocol minor version this engine answers INIT with (at most; never above the kernel's).
constexpr uint32_t kProtocolMinor = 40;
// Below this minor the kernel lacks max_pages (7.28): such kernels get the fuse-native engine.
constexpr uint32_t kProtocolMinorMin = 28;

// 7.40: open_out.backing_id (was padding) and init_out.max_stack_depth (was unused[0]).
constexpr uint64_t kFusePassthrough = 1ULL << 37;
// 7.39: shared mmap of files opened with FOPEN_DIRECT_IO (pages filled through READ with the mapping
// file's handle; an open without FOPEN_KEEP_CACHE drops the inode's cached pages).
constexpr uint64_t kFuseDirectIoAllowMmap = 1ULL << 36;
constexpr uint32_t kFopenPassthrough = 1U << 7;

struct BackingMap {
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
static_assert(sizeof(BackingMap) == 16, "struct fuse_backing_map");

constexpr unsigned long kIocBackingOpen = _IOW(229, 1, BackingMap);
constexpr unsigned long kIocBackingClose = _IOW(229, 2, uint32_t);

struct OpenOut {
  uint64_t fh;
  uint32_t open_flags;
  int32_t backing_id;
};
static_assert(sizeof(OpenOut) == sizeof(fuse_open_out), "fuse_open_out");

struct InitOut {
  uint32_t major;
  uint32_t minor;
  uint32_t max_readahead;
  uint32_t flags;
  uint16_t max_background;
  uint16_t congestion_threshold;
  uint32_t max_write;
  uint32_t time_gran;
  uint16_t max_pages;
  uint16_t map_alignment;
  uint32_t flags2;
  uint32_t max_stack_depth;
  uint32_t unused[6];
};
static_assert(sizeof(InitOut) == 64, "fuse_init_out");

}  // namespace cascade::engine
