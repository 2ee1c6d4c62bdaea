// The store's size file: how many bytes of entries the store holds, and when
// the directory was last walked (recounted). Read and written only under the
// store lock. 40 bytes: magic "UCSIZE01", format version, total bytes, last
// walk time, checksum. A missing, torn, oversized or foreign file (or
// anything but a regular file) reads as "unknown", which makes the store
// recount. Written to a temporary file and renamed into place, so whatever
// another writer left under its name is replaced, never written through.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "util/directory_handle.hpp"

namespace unicache::detail {

struct size_record {
  std::uint64_t bytes = 0;
  std::int64_t last_walk_unix = 0;
};

class size_file {
 public:
  // The file kSizeName (store_layout.hpp) in `dir`, which must outlive
  // this; written with exactly `mode`.
  size_file(const directory_handle& dir, mode_t mode) : dir_(dir), mode_(mode) {}
  // nullopt: missing, unreadable or not valid (recount).
  std::optional<size_record> read() const noexcept;
  // Returns 0 or errno.
  int write(const size_record& record) const noexcept;

 private:
  const directory_handle& dir_;
  mode_t mode_;
};

}  // namespace unicache::detail
