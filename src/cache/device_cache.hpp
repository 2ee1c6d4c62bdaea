// One device's part of a unified_cache: its entries (a table that hits read
// with no lock), its byte budget, its eviction policy and its counters.
//
// Everything but the table's readers and the counters' atomics is guarded
// by `mu`. Entries leave through remove_locked, which hands the table's
// reference to a list the caller finishes (callbacks, traces, retirement)
// once it has released `mu`.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "cache/entry.hpp"
#include "cache/entry_table.hpp"
#include "cache/policy.hpp"
#include "unicache/cache.hpp"
#include "util/mutex.hpp"

namespace unicache::detail {

// Counters of one scope that are written only on the slow path (hits and
// waits live in the entries, where the hit path already writes).
struct scope_counters {
  std::atomic<std::uint64_t> misses{0}, inserts{0}, evictions{0}, failures{0};
  std::atomic<std::uint64_t> refused_full{0}, refused_oversize{0}, refused_admission{0};
  std::atomic<std::uint64_t> bytes{0}, entries{0};
  std::atomic<std::uint64_t> retired_hits{0}, retired_waits{0};
};

enum class removal { capacity, shrink, clear, failure, erase };
const char* describe(removal reason);

struct removed_entry {
  entry_ref entry;  // the table's reference, retired once processed
  removal reason;
};

struct device_cache {
  device_cache(engine_kind k, int id);

  const engine_kind kind;
  const int device_id;
  mutex mu;
  entry_table table;  // readers: no lock; writers: mu
  // What hits stamp into the entries they use; its meaning is the policy's.
  std::atomic<std::uint64_t> clock{0};

  scope_counters& counters_for(std::uint64_t context_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  const absl::flat_hash_map<std::uint64_t, std::unique_ptr<scope_counters>>& scopes() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return scopes_;
  }
  std::uint64_t capacity() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return capacity_bytes_; }
  std::uint64_t used() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return used_bytes_; }
  bool evicts_for_room() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return policy_->evicts_for_room(); }

  // Inserts `e` (not present) and counts it; the table owns e's reference.
  void insert_locked(entry* e, scope_counters& counters) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Takes `e` out and appends it, with the table's reference, to `removed`.
  void remove_locked(entry* e, removal reason, std::vector<removed_entry>& removed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Evicts per policy until at most `target` bytes are used. `incoming`
  // (nullptr for a shrink) is the entry about to be inserted; false: the
  // policy turned it away (counted as refused_admission).
  bool make_room(std::uint64_t target, const entry* incoming, removal reason,
                 std::vector<removed_entry>& removed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A resident entry's cost or size changed: the policy reorders it, and a
  // device then over its budget evicts.
  void update_entry(entry* e, std::uint64_t cost_ns, std::uint64_t size_bytes,
                    std::vector<removed_entry>& removed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Sets the budget and policy, evicting down to the budget.
  void set_budget(std::uint64_t bytes, eviction_policy policy, std::vector<removed_entry>& removed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

 private:
  class eviction_run;

  std::uint64_t capacity_bytes_ ABSL_GUARDED_BY(mu) = 0;
  std::uint64_t used_bytes_ ABSL_GUARDED_BY(mu) = 0;
  eviction_policy policy_kind_ ABSL_GUARDED_BY(mu) = eviction_policy::library_default;
  std::unique_ptr<cache_policy> policy_ ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::uint64_t, std::unique_ptr<scope_counters>> scopes_ ABSL_GUARDED_BY(mu);
};

}  // namespace unicache::detail
