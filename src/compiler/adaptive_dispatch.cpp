// Adaptive dispatch: each compiled shape's class in its partition's table,
// the cost model that decides when a class is specialized, and the lock-free
// choice, per execution, between the specialized and the generic kernel.
#include "compiler/adaptive_dispatch.hpp"

#include <algorithm>
#include <exception>

#include "compiler/shape_class_table.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/specialization.hpp"
#include "util/epoch.hpp"
#include "util/env.hpp"
#include "util/log.hpp"

namespace unicache::detail {
namespace {

// Families by scope and key, and each backend's build cost.
struct registry {
  mutex mu;
  absl::flat_hash_map<std::string, std::weak_ptr<class_table>> families ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<const backend*, std::unique_ptr<build_cost>> costs ABSL_GUARDED_BY(mu);
  std::size_t inserts_since_sweep ABSL_GUARDED_BY(mu) = 0;
};
registry& the_registry() {
  static registry* const r = new registry();
  return *r;
}

// The cost model (config.hpp): whether `c`, after `generic_ns` of generic
// executions, is worth building.
bool hot(const class_table& f, const class_state& c, std::uint64_t generic_ns, const specialize_settings& s) {
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
void drop_evicted(class_table& f, class_state& c, specialized_variant* v, const engine& e) {
  if (!c.variant.compare_exchange_strong(v, nullptr, std::memory_order_acq_rel)) return;
  c.generic_uses.store(0, std::memory_order_relaxed);
  c.generic_timed.store(0, std::memory_order_relaxed);
  c.generic_ns.store(0, std::memory_order_relaxed);
  f.variants.fetch_sub(1, std::memory_order_relaxed);
  stats_counters().evicted.fetch_add(1, std::memory_order_relaxed);
  trace("evicted", f, c, e, 0);
  c.status.store(class_status::cold, std::memory_order_release);
  epoch_domain::instance().retire(v, [](void* p) { delete static_cast<specialized_variant*>(p); });
}

// Drops the family's evicted variants that no execution has noticed yet (a
// class not run since), so that they no longer count against the limit.
// Skipped if another thread holds the family's lock: never waits.
void drop_unnoticed_evictions(class_table& f, const engine& e) {
  if (!f.mu.try_lock()) return;
  std::vector<std::shared_ptr<class_state>> classes;
  for (const auto& [key, c] : f.classes) classes.push_back(c);
  f.mu.unlock();
  epoch_guard guard;
  for (const auto& c : classes) {
    specialized_variant* v = c->variant.load(std::memory_order_acquire);
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

std::shared_ptr<class_table> family_for(const partition& p, const std::string& family_key, const engine& e,
                                        const compiled_kernel& generic, std::uint64_t generic_build_ns) {
  if (current_kernel_shapes() != kernel_shapes::adaptive || !e.get_backend()) return nullptr;
  registry& r = the_registry();
  if (generic.built_for_its_shapes()) {
    scoped_lock lock(&r.mu);
    record_generic_build(r, *e.get_backend(), generic_build_ns);
    return nullptr;
  }
  cache_key scoped;
  scoped.add(static_cast<std::uint8_t>(e.scope().kind)).add(e.scope().device_id).add(e.scope().context_id);
  scoped.add(family_key);
  const std::string key(scoped.bytes());
  scoped_lock lock(&r.mu);
  std::weak_ptr<class_table>& slot = r.families[key];
  if (std::shared_ptr<class_table> f = slot.lock()) return f;
  auto f = std::make_shared<class_table>();
  f->p = p;
  f->key = family_key;
  f->scope = e.scope();
  f->cost = record_generic_build(r, *e.get_backend(), generic_build_ns);
  slot = f;
  // Families of compiled partitions that are gone leave expired entries: sweep now and then.
  if (++r.inserts_since_sweep >= 256) {
    r.inserts_since_sweep = 0;
    absl::erase_if(r.families, [](const auto& entry) { return entry.second.expired(); });
  }
  return f;
}

class_ref class_in(const std::shared_ptr<class_table>& family, const engine& e, const std::vector<logical_tensor>& in,
                   const std::vector<logical_tensor>& out) {
  class_table& f = *family;
  shape_class sc = e.get_backend()->specialization_class(f.p, in, out, e);
  if (sc.key.empty()) return {};
  class_ref ref;
  ref.family = family;
  {
    scoped_lock lock(&f.mu);
    if (const auto it = f.classes.find(sc.key); it != f.classes.end()) {
      ref.cls = it->second;
      return ref;
    }
  }
  // A new class: the backend is asked once, outside the lock (it may read
  // the store); a shape of the class executed meanwhile may ask too.
  bool ready = false;
  try {
    ready = e.get_backend()->specialization_ready(f.p, in, out, e);
  } catch (...) {
    ready = false;  // then it is built as a cold class would be
  }
  // Made before the lock, so that a failed allocation leaves no empty entry.
  auto fresh = std::make_shared<class_state>();
  fresh->key = sc.key;
  fresh->description = std::move(sc.description);
  fresh->ready_to_load = ready;
  {
    scoped_lock lock(&f.mu);
    const auto [it, inserted] = f.classes.try_emplace(std::move(sc.key), fresh);
    if (inserted) stats_counters().classes.fetch_add(1, std::memory_order_relaxed);
    ref.cls = it->second;
  }
  f.has_class.store(true, std::memory_order_relaxed);
  return ref;
}

void report_class_lookup_failure(class_table& family, const engine& e, const std::string& what) {
  if (family.lookup_failure_reported.exchange(true)) return;
  warn(std::string("specialization: the backend ") + (e.get_backend() ? e.get_backend()->name() : "?") +
       " failed to name the shape class of a shape of partition " + family.p.fingerprint() + ": " + what +
       "; such shapes run on the generic kernel only");
}

bool specialization_queued() { return stats_counters().queued.load(std::memory_order_relaxed) != 0; }

namespace {

// Unlinks the class's variant `v` (which ran `kernel`) for good, with
// `status` (slower or failed); true for the one caller that did.
bool drop_variant(class_table& f, class_state& c, specialized_variant* v, const compiled_kernel* kernel, class_status status,
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
  epoch_domain::instance().retire(v, [](void* p) { delete static_cast<specialized_variant*>(p); });
  return true;
}

// One timed execution of the class's specialized kernel `kernel` (variant
// `v`). After kJudgeAfter timed executions, one check: a specialized kernel
// that runs slower than the generic one did is dropped for good, and what it
// saved or lost teaches the backend's expected saving.
void account_specialized(const class_ref& t, specialized_variant* v, const compiled_kernel* kernel, std::uint64_t ns,
                         const engine& e) {
  class_state& c = *t.cls;
  counters& n = stats_counters();
  const std::uint64_t mean = c.generic_mean_ns.load(std::memory_order_relaxed);
  if (mean) n.saved_ns.fetch_add(static_cast<std::int64_t>(mean) - static_cast<std::int64_t>(ns), std::memory_order_relaxed);
  const std::uint64_t use = c.variant_uses.fetch_add(1, std::memory_order_relaxed);
  if (use == 0 || mean == 0) return;  // the first carries one-time work
  const std::uint64_t total = c.variant_ns.fetch_add(ns, std::memory_order_relaxed) + ns;
  if (use != kJudgeAfter) return;
  class_table& f = *t.family;
  const double variant_mean = static_cast<double>(total) / kJudgeAfter;
  const double saving = std::clamp(1.0 - variant_mean / static_cast<double>(mean), -1.0, 1.0);
  f.cost->judged.fetch_add(1, std::memory_order_relaxed);
  f.cost->saving_permille.fetch_add(static_cast<std::int64_t>(saving * 1000), std::memory_order_relaxed);
  if (saving < 0) drop_variant(f, c, v, kernel, class_status::slower, e);
}

// One timed generic execution of the class, standing for `weight` of them.
void account_generic(class_state& c, std::uint64_t ns, std::uint64_t weight) {
  c.generic_timed.fetch_add(weight, std::memory_order_relaxed);
  c.generic_ns.fetch_add(ns * weight, std::memory_order_relaxed);
}

void add_pending_timing(class_state& c, class_state::pending_timing p) {
  mutex_lock lock(&c.timing_mu);
  if (c.pending_timings.size() < class_state::kMaxPendingTimings) c.pending_timings.push_back(std::move(p));
}

// Accounts the device timings of the class that are done, oldest first;
// never waits.
void read_timings(const class_ref& t, const engine& e) {
  class_state& c = *t.cls;
  std::vector<class_state::pending_timing> done;
  {
    mutex_lock lock(&c.timing_mu);
    while (!c.pending_timings.empty() && c.pending_timings.front().timer->done()) {
      done.push_back(std::move(c.pending_timings.front()));
      c.pending_timings.pop_front();
    }
  }
  for (class_state::pending_timing& p : done) {
    const std::optional<std::uint64_t> ns = p.timer->elapsed_ns();
    if (!ns) continue;  // the work failed: no time
    if (p.kernel) {
      bool current = false;
      {
        epoch_guard guard;  // the variant read is not freed meanwhile
        const specialized_variant* v = c.variant.load(std::memory_order_acquire);
        current = v == p.variant && v->kernel.get() == p.kernel.get();
      }
      if (!current) continue;  // a replaced kernel's time says nothing of the one judged now
      account_specialized(t, p.variant, p.kernel.get(), *ns, e);
    } else {
      account_generic(c, *ns, p.weight);
    }
  }
}

}  // namespace

specialized_run run_specialized(const class_ref& t, stream& s, const std::vector<tensor>& inputs,
                                const std::vector<tensor>& outputs, specialized_failure* failure) {
  class_state& c = *t.cls;
  if (c.status.load(std::memory_order_acquire) != class_status::ready) return specialized_run::not_ready;
  // The guard covers reading the variant, not running it: a reference to the
  // kernel is taken, so memory retired meanwhile (an evicted weight the
  // kernel's own allocation retries after) is not held up by an execution.
  std::shared_ptr<const compiled_kernel> kernel;
  specialized_variant* v = nullptr;
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
  // Timed while it is judged: on the device where execute() returns before
  // the device is done, else by the host's clock.
  const bool judged = c.variant_uses.load(std::memory_order_relaxed) <= kJudgeAfter;
  std::unique_ptr<device_timer> timer = judged ? s.get_engine().get_backend()->start_timer(s) : nullptr;
  const auto start = clock_type::now();
  try {
    kernel->execute(s, inputs, outputs);
  } catch (const stream_error&) {
    throw;  // earlier work on the stream failed: not this kernel's fault
  } catch (...) {
    *failure = {v, std::move(kernel), std::current_exception()};
    return specialized_run::failed;
  }
  stats_counters().specialized_executions.fetch_add(1, std::memory_order_relaxed);
  if (!judged) return specialized_run::ran;
  if (timer) {
    timer->stop(s);
    add_pending_timing(c, {std::move(timer), v, std::move(kernel)});
    read_timings(t, s.get_engine());
  } else {
    account_specialized(t, v, kernel.get(), ns_since(start), s.get_engine());
  }
  return specialized_run::ran;
}

void drop_failed(const class_ref& t, const specialized_failure& failure, const engine& e, bool answered) {
  class_state& c = *t.cls;
  if (!drop_variant(*t.family, c, failure.variant, failure.kernel.get(), class_status::failed, e)) return;
  std::string what = "an unknown exception";
  try {
    std::rethrow_exception(failure.error);
  } catch (const std::exception& err) {
    what = err.what();
  } catch (...) {
  }
  warn(std::string("specialization: the specialized kernel of partition ") + t.family->p.fingerprint() + " (" +
       quoted(c.description, 96) + ") failed to execute: " + what +
       (answered ? "; the generic kernel ran that execution again, and runs those shapes from now on"
                 : "; the outputs overlap the inputs, so that execution fails; the generic kernel runs those "
                   "shapes from now on"));
}


namespace {

// Whether the class's generic executions are timed: cold (the time decides
// when to specialize) or queued (its mean is what the specialized kernel is
// compared with). On the device, only until kGenericTimedEnough executions
// are accounted for (then counted at its mean).
bool generic_timing_wanted(const class_state& c, bool on_device) {
  const class_status status = c.status.load(std::memory_order_relaxed);
  if (status != class_status::cold && status != class_status::queued) return false;
  return !on_device || c.generic_timed.load(std::memory_order_relaxed) < kGenericTimedEnough;
}

// Starts the backend's timer on `s` and records how the backend times in
// `family` (and `cls`, if given): a device timer, or nullptr and the host's
// clock (*host_clock).
std::unique_ptr<device_timer> start_timer_learning(stream& s, class_table& family, class_state* cls, bool* host_clock) {
  std::unique_ptr<device_timer> timer = s.get_engine().get_backend()->start_timer(s);
  const class_state::timing learnt = timer ? class_state::timing::device : class_state::timing::host;
  if (cls) cls->generic_timing.store(learnt, std::memory_order_relaxed);
  family.timing.store(learnt, std::memory_order_relaxed);
  *host_clock = !timer;
  return timer;
}

}  // namespace

std::unique_ptr<device_timer> start_generic_timer(const class_ref& t, stream& s, bool* host_clock) {
  *host_clock = false;
  class_state& c = *t.cls;
  const class_state::timing timing = c.generic_timing.load(std::memory_order_relaxed);
  if (!generic_timing_wanted(c, timing == class_state::timing::device)) return nullptr;
  switch (timing) {
    case class_state::timing::host:
      *host_clock = true;
      return nullptr;
    case class_state::timing::device:
      if (c.generic_timing_turn.fetch_add(1, std::memory_order_relaxed) % kDeviceTimingEvery != 0) return nullptr;
      break;
    case class_state::timing::unknown:
      break;
  }
  return start_timer_learning(s, *t.family, &c, host_clock);
}

std::unique_ptr<device_timer> start_deferred_timer(class_table& family, stream& s, bool* host_clock) {
  *host_clock = false;
  if (!family.has_class.load(std::memory_order_relaxed)) return nullptr;  // nothing to time it for yet
  switch (family.timing.load(std::memory_order_relaxed)) {
    case class_state::timing::host:
      *host_clock = true;
      return nullptr;
    case class_state::timing::device:
      if (family.deferred_turn.fetch_add(1, std::memory_order_relaxed) % kDeviceTimingEvery != 0) return nullptr;
      break;
    case class_state::timing::unknown:
      break;
  }
  return start_timer_learning(s, family, nullptr, host_clock);
}

void record_generic(const class_ref& t, execution_time time, const stream& s, const std::vector<logical_tensor>& in,
                    const std::vector<logical_tensor>& out) {
  class_state& c = *t.cls;
  stats_counters().generic_executions.fetch_add(1, std::memory_order_relaxed);
  // A class's first execution carries one-time work (a driver's or JIT's
  // first launch, packing a weight): it is counted, not timed.
  const std::uint64_t use = c.generic_uses.fetch_add(1, std::memory_order_relaxed);
  const bool first = use == 0;
  if (time.deferred) {
    // Run before the class was known: the class learns how its backend
    // times, and a device timing counts only where start_generic_timer
    // would have started one, for itself alone (the family's turn picked
    // it, not the class's: it stands for no other execution of the class).
    const class_state::timing family_timing = t.family->timing.load(std::memory_order_relaxed);
    class_state::timing unknown = class_state::timing::unknown;
    if (family_timing != unknown) {
      c.generic_timing.compare_exchange_strong(unknown, family_timing, std::memory_order_relaxed);
    }
    if (time.device && !generic_timing_wanted(c, /*on_device=*/true)) time.device.reset();
  }
  const bool on_device = c.generic_timing.load(std::memory_order_relaxed) == class_state::timing::device;
  if (time.device) {
    if (!first) add_pending_timing(c, {std::move(time.device), nullptr, nullptr, time.deferred ? 1 : kDeviceTimingEvery});
  } else if (!first && time.host_ns) {
    account_generic(c, *time.host_ns, 1);
  } else if (on_device) {
    // Timed enough (start_generic_timer): this one counts at the mean.
    const std::uint64_t timed = c.generic_timed.load(std::memory_order_relaxed);
    if (timed >= kGenericTimedEnough) account_generic(c, c.generic_ns.load(std::memory_order_relaxed) / timed, 1);
  }
  // Only a class timed on the device has timings to read (a host-timed one,
  // the CPU, takes no lock here), and at most one in kDeviceTimingEvery
  // executions is timed: it is read at that rhythm, not at every execution
  // (each read asks the device about the oldest timing).
  if (on_device && use % kDeviceTimingEvery == 0) read_timings(t, s.get_engine());
  const std::uint64_t total = c.generic_ns.load(std::memory_order_relaxed);
  if (c.status.load(std::memory_order_relaxed) != class_status::cold) return;
  const specialize_settings settings = current_specialize_settings();
  if (settings.threads == 0 || !hot(*t.family, c, total, settings)) return;
  class_status expected = class_status::cold;
  if (!c.status.compare_exchange_strong(expected, class_status::queued, std::memory_order_acq_rel)) return;
  class_table& f = *t.family;
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
