// The state of one unified_cache shared by its source files: its devices
// (found with one atomic load on the hit path), its configuration and its
// eviction callbacks.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "cache/callback_registry.hpp"
#include "cache/device_cache.hpp"
#include "unicache/cache.hpp"
#include "util/mutex.hpp"

namespace unicache {

namespace detail {
constexpr std::uint64_t kBytesPerMb = std::uint64_t{1} << 20;
// Device ids below this are found with one atomic load on the hit path.
constexpr int kDirectDevices = 64;

// Capacities come checked (check_capacity, or the environment parser with
// the same bound), so the product fits.
inline std::uint64_t mb_to_bytes(std::size_t mb) { return std::uint64_t{mb} * kBytesPerMb; }
// Throws cache_error for a capacity above max_capacity_mb.
void check_capacity(std::size_t capacity_mb);
// Throw cache_error for a value outside the enum (a cast integer): the
// devices are indexed by kind, and a policy picks an implementation.
void check_kind(engine_kind kind);
void check_policy(eviction_policy policy);
inline bool known_kind(engine_kind kind) { return static_cast<unsigned>(kind) < engine_kind_count; }
}  // namespace detail

struct unified_cache::impl {
  explicit impl(cache_config c);

  const cache_config initial;
  std::atomic<bool> enabled{true};

  // Devices: created on first insertion, destroyed with the cache.
  mutable detail::mutex config_mu;
  cache_config settings ABSL_GUARDED_BY(config_mu);
  absl::flat_hash_map<std::pair<int, int>, std::uint64_t> device_overrides ABSL_GUARDED_BY(config_mu);
  std::vector<std::unique_ptr<detail::device_cache>> devices ABSL_GUARDED_BY(config_mu);
  absl::flat_hash_map<std::pair<int, int>, detail::device_cache*> far_devices ABSL_GUARDED_BY(config_mu);
  std::array<std::array<std::atomic<detail::device_cache*>, detail::kDirectDevices>, engine_kind_count> direct;

  detail::callback_registry callbacks;

  // The device, or nullptr if nothing was ever inserted for it.
  detail::device_cache* find_device(engine_kind kind, int device_id) const;
  // The device, created on first use.
  detail::device_cache* device(engine_kind kind, int device_id);
  std::uint64_t budget_of(engine_kind kind, int device_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu);
  std::vector<detail::device_cache*> devices_of(std::optional<engine_kind> kind) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu);

  // Runs callbacks and traces for removed entries, then hands the table's
  // references to the epoch domain. Called with no lock held.
  void finish_removals(engine_kind kind, int device_id, std::vector<detail::removed_entry>& removed);
  void trace_miss(const cache_scope& scope, owner_id owner, std::uint64_t hash, std::uint64_t size,
                  const char* outcome) const;
};

}  // namespace unicache
