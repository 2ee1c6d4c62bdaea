// The store's size file: how many bytes of entries the store holds, and when
// the directory was last walked (recounted). Read and written only under the
// store lock. 40 bytes: magic "UCSIZE01", format version, total bytes, last
// walk time, checksum. A missing, torn or foreign file reads as "unknown",
// which makes the store recount.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace unicache::detail {

struct size_record {
  std::uint64_t bytes = 0;
  std::int64_t last_walk_unix = 0;
};

class size_file {
 public:
  explicit size_file(std::string path) : path_(std::move(path)) {}
  // nullopt: missing, unreadable or not valid (recount).
  std::optional<size_record> read() const noexcept;
  // Returns 0 or errno.
  int write(const size_record& record) const noexcept;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace unicache::detail
