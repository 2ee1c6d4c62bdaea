// unified_cache's devices, configuration, bulk removal, eviction callbacks
// and statistics. The lookups are in unified_cache.cpp.
#include <cinttypes>
#include <cstdio>
#include <future>

#include "cache/cache_impl.hpp"
#include "util/epoch.hpp"
#include "util/log.hpp"

namespace unicache {
namespace detail {

void check_capacity(std::size_t capacity_mb) {
  if (capacity_mb > max_capacity_mb) {
    throw cache_error("unicache: capacity " + std::to_string(capacity_mb) + " MB does not fit in bytes; the largest is " +
                      std::to_string(max_capacity_mb) + " MB");
  }
}

void check_kind(engine_kind kind) {
  if (!known_kind(kind)) throw cache_error("unicache: unknown engine kind " + std::to_string(static_cast<int>(kind)));
}

void check_policy(eviction_policy policy) {
  if (static_cast<unsigned>(policy) > static_cast<unsigned>(eviction_policy::library_default)) {
    throw cache_error("unicache: unknown eviction policy " + std::to_string(static_cast<int>(policy)));
  }
}

namespace {

std::string describe_scope(engine_kind kind, int device_id, std::uint64_t context_id) {
  char buffer[96];
  std::snprintf(buffer, sizeof buffer, "%s:%d:0x%" PRIx64, std::string(to_string(kind)).c_str(),
                device_id, context_id);
  return buffer;
}

void release_table_reference(void* e) { entry_ref::adopt(static_cast<entry*>(e)).reset(); }

}  // namespace
}  // namespace detail

using namespace detail;

unified_cache::impl::impl(cache_config c) : initial(c), settings(c) {
  for (auto& kind_devices : direct) {
    for (auto& slot : kind_devices) slot.store(nullptr, std::memory_order_relaxed);
  }
  enabled.store(c.enabled, std::memory_order_relaxed);
}

device_cache* unified_cache::impl::find_device(engine_kind kind, int device_id) const {
  if (!known_kind(kind)) return nullptr;  // no such device: a miss; device() reports it
  if (device_id >= 0 && device_id < kDirectDevices) {
    return direct[static_cast<int>(kind)][device_id].load(std::memory_order_acquire);
  }
  mutex_lock lock(&config_mu);
  auto it = far_devices.find({static_cast<int>(kind), device_id});
  return it == far_devices.end() ? nullptr : it->second;
}

std::uint64_t unified_cache::impl::budget_of(engine_kind kind, int device_id) const {
  auto it = device_overrides.find({static_cast<int>(kind), device_id});
  return it != device_overrides.end() ? it->second : mb_to_bytes(settings.of(kind).capacity_mb);
}

device_cache* unified_cache::impl::device(engine_kind kind, int device_id) {
  if (device_cache* d = find_device(kind, device_id)) return d;
  check_kind(kind);
  mutex_lock lock(&config_mu);
  if (device_id >= 0 && device_id < kDirectDevices) {
    auto& slot = direct[static_cast<int>(kind)][device_id];
    if (device_cache* d = slot.load(std::memory_order_relaxed)) return d;
  } else if (auto it = far_devices.find({static_cast<int>(kind), device_id}); it != far_devices.end()) {
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

std::vector<device_cache*> unified_cache::impl::devices_of(std::optional<engine_kind> kind) const {
  std::vector<device_cache*> out;
  for (const auto& d : devices) {
    if (!kind || d->kind == *kind) out.push_back(d.get());
  }
  return out;
}

void unified_cache::impl::finish_removals(engine_kind kind, int device_id, std::vector<removed_entry>& removed) {
  for (removed_entry& r : removed) {
    entry* e = as_entry(r.entry);
    const bool evicted = r.reason == removal::capacity || r.reason == removal::shrink || r.reason == removal::clear;
    if (initial.verbose) {
      char line[384];
      std::snprintf(line, sizeof line,
                    "unicache_verbose,%s,evict,%s,owner=%s,key=%016" PRIx64 ",bytes=%" PRIu64 ",reason=%s",
                    initial.name.c_str(), describe_scope(kind, device_id, e->context_id).c_str(),
                    owner_name(e->owner).c_str(), e->hash, e->size_bytes, describe(r.reason));
      write_line(line);
    }
    if (evicted) callbacks.run(eviction_event{{kind, device_id, e->context_id}, e->owner, e->key(), e->future});
    // With its size: an evicted large value (a packed weight's device
    // memory) is freed at the collect() below, not after a batch.
    const std::size_t bytes = e->size_bytes;
    epoch_domain::instance().retire(r.entry.release(), &release_table_reference, bytes);
  }
  removed.clear();
  epoch_domain::instance().collect();
}

void unified_cache::impl::trace_miss(const cache_scope& scope, owner_id owner, std::uint64_t hash,
                                     std::uint64_t size, const char* outcome) const {
  if (!initial.verbose) return;
  char line[384];
  std::snprintf(line, sizeof line,
                "unicache_verbose,%s,miss,%s,owner=%s,key=%016" PRIx64 ",bytes=%" PRIu64 ",outcome=%s",
                initial.name.c_str(), describe_scope(scope.kind, scope.device_id, scope.context_id).c_str(),
                owner_name(owner).c_str(), hash, size, outcome);
  write_line(line);
}

unified_cache::unified_cache(cache_config config) {
  check_capacity(config.cpu.capacity_mb);
  check_capacity(config.gpu.capacity_mb);
  check_policy(config.cpu.policy);
  check_policy(config.gpu.policy);
  impl_ = std::make_unique<impl>(config);
}

unified_cache::~unified_cache() {
  mutex_lock lock(&impl_->config_mu);
  for (auto& d : impl_->devices) {
    mutex_lock device_lock(&d->mu);
    for (entry* e : d->table.entries()) {
      e->resident.store(false, std::memory_order_release);
      entry_ref::adopt(e).reset();  // no reader may remain: release directly
    }
  }
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

std::uint64_t unified_cache::evict_device(engine_kind kind, int device_id, owner_id owner) {
  device_cache* d = impl_->device(kind, device_id);
  std::vector<removed_entry> removed;
  std::uint64_t bytes = 0;
  {
    mutex_lock lock(&d->mu);
    for (entry* e : d->table.entries()) {
      // A value still being built (perhaps by the caller, whose allocation
      // failed) is not evicted: its builder holds what it allocated anyway.
      if (e->owner != owner) continue;
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
  check_kind(kind);
  check_capacity(capacity_mb);
  check_policy(new_policy);
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
  check_kind(kind);
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

eviction_subscription unified_cache::add_eviction_callback(owner_id owner, eviction_callback callback) {
  return impl_->callbacks.add(owner, std::move(callback));
}

bool unified_cache::remove_eviction_callback(const eviction_subscription& subscription) {
  return impl_->callbacks.remove(subscription);
}

cache_stats unified_cache::stats(const cache_scope& scope) const {
  cache_stats out;
  device_cache* d = impl_->find_device(scope.kind, scope.device_id);
  if (!d) return out;
  mutex_lock lock(&d->mu);
  auto it = d->scopes().find(scope.context_id);
  if (it == d->scopes().end()) return out;
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

cache_stats unified_cache::stats() const {
  cache_stats total;
  std::vector<cache_scope> scopes;
  {
    mutex_lock lock(&impl_->config_mu);
    for (const auto& d : impl_->devices) {
      mutex_lock device_lock(&d->mu);
      for (const auto& [context, counters] : d->scopes()) {
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

}  // namespace unicache
