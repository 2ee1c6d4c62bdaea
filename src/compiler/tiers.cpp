#include "compiler/tiers.hpp"

#include <oneapi/tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "unicache/cache.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/tiers.hpp"
#include "util/env.hpp"
#include "util/epoch.hpp"
#include "util/log.hpp"
#include "util/mutex.hpp"
#include "util/stable_hash.hpp"

namespace unicache::detail {

// A specialized kernel as a class publishes it. The handle keeps the kernel
// alive while an execution runs it, and says whether the cache still holds it.
struct tier_variant {
  cache_handle<const compiled_kernel> kernel;
};

enum class class_status : std::uint8_t { cold, queued, ready, failed, refused, slower };

struct tier_class {
  std::string key;
  std::string description;
  bool ready_to_load = false;
  std::atomic<tier_variant*> variant{nullptr};
  std::atomic<class_status> status{class_status::cold};
  // Generic executions since the class was last (re)started cold; those timed
  // (all but the first) and their time.
  std::atomic<std::uint64_t> generic_uses{0}, generic_timed{0}, generic_ns{0};
  // Executions of the specialized kernel, and the time of those timed (all
  // but its first), for the check that it is faster.
  std::atomic<std::uint64_t> variant_uses{0}, variant_ns{0};
  // The mean generic time when the class was specialized: what a specialized
  // execution is compared with.
  std::atomic<std::uint64_t> generic_mean_ns{0};

  ~tier_class() { delete variant.load(std::memory_order_relaxed); }  // unreachable: no reader
};

// The measured cost of one backend's specializations (the cost model's estimate).
struct build_cost {
  std::atomic<std::uint64_t> count{0}, total_ns{0};
  // The longest generic build of the backend's families: the first estimate
  // (a family whose generic kernel was a cache hit measured no build).
  std::atomic<std::uint64_t> generic_build_ns{0};
  // Specialized kernels checked against their generic ones, and the sum of
  // the fractions of time they saved (in thousandths; negative: slower).
  std::atomic<std::uint64_t> judged{0};
  std::atomic<std::int64_t> saving_permille{0};
};

// Specialized executions timed before a specialized kernel is compared with
// the generic one it replaced (its first is not timed).
constexpr std::uint64_t kJudgeAfter = 8;

struct tier_family {
  partition p;
  std::string key;
  cache_scope scope;
  build_cost* cost = nullptr;  // of the family's backend; lives for the process
  std::atomic<unsigned> variants{0};  // classes queued, being built or ready
  std::atomic<bool> limit_reported{false};
  mutex mu;
  absl::flat_hash_map<std::string, std::shared_ptr<tier_class>> classes ABSL_GUARDED_BY(mu);
};

namespace {

using clock_type = std::chrono::steady_clock;

std::uint64_t ns_since(clock_type::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - start).count());
}

// What the kernel cache counts for a specialized kernel's entry (the
// backend's programs and primitives are entries of their own).
constexpr std::size_t kVariantBytes = 4096;

struct counters {
  std::atomic<std::uint64_t> classes{0}, queued{0}, ready{0}, failed{0}, over_limit{0}, refused{0}, evicted{0}, slower{0};
  std::atomic<std::uint64_t> generic_executions{0}, specialized_executions{0}, build_ns{0};
  std::atomic<std::int64_t> saved_ns{0};
};
counters& stats_counters() {
  static counters* const c = new counters();
  return *c;
}

// Families by scope and key, and each backend's build cost.
struct registry {
  mutex mu;
  absl::flat_hash_map<std::string, std::weak_ptr<tier_family>> families ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<const backend*, std::unique_ptr<build_cost>> costs ABSL_GUARDED_BY(mu);
  std::size_t inserts_since_sweep ABSL_GUARDED_BY(mu) = 0;
};
registry& the_registry() {
  static registry* const r = new registry();
  return *r;
}

// The background: a oneTBB arena of specialize_settings::threads threads at
// low priority. `pending` counts tasks queued or running; at exit, queued
// tasks are dropped and running ones are waited for (a bounded wait), so no
// build touches the driver while the process tears it down.
struct specializer {
  mutex mu;
  std::condition_variable_any idle;
  unsigned pending ABSL_GUARDED_BY(mu) = 0;
  unsigned running ABSL_GUARDED_BY(mu) = 0;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  bool stop_registered ABSL_GUARDED_BY(mu) = false;
  // When the first stop_specializing gives up waiting: later calls share it.
  std::optional<std::chrono::steady_clock::time_point> stop_deadline ABSL_GUARDED_BY(mu);
  std::unique_ptr<oneapi::tbb::task_arena> arena ABSL_GUARDED_BY(mu);
  // The process that made the arena (0: none yet). A child of fork() has no
  // workers, and its copy of `mu` may have been held by a thread that does
  // not exist there: it must not touch either.
  std::atomic<pid_t> owner{0};
};
specializer* const the_specializer_instance = new specializer();
specializer& the_specializer() { return *the_specializer_instance; }

// At exit: queued tasks are dropped; running builds end on their own, and a
// worker that oneTBB already stopped never will, hence the bound (30 s in
// all, however many times it is called). Does nothing in a child of fork().
void stop_specializing() {
  specializer& sp = the_specializer();
  const pid_t owner = sp.owner.load(std::memory_order_acquire);
  if (owner != 0 && owner != ::getpid()) return;
  scoped_lock lock(&sp.mu);
  sp.stopping = true;
  if (!sp.stop_deadline) sp.stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  const auto left = *sp.stop_deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return;
  sp.mu.wait_for(sp.idle, std::chrono::duration_cast<std::chrono::nanoseconds>(left),
                 [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return sp.running == 0; });
}

// A running build must end before the static objects it uses are destroyed.
// An atexit function runs only before the objects constructed before it was
// registered; a build creates some of its own later (a compiler's
// function-local statics, first reached in a background build: PoCL's clang
// then crashes at exit). The thread that calls exit() destroys its
// thread_local objects before any static object and any atexit function, so
// the process's initial thread (where main returns) holds this guard from
// the library's static initialization on, and so does every thread that
// queues a build (its destructor acts on the initial thread only). The atexit
// registration stays for an exit() called from another thread, which waits
// from there, after the statics created since are gone.
struct exit_guard {
  exit_guard() = default;
  exit_guard(const exit_guard&) = delete;
  exit_guard& operator=(const exit_guard&) = delete;
  ~exit_guard() {
    if (::gettid() == ::getpid()) stop_specializing();
  }
};
void hold_exit_guard() {
  static thread_local exit_guard guard;
  (void)guard;
}
// Static initialization runs on the initial thread unless the library is
// loaded later by another one (dlopen); enqueue covers that case.
const bool initial_thread_guarded = [] {
  if (::gettid() == ::getpid()) hold_exit_guard();
  return true;
}();

// unicache_verbose,tiers,<event>,backend=<name>,partition=<16 hex>,class="<description>",uses=..,generic_ms=..,build_ms=..
void trace(const char* event, const tier_family& f, const tier_class& c, const engine& e, std::uint64_t build_ns) {
  if (!verbose_lines()) return;
  char line[640];
  std::snprintf(line, sizeof line,
                "unicache_verbose,tiers,%s,backend=%s,partition=%s,class=%s,uses=%llu,generic_ms=%.3f,build_ms=%.3f",
                event, e.owner() ? e.owner()->name() : "none", f.p.fingerprint().substr(0, 16).c_str(),
                quoted(c.description, 96).c_str(),
                static_cast<unsigned long long>(c.generic_uses.load(std::memory_order_relaxed)),
                static_cast<double>(c.generic_ns.load(std::memory_order_relaxed)) / 1e6,
                static_cast<double>(build_ns) / 1e6);
  write_line(line);
}

std::string variant_key(const tier_family& f, const tier_class& c) {
  cache_key key;
  key.add("tiered-variant/1").add(f.key).add(c.key);
  return std::string(key.bytes());
}

// Builds the class's specialized kernel (on a worker of the arena) and
// publishes it.
void specialize_now(const std::shared_ptr<tier_family>& f, const std::shared_ptr<tier_class>& c, const engine& e,
                    const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out) {
  counters& n = stats_counters();
  // Whether this build is a load is decided now, not when the class was
  // made: candidates another class built meanwhile, or tiles stored before
  // an eviction, make it one; a stored choice removed since makes it a build.
  bool load = false;
  try {
    load = e.owner()->specialization_ready(f->p, in, out, e);
  } catch (...) {
    load = false;
  }
  const auto start = clock_type::now();
  cache_handle<const compiled_kernel> built;
  std::string failure;
  try {
    built = kernel_cache().get_or_build<const compiled_kernel>(
        f->scope, compiled_partition_backend_id, variant_key(*f, *c), kVariantBytes,
        [&] { return e.owner()->specialize(f->p, in, out, e); });
    if (!built) failure = "the backend returned no kernel";
  } catch (const std::exception& err) {
    failure = err.what();
  } catch (...) {
    failure = "an unknown exception";
  }
  const std::uint64_t ns = ns_since(start);
  n.build_ns.fetch_add(ns, std::memory_order_relaxed);
  if (!load) {
    // A load (the store held the choice, or the candidates were built) says
    // nothing of what building a cold class costs: milliseconds against
    // seconds on PoCL, which would make every class look worth it.
    f->cost->count.fetch_add(1, std::memory_order_relaxed);
    f->cost->total_ns.fetch_add(ns, std::memory_order_relaxed);
  }
  if (!failure.empty()) {
    c->status.store(class_status::failed, std::memory_order_release);
    f->variants.fetch_sub(1, std::memory_order_relaxed);
    n.failed.fetch_add(1, std::memory_order_relaxed);
    warn(std::string("tiered kernels: building the specialized kernel of partition ") + f->p.fingerprint() + " (" +
         e.owner()->name() + ", " + quoted(c->description, 96) + ") failed: " + failure +
         "; those shapes keep running on the generic kernel");
    trace("fail", *f, *c, e, ns);
    return;
  }
  if (!built.valid()) {
    // The kernel cache is off, or would not hold it: the cache decides what
    // stays resident, so the class stays generic.
    c->status.store(class_status::refused, std::memory_order_release);
    f->variants.fetch_sub(1, std::memory_order_relaxed);
    n.refused.fetch_add(1, std::memory_order_relaxed);
    trace("refused", *f, *c, e, ns);
    return;
  }
  const std::uint64_t timed = c->generic_timed.load(std::memory_order_relaxed);
  c->generic_mean_ns.store(timed ? c->generic_ns.load(std::memory_order_relaxed) / timed : 0, std::memory_order_relaxed);
  c->variant_uses.store(0, std::memory_order_relaxed);
  c->variant_ns.store(0, std::memory_order_relaxed);
  // Ready first, then the variant: an eviction noticed once it is published
  // puts the class back to cold after this, never before.
  c->status.store(class_status::ready, std::memory_order_release);
  c->variant.store(new tier_variant{std::move(built)}, std::memory_order_release);
  n.ready.fetch_add(1, std::memory_order_relaxed);
  trace("ready", *f, *c, e, ns);
}

void enqueue(std::shared_ptr<tier_family> f, std::shared_ptr<tier_class> c, engine e, std::vector<logical_tensor> in,
             std::vector<logical_tensor> out, unsigned threads) {
  specializer& sp = the_specializer();
  // Exiting (or the initial thread ended with pthread_exit), or a child of
  // fork(), whose arena has no workers and whose `mu` may be held by a
  // thread that does not exist there: the class goes back to cold.
  auto give_up = [&] {
    c->status.store(class_status::cold, std::memory_order_release);
    f->variants.fetch_sub(1, std::memory_order_relaxed);
  };
  const pid_t owner = sp.owner.load(std::memory_order_acquire);
  if (owner != 0 && owner != ::getpid()) return give_up();
  hold_exit_guard();  // before the lock: it may take the loader's lock
  scoped_lock lock(&sp.mu);
  if (sp.stopping) return give_up();
  if (!sp.arena) {
    sp.arena = std::make_unique<oneapi::tbb::task_arena>(static_cast<int>(threads), 0,
                                                         oneapi::tbb::task_arena::priority::low);
    sp.owner.store(::getpid(), std::memory_order_release);
  }
  if (sp.pending == 0 && !sp.stop_registered) {
    sp.stop_registered = true;
    std::atexit(&stop_specializing);
  }
  ++sp.pending;
  struct job {
    std::shared_ptr<tier_family> f;
    std::shared_ptr<tier_class> c;
    engine e;
    std::vector<logical_tensor> in, out;
  };
  auto j = std::make_shared<job>(job{std::move(f), std::move(c), std::move(e), std::move(in), std::move(out)});
  sp.arena->enqueue([j] {
    specializer& s = the_specializer();
    {
      scoped_lock l(&s.mu);
      if (s.stopping) {
        // The process is exiting: the job's engine, kernels and driver
        // objects are left to the exit rather than destroyed on a worker
        // while the drivers are torn down.
        static auto* const left = new std::vector<std::shared_ptr<job>>();
        left->push_back(j);
        --s.pending;
        s.idle.notify_all();
        return;
      }
      ++s.running;
    }
    specialize_now(j->f, j->c, j->e, j->in, j->out);
    *j = job{};  // free what the task holds before it says it is done
    scoped_lock l(&s.mu);
    --s.running;
    --s.pending;
    s.idle.notify_all();
  });
}

// The cost model (config.hpp): whether `c`, after `generic_ns` of generic
// executions, is worth building.
bool hot(const tier_family& f, const tier_class& c, std::uint64_t generic_ns, const specialize_settings& s) {
  if (c.ready_to_load) return true;
  // The saving to expect: what the backend's checked specializations saved
  // (at least 5%, at most 90%), else the setting.
  const std::uint64_t judged = f.cost->judged.load(std::memory_order_relaxed);
  const double saving =
      judged ? std::clamp(static_cast<double>(f.cost->saving_permille.load(std::memory_order_relaxed)) / 1000.0 / judged,
                          0.05, 0.9)
             : s.expected_saving;
  const std::uint64_t builds = f.cost->count.load(std::memory_order_relaxed);
  const double build_ns = builds ? static_cast<double>(f.cost->total_ns.load(std::memory_order_relaxed)) / builds
                                 : static_cast<double>(f.cost->generic_build_ns.load(std::memory_order_relaxed));
  return static_cast<double>(generic_ns) * saving >= s.threshold * build_ns;
}

// The class's variant `v`, which the cache evicted: back to the generic
// kernel (cold again, counted from zero). Whoever unlinks it retires it.
void drop_evicted(tier_family& f, tier_class& c, tier_variant* v, const engine& e) {
  if (!c.variant.compare_exchange_strong(v, nullptr, std::memory_order_acq_rel)) return;
  c.generic_uses.store(0, std::memory_order_relaxed);
  c.generic_timed.store(0, std::memory_order_relaxed);
  c.generic_ns.store(0, std::memory_order_relaxed);
  f.variants.fetch_sub(1, std::memory_order_relaxed);
  stats_counters().evicted.fetch_add(1, std::memory_order_relaxed);
  trace("evicted", f, c, e, 0);
  c.status.store(class_status::cold, std::memory_order_release);
  epoch_domain::instance().retire(v, [](void* p) { delete static_cast<tier_variant*>(p); });
}

// Drops the family's evicted variants that no execution has noticed yet (a
// class not run since), so that they no longer count against the limit.
// Skipped if another thread holds the family's lock: never waits.
void drop_unnoticed_evictions(tier_family& f, const engine& e) {
  if (!f.mu.try_lock()) return;
  std::vector<std::shared_ptr<tier_class>> classes;
  for (const auto& [key, c] : f.classes) classes.push_back(c);
  f.mu.unlock();
  epoch_guard guard;
  for (const auto& c : classes) {
    tier_variant* v = c->variant.load(std::memory_order_acquire);
    if (v && !v->kernel.valid()) drop_evicted(f, *c, v, e);
  }
}

// Keeps the longest generic build of `b`; returns its build cost record.
build_cost* record_generic_build(registry& r, const backend& b, std::uint64_t generic_build_ns)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  std::unique_ptr<build_cost>& cost = r.costs[&b];
  if (!cost) cost = std::make_unique<build_cost>();
  std::uint64_t longest = cost->generic_build_ns.load(std::memory_order_relaxed);
  while (generic_build_ns > longest &&
         !cost->generic_build_ns.compare_exchange_weak(longest, generic_build_ns, std::memory_order_relaxed)) {
  }
  return cost.get();
}

}  // namespace

tier_ref tier_for(const partition& p, const std::string& family_key, const engine& e,
                  const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
                  const compiled_kernel& generic, std::uint64_t generic_build_ns) {
  if (current_kernel_shapes() != kernel_shapes::tiered || !e.owner()) return {};
  registry& r = the_registry();
  if (generic.built_for_its_shapes()) {
    scoped_lock lock(&r.mu);
    record_generic_build(r, *e.owner(), generic_build_ns);
    return {};
  }
  shape_class sc = e.owner()->specialization_class(p, in, out, e);
  if (sc.key.empty()) return {};
  cache_key scoped;
  scoped.add(static_cast<std::uint8_t>(e.scope().kind)).add(e.scope().device_id).add(e.scope().context_id);
  scoped.add(family_key);
  const std::string key(scoped.bytes());

  tier_ref ref;
  {
    scoped_lock lock(&r.mu);
    std::weak_ptr<tier_family>& slot = r.families[key];
    ref.family = slot.lock();
    if (!ref.family) {
      auto f = std::make_shared<tier_family>();
      f->p = p;
      f->key = family_key;
      f->scope = e.scope();
      f->cost = record_generic_build(r, *e.owner(), generic_build_ns);
      slot = f;
      ref.family = std::move(f);
      // Families of compiled partitions that are gone leave expired entries: sweep now and then.
      if (++r.inserts_since_sweep >= 256) {
        r.inserts_since_sweep = 0;
        absl::erase_if(r.families, [](const auto& entry) { return entry.second.expired(); });
      }
    }
  }
  tier_family& f = *ref.family;
  {
    scoped_lock lock(&f.mu);
    if (const auto it = f.classes.find(sc.key); it != f.classes.end()) {
      ref.cls = it->second;
      return ref;
    }
  }
  // A new class: the backend is asked once, outside the lock (it may read
  // the store); a shape of the class compiled meanwhile may ask too.
  bool ready = false;
  try {
    ready = e.owner()->specialization_ready(p, in, out, e);
  } catch (...) {
    ready = false;  // then it is built as a cold class would be
  }
  scoped_lock lock(&f.mu);
  std::shared_ptr<tier_class>& c = f.classes[sc.key];
  if (!c) {
    c = std::make_shared<tier_class>();
    c->key = std::move(sc.key);
    c->description = std::move(sc.description);
    c->ready_to_load = ready;
    stats_counters().classes.fetch_add(1, std::memory_order_relaxed);
  }
  ref.cls = c;
  return ref;
}

namespace {

// Unlinks the class's variant `v` (which ran `kernel`) for good, with
// `status` (slower or failed); true for the one caller that did.
bool drop_variant(tier_family& f, tier_class& c, tier_variant* v, const compiled_kernel* kernel, class_status status,
                  const engine& e) {
  epoch_guard guard;  // `v` is compared again: it must not have been freed and reused meanwhile
  if (c.variant.load(std::memory_order_acquire) != v || v->kernel.get() != kernel ||
      !c.variant.compare_exchange_strong(v, nullptr, std::memory_order_acq_rel)) {
    return false;
  }
  c.status.store(status, std::memory_order_release);
  f.variants.fetch_sub(1, std::memory_order_relaxed);
  counters& n = stats_counters();
  (status == class_status::slower ? n.slower : n.failed).fetch_add(1, std::memory_order_relaxed);
  trace(status == class_status::slower ? "slower" : "fail", f, c, e, 0);
  epoch_domain::instance().retire(v, [](void* p) { delete static_cast<tier_variant*>(p); });
  return true;
}

}  // namespace

specialized_run run_specialized(const tier_ref& t, stream& s, const std::vector<tensor>& inputs,
                                const std::vector<tensor>& outputs, specialized_failure* failure) {
  tier_class& c = *t.cls;
  if (c.status.load(std::memory_order_acquire) != class_status::ready) return specialized_run::not_ready;
  // The guard covers reading the variant, not running it: a reference to the
  // kernel is taken, so memory retired meanwhile (an evicted weight the
  // kernel's own allocation retries after) is not held up by an execution.
  std::shared_ptr<const compiled_kernel> kernel;
  tier_variant* v = nullptr;
  {
    epoch_guard guard;
    v = c.variant.load(std::memory_order_acquire);
    if (v == nullptr) return specialized_run::not_ready;
    if (!v->kernel.valid()) {
      drop_evicted(*t.family, c, v, s.get_engine());
      return specialized_run::not_ready;
    }
    kernel = v->kernel.value();
  }
  const auto start = clock_type::now();
  try {
    kernel->execute(s, inputs, outputs);
  } catch (...) {
    *failure = {v, std::move(kernel), std::current_exception()};
    return specialized_run::failed;
  }
  const std::uint64_t ns = ns_since(start);
  counters& n = stats_counters();
  n.specialized_executions.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t mean = c.generic_mean_ns.load(std::memory_order_relaxed);
  if (mean) n.saved_ns.fetch_add(static_cast<std::int64_t>(mean) - static_cast<std::int64_t>(ns), std::memory_order_relaxed);
  // After kJudgeAfter timed executions, one check: a specialized kernel that
  // runs slower than the generic one did is dropped for good, and what it
  // saved or lost teaches the backend's expected saving.
  const std::uint64_t use = c.variant_uses.fetch_add(1, std::memory_order_relaxed);
  if (use == 0 || mean == 0) return specialized_run::ran;
  const std::uint64_t total = c.variant_ns.fetch_add(ns, std::memory_order_relaxed) + ns;
  if (use != kJudgeAfter) return specialized_run::ran;
  tier_family& f = *t.family;
  const double variant_mean = static_cast<double>(total) / kJudgeAfter;
  const double saving = std::clamp(1.0 - variant_mean / static_cast<double>(mean), -1.0, 1.0);
  f.cost->judged.fetch_add(1, std::memory_order_relaxed);
  f.cost->saving_permille.fetch_add(static_cast<std::int64_t>(saving * 1000), std::memory_order_relaxed);
  if (saving < 0) drop_variant(f, c, v, kernel.get(), class_status::slower, s.get_engine());
  return specialized_run::ran;
}

void drop_failed(const tier_ref& t, const specialized_failure& failure, const engine& e, bool answered) {
  tier_class& c = *t.cls;
  if (!drop_variant(*t.family, c, failure.variant, failure.kernel.get(), class_status::failed, e)) return;
  std::string what = "an unknown exception";
  try {
    std::rethrow_exception(failure.error);
  } catch (const std::exception& err) {
    what = err.what();
  } catch (...) {
  }
  warn(std::string("tiered kernels: the specialized kernel of partition ") + t.family->p.fingerprint() + " (" +
       quoted(c.description, 96) + ") failed to execute: " + what +
       (answered ? "; the generic kernel ran that execution again, and runs those shapes from now on"
                 : "; the outputs overlap the inputs, so that execution fails; the generic kernel runs those "
                   "shapes from now on"));
}


void record_generic(const tier_ref& t, std::uint64_t ns, const stream& s, const std::vector<logical_tensor>& in,
                    const std::vector<logical_tensor>& out) {
  tier_class& c = *t.cls;
  stats_counters().generic_executions.fetch_add(1, std::memory_order_relaxed);
  // A class's first execution carries one-time work (a driver's or JIT's
  // first launch, packing a weight): it is counted, not timed.
  const bool first = c.generic_uses.fetch_add(1, std::memory_order_relaxed) == 0;
  if (!first) c.generic_timed.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t total = c.generic_ns.fetch_add(first ? 0 : ns, std::memory_order_relaxed) + (first ? 0 : ns);
  if (c.status.load(std::memory_order_relaxed) != class_status::cold) return;
  const specialize_settings settings = current_specialize_settings();
  if (settings.threads == 0 || !hot(*t.family, c, total, settings)) return;
  class_status expected = class_status::cold;
  if (!c.status.compare_exchange_strong(expected, class_status::queued, std::memory_order_acq_rel)) return;
  tier_family& f = *t.family;
  if (f.variants.load(std::memory_order_relaxed) >= settings.max_variants) drop_unnoticed_evictions(f, s.get_engine());
  if (f.variants.fetch_add(1, std::memory_order_relaxed) >= settings.max_variants) {
    f.variants.fetch_sub(1, std::memory_order_relaxed);
    // Cold again: a variant of the partition may be evicted and free a place.
    c.status.store(class_status::cold, std::memory_order_release);
    c.generic_uses.store(0, std::memory_order_relaxed);
    c.generic_timed.store(0, std::memory_order_relaxed);
    c.generic_ns.store(0, std::memory_order_relaxed);
    stats_counters().over_limit.fetch_add(1, std::memory_order_relaxed);
    if (!f.limit_reported.exchange(true)) trace("limit", f, c, s.get_engine(), 0);
    return;
  }
  stats_counters().queued.fetch_add(1, std::memory_order_relaxed);
  trace("queue", f, c, s.get_engine(), 0);
  enqueue(t.family, t.cls, s.get_engine(), in, out, settings.threads);
}

}  // namespace unicache::detail

namespace unicache {

tier_stats tiered_kernel_stats() {
  const detail::counters& n = detail::stats_counters();
  tier_stats s;
  s.classes = n.classes.load();
  s.queued = n.queued.load();
  s.ready = n.ready.load();
  s.failed = n.failed.load();
  s.over_limit = n.over_limit.load();
  s.refused = n.refused.load();
  s.evicted = n.evicted.load();
  s.slower = n.slower.load();
  s.generic_executions = n.generic_executions.load();
  s.specialized_executions = n.specialized_executions.load();
  s.build_ns = n.build_ns.load();
  s.saved_ns = n.saved_ns.load();
  return s;
}

void wait_for_specializations() {
  detail::specializer& sp = detail::the_specializer();
  detail::scoped_lock lock(&sp.mu);
  sp.mu.wait(sp.idle, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return sp.pending == 0; });
}

}  // namespace unicache
