// bench_tiers_interleaved: tiered kernels (the default mode) against
// shape-agnostic kernels in one process, request by request, on the CPU.
//
// bench_dynamic_shapes runs each mode in a fresh process. On a many-core
// host the p50 of the same mode moves by about 10% from one process to the
// next, as much as specialization can gain, so comparing two processes
// says little. Here both modes serve the same trace (bench_dynamic_shapes'
// BERT-layer workload) in one process, alternating request by request, the
// order alternating too. Warm-up passes first let the tiered mode build its
// classes (--threshold 0, the default here: every class at its first use)
// and run most specialized kernels' checks against the generic one. Builds
// may still start during the timed rounds (a class freed by a dropped
// kernel, one over the variant limit); the counters printed for the timed
// rounds say how many. A request costs what it costs in
// bench_dynamic_shapes: its six compile() calls and executions.
//
// It prints each mode's p50 (nearest rank, as bench_dynamic_shapes) and
// mean, their ratio, the median of the per-request ratios (tiered /
// agnostic), and the tiers' counters.
//
//   bench_tiers_interleaved [--requests N] [--seed S] [--max-batch B]
//       [--max-seq L] [--hidden H] [--ffn F] [--warm-passes P] [--rounds R]
//       [--threshold T]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "dynamic_shapes_workload.hpp"
#include "unicache/config.hpp"
#include "unicache/tiers.hpp"

namespace {

using namespace unicache;
using namespace unicache::bench;

struct options {
  int requests = 400;
  unsigned seed = 99;
  int max_batch = 8;
  int max_seq = 512;
  std::int64_t hidden = 768;
  std::int64_t ffn = 3072;
  int warm_passes = 2;
  int rounds = 2;
  double threshold = 0;
};

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// Every value is a finite number; sizes and counts are whole numbers in
// the ranges bench_dynamic_shapes accepts.
bool parse(int argc, char** argv, options& o) {
  if (argc % 2 != 1) return false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* text = argv[i + 1];
    char* end = nullptr;
    const double v = std::strtod(text, &end);
    if (end == text || *end != '\0' || !std::isfinite(v)) return false;
    if (a == "--threshold") {
      if (v < 0 || v > 1e6) return false;
      o.threshold = v;
      continue;
    }
    const auto whole = [&](double lo, double hi) { return v == std::floor(v) && v >= lo && v <= hi; };
    if (a == "--seed" && whole(0, 4294967295.0)) {
      o.seed = static_cast<unsigned>(v);
    } else if (a == "--requests" && whole(1, 1e6)) {
      o.requests = static_cast<int>(v);
    } else if (a == "--max-batch" && whole(1, 1024)) {
      o.max_batch = static_cast<int>(v);
    } else if (a == "--max-seq" && whole(1, 65536)) {
      o.max_seq = static_cast<int>(v);
    } else if (a == "--hidden" && whole(1, 16384)) {
      o.hidden = static_cast<std::int64_t>(v);
    } else if (a == "--ffn" && whole(1, 16384)) {
      o.ffn = static_cast<std::int64_t>(v);
    } else if (a == "--warm-passes" && whole(0, 100)) {
      o.warm_passes = static_cast<int>(v);
    } else if (a == "--rounds" && whole(1, 100)) {
      o.rounds = static_cast<int>(v);
    } else {
      return false;
    }
  }
  return true;
}

int run(const options& o) {
  dnnl::set_primitive_cache_capacity(0);  // only unicache caches
  specialize_settings settings = current_specialize_settings();
  settings.threshold = o.threshold;
  set_specialize_settings(settings);

  const std::vector<request> trace = make_trace(o.requests, o.seed, o.max_batch, o.max_seq);
  const layer l(o.hidden, o.ffn);
  cpu_device dev(l, largest_rows(trace));
  const auto serve = [&](kernel_shapes mode, std::int64_t m) {
    set_kernel_shapes(mode);
    std::vector<compiled_partition> cps;
    for (std::size_t i = 0; i < l.steps.size(); ++i) cps.push_back(compile(l.part(i), l.shapes(i, m), dev.eng()));
    for (std::size_t i = 0; i < l.steps.size(); ++i) dev.run(cps[i], i);
  };

  for (int pass = 0; pass < o.warm_passes; ++pass) {
    for (const request& r : trace) {
      serve(kernel_shapes::tiered, r.rows());
      serve(kernel_shapes::agnostic, r.rows());
    }
    wait_for_specializations();
  }
  const tier_stats before = tiered_kernel_stats();
  std::vector<double> agnostic, tiered, ratio;
  for (int round = 0; round < o.rounds; ++round) {
    for (std::size_t r = 0; r < trace.size(); ++r) {
      double ms[2] = {0, 0};  // agnostic, tiered
      for (int k = 0; k < 2; ++k) {
        const std::size_t which = (r + static_cast<std::size_t>(k + round)) % 2;
        const auto start = std::chrono::steady_clock::now();
        serve(which == 0 ? kernel_shapes::agnostic : kernel_shapes::tiered, trace[r].rows());
        ms[which] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      }
      agnostic.push_back(ms[0]);
      tiered.push_back(ms[1]);
      ratio.push_back(ms[1] / ms[0]);
    }
  }
  const tier_stats after = tiered_kernel_stats();
  // p50 as bench_dynamic_shapes reports it (nearest rank).
  const double p50_agnostic = percentile(agnostic, 50), p50_tiered = percentile(tiered, 50);
  std::printf("DEVICE %s; %d requests (seed %u) x %d rounds, after %d warm-up passes, threshold %g\n",
              dev.name().c_str(), o.requests, o.seed, o.rounds, o.warm_passes, o.threshold);
  std::printf("agnostic: p50 %.3f ms, mean %.3f ms\n", p50_agnostic, mean(agnostic));
  std::printf("tiered:   p50 %.3f ms, mean %.3f ms\n", p50_tiered, mean(tiered));
  std::printf("tiered / agnostic: p50 %.3fx, mean %.3fx, median per request %.3fx\n", p50_tiered / p50_agnostic,
              mean(tiered) / mean(agnostic), median(ratio));
  const auto delta = [](std::uint64_t a, std::uint64_t b) { return static_cast<unsigned long long>(a - b); };
  // Executions of shapes with no class (M below the smallest class, a
  // configuration's first shape) are in neither count.
  std::printf("tiers while timed: %llu specialized and %llu generic executions; %llu builds queued, %llu ready, "
              "%llu dropped as slower, %llu evicted, %llu turned away by the limit\n",
              delta(after.specialized_executions, before.specialized_executions),
              delta(after.generic_executions, before.generic_executions), delta(after.queued, before.queued),
              delta(after.ready, before.ready), delta(after.slower, before.slower),
              delta(after.evicted, before.evicted), delta(after.over_limit, before.over_limit));
  std::printf("tiers in all: %llu classes, %llu ready, %llu dropped as slower, %llu turned away by the limit\n",
              static_cast<unsigned long long>(after.classes), static_cast<unsigned long long>(after.ready),
              static_cast<unsigned long long>(after.slower), static_cast<unsigned long long>(after.over_limit));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: bench_tiers_interleaved [--requests N] [--seed S] [--max-batch B] [--max-seq L] "
                 "[--hidden H] [--ffn F] [--warm-passes P] [--rounds R] [--threshold T]\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tiers_interleaved: %s\n", e.what());
    return 1;
  }
}
