// unicache/specialization.hpp — what adaptive kernels (kernel_shapes::adaptive,
// the default) did. For: users (statistics, tests and benchmarks).
//
// Every shape runs at once on its partition's generic kernel, and shape
// classes used enough to repay a specialized kernel get one, built in the
// background (see specialize_settings in config.hpp).
//
// compile() does not look up a shape's class: the shape's first execution
// does, once, under its table's lock (and, for a class not seen before, asks
// the backend whether its kernel is at hand, which may read the store).
// Until some class of the process has been queued for specialization no
// specialized kernel exists, and that first execution enqueues the generic
// kernel before the lookup (on a GPU the lookup then overlaps the device's
// work instead of delaying the request's first launch); afterwards the
// lookup comes first, so that a new shape of a ready class runs its
// specialized kernel at once.
//
// After that, a compiled partition reads its class without a lock: an
// execution runs the class's specialized kernel if one is ready and still
// cached, else the generic kernel; it never waits for a build. A specialized
// kernel is an entry of the kernel cache (with its measured build time as its
// cost): when the cache evicts it, its class runs on the generic kernel again,
// and may be specialized again later. A build that fails leaves its class on
// the generic kernel for good, with one warning. After 8 timed executions (its
// first is not timed) a specialized kernel is compared with the generic one it
// replaced: one that ran slower is dropped and its class stays generic, and
// the fraction saved or lost becomes the backend's expected saving.
//
// UNICACHE_VERBOSE=1 prints one line per event:
//   unicache_verbose,specialize,<event>,backend=<name>,partition=<16 hex>,class="<description>",
//       uses=<generic executions>,generic_ms=<their time>,build_ms=<time>
// with event queue (the class became hot), ready, fail, evicted, slower
// (dropped, see above), limit (UNICACHE_SPECIALIZE_MAX reached) or refused
// (the kernel cache would not hold it).
#pragma once

#include <cstdint>

namespace unicache {

// Process-wide counters, all exact.
struct specialization_stats {
  std::uint64_t classes = 0;        // shape classes seen that a specialized kernel could serve
  std::uint64_t queued = 0;         // specializations started (classes that became hot)
  std::uint64_t ready = 0;          // specialized kernels swapped in
  std::uint64_t failed = 0;         // builds that threw (their classes stay generic)
  std::uint64_t over_limit = 0;     // hot classes left generic by specialize_settings::max_variants
  std::uint64_t refused = 0;        // built, but the kernel cache would not hold them
  std::uint64_t evicted = 0;        // specialized kernels the cache evicted (classes fell back)
  std::uint64_t slower = 0;         // specialized kernels dropped for running slower than the generic one
  std::uint64_t generic_executions = 0;      // of partitions whose shapes have a class
  std::uint64_t specialized_executions = 0;
  std::uint64_t build_ns = 0;       // time the background spent building them
  // Estimated time the specialized kernels saved: for each of their
  // executions, the class's mean generic execution time minus its own.
  std::int64_t saved_ns = 0;
};
// The process's counters of adaptive kernels: specialization::stats(), as
// every component's counters are read (stats(), on the object or in the
// namespace that counts them).
namespace specialization {
specialization_stats stats();
}  // namespace specialization

// Waits until no specialization is queued or being built: for tests, and for
// benchmarks before they measure a steady state. Thread-safe; an execution
// that makes a class hot meanwhile extends the wait. Kernels a backend
// builds ahead with build_in_background (kernel_path.hpp) count too.
void wait_for_specializations();

}  // namespace unicache
