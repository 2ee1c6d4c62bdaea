// A shard's size record: how many entries and bytes the shard holds, when it
// was last walked, a generation that every change under the shard's lock
// advances, and the bytes of a batch of removals in progress. Read and
// written under the shard's lock (a reader without it sees the old record,
// the new one, or rarely a torn mix, which its checksum turns into
// "unknown"). 64 bytes: magic "UCSHARD1", format version, the five fields,
// checksum. A missing, torn, oversized or foreign file (or anything but a
// regular file) reads as "unknown", which makes the store recount the shard.
// Written in place over the record a writer left (a regular file of 64
// bytes and no other name): replacing it by rename would free the old
// file's blocks, and on a filesystem mounted with online discard that waits
// for the device (8-10 ms a time on the VM measured), under the shard's
// lock, at every put. Anything else under its name is replaced by a new
// file renamed into place, never written through.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "util/directory_handle.hpp"

namespace unicache::detail {

struct shard_totals {
  std::uint64_t bytes = 0;
  std::uint64_t entries = 0;
  std::int64_t last_walk_unix = 0;
  // Advanced by every publish and removal: a walk made without the lock saw
  // a stable shard when the generation did not move meanwhile.
  std::uint64_t generation = 0;
  // Non-zero only while an eviction batch holds the lock: a holder that
  // finds it set knows the last one died mid-batch and recounts.
  std::uint64_t pending_removal = 0;
};

class shard_record {
 public:
  // The file `name` in `dir`, which must outlive this; written with exactly `mode`.
  shard_record(const directory_handle& dir, std::string name, mode_t mode)
      : dir_(dir), name_(std::move(name)), mode_(mode) {}
  // nullopt: missing, unreadable or not valid (recount).
  std::optional<shard_totals> read() const noexcept;
  // Returns 0 or errno.
  int write(const shard_totals& totals) const noexcept;

 private:
  // Overwrites the record a writer left, if that is what the name holds.
  bool write_in_place(const unsigned char* bytes) const noexcept;

  const directory_handle& dir_;
  std::string name_;
  mode_t mode_;
};

}  // namespace unicache::detail
