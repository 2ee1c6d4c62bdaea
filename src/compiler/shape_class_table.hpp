// The state that adaptive dispatch (adaptive_dispatch.cpp) and the background
// specializer (specializer.cpp) share: a compiled partition's table of shape
// classes, each class's counters and published variant, the backends' build
// costs, and the process-wide counters of specialization_stats.
#pragma once

#include <atomic>
#include <deque>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "compiler/adaptive_dispatch.hpp"
#include "unicache/cache.hpp"
#include "util/mutex.hpp"

namespace unicache::detail {

// A specialized kernel as a class publishes it. The handle keeps the kernel
// alive while an execution runs it, and says whether the cache still holds it.
struct specialized_variant {
  cache_handle<const compiled_kernel> kernel;
};

enum class class_status : std::uint8_t { cold, queued, ready, failed, refused, slower };

struct class_state {
  std::string key;
  std::string description;
  bool ready_to_load = false;
  std::atomic<specialized_variant*> variant{nullptr};
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
  // Executions timed on the device (a backend whose execute() returns before
  // the device is done) whose time is not read yet, oldest first: generic
  // ones (no variant) and the specialized kernel's (which it holds).
  struct pending_timing {
    std::unique_ptr<device_timer> timer;
    specialized_variant* variant = nullptr;  // compared, never dereferenced
    std::shared_ptr<const compiled_kernel> kernel;
    std::uint64_t weight = 1;  // the generic executions it stands for (one in kDeviceTimingEvery is timed)
  };
  // How the backend times this class's generic executions: not known yet,
  // on the device (sampled), or by the host's clock (every one).
  enum class timing : std::uint8_t { unknown, device, host };
  std::atomic<timing> generic_timing{timing::unknown};
  std::atomic<std::uint64_t> generic_timing_turn{0};
  static constexpr std::size_t kMaxPendingTimings = 64;  // beyond: executions go untimed
  mutex timing_mu;
  std::deque<pending_timing> pending_timings ABSL_GUARDED_BY(timing_mu);

  ~class_state() { delete variant.load(std::memory_order_relaxed); }  // unreachable: no reader
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

// A cold class's generic executions timed on the device: one in this many
// (two timed events cost microseconds per execution), each standing for all.
constexpr std::uint64_t kDeviceTimingEvery = 8;

// Generic executions a class's device timings stand for, after which its
// mean is taken as known: later generic executions are counted at that mean
// and not timed (8 samples, as many as a specialized kernel is judged by;
// the events and the reads of them cost microseconds per execution for as
// long as timing goes on).
constexpr std::uint64_t kGenericTimedEnough = 8 * kDeviceTimingEvery;

// Specialized executions timed before a specialized kernel is compared with
// the generic one it replaced (its first is not timed).
constexpr std::uint64_t kJudgeAfter = 8;

struct class_table {
  partition p;
  std::string key;
  cache_scope scope;
  build_cost* cost = nullptr;  // of the family's backend; lives for the process
  // How the backend times generic executions (learnt at the first timed
  // one), for the first executions of shapes whose class is not known yet,
  // and whose turn it is to be timed on the device (start_deferred_timer).
  std::atomic<class_state::timing> timing{class_state::timing::unknown};
  std::atomic<std::uint64_t> deferred_turn{0};
  // Whether any shape of the table has a class: until one does, such first
  // executions are not timed (a partition with no specialized kernel, such
  // as an elementwise one, never is).
  std::atomic<bool> has_class{false};
  std::atomic<bool> lookup_failure_reported{false};
  std::atomic<unsigned> variants{0};  // classes queued, being built or ready
  std::atomic<bool> limit_reported{false};
  mutex mu;
  absl::flat_hash_map<std::string, std::shared_ptr<class_state>> classes ABSL_GUARDED_BY(mu);
};


using clock_type = std::chrono::steady_clock;
inline std::uint64_t ns_since(clock_type::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - start).count());
}

// What specialization::stats() reports.
struct counters {
  std::atomic<std::uint64_t> classes{0}, queued{0}, ready{0}, failed{0}, over_limit{0}, refused{0}, evicted{0}, slower{0};
  std::atomic<std::uint64_t> generic_executions{0}, specialized_executions{0}, build_ns{0};
  std::atomic<std::int64_t> saved_ns{0};
};
counters& stats_counters();

// One line of UNICACHE_VERBOSE for an event of class `c` of table `f`.
void trace(const char* event, const class_table& f, const class_state& c, const engine& e, std::uint64_t build_ns);

// Queues the build of class `c`'s specialized kernel for the shapes `in` ->
// `out` on `e`, on the background arena of `threads` threads (made at the
// first call). The class must be queued and counted in f->variants; when the
// process is exiting (or is a child of fork()) it goes back to cold instead.
void enqueue(std::shared_ptr<class_table> f, std::shared_ptr<class_state> c, engine e, std::vector<logical_tensor> in,
             std::vector<logical_tensor> out, unsigned threads);

}  // namespace unicache::detail
