// unicache/constant_registry.hpp — how a backend keeps packed constant
// tensors (weights) in the constant tensor cache and finds them again with
// one atomic load per execution.
//
// A backend packs a constant input once per (identity, version, layout) into
// the cache's scope of the engine, and keeps a handle to it in the compiled
// kernel (seed 004's recommendation: check a cheap valid() flag instead of
// looking the key up on every execution). When the cache evicts the packed
// value, the registry's eviction callback drops every kernel's handle, so the
// packed memory is freed at once (not when the kernel dies), and the next
// execution packs again:
//
//   static auto* weights = new constant_registry<packed>(constant_tensor_cache(), kMyBackend);
//   auto slot = weights->make_slot();                       // one per kernel and constant input
//   std::shared_ptr<packed> w = weights->get(slot, scope, t.data, t.version, key, bytes,
//                                            [&] { return pack(t); });
//
// Thread safety: every member may be called concurrently; get() on one slot
// from several threads packs at most once per key (the cache's single flight).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "unicache/cache.hpp"
#include "unicache/cache_key.hpp"

namespace unicache {

template <typename T>
class constant_registry {
 public:
  // What a compiled kernel keeps for one constant input: the handle of the
  // packed value and the identity it was packed from. Kernels own slots
  // (shared_ptr); the registry only keeps weak references to them.
  class slot {
    friend class constant_registry;
    std::mutex mu;
    const void* data = nullptr;
    std::uint64_t version = 0;
    std::string key;
    cache_handle<T> handle;
  };

  // Subscribes this registry to evictions of `backend`'s entries in `cache`
  // (beside any other subscriber). Backends create one registry per backend
  // id and never destroy it.
  constant_registry(unified_cache& cache, backend_id backend)
      : cache_(cache),
        backend_(backend),
        subscription_(cache_.add_eviction_callback(backend_, [this](const eviction_event& e) { evicted(e.key); })) {}
  ~constant_registry() { cache_.remove_eviction_callback(subscription_); }
  constant_registry(const constant_registry&) = delete;
  constant_registry& operator=(const constant_registry&) = delete;

  std::shared_ptr<slot> make_slot() const { return std::make_shared<slot>(); }

  // The packed value of the constant at `data` with `version`: the slot's,
  // while the cache still holds it and it was packed from the same data and
  // version; else the cache's entry under `key` (which must identify data,
  // version and packed layout), built by `pack` on a miss. `bytes` is what
  // the packed value counts against the capacity. Exceptions of `pack`
  // reach the caller, and nothing is cached.
  template <typename Pack>
  std::shared_ptr<T> get(const std::shared_ptr<slot>& s, const cache_scope& scope, const void* data,
                         std::uint64_t version, const cache_key& key, std::size_t bytes, Pack&& pack) {
    {
      std::lock_guard lock(s->mu);
      if (s->handle.valid() && s->data == data && s->version == version) return s->handle.value();
    }
    // Not under the slot's lock: an insert may evict, and the eviction
    // callback takes slot locks (this one's included).
    cache_handle<T> handle =
        cache_.template get_or_build<T>(scope, backend_, key.bytes(), bytes, std::forward<Pack>(pack));
    std::shared_ptr<T> value = handle.value();
    std::string key_bytes(key.bytes());
    {
      std::lock_guard lock(s->mu);
      s->handle = std::move(handle);
      s->data = data;
      s->version = version;
      s->key = key_bytes;
    }
    track(key_bytes, s);
    return value;
  }

 private:
  void track(const std::string& key, const std::shared_ptr<slot>& s) {
    std::lock_guard lock(mu_);
    auto& list = slots_[key];
    std::erase_if(list, [&](const std::weak_ptr<slot>& w) { return w.expired() || w.lock() == s; });
    list.push_back(s);
  }

  // The eviction callback: every slot holding this key drops its handle.
  void evicted(std::string_view key) {
    std::vector<std::shared_ptr<slot>> holders;
    {
      std::lock_guard lock(mu_);
      auto it = slots_.find(std::string(key));
      if (it == slots_.end()) return;
      for (auto& w : it->second) {
        if (auto s = w.lock()) holders.push_back(std::move(s));
      }
      slots_.erase(it);
    }
    for (auto& s : holders) {
      std::lock_guard lock(s->mu);
      if (s->key == key) s->handle = {};
    }
  }

  unified_cache& cache_;
  backend_id backend_;
  eviction_subscription subscription_;
  std::mutex mu_;
  std::unordered_map<std::string, std::vector<std::weak_ptr<slot>>> slots_;
};

}  // namespace unicache
