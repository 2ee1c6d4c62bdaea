// Splitting a loop over the CPU backend's threads: the ones oneDNN runs on.
#pragma once

#include <algorithm>
#include <cstdint>

#if UNICACHE_CPU_OPENMP
#include <omp.h>
#else
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#endif

namespace unicache::onednn_cpu::detail {

// Calls body(first, last) over [0, n) in ranges of about `grain` or more
// (first < last), in parallel, and returns when all are done. `body` must
// not throw. Where this build uses GCC's OpenMP (UNICACHE_CPU_OPENMP), as
// Debian's oneDNN does, the ranges run on the OpenMP threads oneDNN's
// primitives run on: a second pool of busy-waiting threads beside oneDNN's
// would take cores from its next primitive. Elsewhere (oneDNN on another
// runtime, or a clang build), on oneTBB's threads. A call from several
// threads at once is safe; each runs its own ranges, with OpenMP on a team of
// its own (as each thread's oneDNN primitives do).
template <class Body>
void parallel_ranges(std::int64_t n, std::int64_t grain, const Body& body) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(1, grain);
#if UNICACHE_CPU_OPENMP
  const std::int64_t most = (n + grain - 1) / grain;
  const std::int64_t chunks = std::min<std::int64_t>(most, std::int64_t{4} * omp_get_max_threads());
  if (chunks <= 1) {
    body(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) body(c * n / chunks, (c + 1) * n / chunks);
#else
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<std::int64_t>& r) { body(r.begin(), r.end()); });
#endif
}

}  // namespace unicache::onednn_cpu::detail
