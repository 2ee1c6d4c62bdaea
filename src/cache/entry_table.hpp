// The hash table of one device's entries: readers probe it with no lock,
// writers serialize on the owning device's mutex.
//
// Open addressing with linear probing over an array of atomic entry
// pointers. A reader (inside an epoch guard) sees each slot as empty, a
// tombstone or a published entry, so every lookup is linearizable. Writers
// fill empty slots, turn removed entries into tombstones, and grow or clean
// the array by building a new one, publishing it, and retiring the old one to
// the epoch domain. Load (entries plus tombstones) stays at or under one half.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "cache/entry.hpp"

namespace unicache::detail {

class entry_table {
 public:
  entry_table();
  ~entry_table();  // no reader may be inside; entries are not released
  entry_table(const entry_table&) = delete;
  entry_table& operator=(const entry_table&) = delete;

  // Reader side: the caller holds an epoch guard for as long as it uses the
  // returned entry. Entries are compared by full key, never by hash alone.
  entry* find(std::uint64_t hash, std::uint64_t context_id, owner_id owner,
              std::string_view key) const noexcept;

  // Writer side: the caller serializes all writers. `e` must not be present
  // (insert) or must be present (erase).
  void insert(entry* e);
  void erase(const entry* e) noexcept;
  std::size_t size() const noexcept { return live_; }
  // Writer side: every entry present.
  std::vector<entry*> entries() const;

 private:
  struct slot_array;
  void rebuild(std::size_t capacity);

  std::atomic<slot_array*> slots_;
  std::size_t live_ = 0;
  std::size_t occupied_ = 0;  // live entries plus tombstones
};

}  // namespace unicache::detail
