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
// and run each specialized kernel's check against the generic one; the
// timed rounds then see the steady state. A request costs what it costs in
// bench_dynamic_shapes: its six compile() calls and executions.
//
// It prints each mode's p50 and mean, their ratio, the median of the
// per-request ratios (tiered / agnostic), and the tiers' counters.
//
//   bench_tiers_interleaved [--requests N] [--seed S] [--max-batch B]
//       [--max-seq L] [--hidden H] [--ffn F] [--warm-passes P] [--rounds R]
//       [--threshold T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

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

bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    char* end = nullptr;
    const double v = std::strtod(argv[i + 1], &end);
    if (*end != '\0' || v < 0 || v > 1e6) return false;
    const int n = static_cast<int>(v);
    if (a == "--threshold") {
      o.threshold = v;
    } else if (v != n || (n < 1 && a != "--warm-passes" && a != "--seed")) {
      return false;
    } else if (a == "--requests") {
      o.requests = n;
    } else if (a == "--seed") {
      o.seed = static_cast<unsigned>(n);
    } else if (a == "--max-batch") {
      o.max_batch = n;
    } else if (a == "--max-seq") {
      o.max_seq = n;
    } else if (a == "--hidden") {
      o.hidden = n;
    } else if (a == "--ffn") {
      o.ffn = n;
    } else if (a == "--warm-passes") {
      o.warm_passes = n;
    } else if (a == "--rounds") {
      o.rounds = n;
    } else {
      return false;
    }
  }
  return argc % 2 == 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
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
  std::printf("DEVICE %s; %d requests (seed %u) x %d rounds, after %d warm-up passes, threshold %g\n",
              dev.name().c_str(), o.requests, o.seed, o.rounds, o.warm_passes, o.threshold);
  std::printf("agnostic: p50 %.3f ms, mean %.3f ms\n", median(agnostic), mean(agnostic));
  std::printf("tiered:   p50 %.3f ms, mean %.3f ms\n", median(tiered), mean(tiered));
  std::printf("tiered / agnostic: p50 %.3fx, mean %.3fx, median per request %.3fx\n",
              median(tiered) / median(agnostic), mean(tiered) / mean(agnostic), median(ratio));
  std::printf("tiers while timed: %llu specialized and %llu generic executions; in all: %llu classes, %llu ready, "
              "%llu over the limit, %llu slower (dropped)\n",
              static_cast<unsigned long long>(after.specialized_executions - before.specialized_executions),
              static_cast<unsigned long long>(after.generic_executions - before.generic_executions),
              static_cast<unsigned long long>(after.classes), static_cast<unsigned long long>(after.ready),
              static_cast<unsigned long long>(after.over_limit), static_cast<unsigned long long>(after.slower));
  return 0;
}
