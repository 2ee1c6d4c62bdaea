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

kernel_path_stats kernel_stats(owner_id owner) {
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

std::shared_ptr<const kernel> cached_kernel(owner_id owner, const cache_scope& scope, const std::string& config) {
  if (auto hit = kernel_cache().lookup<const kernel>(scope, owner, config)) return hit.shared_value();
  return nullptr;
}

std::shared_ptr<const kernel> get_kernel(owner_id owner, const cache_scope& scope, const kernel_builder& builder,
                                         const kernel_source& src, const std::vector<kernel_binary>& preloaded) {
  if (auto hit = cached_kernel(owner, scope, src.config)) return hit;
  return kernel_cache()
      .get_or_build<const kernel>(
          scope, owner, src.config, kernel_bytes_estimate,  // then kernel::cached_bytes()
          [&]() -> std::shared_ptr<const kernel> {
            const std::string key = src.store_key();
            const device_identity identity = builder.identity();
            counters& c = counters_of(owner);
            auto loaded = [&](std::unique_ptr<device_program> p, std::chrono::steady_clock::time_point start,
                              bool store_after_launch) {
              const std::uint64_t ns = ns_since(start);
              c.load_ns.fetch_add(ns, std::memory_order_relaxed);
              c.from_binary.fetch_add(1, std::memory_order_relaxed);
              trace("load", owner, src.kernel_name, key, ns);
              return std::make_shared<const kernel>(owner, std::move(p), src.kernel_name, key, identity,
                                                    store_after_launch);
            };
            auto rejected = [&](std::chrono::steady_clock::time_point start) {
              const std::uint64_t ns = ns_since(start);
              c.load_ns.fetch_add(ns, std::memory_order_relaxed);
              c.rejected.fetch_add(1, std::memory_order_relaxed);
              trace("reject", owner, src.kernel_name, key, ns);
            };
            // Refused before a load is tried: binaries for this identity
            // that this machine cannot run (a driver too old for them).
            const std::string refusal = builder.load_refusal();
            auto explain_refusal = [&] {
              miss_explanation e;
              e.what = src.language + " " + src.kernel_name;
              e.blob_id = blob_id(identity, key);
              e.refusal = refusal;
              print_explanation(e);
            };
            // A builder that reads no binaries (an offline engine) builds
            // every kernel: what it keeps is what its compiler made.
            const bool reads = builder.reads_stored_binaries();
            for (const kernel_binary& b : preloaded) {
              if (!reads || b.key != key) continue;
              if (!refusal.empty()) {
                rejected(std::chrono::steady_clock::now());
                explain_refusal();
                continue;
              }
              const auto start = std::chrono::steady_clock::now();
              // Not stored: a blob is the application's to trust, not every
              // user's of a (possibly shared) store.
              if (auto p = builder.load(src, b.binary)) return loaded(std::move(p), start, false);
              rejected(start);
            }
            kernel_store& store = kernel_store::instance();
            const auto load_start = std::chrono::steady_clock::now();
            // On a miss everywhere, the fleet's lease on building it: one
            // process builds, the others wait for its binary.
            kernel_store::lookup stored = reads ? store.get_or_lease(identity, key) : kernel_store::lookup{};
            // A binary this machine cannot run stays where it is (machines
            // that can run it use it); the one built here is not stored.
            bool keep_stored = false;
            if (stored.binary) {
              if (refusal.empty()) {
                if (auto p = builder.load(src, *stored.binary)) return loaded(std::move(p), load_start, false);
                // The driver refused the image itself: it goes, and the
                // rebuilt binary takes its place.
                rejected(load_start);
                store.remove(identity, key);
              } else {
                rejected(load_start);
                explain_refusal();
                keep_stored = true;
              }
            }
            const bool explain = reads && !stored.binary && explain_misses();
            const auto build_start = std::chrono::steady_clock::now();
            std::unique_ptr<device_program> built;
            try {
              built = builder.build(src);
            } catch (...) {
              if (stored.leased) store.release_lease(identity, key);
              throw;
            }
            const std::uint64_t ns = ns_since(build_start);
            c.build_ns.fetch_add(ns, std::memory_order_relaxed);
            c.from_source.fetch_add(1, std::memory_order_relaxed);
            trace("build", owner, src.kernel_name, key, ns);
            bool published = false;
            if (stored.leased) {
              // Others wait for it: stored now (which ends the lease), not
              // after the first launch. A binary that could not be stored
              // is tried again then, as any other.
              try {
                const byte_vector bin = built->binary();
                published = !bin.empty() && store.put(identity, key, bin);
              } catch (...) {
              }
              store.release_lease(identity, key);  // if put did not
              if (published) {
                c.stored.fetch_add(1, std::memory_order_relaxed);
                trace("store", owner, src.kernel_name, key, 0);
              }
            }
            if (explain) {
              // After the lease is released: the walk keeps no other
              // process waiting. (The entry just stored is not its own nearest.)
              if (const auto e = store.explain_miss(identity, key)) {
                print_explanation(*e);
                store.record_miss(identity, key);  // for `unicache-store explain`
              }
            }
            return std::make_shared<const kernel>(owner, std::move(built), src.kernel_name, key, identity,
                                                  !published && !keep_stored && reads);
          })
      .value();
}

std::shared_ptr<const kernel> find_kernel(owner_id owner, const cache_scope& scope, const kernel_builder& builder,
                                          const kernel_source& src) {
  if (auto hit = cached_kernel(owner, scope, src.config)) return hit;
  // Looked up once more by get_kernel, under the cache's single flight: a
  // binary removed in between is built there, as any missing one.
  if (!kernel_store::instance().get(builder.identity(), src.store_key())) return nullptr;
  return get_kernel(owner, scope, builder, src, {});
}

std::vector<kernel_binary> binaries_of(std::initializer_list<const kernel*> kernels) {
  std::vector<kernel_binary> out;
  for (const kernel* k : kernels) {
    if (k) out.push_back({k->store_key(), k->binary()});
  }
  return out;
}

}  // namespace unicache
