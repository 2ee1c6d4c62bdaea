// unicache/constant_registry.hpp — how a backend keeps packed constant
// tensors (weights) in the constant tensor cache and finds them again with
// one atomic load and a small hash per execution.
// For: backend authors.
//
// A backend packs a constant input once per (contents, layout) into the
// cache's scope of the engine, and keeps a handle to it in the compiled
// kernel (check a cheap valid() flag instead of looking the key up on every
// execution). The cache key is a fingerprint of the weight's contents, not
// its address: a weight freed and allocated again at the same address with
// other values is packed again, and two kernels given equal weights at
// different addresses share one packed copy. At each execution the registry
// confirms the contents as current_constant_check() says (by default a hash
// of 16 sampled blocks, see config.hpp). When the cache evicts the packed
// value, the registry's eviction callback drops every kernel's handle, so
// the packed memory is freed at once (not when the kernel dies), and the next
// execution packs again:
//
//   static auto* weights = new constant_registry<packed>(constant_tensor_cache(), my_backend.cache_owner());
//   auto slot = weights->make_slot();                        // one per kernel and constant input
//   cache_key layout;                                        // what the packed form depends on
//   layout.add("packed-b").add(k).add(n).add(tile);
//   std::shared_ptr<packed> w = weights->get(slot, scope, {t.data, t.version, bytes}, layout, packed_bytes,
//                                            host_memory_reader{t.data}, [&] { return pack(t); });
//
// Device memory is read through a reader the backend supplies (a callable
// like host_memory_reader, e.g. one clEnqueueReadBufferRect of the sampled
// blocks). A reader with a member read_samples(first, block, stride, count,
// out) reads the per-execution sampled blocks with it instead (the GPU core
// reads them without waiting for work queued on the stream), and the whole
// constant, for its fingerprint, with operator().
//
// Thread safety: every member may be called concurrently; get() on one slot
// from several threads packs at most once per key (the cache's single flight).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "unicache/cache.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/config.hpp"

namespace unicache {

// XXH3-128 of a constant's bytes (about 20 GB/s on one core).
struct content_fingerprint {
  std::uint64_t high = 0, low = 0;
  friend bool operator==(const content_fingerprint&, const content_fingerprint&) = default;
};
content_fingerprint fingerprint_of(const void* data, std::size_t bytes) noexcept;

// Which bytes the sampled check reads: `count` blocks of `block` bytes, the
// i-th at byte first + i * stride. At most 1 KB: 16 blocks of 64 bytes, one
// at the start of each sixteenth of the tensor, or the whole tensor when it
// is no larger. first + count * stride never exceeds the tensor's size.
struct sample_layout {
  std::size_t first = 0, block = 0, stride = 0, count = 0;
  std::size_t bytes() const noexcept { return block * count; }
};
inline constexpr std::size_t max_sample_bytes = 1024;
sample_layout sample_layout_for(std::size_t bytes) noexcept;
// XXH3-64 of the sampled blocks, given gathered (`samples`, layout.bytes()
// bytes) or read in place from host memory.
std::uint64_t sample_hash(const void* samples, std::size_t bytes) noexcept;
std::uint64_t host_sample_hash(const void* data, std::size_t bytes) noexcept;

// The reader of a constant in host memory. A reader copies `count` blocks
// of `block` bytes, the i-th at byte first + i * stride, into `out`.
struct host_memory_reader {
  const void* data;
  void operator()(std::size_t first, std::size_t block, std::size_t stride, std::size_t count,
                  unsigned char* out) const {
    const auto* base = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < count; ++i) std::memcpy(out + i * block, base + first + i * stride, block);
  }
};

// One constant input as an execution sees it.
struct constant_source {
  const void* data = nullptr;  // address or device handle (a hint: contents decide)
  std::uint64_t version = 0;   // tensor::version
  std::size_t bytes = 0;       // the tensor's size in bytes
};

template <typename T>
class constant_registry {
 public:
  // What a compiled kernel keeps for one constant input: the handle of the
  // packed value and what it was packed from. Kernels own slots
  // (shared_ptr); the registry only keeps weak references to them.
  class slot {
    friend class constant_registry;
    std::mutex mu;
    constant_source source;
    constant_check mode = constant_check::none;
    std::uint64_t sample = 0;
    content_fingerprint fingerprint;
    std::string key;
    cache_handle<T> handle;
  };

  // Subscribes this registry to evictions of `owner`'s entries in `cache`
  // (beside any other subscriber). Backends create one registry per owner
  // id and never destroy it.
  constant_registry(unified_cache& cache, owner_id owner)
      : cache_(cache),
        owner_(owner),
        subscription_(cache_.add_eviction_callback(owner_, [this](const eviction_event& e) { evicted(e.key); })) {}
  ~constant_registry() { cache_.remove_eviction_callback(subscription_); }
  constant_registry(const constant_registry&) = delete;
  constant_registry& operator=(const constant_registry&) = delete;

  std::shared_ptr<slot> make_slot() const { return std::make_shared<slot>(); }

  // The packed value of the constant `src` in the form `layout` describes:
  // the slot's, while the cache still holds it and the contents check (per
  // current_constant_check()) says it was packed from these contents; else
  // the cache's entry under (layout, contents), built by `pack` on a miss.
  // `read` reads the constant's bytes (host_memory_reader for host memory).
  // `packed_bytes` is what the packed value counts against the capacity.
  // `check`, when given, replaces current_constant_check() for this call (a
  // stream whose caller versions its constants passes constant_check::none).
  // Exceptions of `read` and `pack` reach the caller, and nothing is cached.
  template <typename Reader, typename Pack>
  std::shared_ptr<T> get(const std::shared_ptr<slot>& s, const cache_scope& scope, const constant_source& src,
                         const cache_key& layout, std::size_t packed_bytes, Reader&& read, Pack&& pack,
                         std::optional<constant_check> check = std::nullopt) {
    const constant_check mode = check.value_or(current_constant_check());
    std::uint64_t sample = 0;
    content_fingerprint fingerprint;
    if (mode == constant_check::sampled) sample = sample_of(src, read);
    if (mode == constant_check::full) fingerprint = fingerprint_of_source(src, read);
    {
      std::lock_guard lock(s->mu);
      if (s->handle.valid() && s->mode == mode && same_source(s->source, src) &&
          (mode == constant_check::none || (mode == constant_check::sampled && s->sample == sample) ||
           (mode == constant_check::full && s->fingerprint == fingerprint))) {
        return s->handle.value();
      }
    }
    cache_key key = layout;
    if (mode == constant_check::none) {
      key.add("address").add(reinterpret_cast<std::uintptr_t>(src.data)).add(src.version);
    } else {
      if (mode == constant_check::sampled) fingerprint = remembered_fingerprint(src, sample, read);
      key.add("contents").add(fingerprint.high).add(fingerprint.low);
    }
    key.add(static_cast<std::uint64_t>(src.bytes));
    // Not under the slot's lock: an insert may evict, and the eviction
    // callback takes slot locks (this one's included).
    cache_handle<T> handle =
        cache_.template get_or_build<T>(scope, owner_, key.bytes(), packed_bytes, std::forward<Pack>(pack));
    std::shared_ptr<T> value = handle.value();
    std::string key_bytes(key.bytes());
    {
      std::lock_guard lock(s->mu);
      s->handle = std::move(handle);
      s->source = src;
      s->mode = mode;
      s->sample = sample;
      s->fingerprint = fingerprint;
      s->key = key_bytes;
    }
    track(key_bytes, s);
    return value;
  }

  // How many full fingerprints this registry computed (a weight read whole),
  // for tests and benchmarks.
  std::uint64_t fingerprints_computed() const { return fingerprints_computed_.load(std::memory_order_relaxed); }

 private:
  static bool same_source(const constant_source& a, const constant_source& b) {
    return a.data == b.data && a.version == b.version && a.bytes == b.bytes;
  }

  template <typename Reader>
  static std::uint64_t sample_of(const constant_source& src, Reader& read) {
    if constexpr (std::is_same_v<std::remove_cvref_t<Reader>, host_memory_reader>) {
      return host_sample_hash(read.data, src.bytes);
    } else {
      const sample_layout layout = sample_layout_for(src.bytes);
      unsigned char samples[max_sample_bytes];
      if (layout.count > 0) {
        // A reader may read the sampled blocks its own way (read_samples):
        // a GPU's reads them without waiting for the stream's queued work.
        if constexpr (requires { read.read_samples(layout.first, layout.block, layout.stride, layout.count, samples); }) {
          read.read_samples(layout.first, layout.block, layout.stride, layout.count, samples);
        } else {
          read(layout.first, layout.block, layout.stride, layout.count, samples);
        }
      }
      return sample_hash(samples, layout.bytes());
    }
  }

  template <typename Reader>
  content_fingerprint fingerprint_of_source(const constant_source& src, Reader& read) {
    fingerprints_computed_.fetch_add(1, std::memory_order_relaxed);
    if constexpr (std::is_same_v<std::remove_cvref_t<Reader>, host_memory_reader>) {
      return fingerprint_of(read.data, src.bytes);
    } else {
      // Not zero-filled first: the read overwrites every byte, and a weight
      // may be hundreds of MB.
      const std::unique_ptr<unsigned char[]> all(new unsigned char[src.bytes]);
      if (src.bytes != 0) read(0, src.bytes, src.bytes, 1, all.get());
      return fingerprint_of(all.get(), src.bytes);
    }
  }

  // The full fingerprint of `src` whose sample hash is `sample`: the one
  // computed for the same (address, version, size, sample) by any kernel, or
  // a new one. Several compiled partitions of one weight (one per shape)
  // read it whole once, not once each.
  template <typename Reader>
  content_fingerprint remembered_fingerprint(const constant_source& src, std::uint64_t sample, Reader& read) {
    const seen_key id{src.data, src.version, src.bytes};
    {
      std::lock_guard lock(mu_);
      if (auto it = seen_.find(id); it != seen_.end() && it->second.sample == sample) return it->second.fingerprint;
    }
    const content_fingerprint fingerprint = fingerprint_of_source(src, read);
    std::lock_guard lock(mu_);
    if (seen_.size() >= kSeenLimit) seen_.clear();  // a bound, not a policy: forgetting costs one re-read
    seen_[id] = {sample, fingerprint};
    return fingerprint;
  }

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

  struct seen_key {
    const void* data;
    std::uint64_t version;
    std::size_t bytes;
    friend bool operator==(const seen_key&, const seen_key&) = default;
  };
  struct seen_key_hash {
    std::size_t operator()(const seen_key& k) const noexcept {
      return std::hash<const void*>()(k.data) ^ (k.version * 0x9E3779B97F4A7C15ull) ^ (k.bytes << 1);
    }
  };
  struct seen_value {
    std::uint64_t sample;
    content_fingerprint fingerprint;
  };
  static constexpr std::size_t kSeenLimit = 4096;

  unified_cache& cache_;
  owner_id owner_;
  eviction_subscription subscription_;
  std::mutex mu_;
  std::unordered_map<std::string, std::vector<std::weak_ptr<slot>>> slots_;
  std::unordered_map<seen_key, seen_value, seen_key_hash> seen_;
  std::atomic<std::uint64_t> fingerprints_computed_{0};
};

}  // namespace unicache
