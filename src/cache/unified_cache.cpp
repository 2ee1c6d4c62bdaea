// unified_cache's lookups: the lock-free hit path, the miss path that
// decides, evicts and inserts under the device's mutex, and the calls that
// finish or undo an insertion. Configuration, removal and statistics are in
// cache_control.cpp.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <future>
#include <limits>
#include <new>

#include "cache/cache_impl.hpp"
#include "cache/entry.hpp"
#include "util/epoch.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace unicache {
namespace detail {

entry* entry::create(std::uint64_t hash, std::uint64_t context_id, owner_id owner,
                     std::string_view key, std::uint64_t size_bytes, std::uint64_t cost_ns,
                     cache_future future) {
  if (key.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw cache_error("unicache: cache key longer than 4 GiB");
  }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
  static_assert(offsetof(entry, size_bytes) <= 64, "the fields a hit touches must fit in 64 bytes");
#pragma GCC diagnostic pop
  void* raw = ::operator new(sizeof(entry) + key.size());
  auto* e = new (raw) entry();
  e->hash = hash;
  e->context_id = context_id;
  e->owner = owner;
  e->key_size = static_cast<std::uint32_t>(key.size());
  e->size_bytes = size_bytes;
  e->cost_ns.store(static_cast<float>(cost_ns), std::memory_order_relaxed);
  e->future = std::move(future);
  if (!key.empty()) std::memcpy(reinterpret_cast<char*>(e + 1), key.data(), key.size());
  return e;
}

void destroy_entry(entry_base* base) noexcept {
  entry* e = as_entry(base);
  e->~entry();
  ::operator delete(e);
}

void* begin_read_section() noexcept { return epoch_domain::begin_read(); }
void end_read_section(void* section) noexcept {
  epoch_domain::end_read(static_cast<epoch_domain::record*>(section));
}
const cache_value& entry_value(entry_base* e) noexcept {
  // Only for an entry lookup found ready: get() neither waits nor throws.
  return as_entry(e)->future.get();
}

namespace {

std::uint64_t hash_key(std::uint64_t context_id, owner_id owner, std::string_view key) {
  const std::uint64_t seed = context_id * 0x9E3779B97F4A7C15ull ^ owner;
  return XXH3_64bits_withSeed(key.data(), key.size(), seed);
}

// Settles a pending entry whose future has become ready: a value makes it
// ready, an exception (including a broken promise) makes it failed. Every
// thread that settles one entry reaches the same answer.
build_state settle(entry* e) {
  build_state state = e->state.load(std::memory_order_acquire);
  if (state != build_state::pending) return state;
  if (e->future.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return state;
  try {
    e->future.get();
    state = build_state::ready;
  } catch (...) {
    state = build_state::failed;
  }
  e->state.store(state, std::memory_order_release);
  return state;
}

// Counting every use exactly would make every hit write its entry's cache
// line, which then moves between the cores that share the entry: with 16
// threads on one working set that alone halves throughput. So an entry's
// hits and waits are exact up to kExactUses; beyond, a use adds `weight`
// with probability 1/weight, an unbiased estimate. The weight grows with
// the count (a 64th of it, from 16 to 4,096, a power of two), so a hot
// entry's line is written once in hundreds to thousands of hits while the
// estimate's relative error stays near 1/8. The first 1,024 uses are
// exact because COST compares frequencies of that order (entries used once
// per request); stats of hot entries are estimates (docs/design.md).
constexpr std::uint32_t kExactUses = 1024;
constexpr std::uint32_t kWeightDivisor = 64;
constexpr std::uint32_t kMinWeight = 16;
constexpr std::uint32_t kMaxWeight = 4096;

void count_use(std::atomic<std::uint32_t>& counter) {
  const std::uint32_t seen = counter.load(std::memory_order_relaxed);
  if (seen < kExactUses) {
    counter.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const std::uint32_t weight = std::clamp(std::bit_floor(seen / kWeightDivisor), kMinWeight, kMaxWeight);
  // Seeded by the order in which threads first count, so that a replay on
  // one thread makes the same choices every run.
  constinit thread_local std::uint32_t state = 0;
  if (state == 0) {
    static std::atomic<std::uint32_t> threads{0};
    state = (0x9E3779B9u * (threads.fetch_add(1, std::memory_order_relaxed) + 1)) | 1u;
  }
  state ^= state << 13;  // xorshift32
  state ^= state >> 17;
  state ^= state << 5;
  if ((state & (weight - 1)) == 0 && seen < std::numeric_limits<std::uint32_t>::max() - weight) {
    counter.fetch_add(weight, std::memory_order_relaxed);
  }
}

// What a hit records for the policy: the device's clock (only when it
// moved, so that hits of a quiet device write nothing) and a use.
void record_use(const device_cache& d, entry* e, bool ready) {
  const std::uint64_t clock = d.clock.load(std::memory_order_relaxed);
  if (e->stamp.load(std::memory_order_relaxed) != clock) e->stamp.store(clock, std::memory_order_relaxed);
  count_use(ready ? e->hits : e->waits);
}

}  // namespace
}  // namespace detail

using namespace detail;

entry_base* unified_cache::find_built(const cache_scope& scope, owner_id owner, std::string_view key,
                                      void** value) {
  if (!impl_->enabled.load(std::memory_order_relaxed)) return nullptr;
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  if (!d) return nullptr;
  entry* e = d->table.find(hash_key(scope.context_id, owner, key), scope.context_id, owner, key);
  if (!e || settle(e) != build_state::ready) return nullptr;
  *value = e->future.get().get();
  if (!*value) return nullptr;
  record_use(*d, e, /*ready=*/true);
  return e;
}

unified_cache::lookup_result unified_cache::lookup_or_insert(
    const cache_scope& scope, owner_id owner, std::string_view key, std::size_t size_bytes,
    std::uint64_t cost_ns, const cache_future& future, bool want_entry) {
  if (!future.valid()) throw cache_error("unicache: get_or_add needs a valid future");
  const std::uint64_t hash = hash_key(scope.context_id, owner, key);
  using outcome = lookup_result::outcome;

  // Hit path: no lock, no allocation; writes only what record_use writes
  // (and the returned future's reference count).
  if (impl_->enabled.load(std::memory_order_relaxed)) {
    if (device_cache* d = impl_->find_device(scope.kind, scope.device_id)) {
      epoch_guard guard;
      if (entry* e = d->table.find(hash, scope.context_id, owner, key)) {
        const build_state state = settle(e);
        if (state != build_state::failed) {
          const bool ready = state == build_state::ready;
          record_use(*d, e, ready);
          return {ready ? outcome::hit : outcome::wait, e->future,
                  want_entry ? entry_ref::share(e) : entry_ref()};
        }
      }
    }
  }

  // Miss path: under the device's mutex, decide, evict, insert.
  device_cache* d = impl_->device(scope.kind, scope.device_id);
  std::vector<removed_entry> removed;
  lookup_result result{outcome::refused, {}, {}};
  const char* trace = nullptr;
  {
    mutex_lock lock(&d->mu);
    const bool enabled = impl_->enabled.load(std::memory_order_relaxed);
    // Writers hold mu, so entries and slots found here stay put.
    entry* found = enabled ? d->table.find(hash, scope.context_id, owner, key) : nullptr;
    if (found) {
      const build_state state = settle(found);
      if (state == build_state::failed) {
        d->remove_locked(found, removal::failure, removed);
      } else {
        const bool ready = state == build_state::ready;
        count_use(ready ? found->hits : found->waits);
        result = {ready ? outcome::hit : outcome::wait, found->future,
                  want_entry ? entry_ref::share(found) : entry_ref()};
      }
    }
    if (result.kind == outcome::refused) {
      scope_counters& counters = d->counters_for(scope.context_id);
      counters.misses.fetch_add(1, std::memory_order_relaxed);
      if (!enabled) {
        trace = "disabled";
      } else if (size_bytes > d->capacity() || d->capacity() == 0) {
        counters.refused_oversize.fetch_add(1, std::memory_order_relaxed);
        trace = "refused_oversize";
      } else if (d->used() + size_bytes > d->capacity() && !d->evicts_for_room()) {
        counters.refused_full.fetch_add(1, std::memory_order_relaxed);
        trace = "refused_full";
      } else {
        // Allocate before evicting: if allocation throws, nothing has changed.
        entry_ref made = entry_ref::adopt(entry::create(hash, scope.context_id, owner, key, size_bytes, cost_ns, future));
        entry* e = as_entry(made);
        e->awaiting_cost = want_entry && cost_ns == 0;  // get_or_build: complete_build reports it
        if (d->make_room(d->capacity() - size_bytes, e, removal::capacity, removed)) {
          d->insert_locked(e, counters);
          result = {outcome::inserted, {}, entry_ref::share(e)};
          made.release();  // e's own reference is now the table's
          trace = "inserted";
        } else {
          trace = "refused_admission";
        }
      }
    }
  }
  if (!removed.empty()) impl_->finish_removals(scope.kind, scope.device_id, removed);
  epoch_domain::instance().collect();  // an insert may have retired a grown table
  if (trace) impl_->trace_miss(scope, owner, hash, size_bytes, trace);
  if (!want_entry) result.entry.reset();
  return result;
}

cache_future unified_cache::get_or_add(const cache_scope& scope, owner_id owner,
                                       std::string_view key, std::size_t size_bytes,
                                       std::uint64_t cost_ns, const cache_future& future) {
  lookup_result r = lookup_or_insert(scope, owner, key, size_bytes, cost_ns, future, false);
  return r.kind == lookup_result::outcome::hit || r.kind == lookup_result::outcome::wait
             ? std::move(r.future)
             : cache_future();
}

void unified_cache::complete_build(const cache_scope& scope, const entry_ref& ref,
                                   std::uint64_t cost_ns, std::uint64_t size_bytes) {
  entry* e = as_entry(ref);
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  std::vector<removed_entry> removed;
  {
    mutex_lock lock(&d->mu);
    e->state.store(build_state::ready, std::memory_order_release);
    // The value's real size replaces the estimate it was inserted with.
    d->update_entry(e, cost_ns, size_bytes, removed);
  }
  if (!removed.empty()) impl_->finish_removals(d->kind, d->device_id, removed);
}

void unified_cache::drop_failed(const cache_scope& scope, const entry_ref& ref) {
  entry* e = as_entry(ref);
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  std::vector<removed_entry> removed;
  {
    mutex_lock lock(&d->mu);
    e->state.store(build_state::failed, std::memory_order_release);
    if (e->resident.load(std::memory_order_relaxed)) d->remove_locked(e, removal::failure, removed);
  }
  impl_->finish_removals(d->kind, d->device_id, removed);
}

bool unified_cache::contains(const cache_scope& scope, owner_id owner,
                             std::string_view key) const {
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  if (!d) return false;
  epoch_guard guard;
  entry* e = d->table.find(hash_key(scope.context_id, owner, key), scope.context_id, owner, key);
  return e != nullptr && settle(e) != build_state::failed;
}

void unified_cache::update_cost(const cache_scope& scope, owner_id owner, std::string_view key,
                                std::uint64_t cost_ns) {
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  if (!d) return;
  const std::uint64_t hash = hash_key(scope.context_id, owner, key);
  std::vector<removed_entry> removed;
  {
    mutex_lock lock(&d->mu);
    if (entry* e = d->table.find(hash, scope.context_id, owner, key)) d->update_entry(e, cost_ns, 0, removed);
  }
  if (!removed.empty()) impl_->finish_removals(d->kind, d->device_id, removed);
}

bool unified_cache::remove(const cache_scope& scope, owner_id owner, std::string_view key) {
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  if (!d) return false;
  const std::uint64_t hash = hash_key(scope.context_id, owner, key);
  std::vector<removed_entry> removed;
  {
    mutex_lock lock(&d->mu);
    entry* e = d->table.find(hash, scope.context_id, owner, key);
    if (!e) return false;
    d->remove_locked(e, removal::erase, removed);
  }
  impl_->finish_removals(d->kind, d->device_id, removed);
  return true;
}

}  // namespace unicache
