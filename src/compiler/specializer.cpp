// The specializer: the low-priority oneTBB arena that builds specialized
// kernels in the background, its orderly stop at exit, and what it counts.
#include <oneapi/tbb/task_arena.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>

#include "compiler/shape_class_table.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/kernel_path.hpp"
#include "unicache/specialization.hpp"
#include "util/env.hpp"
#include "util/log.hpp"

namespace unicache::detail {

counters& stats_counters() {
  static counters* const c = new counters();
  return *c;
}

namespace {

// What the kernel cache counts for a specialized kernel's entry (the
// backend's programs and primitives are entries of their own).
constexpr std::size_t kVariantBytes = 4096;

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


std::string variant_key(const class_table& f, const class_state& c) {
  cache_key key;
  key.add("specialized-variant/1").add(f.key).add(c.key);
  return std::string(key.bytes());
}


// Builds the class's specialized kernel (on a worker of the arena) and
// publishes it.
void specialize_now(const std::shared_ptr<class_table>& f, const std::shared_ptr<class_state>& c, const engine& e,
                    const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out) {
  counters& n = stats_counters();
  // Whether this build is a load is decided now, not when the class was
  // made: candidates another class built meanwhile, or tiles stored before
  // an eviction, make it one; a stored choice removed since makes it a build.
  bool load = false;
  try {
    load = e.get_backend()->specialization_ready(f->p, in, out, e);
  } catch (...) {
    load = false;
  }
  const auto start = clock_type::now();
  cache_handle<const compiled_kernel> built;
  std::string failure;
  try {
    built = kernel_cache().get_or_build<const compiled_kernel>(
        f->scope, compiled_partition_owner, variant_key(*f, *c), kVariantBytes,
        [&] { return e.get_backend()->specialize(f->p, in, out, e); });
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
    warn(std::string("specialization: building the specialized kernel of partition ") + f->p.fingerprint() + " (" +
         e.get_backend()->name() + ", " + quoted(c->description, 96) + ") failed: " + failure +
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
  c->variant.store(new specialized_variant{std::move(built)}, std::memory_order_release);
  n.ready.fetch_add(1, std::memory_order_relaxed);
  trace("ready", *f, *c, e, ns);
}

}  // namespace

// unicache_verbose,specialize,<event>,backend=<name>,partition=<16 hex>,class="<description>",uses=..,generic_ms=..,build_ms=..
void trace(const char* event, const class_table& f, const class_state& c, const engine& e, std::uint64_t build_ns) {
  if (!verbose_lines()) return;
  char line[640];
  std::snprintf(line, sizeof line,
                "unicache_verbose,specialize,%s,backend=%s,partition=%s,class=%s,uses=%llu,generic_ms=%.3f,build_ms=%.3f",
                event, e.get_backend() ? e.get_backend()->name() : "none", f.p.fingerprint().substr(0, 16).c_str(),
                quoted(c.description, 96).c_str(),
                static_cast<unsigned long long>(c.generic_uses.load(std::memory_order_relaxed)),
                static_cast<double>(c.generic_ns.load(std::memory_order_relaxed)) / 1e6,
                static_cast<double>(build_ns) / 1e6);
  write_line(line);
}

// Queues `task` on the arena (made at the first call, with `threads`
// workers); false, queuing nothing, in a child of fork() (whose arena has no
// workers and whose `mu` may be held by a thread that does not exist there),
// while the process exits, or without memory or a thread to be had.
bool queue_task(std::function<void()> task, unsigned threads) {
  specializer& sp = the_specializer();
  const pid_t owner = sp.owner.load(std::memory_order_acquire);
  if (owner != 0 && owner != ::getpid()) return false;
  hold_exit_guard();  // before the lock: it may take the loader's lock
  scoped_lock lock(&sp.mu);
  if (sp.stopping) return false;
  try {
    if (!sp.arena) {
      sp.arena = std::make_unique<oneapi::tbb::task_arena>(static_cast<int>(threads), 0,
                                                           oneapi::tbb::task_arena::priority::low);
      sp.owner.store(::getpid(), std::memory_order_release);
    }
    if (sp.pending == 0 && !sp.stop_registered) {
      sp.stop_registered = true;
      std::atexit(&stop_specializing);
    }
    auto t = std::make_shared<std::function<void()>>(std::move(task));
    // Counted once queued: the task takes `mu` before it counts itself
    // done, so it cannot do so before this.
    sp.arena->enqueue([t] {
      specializer& s = the_specializer();
      {
        scoped_lock l(&s.mu);
        if (s.stopping) {
          // The process is exiting: what the task holds (engines, kernels,
          // driver objects) is left to the exit rather than destroyed on a
          // worker while the drivers are torn down.
          static auto* const left = new std::vector<std::shared_ptr<std::function<void()>>>();
          left->push_back(t);
          --s.pending;
          s.idle.notify_all();
          return;
        }
        ++s.running;
      }
      try {
        (*t)();
      } catch (...) {
        // A task reports its own failures; nothing may leave a worker.
      }
      *t = nullptr;  // free what the task holds before it says it is done
      scoped_lock l(&s.mu);
      --s.running;
      --s.pending;
      s.idle.notify_all();
    });
    ++sp.pending;
    return true;
  } catch (...) {
    return false;  // nothing was queued, and nothing waits for it
  }
}

void enqueue(std::shared_ptr<class_table> f, std::shared_ptr<class_state> c, engine e, std::vector<logical_tensor> in,
             std::vector<logical_tensor> out, unsigned threads) {
  const bool queued = queue_task(
      [f, c, e = std::move(e), in = std::move(in), out = std::move(out)] { specialize_now(f, c, e, in, out); },
      threads);
  if (!queued) {
    // The class goes back to cold, and may try again later.
    c->status.store(class_status::cold, std::memory_order_release);
    f->variants.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace unicache::detail

namespace unicache {

specialization_stats specialization::stats() {
  const detail::counters& n = detail::stats_counters();
  specialization_stats s;
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

bool build_in_background(std::function<void()> task) {
  const unsigned threads = current_specialize_settings().threads;
  return threads > 0 && detail::queue_task(std::move(task), threads);
}

void wait_for_specializations() {
  detail::specializer& sp = detail::the_specializer();
  detail::scoped_lock lock(&sp.mu);
  sp.mu.wait(sp.idle, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return sp.pending == 0; });
}

}  // namespace unicache
