// Invariants that only a bug in the core can break: crash loudly, never serve wrong bytes. (Bad input
// is a Status, never a Check.)
#pragma once

#include <cstdio>
#include <cstdlib>

namespace cascade {

inline void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "cascade native: broken invariant: %s\n", what);
    abort();
  }
}

}  // namespace cascade
