// One cached value and its bookkeeping, with the backend's key bytes stored
// inline after the struct: one allocation per entry.
//
// Immutable after publication: hash, scope, backend, key, size, future, owner.
// Written lock-free on hits: hits, waits, stamp, state. Written under the
// owning device's mutex: heap_version, member_index, cost (also by
// update_cost, atomically).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "unicache/cache.hpp"

namespace unicache::detail {

struct device_cache;
struct scope_counters;

enum class build_state : std::uint8_t { pending, ready, failed };

struct entry : entry_base {
  std::atomic<build_state> state{build_state::pending};
  backend_id backend = 0;
  std::uint32_t key_size = 0;
  std::uint32_t heap_version = 0;  // guarded by owner->mu
  std::uint32_t member_index = 0;  // guarded by owner->mu
  std::uint64_t hash = 0;
  std::uint64_t context_id = 0;
  std::uint64_t size_bytes = 0;
  std::atomic<std::uint64_t> cost_ns{0};
  std::atomic<std::uint64_t> stamp{0};  // policy clock at the last use
  std::atomic<std::uint32_t> hits{0};
  std::atomic<std::uint32_t> waits{0};
  device_cache* owner = nullptr;
  scope_counters* counters = nullptr;
  cache_future future;

  std::string_view key() const noexcept {
    return {reinterpret_cast<const char*>(this + 1), key_size};
  }
  bool matches(std::uint64_t h, std::uint64_t context, backend_id b,
               std::string_view k) const noexcept {
    return hash == h && context_id == context && backend == b && key_size == k.size() &&
           std::memcmp(this + 1, k.data(), k.size()) == 0;
  }

  // Allocates an entry with one reference (the caller's) and its key inline.
  static entry* create(std::uint64_t hash, std::uint64_t context_id, backend_id backend,
                       std::string_view key, std::uint64_t size_bytes, std::uint64_t cost_ns,
                       cache_future future);
};

inline entry* as_entry(entry_base* e) noexcept { return static_cast<entry*>(e); }
inline entry* as_entry(const entry_ref& r) noexcept { return static_cast<entry*>(r.get()); }

}  // namespace unicache::detail
