// One cached value and its bookkeeping, with its owner's key bytes stored
// inline after the struct: one allocation per entry.
//
// The first 64 bytes are what a hit reads and writes (the reference count and
// flags, the identity compared by lookups, the use stamp and counters, the
// future it returns); the rest is touched only under the owning device's mutex.
//
// Immutable after publication: hash, context, owner, key, future.
// Written lock-free on hits: hits, waits, stamp, state. Written under the
// owning device's mutex: size (once, when the built value tells its real
// size), cost and the policy's bookkeeping.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>
#include <string_view>

#include "unicache/cache.hpp"

namespace unicache::detail {

struct device_cache;

enum class build_state : std::uint8_t { pending, ready, failed };

struct entry : entry_base {
  // Hot: read by every lookup, written by hits.
  std::atomic<build_state> state{build_state::pending};
  std::uint64_t hash = 0;
  std::uint64_t context_id = 0;
  owner_id owner = 0;
  std::uint32_t key_size = 0;
  std::atomic<std::uint64_t> stamp{0};  // policy clock at the last use
  std::atomic<std::uint32_t> hits{0};
  std::atomic<std::uint32_t> waits{0};
  cache_future future;

  // Cold, under the owning device's mutex: the size and cost (cost_ns is
  // atomic because update_cost writes it), and the policy's bookkeeping
  // (see cache/policy.hpp): what the device's policy of the moment makes
  // of them.
  std::uint64_t size_bytes = 0;
  double priority = 0;               // its key in the policy's eviction_queue
  std::atomic<float> cost_ns{0};     // a heuristic: float precision is plenty
  std::uint32_t heap_index = 0;      // its position in the eviction_queue (or a policy's own queue)
  float history = 0;                 // uses remembered from before it was cached
  std::uint8_t region = 0;           // which of the policy's queues holds it
  bool awaiting_cost = false;        // inserted by get_or_build, whose cost comes once built

  std::string_view key() const noexcept {
    return {reinterpret_cast<const char*>(this + 1), key_size};
  }
  bool matches(std::uint64_t h, std::uint64_t context, owner_id b,
               std::string_view k) const noexcept {
    return hash == h && context_id == context && owner == b && key_size == k.size() &&
           std::memcmp(this + 1, k.data(), k.size()) == 0;
  }

  // Allocates an entry with one reference (the caller's) and its key inline.
  static entry* create(std::uint64_t hash, std::uint64_t context_id, owner_id owner,
                       std::string_view key, std::uint64_t size_bytes, std::uint64_t cost_ns,
                       cache_future future);
};

inline entry* as_entry(entry_base* e) noexcept { return static_cast<entry*>(e); }
inline entry* as_entry(const entry_ref& r) noexcept { return static_cast<entry*>(r.get()); }

}  // namespace unicache::detail
