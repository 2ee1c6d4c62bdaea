// An eviction policy of one device's cache: which entries to give up, and in
// what order, when the device needs room.
//
// A policy is a type behind the small interface below (told of insertions,
// updates and removals; asked to make room, which picks victims and may
// turn the new entry away), one file each
// (lru_policy.cpp, no_evict_policy.cpp, cost_policy.cpp), registered by one
// line in policies.def. Every member function is called with the owning
// device's mutex held; a policy needs no lock of its own.
//
// Hits never call a policy: they take no lock and write nothing shared. What
// a policy learns of hits is what the hit path already records in the entry:
// `stamp` (the device's clock at the last use) and `hits` (a use count,
// sampled once the entry is hot). A policy chooses what the clock means by
// what it stores in it (LRU: a tick per insertion; COST: its GreedyDual
// inflation value) and reads the stamps back when it orders entries.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "cache/entry.hpp"
#include "unicache/config.hpp"

namespace unicache::detail {

// What a policy may ask of the device it serves.
class policy_host {
 public:
  virtual std::uint64_t used_bytes() const = 0;
  // Removes `e` from the device (the policy is told through on_remove).
  // `refused`: turned away by an admission decision rather than evicted
  // for its priority (counted as such in the statistics).
  virtual void evict(entry* e, bool refused) = 0;

 protected:
  ~policy_host() = default;
};

class cache_policy {
 public:
  // `clock` is the device's clock, which hits copy into entry::stamp. The
  // policy sets it in its constructor; the device then restamps every
  // entry it already holds with it and hands them over with on_adopt.
  explicit cache_policy(std::atomic<std::uint64_t>& clock) : clock_(clock) {}
  virtual ~cache_policy() = default;
  cache_policy(const cache_policy&) = delete;
  cache_policy& operator=(const cache_policy&) = delete;

  // Whether entries are evicted to make room for new ones. When false the
  // device refuses a new entry that does not fit; shrinking still evicts
  // through make_room.
  virtual bool evicts_for_room() const { return true; }
  // The device's capacity changed (also called once after construction).
  virtual void set_capacity(std::uint64_t /*bytes*/) {}

  // `e` was just inserted: new to the cache, not yet used.
  virtual void on_insert(entry* e) = 0;
  // `e` was cached under the device's previous policy and is now this one's.
  virtual void on_adopt(entry* e) { on_insert(e); }
  // `e`'s cost or size changed (its build finished, or update_cost);
  // `old_size` is the size it had.
  virtual void on_update(entry* e, std::uint64_t old_size) = 0;
  // `e` leaves the device for any reason (also through policy_host::evict).
  virtual void on_remove(entry* e) = 0;

  // Evicts through `host` until host.used_bytes() <= target or nothing is
  // left to evict. `incoming` (nullptr for a shrink) is the entry about to
  // be inserted, not yet in the device: its size, hash and cost are set.
  // Returns false if the policy turns it away instead (the device then
  // does not cache it). Choosing the victims is the policy's own business.
  virtual bool make_room(std::uint64_t target, const entry* incoming, policy_host& host) = 0;

 protected:
  std::atomic<std::uint64_t>& clock_;
};

// The policy `kind` stands for (library_default resolved), for a device
// whose clock is `clock`.
std::unique_ptr<cache_policy> make_policy(eviction_policy kind, std::atomic<std::uint64_t>& clock);

}  // namespace unicache::detail
