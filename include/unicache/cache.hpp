// unicache/cache.hpp — the unified in-memory cache.
// For: users (capacities, statistics, a cache of their own) and backend
// authors (what their kernels and weights are kept in).
//
// One `unified_cache` holds values that are expensive to make — packed constant
// tensors, compiled kernels, compiled partitions — for every device and context
// of a process. Each entry lives in a `cache_scope` {engine kind, device id,
// context id}: entries are shared by callers with the same device and context
// and never seen from another one. Every device has its own byte budget
// (capacity per engine kind, optionally per device index) and eviction policy.
//
// The core operation is oneDNN's promise/future `get_or_add`:
//
//   std::promise<unicache::cache_value> promise;
//   auto cached = cache.get_or_add(scope, kMyOwner, key, bytes, cost_ns,
//                                  promise.get_future().share());
//   if (cached.valid()) {
//     use(cached.get());                  // hit, or wait for another builder
//   } else {
//     auto value = build();               // miss: this caller builds once
//     promise.set_value(value);           // every waiter gets it
//     use(value);
//   }
//
// `get_or_build` wraps that pattern, measures the build cost and returns a
// `cache_handle` that a backend can keep: `handle.valid()` is a single atomic
// load that turns false once the cache evicts the entry, so an execution loop
// need not look the key up again.
//
// `lookup` is the hit path for callers that use a value and let it go:
//
//   if (auto kernel = cache.lookup<const my_kernel>(scope, kMyOwner, key)) {
//     kernel->launch(...);                // borrowed until `kernel` ends
//   } else {
//     auto handle = cache.get_or_build<const my_kernel>(...);  // miss
//   }
//
// It takes no lock and touches no reference count: no shared_future copy,
// no entry reference. What a hit writes in the entry is its use count (for
// its first 1,024 uses, then for a sampled few) and its use stamp (only
// when the policy's clock moved since the entry's last use), so hits of a
// warm working set from many threads share no written cache line.
// get_or_add and get_or_build hand out owned references, and every hit of a
// key shared by many threads writes their one reference count.
//
// Thread safety: every member function of `unified_cache` may be called
// concurrently from any thread. Eviction callbacks run on the thread that
// caused the eviction, after the entry is removed and with no lock of the
// cache held, so they may call back into the cache.
#pragma once

#include <algorithm>
#include <atomic>
#include <concepts>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "unicache/error.hpp"
#include "unicache/config.hpp"

namespace unicache {

// A cached value. The cache owns one reference; users own theirs, so a value
// outlives its eviction for as long as anyone uses it.
using cache_value = std::shared_ptr<void>;
using cache_future = std::shared_future<cache_value>;

// Who owns an entry: the namespace its key bytes live in. Key bytes are
// compared only with keys of the same owner, so two owners never see each
// other's entries. Each backend has one owner id (backend::cache_owner(),
// for its kernels and packed weights), and the compiler has its own for
// compiled partitions (compiled_partition_owner in compiler.hpp).
using owner_id = std::uint32_t;

// Names an owner id, for diagnostics (UNICACHE_VERBOSE lines say
// owner=onednn_cpu, not its number). register_backend() names a backend's
// owner id for it; code that uses a unified_cache without a backend may name
// its own. Naming an id again under the same name does nothing; under
// another name it throws cache_error: two owners never share an id (their
// entries would be each other's). Thread-safe.
void register_owner(owner_id owner, std::string_view name);
// The name given to `owner`, else its id in hex ("0x0d0e0001").
std::string owner_name(owner_id owner);

// Where an entry lives. Entries are visible only to callers with the same
// kind, device id and context id. The context id is an opaque value chosen by
// the backend (a cl_context's address, a counter, 0 for the CPU).
struct cache_scope {
  engine_kind kind = engine_kind::cpu;
  int device_id = 0;
  std::uint64_t context_id = 0;

  friend bool operator==(const cache_scope&, const cache_scope&) = default;
};

// Counters of one scope (or, from `stats`, of the whole cache). Every
// get_or_add is exactly one of hit, wait or miss (a lookup that finds a
// value, one hit); refused_full, refused_oversize and the refused_admission
// of new entries are misses whose value was not cached. Misses, inserts, evictions, failures, refusals, bytes and
// entries are exact. Hits and waits are exact for an entry's first 1,024
// uses and then sampled (an unbiased estimate, within about 1/8), so
// that hits of an entry shared by many threads do not all write one cache
// line.
struct cache_stats {
  std::uint64_t hits = 0;     // a finished value was returned
  std::uint64_t waits = 0;    // a value still being built was returned
  std::uint64_t misses = 0;   // the caller was told to build
  std::uint64_t inserts = 0;  // misses that created an entry
  std::uint64_t evictions = 0;       // entries removed to make room, by shrinking or by clear()
  std::uint64_t failures = 0;        // entries dropped because their build failed
  std::uint64_t refused_full = 0;    // not cached: NO_EVICT and no room
  std::uint64_t refused_oversize = 0;  // not cached: larger than the capacity (or capacity 0)
  // turned away by COST as worth less than what it would displace: a new
  // entry (not cached; a miss), or an entry leaving COST's admission window
  // (cached until then; also counted in evictions)
  std::uint64_t refused_admission = 0;
  std::uint64_t bytes = 0;    // sizes of the entries now cached (declared; real once built, see get_or_build)
  std::uint64_t entries = 0;  // entries now cached
};

// What an eviction callback is told. `key` is the owner's own key bytes and
// is valid only during the call. `value` is the entry's future: ready unless
// the entry was evicted while still being built.
struct eviction_event {
  cache_scope scope;
  owner_id owner = 0;
  std::string_view key;
  cache_future value;
};
using eviction_callback = std::function<void(const eviction_event&)>;

// One subscriber of eviction callbacks, as add_eviction_callback returns it.
struct eviction_subscription {
  owner_id owner = 0;
  std::uint64_t id = 0;  // 0: none
};

// Thrown by the cache's own API on misuse (a bad argument); build failures
// reach callers as the exception the builder threw.
class cache_error : public error {
 public:
  using error::error;
};

namespace detail {
// The part of a cache entry a handle needs inline: a reference count and the
// residency flag. The rest of the entry is private to the library.
struct entry_base {
  std::atomic<std::uint32_t> refs{1};
  std::atomic<bool> resident{false};
};
void destroy_entry(entry_base* entry) noexcept;

// Intrusive reference to an entry; keeps the entry (not its slot) alive.
class entry_ref {
 public:
  entry_ref() = default;
  // Adopts one reference the caller already counted.
  static entry_ref adopt(entry_base* e) noexcept { return entry_ref(e); }
  static entry_ref share(entry_base* e) noexcept {
    if (e) e->refs.fetch_add(1, std::memory_order_relaxed);
    return entry_ref(e);
  }
  entry_ref(const entry_ref& o) noexcept : e_(o.e_) {
    if (e_) e_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  entry_ref(entry_ref&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  entry_ref& operator=(entry_ref o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  ~entry_ref() { reset(); }
  void reset() noexcept {
    if (e_ && e_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy_entry(e_);
    e_ = nullptr;
  }
  // Gives up ownership of the reference without dropping it.
  entry_base* release() noexcept { return std::exchange(e_, nullptr); }
  entry_base* get() const noexcept { return e_; }
  explicit operator bool() const noexcept { return e_ != nullptr; }

 private:
  explicit entry_ref(entry_base* e) noexcept : e_(e) {}
  entry_base* e_ = nullptr;
};
}  // namespace detail

// A value obtained from the cache, kept by a backend between executions.
// Holding a handle keeps the value alive even after the cache evicts it;
// `valid()` tells whether the cache still holds it, with one atomic load.
// Handles are cheap to copy and may outlive the cache (then valid() is false).
template <typename T>
class cache_handle {
 public:
  cache_handle() = default;
  cache_handle(detail::entry_ref entry, std::shared_ptr<T> value)
      : entry_(std::move(entry)), value_(std::move(value)) {}

  // True while the entry is in the cache. False for a default handle, for a
  // value that was built but not cached (refused), and after eviction.
  bool valid() const noexcept {
    return entry_ && entry_.get()->resident.load(std::memory_order_acquire);
  }
  T* get() const noexcept { return value_.get(); }
  T& operator*() const noexcept { return *value_; }
  T* operator->() const noexcept { return value_.get(); }
  const std::shared_ptr<T>& value() const noexcept { return value_; }
  explicit operator bool() const noexcept { return value_ != nullptr; }

 private:
  detail::entry_ref entry_;
  std::shared_ptr<T> value_;
};

namespace detail {
// A read-side section of the cache's memory reclamation (see cache_ref).
void* begin_read_section() noexcept;
void end_read_section(void* section) noexcept;
// The value of a built entry, found inside a read section.
const cache_value& entry_value(entry_base* entry) noexcept;
}  // namespace detail

// A value borrowed from the cache for one scope, as `lookup` returns it.
// While it lives the value stays valid, even if the cache evicts it or is
// cleared meanwhile (not if the cache itself is destroyed). Taking and
// ending a borrow writes only this thread's own epoch record. Rules:
// - destroy it on the thread that made it (it is movable, not copyable);
// - keep it short, as a read-side critical section: while any borrow lives,
//   memory the cache gave up (evicted values among it) is not freed;
// - to keep the value longer, take a handle with share().
template <typename T>
class cache_ref {
 public:
  cache_ref() = default;
  cache_ref(cache_ref&& o) noexcept
      : section_(std::exchange(o.section_, nullptr)),
        entry_(std::exchange(o.entry_, nullptr)),
        value_(std::exchange(o.value_, nullptr)) {}
  cache_ref& operator=(cache_ref&& o) noexcept {
    cache_ref moved(std::move(o));
    std::swap(section_, moved.section_);
    std::swap(entry_, moved.entry_);
    std::swap(value_, moved.value_);
    return *this;
  }
  cache_ref(const cache_ref&) = delete;
  cache_ref& operator=(const cache_ref&) = delete;
  ~cache_ref() {
    if (section_) detail::end_read_section(section_);
  }

  explicit operator bool() const noexcept { return value_ != nullptr; }
  T* get() const noexcept { return value_; }
  T& operator*() const noexcept { return *value_; }
  T* operator->() const noexcept { return value_; }
  // The value as an owning pointer, for keeping it beyond this scope (one
  // reference count); null from an empty borrow.
  std::shared_ptr<T> shared_value() const {
    if (!entry_) return {};
    return std::static_pointer_cast<T>(detail::entry_value(entry_));
  }
  // A handle that owns the value and tells whether it stays cached; an
  // empty handle from an empty borrow. Takes the reference counts a handle
  // holds.
  cache_handle<T> share() const {
    if (!entry_) return {};
    return cache_handle<T>(detail::entry_ref::share(entry_),
                           std::static_pointer_cast<T>(detail::entry_value(entry_)));
  }

 private:
  friend class unified_cache;
  void* section_ = nullptr;
  detail::entry_base* entry_ = nullptr;
  T* value_ = nullptr;
};

class unified_cache {
 public:
  // An independent cache with its own configuration. Tests and applications
  // that want isolation use these; most code uses the process-wide caches
  // below. Throws cache_error for a capacity above max_capacity_mb.
  explicit unified_cache(cache_config config = {});
  // Destroying a cache while another thread uses it is undefined. Values held
  // by users stay alive; their handles become invalid.
  ~unified_cache();
  unified_cache(const unified_cache&) = delete;
  unified_cache& operator=(const unified_cache&) = delete;

  // oneDNN's get_or_add. On a hit returns the cached future (possibly still
  // being computed by another thread: calling get() on it waits). On a miss
  // stores `future` and returns an invalid future: the caller owns the promise
  // and must fulfil it (set_value or set_exception; a destroyed promise counts
  // as a failure). A failed entry reaches every waiter as the same exception
  // and is dropped at the next lookup, which then builds again. If the value
  // cannot be cached (disabled, oversize, NO_EVICT and full, COST refuses it) the result is
  // also invalid and `future` is not stored. `size_bytes` is what the entry
  // counts against the device's capacity; `cost_ns` is an estimate of the
  // build time, replaced by `update_cost` when the real time is known.
  // Throws cache_error if `future` is invalid.
  cache_future get_or_add(const cache_scope& scope, owner_id owner, std::string_view key,
                          std::size_t size_bytes, std::uint64_t cost_ns,
                          const cache_future& future);

  // Single-flight build: returns the cached value, waits for a build in
  // flight, or runs `builder` (on this thread, outside every lock) and caches
  // its result with the measured build time as its cost. If the builder (or a
  // concurrent builder of the same key) throws, the exception is rethrown here
  // and the entry is removed so that the next call builds again. T must be the
  // type every builder of this key returns.
  template <typename T, typename Builder>
  cache_handle<T> get_or_build(const cache_scope& scope, owner_id owner, std::string_view key,
                               std::size_t size_bytes, Builder&& builder);

  // The hit path that shares nothing: the cached value of `key`, borrowed
  // (see cache_ref), counted as a hit and a use. Empty, counting nothing,
  // when the key is not cached, is still being built, or failed (the
  // caller then calls get_or_build, which waits or builds), and when the
  // cached value is null. T must be the type every builder of this key
  // returns. Any thread; lock-free for device ids 0-63 (others look their
  // device up under a lock).
  template <typename T>
  cache_ref<T> lookup(const cache_scope& scope, owner_id owner, std::string_view key);

  // Whether the entry is cached (built or in flight, not failed). A pure lookup: it does
  // not count as a use, a hit or a miss.
  bool contains(const cache_scope& scope, owner_id owner, std::string_view key) const;

  // Replaces the cost of an existing entry (no effect if absent). Backends
  // call it when a build finishes and its real duration is known.
  void update_cost(const cache_scope& scope, owner_id owner, std::string_view key,
                   std::uint64_t cost_ns);

  // Removes one entry (no callback: the caller asked). Returns whether it was present.
  bool remove(const cache_scope& scope, owner_id owner, std::string_view key);
  // Removes every entry; eviction callbacks run for each.
  void clear();
  // Evicts every entry of `owner` on one device (all its contexts) but
  // those still being built, with eviction callbacks: what a backend does
  // when the device runs out of memory, before it retries. Returns the bytes
  // the entries counted (their values are freed once no caller holds them).
  std::uint64_t evict_device(engine_kind kind, int device_id, owner_id owner);
  // Evicts every entry of one scope (one context), of every owner, with
  // eviction callbacks: before a context the caller owns is destroyed.
  // Returns the bytes the entries counted.
  std::uint64_t evict_scope(const cache_scope& scope);

  // Capacity in MB, a budget for each device of `kind`. Applies to existing
  // and future devices of that kind and clears per-device overrides.
  // Shrinking evicts (per policy; NO_EVICT in least-recently-used order) down
  // to the new size; growing keeps every entry. 0 caches nothing, not even a
  // value of 0 bytes. Throws cache_error, changing nothing, for a capacity
  // above max_capacity_mb (the bound the environment parser applies too).
  void set_capacity(engine_kind kind, std::size_t capacity_mb);
  void set_capacity(engine_kind kind, std::size_t capacity_mb, eviction_policy policy);
  // Capacity in MB of one device index, overriding the kind's value.
  void set_capacity(engine_kind kind, int device_id, std::size_t capacity_mb);
  std::size_t capacity(engine_kind kind) const;
  std::size_t capacity(engine_kind kind, int device_id) const;
  eviction_policy policy(engine_kind kind) const;
  void set_enabled(bool enabled);
  bool enabled() const;

  // Subscribes `callback` to evictions of `owner`'s entries. An owner may
  // have several subscribers (a backend's own bookkeeping and a user who
  // observes it); each is called, in the order they subscribed, after an
  // entry is evicted or cleared, never for an entry removed with remove() or
  // dropped after a failed build. Throws cache_error for an empty callback.
  eviction_subscription add_eviction_callback(owner_id owner, eviction_callback callback);
  // Unsubscribes. After this returns no call of that callback is running,
  // except one on the calling thread (unsubscribing from inside the callback
  // is allowed). Returns false if the subscription was already removed.
  bool remove_eviction_callback(const eviction_subscription& subscription);

  // The counters of one scope's entries, and of the whole cache.
  cache_stats stats(const cache_scope& scope) const;
  cache_stats stats() const;

 private:
  struct impl;
  struct lookup_result {
    enum class outcome { hit, wait, inserted, refused } kind;
    cache_future future;
    detail::entry_ref entry;  // set for hit, wait and inserted
  };
  lookup_result lookup_or_insert(const cache_scope& scope, owner_id owner,
                                 std::string_view key, std::size_t size_bytes,
                                 std::uint64_t cost_ns, const cache_future& future,
                                 bool want_entry);
  // The entry's device exists: the entry was inserted into it. `size_bytes`:
  // what the built value says it holds (0: keep the size given at insertion).
  void complete_build(const cache_scope& scope, const detail::entry_ref& entry,
                      std::uint64_t cost_ns, std::uint64_t size_bytes = 0);
  void drop_failed(const cache_scope& scope, const detail::entry_ref& entry);
  // lookup's hit path, inside a read section: the entry and its value, or
  // nullptr when it is not a hit.
  detail::entry_base* find_built(const cache_scope& scope, owner_id owner, std::string_view key,
                                 void** value);

  std::unique_ptr<impl> impl_;
};

// The process-wide caches, configured from the environment on first use (see
// config.hpp) and never destroyed, so that backends may use them from static
// destructors. Constant tensors (packed weights) and compiled kernels have
// separate budgets: a large weight never pushes every kernel out.
unified_cache& constant_tensor_cache();
unified_cache& kernel_cache();

// ---------------------------------------------------------------------------

template <typename T>
cache_ref<T> unified_cache::lookup(const cache_scope& scope, owner_id owner, std::string_view key) {
  cache_ref<T> ref;
  ref.section_ = detail::begin_read_section();
  void* value = nullptr;
  ref.entry_ = find_built(scope, owner, key, &value);
  if (!ref.entry_) return cache_ref<T>();  // ends the section
  ref.value_ = static_cast<T*>(value);
  return ref;
}

template <typename T, typename Builder>
cache_handle<T> unified_cache::get_or_build(const cache_scope& scope, owner_id owner,
                                            std::string_view key, std::size_t size_bytes,
                                            Builder&& builder) {
  std::promise<cache_value> promise;
  auto found = lookup_or_insert(scope, owner, key, size_bytes, /*cost_ns=*/0,
                                promise.get_future().share(), /*want_entry=*/true);
  using outcome = lookup_result::outcome;
  if (found.kind == outcome::hit || found.kind == outcome::wait) {
    cache_value hit;
    try {
      hit = found.future.get();  // a failed build's exception reaches this caller too
    } catch (const std::future_error& e) {
      // A get_or_add caller destroyed its promise without setting it.
      throw cache_error(std::string("get_or_build: the entry's builder gave up (") + e.what() + ")");
    }
    return cache_handle<T>(std::move(found.entry), std::static_pointer_cast<T>(std::move(hit)));
  }
  std::shared_ptr<T> value;
  const auto start = std::chrono::steady_clock::now();
  try {
    value = std::forward<Builder>(builder)();
  } catch (...) {
    promise.set_exception(std::current_exception());
    if (found.kind == outcome::inserted) drop_failed(scope, found.entry);
    throw;
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  // The cache stores shared_ptr<void>; a const T is handed out as const again.
  promise.set_value(std::const_pointer_cast<std::remove_const_t<T>>(value));
  if (found.kind != outcome::inserted) return cache_handle<T>({}, std::move(value));
  // A value that knows its size (`std::size_t cached_bytes() const`) is
  // counted at that size instead of the caller's estimate.
  std::uint64_t actual_bytes = 0;
  if constexpr (requires(const T& v) {
                  { v.cached_bytes() } -> std::convertible_to<std::size_t>;
                }) {
    if (value) actual_bytes = std::max<std::uint64_t>(1, value->cached_bytes());
  }
  complete_build(scope, found.entry,
                 static_cast<std::uint64_t>(
                     std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()),
                 actual_bytes);
  return cache_handle<T>(std::move(found.entry), std::move(value));
}

}  // namespace unicache
