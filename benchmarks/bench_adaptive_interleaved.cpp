// bench_adaptive_interleaved: adaptive kernels (the default mode) against
// shape-agnostic kernels in one process, request by request, on the CPU.
//
// bench_dynamic_shapes runs each mode in a fresh process. On a many-core
// host the p50 of the same mode moves by about 10% from one process to the
// next, as much as specialization can gain, so comparing two processes
// says little. Here both modes serve the same trace (bench_dynamic_shapes'
// BERT-layer workload) in one process, alternating request by request, the
// order alternating too. Warm-up passes first let adaptive mode build its
// classes (--threshold 0, the default here: every class at its first use)
// and run most specialized kernels' checks against the generic one. Builds
// may still start during the timed rounds (a class freed by a dropped
// kernel, one over the variant limit); the counters printed for the timed
// rounds say how many. A request costs what it costs in
// bench_dynamic_shapes: its six compile() calls and executions.
//
// It prints each mode's p50 (nearest rank, as bench_dynamic_shapes) and
// mean, their ratio, the median of the per-request ratios (adaptive /
// agnostic), and the specializer's counters.
//
//   bench_adaptive_interleaved [--requests N] [--seed S] [--max-batch B]
//       [--max-seq L] [--hidden H] [--ffn F] [--warm-passes P] [--rounds R]
//       [--threshold T]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "child_process.hpp"
#include "dynamic_shapes_workload.hpp"
#include "unicache/config.hpp"
#include "unicache/specialization.hpp"

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
      serve(kernel_shapes::adaptive, r.rows());
      serve(kernel_shapes::agnostic, r.rows());
    }
    wait_for_specializations();
  }
  const specialization_stats before = specialization::stats();
  std::vector<double> agnostic, adaptive, ratio;
  for (int round = 0; round < o.rounds; ++round) {
    for (std::size_t r = 0; r < trace.size(); ++r) {
      double ms[2] = {0, 0};  // agnostic, adaptive
      for (int k = 0; k < 2; ++k) {
        const std::size_t which = (r + static_cast<std::size_t>(k + round)) % 2;
        const auto start = std::chrono::steady_clock::now();
        serve(which == 0 ? kernel_shapes::agnostic : kernel_shapes::adaptive, trace[r].rows());
        ms[which] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      }
      agnostic.push_back(ms[0]);
      adaptive.push_back(ms[1]);
      ratio.push_back(ms[1] / ms[0]);
    }
  }
  const specialization_stats after = specialization::stats();
  // p50 as bench_dynamic_shapes reports it (nearest rank).
  const double p50_agnostic = percentile(agnostic, 50), p50_adaptive = percentile(adaptive, 50);
  std::printf("DEVICE %s; %d requests (seed %u) x %d rounds, after %d warm-up passes, threshold %g\n",
              dev.name().c_str(), o.requests, o.seed, o.rounds, o.warm_passes, o.threshold);
  std::printf("agnostic: p50 %.3f ms, mean %.3f ms\n", p50_agnostic, mean(agnostic));
  std::printf("adaptive: p50 %.3f ms, mean %.3f ms\n", p50_adaptive, mean(adaptive));
  std::printf("adaptive / agnostic: p50 %.3fx, mean %.3fx, median per request %.3fx\n", p50_adaptive / p50_agnostic,
              mean(adaptive) / mean(agnostic), median(ratio));
  const auto delta = [](std::uint64_t a, std::uint64_t b) { return static_cast<unsigned long long>(a - b); };
  // Executions of shapes with no class (M below the smallest class, a
  // configuration's first shape) are in neither count.
  std::printf("specialization while timed: %llu specialized and %llu generic executions; %llu builds queued, %llu ready, "
              "%llu dropped as slower, %llu evicted, %llu turned away by the limit\n",
              delta(after.specialized_executions, before.specialized_executions),
              delta(after.generic_executions, before.generic_executions), delta(after.queued, before.queued),
              delta(after.ready, before.ready), delta(after.slower, before.slower),
              delta(after.evicted, before.evicted), delta(after.over_limit, before.over_limit));
  std::printf("specialization in all: %llu classes, %llu ready, %llu dropped as slower, %llu turned away by the limit\n",
              static_cast<unsigned long long>(after.classes), static_cast<unsigned long long>(after.ready),
              static_cast<unsigned long long>(after.slower), static_cast<unsigned long long>(after.over_limit));
  return 0;
}

const char* const kUsage =
    "usage: bench_adaptive_interleaved [--requests N] [--seed S] [--max-batch B] [--max-seq L]\n"
    "           [--hidden H] [--ffn F] [--warm-passes P] [--rounds R] [--threshold T]\n"
    "\n"
    "Adaptive kernels (the default mode) against shape-agnostic kernels in one\n"
    "process, on the CPU: both serve bench_dynamic_shapes' BERT-layer trace,\n"
    "alternating request by request, after warm-up passes that let the adaptive\n"
    "mode build its classes. Prints each mode's p50 and mean, their ratio, the\n"
    "median of the per-request ratios, and what specialization did while timed.\n"
    "\n"
    "  --requests N     requests in the trace, 1..1000000 (default 400)\n"
    "  --seed S         the trace's seed (default 99)\n"
    "  --max-batch B    sequences per request, at most, 1..1024 (default 8)\n"
    "  --max-seq L      tokens per sequence, at most, 1..65536 (default 512)\n"
    "  --hidden H       the layer's hidden size, 1..16384 (default 768)\n"
    "  --ffn F          its FFN size, 1..16384 (default 3072)\n"
    "  --warm-passes P  untimed passes over the trace first, 0..100 (default 2)\n"
    "  --rounds R       timed passes, 1..100 (default 2)\n"
    "  --threshold T    adaptive mode's specialize threshold, 0..1000000, as\n"
    "                   UNICACHE_SPECIALIZE_THRESHOLD (default 0: every class\n"
    "                   at its first use)\n";

}  // namespace

int main(int argc, char** argv) {
  // Every other argument is a number: --help can be anywhere.
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  options o;
  if (!parse(argc, argv, o)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_adaptive_interleaved: %s\n", e.what());
    return 1;
  }
}
