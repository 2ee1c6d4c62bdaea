// The kernel path every GPU backend shares: kernel cache -> preloaded binary
// -> persistent store -> build from source; binaries stored after their first
// launch; counters and verbose lines.
#include "unicache/kernel_path.hpp"

#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "unicache/cache_key.hpp"
#include "util/env.hpp"
#include "util/log.hpp"
#include "util/mutex.hpp"
#include "util/stable_hash.hpp"

namespace unicache {
namespace {

struct counters {
  std::atomic<std::uint64_t> from_source{0}, from_binary{0}, rejected{0}, stored{0}, build_ns{0}, load_ns{0},
      first_launch_ns{0};
};

struct counter_table {
  detail::mutex mu;
  // Values are never freed: a counters& handed out stays valid.
  absl::flat_hash_map<owner_id, counters*> by_owner ABSL_GUARDED_BY(mu);
};

counter_table& table() {
  static counter_table* const t = new counter_table();  // never destroyed: usable from static destructors
  return *t;
}

counters& counters_of(owner_id owner) {
  counter_table& t = table();
  detail::mutex_lock lock(&t.mu);
  counters*& c = t.by_owner[owner];
  if (c == nullptr) c = new counters();
  return *c;
}

thread_local std::uint64_t first_launch_ns_of_thread = 0;

std::uint64_t ns_since(std::chrono::steady_clock::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

// unicache_verbose,kernel_path,<event>,backend=<name>,kernel=<name>,key=<16 hex>,ms=<time>
void trace(const char* event, owner_id owner, const std::string& kernel_name, const std::string& store_key,
           std::uint64_t ns) {
  if (!detail::verbose_lines()) return;
  const std::string key = detail::to_hex(detail::stable_hash128(store_key)).substr(0, 16);
  char line[512];
  std::snprintf(line, sizeof line, "unicache_verbose,kernel_path,%s,backend=%s,kernel=%s,key=%s,ms=%.3f", event,
                owner_name(owner).c_str(), detail::quoted(kernel_name, 32).c_str(), key.c_str(),
                static_cast<double>(ns) / 1e6);
  detail::write_line(line);
}

constexpr std::size_t kMaxExplanations = 256;

// Prints `e` once per kernel and reason (the differing fields' names, not
// their values), and at most kMaxExplanations lines a process.
void print_explanation(const miss_explanation& e) noexcept {
  // Never destroyed: background builds may explain a miss during exit.
  static std::mutex* const mu = new std::mutex;
  static std::set<std::string>* const said = new std::set<std::string>;
  try {
    std::string reason = e.what + "|" + e.refusal;
    for (const std::string& d : e.differences) reason += "|" + d.substr(0, d.find(" ("));
    std::lock_guard<std::mutex> lock(*mu);
    if (said->size() > kMaxExplanations || !said->insert(reason).second) return;
    if (said->size() > kMaxExplanations) {
      detail::write_line("unicache: miss explained: further explanations are not shown (" +
                         std::to_string(kMaxExplanations) + " in this process)");
      return;
    }
    detail::write_line(e.line());
  } catch (...) {
    // Out of memory: nothing printed.
  }
}

}  // namespace

std::string kernel_source::store_key() const {
  cache_key k;
  k.add(language).add(kernel_name).add(options).add(shape_class).add(source);
  return std::string(k.bytes());
}

kernel_path_stats kernel_path::stats(owner_id owner) {
  const counters& c = counters_of(owner);
  return {c.from_source.load(), c.from_binary.load(), c.rejected.load(),       c.stored.load(),
          c.build_ns.load(),    c.load_ns.load(),     c.first_launch_ns.load()};
}

std::uint64_t first_launch_ns_this_thread() noexcept { return first_launch_ns_of_thread; }

kernel::kernel(owner_id owner, std::unique_ptr<device_program> program, std::string name, std::string store_key,
               device_identity identity, bool store_after_first_launch)
    : owner_(owner),
      program_(std::move(program)),
      name_(std::move(name)),
      store_key_(std::move(store_key)),
      identity_(std::move(identity)),
      store_pending_(store_after_first_launch) {
  cached_bytes_ = sizeof(kernel) + program_->binary_size() + name_.size() + store_key_.size();
}

kernel::~kernel() = default;

void kernel::after_first_launch(std::chrono::steady_clock::time_point start) const {
  const std::uint64_t ns = ns_since(start);
  counters& c = counters_of(owner_);
  c.first_launch_ns.fetch_add(ns, std::memory_order_relaxed);
  first_launch_ns_of_thread += ns;
  if (!store_pending_.exchange(false)) return;
  const byte_vector bin = program_->binary();
  if (!bin.empty() && kernel_store::instance().put(identity_, store_key_, bin)) {
    c.stored.fetch_add(1, std::memory_order_relaxed);
    trace("store", owner_, name_, store_key_, 0);
  }
}

std::shared_ptr<const kernel> kernel_if_cached(owner_id owner, const cache_scope& scope, const std::string& config) {
  if (auto hit = kernel_cache().lookup<const kernel>(scope, owner, config)) return hit.shared_value();
  return nullptr;
}

namespace {

using clock = std::chrono::steady_clock;

// One kernel's way from a kernel-cache miss to a kernel, run under the
// cache's single flight, in the order the kernel path tries: the caller's
// preloaded binaries, the store (with the fleet's build lease), a build from
// source. Each step counts and traces what it did.
class kernel_resolution {
 public:
  kernel_resolution(owner_id owner, const kernel_builder& builder, const kernel_source& src)
      : owner_(owner),
        builder_(builder),
        src_(src),
        key_(src.store_key()),
        identity_(builder.identity()),
        counters_(counters_of(owner)),
        refusal_(builder.load_refusal()),
        reads_(builder.reads_stored_binaries()) {}

  std::shared_ptr<const kernel> run(const std::vector<kernel_binary>& preloaded) {
    if (auto k = from_preloaded(preloaded)) return k;
    if (auto k = from_store()) return k;
    return from_source();
  }

 private:
  // A blob's binary is the application's to trust, not every user's of a
  // (possibly shared) store: a kernel loaded from it is not stored.
  std::shared_ptr<const kernel> from_preloaded(const std::vector<kernel_binary>& preloaded) {
    for (const kernel_binary& b : preloaded) {
      if (!reads_ || b.key != key_) continue;
      if (!refusal_.empty()) {
        rejected(clock::now());
        explain_refusal();
        continue;
      }
      const auto start = clock::now();
      if (auto p = builder_.load(src_, b.binary)) return loaded(std::move(p), start);
      rejected(start);
    }
    return nullptr;
  }

  // On a miss everywhere, the store grants this process the fleet's lease
  // on building the kernel (the others wait for its binary). A binary the
  // driver refuses goes, and the rebuilt one takes its place; one this
  // machine cannot run (load_refusal) stays for the machines that can.
  std::shared_ptr<const kernel> from_store() {
    if (!reads_) return nullptr;
    kernel_store& store = kernel_store::instance();
    const auto start = clock::now();
    stored_ = store.get_or_lease(identity_, key_);
    if (!stored_.binary) return nullptr;
    if (!refusal_.empty()) {
      rejected(start);
      explain_refusal();
      keep_stored_ = true;
      return nullptr;
    }
    if (auto p = builder_.load(src_, *stored_.binary)) return loaded(std::move(p), start);
    rejected(start);
    store.remove(identity_, key_);
    return nullptr;
  }

  // A builder that reads no binaries (an offline engine) builds every
  // kernel: what it keeps is what its compiler made.
  std::shared_ptr<const kernel> from_source() {
    kernel_store& store = kernel_store::instance();
    const bool explain = reads_ && !stored_.binary && explain_misses();
    const auto start = clock::now();
    std::unique_ptr<device_program> built;
    try {
      built = builder_.build(src_);
    } catch (...) {
      if (stored_.leased) store.release_lease(identity_, key_);
      throw;
    }
    const std::uint64_t ns = ns_since(start);
    counters_.build_ns.fetch_add(ns, std::memory_order_relaxed);
    counters_.from_source.fetch_add(1, std::memory_order_relaxed);
    trace("build", owner_, src_.kernel_name, key_, ns);
    const bool published = stored_.leased && publish(*built);
    if (explain) {
      // After the lease is released: the walk keeps no other process
      // waiting. (The entry just stored is not its own nearest.)
      if (const auto e = store.explain_miss(identity_, key_)) {
        print_explanation(*e);
        store.record_miss(identity_, key_);  // for `unicache-store explain`
      }
    }
    return std::make_shared<const kernel>(owner_, std::move(built), src_.kernel_name, key_, identity_,
                                          !published && !keep_stored_ && reads_);
  }

  // Others wait for a leased kernel: its binary is stored now (which ends
  // the lease), not after the first launch. One that could not be stored
  // is tried again then, as any other.
  bool publish(const device_program& built) {
    kernel_store& store = kernel_store::instance();
    bool published = false;
    try {
      const byte_vector bin = built.binary();
      published = !bin.empty() && store.put(identity_, key_, bin);
    } catch (...) {
    }
    store.release_lease(identity_, key_);  // if put did not
    if (published) {
      counters_.stored.fetch_add(1, std::memory_order_relaxed);
      trace("store", owner_, src_.kernel_name, key_, 0);
    }
    return published;
  }

  std::shared_ptr<const kernel> loaded(std::unique_ptr<device_program> p, clock::time_point start) {
    const std::uint64_t ns = ns_since(start);
    counters_.load_ns.fetch_add(ns, std::memory_order_relaxed);
    counters_.from_binary.fetch_add(1, std::memory_order_relaxed);
    trace("load", owner_, src_.kernel_name, key_, ns);
    return std::make_shared<const kernel>(owner_, std::move(p), src_.kernel_name, key_, identity_, false);
  }

  void rejected(clock::time_point start) {
    const std::uint64_t ns = ns_since(start);
    counters_.load_ns.fetch_add(ns, std::memory_order_relaxed);
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    trace("reject", owner_, src_.kernel_name, key_, ns);
  }

  void explain_refusal() const {
    miss_explanation e;
    e.what = src_.language + " " + src_.kernel_name;
    e.blob_id = blob_id(identity_, key_);
    e.refusal = refusal_;
    print_explanation(e);
  }

  const owner_id owner_;
  const kernel_builder& builder_;
  const kernel_source& src_;
  const std::string key_;
  const device_identity identity_;
  counters& counters_;
  // Refused before a load is tried: binaries for this identity that this
  // machine cannot run (a driver too old for them).
  const std::string refusal_;
  const bool reads_;
  kernel_store::lookup stored_;
  bool keep_stored_ = false;  // a stored binary this machine cannot run: the built one is not stored
};

}  // namespace

std::shared_ptr<const kernel> get_or_build_kernel(owner_id owner, const cache_scope& scope,
                                                  const kernel_builder& builder, const kernel_source& src,
                                                  const std::vector<kernel_binary>& preloaded) {
  if (auto hit = kernel_if_cached(owner, scope, src.config)) return hit;
  return kernel_cache()
      .get_or_build<const kernel>(scope, owner, src.config, kernel_bytes_estimate,  // then kernel::cached_bytes()
                                  [&] { return kernel_resolution(owner, builder, src).run(preloaded); })
      .value();
}

std::shared_ptr<const kernel> kernel_if_built(owner_id owner, const cache_scope& scope, const kernel_builder& builder,
                                              const kernel_source& src) {
  if (auto hit = kernel_if_cached(owner, scope, src.config)) return hit;
  // Looked up once more by get_or_build_kernel, under the cache's single
  // flight: a binary removed in between is built there, as any missing one.
  if (!kernel_store::instance().get(builder.identity(), src.store_key())) return nullptr;
  return get_or_build_kernel(owner, scope, builder, src, {});
}

std::vector<kernel_binary> binaries_of(std::initializer_list<const kernel*> kernels) {
  std::vector<kernel_binary> out;
  for (const kernel* k : kernels) {
    if (k) out.push_back({k->store_key(), k->binary()});
  }
  return out;
}

}  // namespace unicache
