#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <future>
#include <limits>
#include <new>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "util/mutex.hpp"
#include "cache/entry.hpp"
#include "cache/entry_table.hpp"
#include "cache/eviction_queue.hpp"
#include "unicache/cache.hpp"
#include "util/epoch.hpp"
#include "util/log.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace unicache {
namespace detail {

constexpr std::uint64_t kBytesPerMb = std::uint64_t{1} << 20;
// How many evicted or refused keys the cost policy remembers: this many,
// plus this many per cached entry.
constexpr std::size_t kGhostsMin = 1024;
constexpr std::size_t kGhostsPerEntry = 4;
// Device ids below this are found with one atomic load on the hit path.
constexpr int kDirectDevices = 64;

entry* entry::create(std::uint64_t hash, std::uint64_t context_id, backend_id backend,
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
  e->backend = backend;
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

namespace {

std::uint64_t hash_key(std::uint64_t context_id, backend_id backend, std::string_view key) {
  const std::uint64_t seed = context_id * 0x9E3779B97F4A7C15ull ^ backend;
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

void release_table_reference(void* e) { entry_ref::adopt(static_cast<entry*>(e)).reset(); }

// Counting every use exactly would make every hit write its entry's cache
// line, which then moves between the cores that share the entry: with 16
// threads on one working set that alone halves throughput. So an entry's
// hits and waits are exact up to kExactUses; beyond, a use adds kUseWeight
// with probability 1/kUseWeight, an unbiased estimate that writes the line
// for one hit in kUseWeight. The cost policy needs frequency only roughly,
// and stats of hot entries are estimates (documented in docs/design.md).
constexpr std::uint32_t kExactUses = 64;
constexpr std::uint32_t kUseWeight = 16;

void count_use(std::atomic<std::uint32_t>& counter) {
  const std::uint32_t seen = counter.load(std::memory_order_relaxed);
  if (seen < kExactUses) {
    counter.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  constinit thread_local std::uint32_t state = 0;
  if (state == 0) state = 0x9E3779B9u ^ static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(&state) >> 4);
  state ^= state << 13;  // xorshift32
  state ^= state >> 17;
  state ^= state << 5;
  if ((state & (kUseWeight - 1)) == 0 &&
      seen < std::numeric_limits<std::uint32_t>::max() - kUseWeight) {
    counter.fetch_add(kUseWeight, std::memory_order_relaxed);
  }
}

}  // namespace

// Counters of one scope that are written only on the slow path (hits and
// waits live in the entries, where the hit path already writes).
struct scope_counters {
  std::atomic<std::uint64_t> misses{0}, inserts{0}, evictions{0}, failures{0};
  std::atomic<std::uint64_t> refused_full{0}, refused_oversize{0}, refused_admission{0};
  std::atomic<std::uint64_t> bytes{0}, entries{0};
  std::atomic<std::uint64_t> retired_hits{0}, retired_waits{0};
};

enum class removal { capacity, shrink, clear, failure, erase };

struct removed_entry {
  entry_ref entry;  // the table's reference, retired once processed
  removal reason;
};

struct device_cache {
  device_cache(engine_kind k, int id) : kind(k), device_id(id) {}

  const engine_kind kind;
  const int device_id;
  mutex mu;
  entry_table table;  // readers: no lock; writers: mu
  std::uint64_t capacity_bytes ABSL_GUARDED_BY(mu) = 0;
  eviction_policy policy ABSL_GUARDED_BY(mu) = eviction_policy::cost;
  std::uint64_t used_bytes ABSL_GUARDED_BY(mu) = 0;
  std::uint64_t tick ABSL_GUARDED_BY(mu) = 0;  // insertions, the LRU clock
  eviction_queue queue ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::uint64_t, std::unique_ptr<scope_counters>> scopes ABSL_GUARDED_BY(mu);
  // What hits stamp into their entry: the LRU tick, or for the cost policy
  // the bits of the GreedyDual inflation value L (non-negative doubles order
  // like their bits). Written under mu, read by hits.
  std::atomic<std::uint64_t> clock{0};

  scope_counters& counters_for(std::uint64_t context_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto& slot = scopes[context_id];
    if (!slot) slot = std::make_unique<scope_counters>();
    return *slot;
  }

  // The cost policy's memory of keys it gave up or turned away: how often
  // each was used and what it cost, so that a key that comes back is judged
  // by its whole history, not as new. Bounded (oldest forgotten first).
  // `ghost_order` lists (hash, serial) oldest first; a slot whose serial is
  // not its ghost's (the key was recalled, then remembered again) is stale
  // and forgets nothing when it expires.
  struct ghost {
    float uses = 0;
    float cost_ns = 0;
    std::uint64_t serial = 0;
  };
  absl::flat_hash_map<std::uint64_t, ghost> ghosts ABSL_GUARDED_BY(mu);
  std::deque<std::pair<std::uint64_t, std::uint64_t>> ghost_order ABSL_GUARDED_BY(mu);
  std::uint64_t ghost_serial ABSL_GUARDED_BY(mu) = 0;

  void remember(std::uint64_t hash, float uses, float cost_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto [it, added] = ghosts.try_emplace(hash);
    if (!added) {
      it->second.uses = uses;
      it->second.cost_ns = cost_ns;
      return;
    }
    it->second = {uses, cost_ns, ++ghost_serial};
    ghost_order.emplace_back(hash, ghost_serial);
    const std::size_t limit = kGhostsMin + kGhostsPerEntry * table.size();
    while (ghost_order.size() > limit) {
      const auto [oldest, serial] = ghost_order.front();
      ghost_order.pop_front();
      if (const auto g = ghosts.find(oldest); g != ghosts.end() && g->second.serial == serial) ghosts.erase(g);
    }
  }

  // Cost policy, cache full: whether a new entry of `size` whose build costs
  // `cost_ns` (0: unknown, then its remembered cost) is worth more per byte,
  // counting its remembered uses, than the entry it would evict first.
  // Entries of unknown cost are admitted. A refused key is remembered with
  // one more use, so a key that keeps coming back gets in.
  bool admits(std::uint64_t hash, std::uint64_t size, std::uint64_t cost_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const auto it = ghosts.find(hash);
    const float prior = it == ghosts.end() ? 0.f : it->second.uses;
    const double cost = cost_ns > 0 ? static_cast<double>(cost_ns) : it == ghosts.end() ? 0.0 : it->second.cost_ns;
    if (cost <= 0) return true;
    double lowest = 0;
    if (!queue.victim([this](const entry* e) ABSL_NO_THREAD_SAFETY_ANALYSIS { return priority_of(e); }, &lowest)) {
      return true;
    }
    const double inflation = std::bit_cast<double>(clock.load(std::memory_order_relaxed));
    const double priority = inflation + (1.0 + prior) * cost / static_cast<double>(std::max<std::uint64_t>(size, 1));
    if (priority >= lowest) return true;
    remember(hash, prior + 1.f, static_cast<float>(cost));
    return false;
  }

  // A newly inserted entry takes over its key's remembered uses.
  void recall(entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const auto it = ghosts.find(e->hash);
    if (it == ghosts.end()) return;
    e->history = it->second.uses;
    ghosts.erase(it);  // its slot in ghost_order is now stale
  }

  double priority_of(const entry* e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const std::uint64_t stamp = e->stamp.load(std::memory_order_relaxed);
    if (policy != eviction_policy::cost) return static_cast<double>(stamp);
    const double uses = 1.0 + e->history + e->hits.load(std::memory_order_relaxed);
    const double cost = e->cost_ns.load(std::memory_order_relaxed);
    const double size = static_cast<double>(std::max<std::uint64_t>(e->size_bytes, 1));
    return std::bit_cast<double>(stamp) + uses * cost / size;
  }

  void insert_locked(entry* e, scope_counters& counters) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (policy == eviction_policy::cost) {
      recall(e);
      e->stamp.store(clock.load(std::memory_order_relaxed), std::memory_order_relaxed);
    } else {
      // The new entry takes a tick of its own and the clock that hits stamp
      // moves past it: an entry hit after this insertion is more recent than
      // this entry, not tied with it (K1, K2, hit K1, K3 evicts K2).
      e->stamp.store(++tick, std::memory_order_relaxed);
      clock.store(++tick, std::memory_order_relaxed);
    }
    table.insert(e);
    used_bytes += e->size_bytes;
    e->resident.store(true, std::memory_order_release);
    queue.push(e, priority_of(e));
    counters.inserts.fetch_add(1, std::memory_order_relaxed);
    counters.bytes.fetch_add(e->size_bytes, std::memory_order_relaxed);
    counters.entries.fetch_add(1, std::memory_order_relaxed);
  }

  void remove_locked(entry* e, removal reason, std::vector<removed_entry>& removed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    table.erase(e);
    queue.erase(e);
    used_bytes -= e->size_bytes;
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

  // Evicts per policy until at most `target` bytes are used.
  void evict_to(std::uint64_t target, removal reason, std::vector<removed_entry>& removed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (used_bytes > target) {
      double priority = 0;
      entry* victim = queue.victim(
          [this](const entry* e) ABSL_NO_THREAD_SAFETY_ANALYSIS { return priority_of(e); },
          &priority);
      if (!victim) break;
      if (policy == eviction_policy::cost) {
        // GreedyDual: everything left ages relative to what was just given up.
        const double inflation = std::bit_cast<double>(clock.load(std::memory_order_relaxed));
        if (priority > inflation) {
          clock.store(std::bit_cast<std::uint64_t>(priority), std::memory_order_relaxed);
        }
        if (reason == removal::capacity || reason == removal::shrink) {
          remember(victim->hash, 1.f + victim->history + static_cast<float>(victim->hits.load(std::memory_order_relaxed)),
                   victim->cost_ns.load(std::memory_order_relaxed));
        }
      }
      remove_locked(victim, reason, removed);
    }
  }

  void set_budget(std::uint64_t bytes, eviction_policy new_policy,
                  std::vector<removed_entry>& removed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    new_policy = effective_policy(new_policy);
    if (new_policy != policy) {
      const bool to_cost = new_policy == eviction_policy::cost;
      const bool from_cost = policy == eviction_policy::cost;
      policy = new_policy;
      const std::vector<entry*> all = table.entries();
      if (to_cost != from_cost) {
        // The clock changes meaning: restart it and every stamp.
        const std::uint64_t restart = to_cost ? std::bit_cast<std::uint64_t>(0.0) : tick;
        clock.store(restart, std::memory_order_relaxed);
        for (entry* e : all) e->stamp.store(restart, std::memory_order_relaxed);
      }
      for (entry* e : all) queue.update(e, priority_of(e));
    }
    capacity_bytes = bytes;
    evict_to(capacity_bytes, removal::shrink, removed);
    if (capacity_bytes == 0) {  // caches nothing: entries of zero bytes go too
      for (entry* e : table.entries()) remove_locked(e, removal::shrink, removed);
    }
  }
};

}  // namespace detail

using namespace detail;

namespace {

// Capacities come checked (check_capacity, or the environment parser with
// the same bound), so the product fits.
std::uint64_t mb_to_bytes(std::size_t mb) { return std::uint64_t{mb} * kBytesPerMb; }

void check_capacity(std::size_t capacity_mb) {
  if (capacity_mb > max_capacity_mb) {
    throw cache_error("unicache: capacity " + std::to_string(capacity_mb) + " MB does not fit in bytes; the largest is " +
                      std::to_string(max_capacity_mb) + " MB");
  }
}

std::string describe_scope(engine_kind kind, int device_id, std::uint64_t context_id) {
  char buffer[96];
  std::snprintf(buffer, sizeof buffer, "%s:%d:0x%" PRIx64, std::string(to_string(kind)).c_str(),
                device_id, context_id);
  return buffer;
}

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

// Lets a callback unregister itself: the callbacks this thread is running.
thread_local std::vector<const void*> running_callbacks;

}  // namespace

struct unified_cache::impl {
  explicit impl(cache_config c) : initial(c), settings(c) {
    for (auto& kind_devices : direct) {
      for (auto& slot : kind_devices) slot.store(nullptr, std::memory_order_relaxed);
    }
    enabled.store(c.enabled, std::memory_order_relaxed);
  }

  const cache_config initial;
  std::atomic<bool> enabled{true};

  // Devices: created on first insertion, destroyed with the cache.
  mutable mutex config_mu;
  cache_config settings ABSL_GUARDED_BY(config_mu);
  absl::flat_hash_map<std::pair<int, int>, std::uint64_t> device_overrides
      ABSL_GUARDED_BY(config_mu);
  std::vector<std::unique_ptr<device_cache>> devices ABSL_GUARDED_BY(config_mu);
  absl::flat_hash_map<std::pair<int, int>, device_cache*> far_devices ABSL_GUARDED_BY(config_mu);
  std::array<std::array<std::atomic<device_cache*>, kDirectDevices>, engine_kind_count> direct;

  struct callback_slot {
    eviction_callback callback;
    std::uint64_t id = 0;
    int running = 0;  // guarded by callbacks_mu
  };
  mutable mutex callbacks_mu;
  std::condition_variable_any callback_finished;
  // Every backend's subscribers, in the order they subscribed.
  absl::flat_hash_map<backend_id, std::vector<std::shared_ptr<callback_slot>>> callbacks
      ABSL_GUARDED_BY(callbacks_mu);
  std::uint64_t last_subscription ABSL_GUARDED_BY(callbacks_mu) = 0;

  device_cache* find_device(engine_kind kind, int device_id) const {
    if (device_id >= 0 && device_id < kDirectDevices) {
      return direct[static_cast<int>(kind)][device_id].load(std::memory_order_acquire);
    }
    mutex_lock lock(&config_mu);
    auto it = far_devices.find({static_cast<int>(kind), device_id});
    return it == far_devices.end() ? nullptr : it->second;
  }

  std::uint64_t budget_of(engine_kind kind, int device_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu) {
    auto it = device_overrides.find({static_cast<int>(kind), device_id});
    return it != device_overrides.end() ? it->second
                                        : mb_to_bytes(settings.of(kind).capacity_mb);
  }

  device_cache* device(engine_kind kind, int device_id) {
    if (device_cache* d = find_device(kind, device_id)) return d;
    mutex_lock lock(&config_mu);
    if (device_id >= 0 && device_id < kDirectDevices) {
      auto& slot = direct[static_cast<int>(kind)][device_id];
      if (device_cache* d = slot.load(std::memory_order_relaxed)) return d;
    } else if (auto it = far_devices.find({static_cast<int>(kind), device_id});
               it != far_devices.end()) {
      return it->second;
    }
    auto owned = std::make_unique<device_cache>(kind, device_id);
    device_cache* d = owned.get();
    {
      std::vector<removed_entry> none;
      mutex_lock device_lock(&d->mu);
      d->set_budget(budget_of(kind, device_id), settings.of(kind).policy, none);
    }
    devices.push_back(std::move(owned));
    if (device_id >= 0 && device_id < kDirectDevices) {
      direct[static_cast<int>(kind)][device_id].store(d, std::memory_order_release);
    } else {
      far_devices[{static_cast<int>(kind), device_id}] = d;
    }
    return d;
  }

  std::vector<device_cache*> devices_of(std::optional<engine_kind> kind) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu) {
    std::vector<device_cache*> out;
    for (const auto& d : devices) {
      if (!kind || d->kind == *kind) out.push_back(d.get());
    }
    return out;
  }

  // Runs callbacks and traces for removed entries, then hands the table's
  // references to the epoch domain. Called with no lock held.
  void finish_removals(engine_kind kind, int device_id, std::vector<removed_entry>& removed) {
    for (removed_entry& r : removed) {
      entry* e = as_entry(r.entry);
      const bool evicted = r.reason == removal::capacity || r.reason == removal::shrink ||
                           r.reason == removal::clear;
      if (initial.verbose) {
        char line[384];
        std::snprintf(line, sizeof line,
                      "unicache_verbose,%s,evict,%s,backend=%s,key=%016" PRIx64 ",bytes=%" PRIu64 ",reason=%s",
                      initial.name.c_str(), describe_scope(kind, device_id, e->context_id).c_str(),
                      backend_name(e->backend).c_str(), e->hash, e->size_bytes, describe(r.reason));
        write_line(line);
      }
      if (evicted) {
        run_callbacks(eviction_event{{kind, device_id, e->context_id}, e->backend, e->key(),
                                    e->future});
      }
      // With its size: an evicted large value (a packed weight's device
      // memory) is freed at the collect() below, not after a batch.
      const std::size_t bytes = e->size_bytes;
      epoch_domain::instance().retire(r.entry.release(), &release_table_reference, bytes);
    }
    removed.clear();
    epoch_domain::instance().collect();
  }

  // Calls every subscriber of the entry's backend. A subscriber removed
  // meanwhile is skipped; one added meanwhile sees the next eviction.
  void run_callbacks(const eviction_event& event) {
    std::vector<std::shared_ptr<callback_slot>> slots;
    {
      mutex_lock lock(&callbacks_mu);
      auto it = callbacks.find(event.backend);
      if (it == callbacks.end()) return;
      slots = it->second;
    }
    for (const std::shared_ptr<callback_slot>& slot : slots) {
      {
        mutex_lock lock(&callbacks_mu);
        if (slot->id == 0) continue;  // removed since the copy
        ++slot->running;
      }
      running_callbacks.push_back(slot.get());
      try {
        slot->callback(event);
      } catch (...) {
        warn("an eviction callback threw; the exception was dropped");
      }
      running_callbacks.pop_back();
      mutex_lock lock(&callbacks_mu);
      --slot->running;
      callback_finished.notify_all();
    }
  }

  void trace_miss(const cache_scope& scope, backend_id backend, std::uint64_t hash,
                  std::uint64_t size, const char* outcome) const {
    if (!initial.verbose) return;
    char line[384];
    std::snprintf(line, sizeof line,
                  "unicache_verbose,%s,miss,%s,backend=%s,key=%016" PRIx64 ",bytes=%" PRIu64 ",outcome=%s",
                  initial.name.c_str(), describe_scope(scope.kind, scope.device_id, scope.context_id).c_str(),
                  backend_name(backend).c_str(), hash, size, outcome);
    write_line(line);
  }
};

unified_cache::unified_cache(cache_config config) {
  check_capacity(config.cpu.capacity_mb);
  check_capacity(config.gpu.capacity_mb);
  impl_ = std::make_unique<impl>(config);
}

unified_cache::~unified_cache() {
  mutex_lock lock(&impl_->config_mu);
  for (auto& d : impl_->devices) {
    mutex_lock device_lock(&d->mu);
    d->queue.clear();
    for (entry* e : d->table.entries()) {
      e->resident.store(false, std::memory_order_release);
      entry_ref::adopt(e).reset();  // no reader may remain: release directly
    }
  }
}

unified_cache::lookup_result unified_cache::lookup_or_insert(
    const cache_scope& scope, backend_id backend, std::string_view key, std::size_t size_bytes,
    std::uint64_t cost_ns, const cache_future& future, bool want_entry) {
  if (!future.valid()) throw cache_error("unicache: get_or_add needs a valid future");
  const std::uint64_t hash = hash_key(scope.context_id, backend, key);
  using outcome = lookup_result::outcome;

  // Hit path: no lock, no allocation; writes only the entry's use stamp (when
  // it changed) and its use count (sampled once the entry is hot).
  if (impl_->enabled.load(std::memory_order_relaxed)) {
    if (device_cache* d = impl_->find_device(scope.kind, scope.device_id)) {
      epoch_guard guard;
      if (entry* e = d->table.find(hash, scope.context_id, backend, key)) {
        const build_state state = settle(e);
        if (state != build_state::failed) {
          const std::uint64_t clock = d->clock.load(std::memory_order_relaxed);
          if (e->stamp.load(std::memory_order_relaxed) != clock) {
            e->stamp.store(clock, std::memory_order_relaxed);
          }
          const bool ready = state == build_state::ready;
          count_use(ready ? e->hits : e->waits);
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
    entry* found = enabled ? d->table.find(hash, scope.context_id, backend, key) : nullptr;
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
      } else if (size_bytes > d->capacity_bytes || d->capacity_bytes == 0) {
        counters.refused_oversize.fetch_add(1, std::memory_order_relaxed);
        trace = "refused_oversize";
      } else if (d->used_bytes + size_bytes > d->capacity_bytes &&
                 d->policy == eviction_policy::no_evict) {
        counters.refused_full.fetch_add(1, std::memory_order_relaxed);
        trace = "refused_full";
      } else if (d->used_bytes + size_bytes > d->capacity_bytes && d->policy == eviction_policy::cost &&
                 !d->admits(hash, size_bytes, cost_ns)) {
        counters.refused_admission.fetch_add(1, std::memory_order_relaxed);
        trace = "refused_admission";
      } else {
        // Allocate before evicting: if allocation throws, nothing has changed.
        entry* e = entry::create(hash, scope.context_id, backend, key, size_bytes, cost_ns, future);
        d->evict_to(d->capacity_bytes - size_bytes, removal::capacity, removed);
        d->insert_locked(e, counters);
        result = {outcome::inserted, {}, entry_ref::share(e)};  // e's own ref is the table's
        trace = "inserted";
      }
    }
  }
  if (!removed.empty()) impl_->finish_removals(scope.kind, scope.device_id, removed);
  epoch_domain::instance().collect();  // an insert may have retired a grown table
  if (trace) impl_->trace_miss(scope, backend, hash, size_bytes, trace);
  if (!want_entry) result.entry.reset();
  return result;
}

cache_future unified_cache::get_or_add(const cache_scope& scope, backend_id backend,
                                       std::string_view key, std::size_t size_bytes,
                                       std::uint64_t cost_ns, const cache_future& future) {
  lookup_result r = lookup_or_insert(scope, backend, key, size_bytes, cost_ns, future, false);
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
    e->cost_ns.store(static_cast<float>(cost_ns), std::memory_order_relaxed);
    e->state.store(build_state::ready, std::memory_order_release);
    if (e->resident.load(std::memory_order_relaxed)) {
      // The value's real size replaces the estimate it was inserted with;
      // a cache now over its budget evicts (per policy) at once.
      if (size_bytes != 0 && size_bytes != e->size_bytes) {
        scope_counters& c = d->counters_for(e->context_id);
        d->used_bytes = d->used_bytes - e->size_bytes + size_bytes;
        c.bytes.fetch_add(size_bytes - e->size_bytes, std::memory_order_relaxed);  // modular: a decrease too
        e->size_bytes = size_bytes;
      }
      d->queue.update(e, d->priority_of(e));
      if (d->used_bytes > d->capacity_bytes) d->evict_to(d->capacity_bytes, removal::capacity, removed);
    }
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

bool unified_cache::contains(const cache_scope& scope, backend_id backend,
                             std::string_view key) const {
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  if (!d) return false;
  epoch_guard guard;
  entry* e = d->table.find(hash_key(scope.context_id, backend, key), scope.context_id, backend, key);
  return e != nullptr && settle(e) != build_state::failed;
}

void unified_cache::update_cost(const cache_scope& scope, backend_id backend, std::string_view key,
                                std::uint64_t cost_ns) {
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  if (!d) return;
  const std::uint64_t hash = hash_key(scope.context_id, backend, key);
  mutex_lock lock(&d->mu);
  if (entry* e = d->table.find(hash, scope.context_id, backend, key)) {
    e->cost_ns.store(static_cast<float>(cost_ns), std::memory_order_relaxed);
    d->queue.update(e, d->priority_of(e));
  }
}

bool unified_cache::remove(const cache_scope& scope, backend_id backend, std::string_view key) {
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  if (!d) return false;
  const std::uint64_t hash = hash_key(scope.context_id, backend, key);
  std::vector<removed_entry> removed;
  {
    mutex_lock lock(&d->mu);
    entry* e = d->table.find(hash, scope.context_id, backend, key);
    if (!e) return false;
    d->remove_locked(e, removal::erase, removed);
  }
  impl_->finish_removals(d->kind, d->device_id, removed);
  return true;
}

void unified_cache::clear() {
  std::vector<device_cache*> all;
  {
    mutex_lock lock(&impl_->config_mu);
    all = impl_->devices_of(std::nullopt);
  }
  for (device_cache* d : all) {
    std::vector<removed_entry> removed;
    {
      mutex_lock lock(&d->mu);
      for (entry* e : d->table.entries()) d->remove_locked(e, removal::clear, removed);
    }
    impl_->finish_removals(d->kind, d->device_id, removed);
  }
}

std::uint64_t unified_cache::evict_device(engine_kind kind, int device_id, backend_id backend) {
  device_cache* d = impl_->device(kind, device_id);
  std::vector<removed_entry> removed;
  std::uint64_t bytes = 0;
  {
    mutex_lock lock(&d->mu);
    for (entry* e : d->table.entries()) {
      // A value still being built (perhaps by the caller, whose allocation
      // failed) is not evicted: its builder holds what it allocated anyway.
      if (e->backend != backend) continue;
      if (e->future.valid() && e->future.wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
      bytes += e->size_bytes;
      d->remove_locked(e, removal::clear, removed);
    }
  }
  impl_->finish_removals(kind, device_id, removed);
  return bytes;
}

std::uint64_t unified_cache::evict_scope(const cache_scope& scope) {
  device_cache* d = impl_->device(scope.kind, scope.device_id);
  std::vector<removed_entry> removed;
  std::uint64_t bytes = 0;
  {
    mutex_lock lock(&d->mu);
    for (entry* e : d->table.entries()) {
      if (e->context_id != scope.context_id) continue;
      bytes += e->size_bytes;
      d->remove_locked(e, removal::clear, removed);
    }
  }
  impl_->finish_removals(scope.kind, scope.device_id, removed);
  return bytes;
}

void unified_cache::set_capacity(engine_kind kind, std::size_t capacity_mb) {
  eviction_policy current = policy(kind);
  set_capacity(kind, capacity_mb, current);
}

void unified_cache::set_capacity(engine_kind kind, std::size_t capacity_mb,
                                 eviction_policy new_policy) {
  check_capacity(capacity_mb);
  std::vector<std::pair<device_cache*, std::vector<removed_entry>>> work;
  {
    mutex_lock lock(&impl_->config_mu);
    impl_->settings.of(kind) = {capacity_mb, new_policy};
    for (auto it = impl_->device_overrides.begin(); it != impl_->device_overrides.end();) {
      if (it->first.first == static_cast<int>(kind)) {
        impl_->device_overrides.erase(it++);
      } else {
        ++it;
      }
    }
    // Applied under config_mu so that concurrent setters end in the order
    // they took it.
    for (device_cache* d : impl_->devices_of(kind)) {
      std::vector<removed_entry> removed;
      mutex_lock device_lock(&d->mu);
      d->set_budget(mb_to_bytes(capacity_mb), new_policy, removed);
      work.emplace_back(d, std::move(removed));
    }
  }
  for (auto& [d, removed] : work) impl_->finish_removals(d->kind, d->device_id, removed);
}

void unified_cache::set_capacity(engine_kind kind, int device_id, std::size_t capacity_mb) {
  check_capacity(capacity_mb);
  device_cache* d = impl_->device(kind, device_id);
  std::vector<removed_entry> removed;
  {
    mutex_lock lock(&impl_->config_mu);
    impl_->device_overrides[{static_cast<int>(kind), device_id}] = mb_to_bytes(capacity_mb);
    mutex_lock device_lock(&d->mu);
    d->set_budget(mb_to_bytes(capacity_mb), impl_->settings.of(kind).policy, removed);
  }
  impl_->finish_removals(kind, device_id, removed);
}

std::size_t unified_cache::capacity(engine_kind kind) const {
  mutex_lock lock(&impl_->config_mu);
  return impl_->settings.of(kind).capacity_mb;
}

std::size_t unified_cache::capacity(engine_kind kind, int device_id) const {
  mutex_lock lock(&impl_->config_mu);
  return static_cast<std::size_t>(impl_->budget_of(kind, device_id) / kBytesPerMb);
}

eviction_policy unified_cache::policy(engine_kind kind) const {
  mutex_lock lock(&impl_->config_mu);
  return impl_->settings.of(kind).policy;
}

void unified_cache::set_enabled(bool enabled) {
  impl_->enabled.store(enabled, std::memory_order_relaxed);
}

bool unified_cache::enabled() const { return impl_->enabled.load(std::memory_order_relaxed); }

eviction_subscription unified_cache::add_eviction_callback(backend_id backend, eviction_callback callback) {
  if (!callback) throw cache_error("unicache: add_eviction_callback needs a callable callback");
  auto slot = std::make_shared<impl::callback_slot>();
  slot->callback = std::move(callback);
  mutex_lock lock(&impl_->callbacks_mu);
  slot->id = ++impl_->last_subscription;
  impl_->callbacks[backend].push_back(slot);
  return {backend, slot->id};
}

bool unified_cache::remove_eviction_callback(const eviction_subscription& subscription) {
  mutex_lock lock(&impl_->callbacks_mu);
  auto it = impl_->callbacks.find(subscription.backend);
  if (it == impl_->callbacks.end()) return false;
  auto& slots = it->second;
  const auto found = std::find_if(slots.begin(), slots.end(), [&](const auto& slot) {
    return subscription.id != 0 && slot->id == subscription.id;
  });
  if (found == slots.end()) return false;
  std::shared_ptr<impl::callback_slot> slot = *found;
  slots.erase(found);
  if (slots.empty()) impl_->callbacks.erase(it);
  slot->id = 0;  // a run that copied the list before this skips it
  // Wait for other threads' calls; calls on this thread (unsubscribing from
  // inside the callback) are allowed to stay.
  const int mine = static_cast<int>(
      std::count(running_callbacks.begin(), running_callbacks.end(), slot.get()));
  impl_->callbacks_mu.wait(impl_->callback_finished, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return slot->running <= mine;
  });
  return true;
}

cache_stats unified_cache::stats(const cache_scope& scope) const {
  cache_stats out;
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  if (!d) return out;
  mutex_lock lock(&d->mu);
  auto it = d->scopes.find(scope.context_id);
  if (it == d->scopes.end()) return out;
  const scope_counters& c = *it->second;
  out.misses = c.misses.load(std::memory_order_relaxed);
  out.inserts = c.inserts.load(std::memory_order_relaxed);
  out.evictions = c.evictions.load(std::memory_order_relaxed);
  out.failures = c.failures.load(std::memory_order_relaxed);
  out.refused_full = c.refused_full.load(std::memory_order_relaxed);
  out.refused_admission = c.refused_admission.load(std::memory_order_relaxed);
  out.refused_oversize = c.refused_oversize.load(std::memory_order_relaxed);
  out.bytes = c.bytes.load(std::memory_order_relaxed);
  out.entries = c.entries.load(std::memory_order_relaxed);
  out.hits = c.retired_hits.load(std::memory_order_relaxed);
  out.waits = c.retired_waits.load(std::memory_order_relaxed);
  for (const entry* e : d->table.entries()) {
    if (e->context_id != scope.context_id) continue;
    out.hits += e->hits.load(std::memory_order_relaxed);
    out.waits += e->waits.load(std::memory_order_relaxed);
  }
  return out;
}

cache_stats unified_cache::total_stats() const {
  cache_stats total;
  std::vector<cache_scope> scopes;
  {
    mutex_lock lock(&impl_->config_mu);
    for (const auto& d : impl_->devices) {
      mutex_lock device_lock(&d->mu);
      for (const auto& [context, counters] : d->scopes) {
        scopes.push_back({d->kind, d->device_id, context});
      }
    }
  }
  for (const cache_scope& s : scopes) {
    const cache_stats one = stats(s);
    total.hits += one.hits;
    total.waits += one.waits;
    total.misses += one.misses;
    total.inserts += one.inserts;
    total.evictions += one.evictions;
    total.failures += one.failures;
    total.refused_full += one.refused_full;
    total.refused_admission += one.refused_admission;
    total.refused_oversize += one.refused_oversize;
    total.bytes += one.bytes;
    total.entries += one.entries;
  }
  return total;
}

unified_cache& constant_tensor_cache() {
  static unified_cache* const cache =
      new unified_cache(cache_config::constant_tensor_cache_from_environment());
  return *cache;
}

unified_cache& kernel_cache() {
  static unified_cache* const cache =
      new unified_cache(cache_config::kernel_cache_from_environment());
  return *cache;
}

}  // namespace unicache
