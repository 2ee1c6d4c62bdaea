// One device's part of a unified_cache: budget, policy, admission and removal.
#include "cache/device_cache.hpp"

namespace unicache::detail {

const char* describe(removal reason) {
  switch (reason) {
    case removal::capacity: return "capacity";
    case removal::shrink: return "shrink";
    case removal::clear: return "clear";
    case removal::failure: return "failure";
    case removal::erase: return "remove";
  }
  return "?";
}

// What the policy evicts through during one make_room.
class device_cache::eviction_run final : public policy_host {
 public:
  eviction_run(device_cache& d, removal reason, std::vector<removed_entry>& removed)
      : d_(d), reason_(reason), removed_(removed) {}
  std::uint64_t used_bytes() const override ABSL_NO_THREAD_SAFETY_ANALYSIS { return d_.used_bytes_; }
  void evict(entry* e, bool refused) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (refused) d_.counters_for(e->context_id).refused_admission.fetch_add(1, std::memory_order_relaxed);
    d_.remove_locked(e, reason_, removed_);
  }

 private:
  device_cache& d_;
  const removal reason_;
  std::vector<removed_entry>& removed_;
};

device_cache::device_cache(engine_kind k, int id) : kind(k), device_id(id) {
  mutex_lock lock(&mu);
  policy_ = make_policy(policy_kind_, clock);
}

scope_counters& device_cache::counters_for(std::uint64_t context_id) {
  auto& slot = scopes_[context_id];
  if (!slot) slot = std::make_unique<scope_counters>();
  return *slot;
}

void device_cache::insert_locked(entry* e, scope_counters& counters) {
  table.insert(e);
  used_bytes_ += e->size_bytes;
  policy_->on_insert(e);
  e->resident.store(true, std::memory_order_release);
  counters.inserts.fetch_add(1, std::memory_order_relaxed);
  counters.bytes.fetch_add(e->size_bytes, std::memory_order_relaxed);
  counters.entries.fetch_add(1, std::memory_order_relaxed);
}

void device_cache::remove_locked(entry* e, removal reason, std::vector<removed_entry>& removed) {
  policy_->on_remove(e);
  table.erase(e);
  used_bytes_ -= e->size_bytes;
  e->resident.store(false, std::memory_order_release);
  scope_counters& c = counters_for(e->context_id);
  c.bytes.fetch_sub(e->size_bytes, std::memory_order_relaxed);
  c.entries.fetch_sub(1, std::memory_order_relaxed);
  c.retired_hits.fetch_add(e->hits.load(std::memory_order_relaxed), std::memory_order_relaxed);
  c.retired_waits.fetch_add(e->waits.load(std::memory_order_relaxed), std::memory_order_relaxed);
  if (reason == removal::failure) {
    c.failures.fetch_add(1, std::memory_order_relaxed);
  } else if (reason != removal::erase) {
    c.evictions.fetch_add(1, std::memory_order_relaxed);
  }
  removed.push_back({entry_ref::adopt(e), reason});  // takes over the table's reference
}

bool device_cache::make_room(std::uint64_t target, const entry* incoming, removal reason,
                             std::vector<removed_entry>& removed) {
  eviction_run run(*this, reason, removed);
  if (policy_->make_room(target, incoming, run)) return true;
  counters_for(incoming->context_id).refused_admission.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void device_cache::update_entry(entry* e, std::uint64_t cost_ns, std::uint64_t size_bytes,
                                std::vector<removed_entry>& removed) {
  e->cost_ns.store(static_cast<float>(cost_ns), std::memory_order_relaxed);
  e->awaiting_cost = false;
  if (!e->resident.load(std::memory_order_relaxed)) return;
  const std::uint64_t old_size = e->size_bytes;
  if (size_bytes != 0 && size_bytes != old_size) {
    scope_counters& c = counters_for(e->context_id);
    used_bytes_ = used_bytes_ - old_size + size_bytes;
    c.bytes.fetch_add(size_bytes - old_size, std::memory_order_relaxed);  // modular: a decrease too
    e->size_bytes = size_bytes;
  }
  policy_->on_update(e, old_size);
  if (used_bytes_ <= capacity_bytes_) return;
  // Grown past what fits: an entry larger than the whole budget, or one a
  // policy that never evicts for room cannot keep, goes itself; otherwise
  // the policy makes room.
  if (e->size_bytes > capacity_bytes_ || !policy_->evicts_for_room()) {
    remove_locked(e, removal::capacity, removed);
    if (used_bytes_ <= capacity_bytes_) return;
  }
  make_room(capacity_bytes_, nullptr, removal::capacity, removed);
}

void device_cache::set_budget(std::uint64_t bytes, eviction_policy new_policy,
                              std::vector<removed_entry>& removed) {
  if (effective_policy(new_policy) != effective_policy(policy_kind_)) {
    // The clock changes meaning: the new policy restarts it, every entry is
    // restamped with it and handed over.
    policy_ = make_policy(new_policy, clock);
    const std::uint64_t restart = clock.load(std::memory_order_relaxed);
    for (entry* e : table.entries()) {
      e->stamp.store(restart, std::memory_order_relaxed);
      policy_->on_adopt(e);
    }
  }
  policy_kind_ = new_policy;
  capacity_bytes_ = bytes;
  policy_->set_capacity(bytes);
  make_room(capacity_bytes_, nullptr, removal::shrink, removed);
  if (capacity_bytes_ == 0) {  // caches nothing: entries of zero bytes go too
    for (entry* e : table.entries()) remove_locked(e, removal::shrink, removed);
  }
}

}  // namespace unicache::detail
