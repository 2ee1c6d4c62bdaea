// bench_dynamic_shapes: a serving workload whose shapes change on every
// request, run through unicache in four modes and through oneDNN directly.
//
// The workload: the matmuls of a BERT-base encoder layer (Q, K, V and output
// projections H x H with bias, FFN H -> F with bias and GELU, F -> H with
// bias; H = 768, F = 3072). The attention product itself is left out: the
// output projection takes V. Every request is a batch of B sequences padded
// to the longest one, so its activations are M = B x L rows:
//   B ~ uniform{1..max_batch}                      (max_batch = 8)
//   each sequence length ~ round(lognormal(ln 48, 0.9)), clamped to [1, max_seq]
//   L = the longest of the B                        (max_seq = 512)
// (short-text serving: median 48 tokens, a tail to 512), from a seeded
// generator, so every run replays the same trace.
//
// Modes, each a fresh process (this program with --child):
//   1 no caching        kernel and constant caches off: every request compiles
//                       its six partitions for its shapes and packs its weights
//   2 per shape         compiled partitions and kernels cached per shape
//                       (UNICACHE_KERNEL_SHAPES=specialized): oneDNN's primitive
//                       cache, in effect
//   3 shape-agnostic    + one kernel per configuration for every shape
//   4 warm store        3 + the persistent store, in a process started after
//                       another one filled the store
//   4+driver (GPU)      4 with the driver's own cache on and warm as well
//   5 adaptive          the default: every shape on the generic kernel at once,
//                       hot shape classes specialized in the background
//   5w adaptive, warm   5 in a process started after a warm-up one ran the
//                       trace in mode 5 with the store on and every class
//                       specialized at first use (UNICACHE_SPECIALIZE_THRESHOLD=0):
//                       the tuning choices and binaries are in the store
//   5wd (GPU)           5w with the driver's own cache on and warm as well
// Baselines (CPU): oneDNN directly, one primitive per shape through its
// primitive cache, and one primitive per configuration with M as
// DNNL_RUNTIME_DIM_VAL. Driver caches are off in every mode but 4+driver
// (POCL_KERNEL_CACHE=0, CUDA_CACHE_DISABLE=1); oneDNN's primitive cache is off
// in modes 1-4 so that only unicache caches. 4+driver turns the driver's
// cache on (POCL_KERNEL_CACHE=1, CUDA_CACHE_DISABLE=0) in a directory of its
// own, warmed by the process that fills the store.
//
// A mode stops starting requests once it has run for --budget-s seconds;
// it then covers a prefix of the trace and says so (requests_run); per
// request figures stay comparable. Output: one JSON file per device,
// <out>/dynamic_shapes_<device>.json. The GPU devices are the backends'
// defaults (UNICACHE_OPENCL_DEVICE, UNICACHE_CUDA_DEVICE select others);
// "all" is cpu, opencl, and cuda where the CUDA backend is available. Usage:
//
//   bench_dynamic_shapes [--device cpu|opencl|cuda|all] [--requests N] [--seed S]
//       [--max-batch B] [--max-seq L] [--hidden H] [--ffn F] [--budget-s S]
//       [--modes 1,2,3,4,4d,5,5w,5wd,dnnl,dnnl_rt] [--out DIR] [--record-trace]
//       [--quiet] [--demo] [--shapes-out FILE] [--graph-out FILE] [--requests-out]
// --shapes-out writes the trace's rows per request to FILE and exits (what
// scripts/torch_dynamic_shapes.py replays with torch.matmul).
// --record-trace also writes <out>/trace_<device>.csv from mode 2 (what the
// per-shape kernel cache and the constant cache saw, with measured costs)
// for bench_policy --trace.
// --requests-out also writes <out>/requests_<device>_<mode>.csv per mode: one
// row per request (when it started, its rows, its latency, how long its
// compile() and execute() calls held the host, and the process's kernel
// builds, loads and swapped-in specialized kernels after it), to tell which
// requests a tail percentile is made of and what ran beside them.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "child_process.hpp"
#include "run_facts.hpp"
#include "dynamic_shapes_workload.hpp"
#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"
#include "unicache/onednn_cpu.hpp"
#include "unicache/specialization.hpp"
#include "unicache/version.hpp"
#if UNICACHE_GPU_WITH_OPENCL || UNICACHE_GPU_WITH_CUDA
#include "gpu_backends.hpp"
#endif

namespace {

using namespace unicache;
using namespace unicache::bench;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

struct options {
  std::string device = "all";
  int requests = 1000;
  unsigned seed = 2026;
  int max_batch = 8;
  int max_seq = 512;
  std::int64_t hidden = 768;
  std::int64_t ffn = 3072;
  double budget_s = 100;
  std::vector<std::string> modes{"1", "2", "3", "4", "4d", "4b", "5", "5w", "5wd", "dnnl", "dnnl_rt"};
  std::string bundle;  // --bundle: mode 4b's store holds only this bundle's entries
  std::string out = ".";
  bool record_trace = false;
  bool quiet = false;
  std::string shapes_out;  // --shapes-out: write the trace's rows per request there and stop
  std::string graph_out;   // --graph-out: write the layer as graph JSON with the trace's shapes and stop
  bool requests_out = false;
  // Child only.
  std::string mode;
  std::string trace_path;
  std::string requests_path;  // --requests-csv: this mode's per-request rows

  std::string trace_args() const {
    return "--requests " + std::to_string(requests) + " --seed " + std::to_string(seed) + " --max-batch " +
           std::to_string(max_batch) + " --max-seq " + std::to_string(max_seq) + " --hidden " +
           std::to_string(hidden) + " --ffn " + std::to_string(ffn) + " --budget-s " + std::to_string(budget_s);
  }
};

// What one per-shape kernel weighs in the kernel cache: the GPU backends'
// kernel estimate (kernel_bytes_estimate, 128 KB) plus the compiled
// partition's (4 KB).
constexpr std::uint64_t kKernelEntryBytes = 128 * 1024 + 4096;

#if UNICACHE_GPU_WITH_OPENCL || UNICACHE_GPU_WITH_CUDA
// A GPU backend's device (gpu_backends.hpp): the same buffers and counters
// for every backend.
template <class Backend>
class gpu_device final : public device {
 public:
  gpu_device(const layer& l, std::int64_t max_rows) : l_(l), eng_(Backend::make_engine()), buffers_(eng_) {
    strm_ = make_stream(eng_);
    x_ = buffers_.upload(random_values(static_cast<std::size_t>(max_rows * l.steps[0].k), 1, 1.f));
    for (std::size_t i = 0; i < l.steps.size(); ++i) {
      const auto& s = l.steps[i];
      w_.push_back(buffers_.upload(random_values(static_cast<std::size_t>(s.k * s.n), 10 + i, 0.05f)));
      b_.push_back(buffers_.upload(random_values(static_cast<std::size_t>(s.n), 20 + i, 0.05f)));
      y_.push_back(buffers_.make(static_cast<std::size_t>(max_rows * s.n) * 4));
    }
  }
  const engine& eng() const override { return eng_; }
  stream& strm() override { return strm_; }
  std::string name() const override { return Backend::device(eng_); }
  work counters() const override {
    const gpu_backends::kernel_counts c = Backend::counts();
    return {c.built, c.loaded, c.packs, c.build_ms, c.load_ms, c.pack_ms, c.first_launch_ms};
  }
  void run(const compiled_partition& cp, std::size_t i) override {
    const auto& s = l_.steps[i];
    void* in = s.input < 0 ? x_ : y_[static_cast<std::size_t>(s.input)];
    cp.execute(strm_, {{cp.inputs()[0], in, 0}, {cp.inputs()[1], w_[i], 0}, {cp.inputs()[2], b_[i], 0}},
               {{cp.outputs()[0], y_[i], 0}});
  }

 private:
  const layer& l_;
  engine eng_;
  stream strm_;
  gpu_backends::buffers<Backend> buffers_;
  void* x_ = nullptr;
  std::vector<void*> w_, b_, y_;
};
#endif

std::unique_ptr<device> make_device(const std::string& name, const layer& l, std::int64_t max_rows) {
  if (name == "cpu") return std::make_unique<cpu_device>(l, max_rows);
#if UNICACHE_GPU_WITH_OPENCL
  if (name == "opencl") return std::make_unique<gpu_device<gpu_backends::opencl_backend>>(l, max_rows);
#endif
#if UNICACHE_GPU_WITH_CUDA
  if (name == "cuda") return std::make_unique<gpu_device<gpu_backends::cuda_backend>>(l, max_rows);
#endif
  throw std::invalid_argument("this build has no " + name + " backend");
}

double peak_rss_mb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// Per-request latencies to the summary fields every mode reports.
void report_latencies(const std::vector<double>& latency, double wall_ms, int requests_total) {
  double sum = 0;
  for (double v : latency) sum += v;
  std::printf("RESULT requests_run=%zu requests_total=%d wall_ms=%.3f first_request_ms=%.3f p50_ms=%.4f p99_ms=%.4f "
              "mean_ms=%.4f max_ms=%.4f peak_rss_mb=%.1f\n",
              latency.size(), requests_total, wall_ms, latency.empty() ? 0.0 : latency[0],
              percentile(latency, 50), percentile(latency, 99), latency.empty() ? 0.0 : sum / latency.size(),
              latency.empty() ? 0.0 : *std::max_element(latency.begin(), latency.end()), peak_rss_mb());
}

void progress(std::size_t done, std::size_t total) {
  if (done % 10 == 0 || done == total) {
    std::printf("PROGRESS %zu %zu\n", done, total);
    std::fflush(stdout);
  }
}

// --- Child: unicache modes ------------------------------------------------------------

int child_unicache(const options& o) {
  dnnl::set_primitive_cache_capacity(0);  // only unicache caches
  const std::vector<request> trace = make_trace(o.requests, o.seed, o.max_batch, o.max_seq);
  const std::int64_t max_rows = largest_rows(trace);
  const layer l(o.hidden, o.ffn);

  const auto t_engine = clock_type::now();
  const std::unique_ptr<device> dev = make_device(o.device, l, max_rows);
  const double engine_ms = ms_since(t_engine);
  std::printf("DEVICE %s\n", dev->name().c_str());

  // The recorded trace (mode 2): what a per-shape kernel cache and the
  // constant cache see, with each item's measured build cost.
  std::ofstream trace_out;
  if (!o.trace_path.empty()) {
    trace_out.open(o.trace_path);
    trace_out << "key,size_bytes,cost_ns\n";
  }
  std::map<std::string, double> item_cost_ns;
  std::vector<std::pair<std::string, std::uint64_t>> trace_items;

  const work start_work = dev->counters();
  std::vector<double> latency, enqueued;  // per request: to its answer, and until its last execute() returned
  std::ofstream requests_csv;
  if (!o.requests_path.empty()) {
    requests_csv.open(o.requests_path);
    requests_csv << "request,start_ms,rows,latency_ms,enqueue_ms,compile_ms,longest_execute_ms,builds,loads,"
                    "specialized_ready\n";
  }
  double compile_call_ms = 0, first_overhead_ms = 0;
  std::set<std::pair<std::string, std::int64_t>> distinct;  // (partition structure, rows)
  const auto t_start = clock_type::now();
  for (std::size_t r = 0; r < trace.size(); ++r) {
    if (r > 0 && ms_since(t_start) > o.budget_s * 1000) break;
    const std::int64_t m = trace[r].rows();
    const auto t_request = clock_type::now();
    const work before = dev->counters();
    double request_compile_ms = 0, longest_execute_ms = 0;
    std::vector<compiled_partition> cps;
    std::vector<double> built_ns(l.steps.size(), -1);  // >= 0: this request compiled step i's kernel
    for (std::size_t i = 0; i < l.steps.size(); ++i) {
      const work c0 = dev->counters();
      const auto t_compile = clock_type::now();
      cps.push_back(compile(l.part(i), l.shapes(i, m), dev->eng()));
      const double took = ms_since(t_compile);
      compile_call_ms += took;
      request_compile_ms += took;
      distinct.insert({l.part(i).fingerprint(), m});
      if (dev->counters().compiles > c0.compiles) built_ns[i] = took * 1e6;
    }
    for (std::size_t i = 0; i < l.steps.size(); ++i) {
      const work c0 = dev->counters();
      const auto t_execute = clock_type::now();
      dev->run(cps[i], i);
      longest_execute_ms = std::max(longest_execute_ms, ms_since(t_execute));
      if (trace_out.is_open()) {
        // The kernel (its cost: compile() plus the driver's first launch,
        // where it finishes compiling) and the packed weight.
        const work c1 = dev->counters();
        const std::string kernel = l.part(i).fingerprint().substr(0, 8) + ":" + std::to_string(m);
        if (built_ns[i] >= 0) item_cost_ns.emplace(kernel, built_ns[i] + (c1.first_launch_ms - c0.first_launch_ms) * 1e6);
        trace_items.push_back({kernel, kKernelEntryBytes});
        const std::string weight = "weight" + std::to_string(i);
        if (c1.packs > c0.packs) item_cost_ns.emplace(weight, (c1.pack_ms - c0.pack_ms) * 1e6);
        trace_items.push_back({weight, static_cast<std::uint64_t>(l.steps[i].k * l.steps[i].n * 4)});
      }
    }
    enqueued.push_back(ms_since(t_request));
    dev->strm().wait();  // one wait per request, as a server waits before answering
    latency.push_back(ms_since(t_request));
    if (requests_csv.is_open()) {
      const work now = dev->counters() - start_work;
      char row[256];
      std::snprintf(row, sizeof row, "%zu,%.3f,%lld,%.4f,%.4f,%.4f,%.4f,%.0f,%.0f,%llu\n", r,
                    std::chrono::duration<double, std::milli>(t_request - t_start).count(), static_cast<long long>(m),
                    latency.back(), enqueued.back(), request_compile_ms, longest_execute_ms, now.compiles, now.loads,
                    static_cast<unsigned long long>(specialization::stats().ready));
      requests_csv << row;
    }
    if (r == 0) first_overhead_ms = (dev->counters() - before).total_ms();
    if (!o.quiet) progress(r + 1, trace.size());
  }
  const double wall_ms = ms_since(t_start);
  // Adaptive: what the background did (a process that fills the store waits
  // for its builds, so that the store holds them).
  if (current_kernel_shapes() == kernel_shapes::adaptive) {
    wait_for_specializations();
    const specialization_stats t = specialization::stats();
    std::printf("RESULT specialize_classes=%llu specialize_ready=%llu specialize_failed=%llu "
                "specialize_generic_executions=%llu specialize_specialized_executions=%llu specialize_slower=%llu "
                "specialize_build_ms=%.3f specialize_saved_ms=%.3f\n",
                static_cast<unsigned long long>(t.classes), static_cast<unsigned long long>(t.ready),
                static_cast<unsigned long long>(t.failed), static_cast<unsigned long long>(t.generic_executions),
                static_cast<unsigned long long>(t.specialized_executions), static_cast<unsigned long long>(t.slower),
                t.build_ns / 1e6, t.saved_ns / 1e6);
  }
  const cache_stats cs = constant_tensor_cache().stats();
  std::printf("RESULT constant_cache_entries=%llu constant_cache_bytes=%llu constant_cache_inserts=%llu\n",
              static_cast<unsigned long long>(cs.entries), static_cast<unsigned long long>(cs.bytes),
              static_cast<unsigned long long>(cs.inserts));
  const work w = dev->counters() - start_work;
  const cache_stats ks = kernel_cache().stats();
  report_latencies(latency, wall_ms, static_cast<int>(trace.size()));
  // Where the host's part ends: on a GPU, execute() returns before the
  // device is done, so a p50 close to p50_ms says the host is the limit.
  std::printf("RESULT p50_enqueue_ms=%.4f\n", percentile(enqueued, 50));
  std::printf("RESULT first_launch_ms=%.3f\n", w.first_launch_ms);
  std::printf("RESULT engine_ms=%.3f compile_call_ms=%.3f compile_pack_ms=%.3f compile_ms=%.3f load_ms=%.3f "
              "pack_ms=%.3f compiles=%.0f loads=%.0f packs=%.0f first_request_compile_pack_ms=%.3f "
              "kernel_cache_hits=%llu kernel_cache_misses=%llu kernel_cache_evictions=%llu distinct_shapes=%zu\n",
              engine_ms, compile_call_ms, w.total_ms(), w.compile_ms, w.load_ms, w.pack_ms, w.compiles, w.loads,
              w.packs, first_overhead_ms, static_cast<unsigned long long>(ks.hits),
              static_cast<unsigned long long>(ks.misses), static_cast<unsigned long long>(ks.evictions),
              distinct.size());
  if (trace_out.is_open()) {
    // Items never built in this process (an earlier request built them)
    // carry their kind's mean cost; weights that never needed packing cost
    // nothing to rebuild, so they are left out.
    std::map<std::string, std::pair<double, int>> mean;
    for (const auto& [key, cost] : item_cost_ns) {
      auto& m = mean[key.substr(0, key.find(':'))];
      m.first += cost;
      ++m.second;
    }
    for (const auto& [key, size] : trace_items) {
      double cost = 0;
      if (auto it = item_cost_ns.find(key); it != item_cost_ns.end()) {
        cost = it->second;
      } else if (auto k = mean.find(key.substr(0, key.find(':'))); k != mean.end()) {
        cost = k->second.first / k->second.second;
      } else {
        continue;
      }
      trace_out << key << "," << size << "," << static_cast<std::uint64_t>(cost) << "\n";
    }
  }
  return latency.empty() ? 1 : 0;
}

// --- Child: oneDNN directly (CPU baselines) ----------------------------------------------

int child_onednn(const options& o, bool runtime_dims) {
  using dnnl::memory;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  const std::vector<request> trace = make_trace(o.requests, o.seed, o.max_batch, o.max_seq);
  const std::int64_t max_rows = largest_rows(trace);
  const layer l(o.hidden, o.ffn);
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::printf("DEVICE oneDNN CPU (%ld cores)\n", ::sysconf(_SC_NPROCESSORS_ONLN));

  std::vector<float> x = random_values(static_cast<std::size_t>(max_rows * o.hidden), 1, 1.f);
  std::vector<std::vector<float>> w, b, y;
  for (std::size_t i = 0; i < l.steps.size(); ++i) {
    const auto& s = l.steps[i];
    w.push_back(random_values(static_cast<std::size_t>(s.k * s.n), 10 + i, 0.05f));
    b.push_back(random_values(static_cast<std::size_t>(s.n), 20 + i, 0.05f));
    y.emplace_back(static_cast<std::size_t>(max_rows * s.n));
  }
  // A matmul for `rows` (or DNNL_RUNTIME_DIM_VAL) with bias and GELU as
  // post-ops, weights in the user's layout: what a user of oneDNN writes.
  auto make = [&](std::size_t i, memory::dim rows) {
    const auto& s = l.steps[i];
    dnnl::post_ops ops;
    ops.append_binary(dnnl::algorithm::binary_add, memory::desc({1, s.n}, dt::f32, tag::ab));
    if (s.gelu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    const memory::desc a({rows, s.k}, dt::f32, tag::ab), wd({s.k, s.n}, dt::f32, tag::ab), c({rows, s.n}, dt::f32, tag::ab);
    return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, wd, c), attr, eng));
  };
  double compile_ms = 0, compiles = 0;
  std::vector<dnnl::matmul> fixed;
  const auto t_start = clock_type::now();
  std::vector<double> latency;
  for (std::size_t r = 0; r < trace.size(); ++r) {
    if (r > 0 && ms_since(t_start) > o.budget_s * 1000) break;
    const std::int64_t m = trace[r].rows();
    const auto t_request = clock_type::now();
    for (std::size_t i = 0; i < l.steps.size(); ++i) {
      const auto& s = l.steps[i];
      const auto t_make = clock_type::now();
      dnnl::matmul prim;
      if (runtime_dims) {
        if (fixed.size() <= i) {
          fixed.push_back(make(i, DNNL_RUNTIME_DIM_VAL));
          ++compiles;
        }
        prim = fixed[i];
      } else {
        prim = make(i, m);  // through oneDNN's primitive cache
        ++compiles;
      }
      compile_ms += ms_since(t_make);
      float* in = s.input < 0 ? x.data() : y[static_cast<std::size_t>(s.input)].data();
      memory am({{m, s.k}, dt::f32, tag::ab}, eng, in), wm({{s.k, s.n}, dt::f32, tag::ab}, eng, w[i].data());
      memory cm({{m, s.n}, dt::f32, tag::ab}, eng, y[i].data()), bm({{1, s.n}, dt::f32, tag::ab}, eng, b[i].data());
      prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, cm},
                          {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, bm}});
      strm.wait();
    }
    latency.push_back(ms_since(t_request));
    if (!o.quiet) progress(r + 1, trace.size());
  }
  report_latencies(latency, ms_since(t_start), static_cast<int>(trace.size()));
  // Per-shape primitive creation goes through oneDNN's primitive cache:
  // "compiles" counts creation calls (hits included), compile_ms their time.
  std::printf("RESULT compile_call_ms=%.3f compile_pack_ms=%.3f compiles=%.0f packs=0\n", compile_ms, compile_ms,
              compiles);
  return 0;
}

// --- Parent ---------------------------------------------------------------------------------

struct mode_spec {
  std::string id, name, description;
  std::string environment;
  bool gpu_only = false, cpu_only = false;
};

std::vector<mode_spec> all_modes(const std::string& store, const std::string& driver_cache) {
  const std::string off = "POCL_KERNEL_CACHE=0 CUDA_CACHE_DISABLE=1 UNICACHE_PERSISTENT_CACHE_DIR=" + store + " ";
  const std::string driver_on = "POCL_KERNEL_CACHE=1 POCL_CACHE_DIR=" + driver_cache +
                                "/pocl CUDA_CACHE_DISABLE=0 CUDA_CACHE_PATH=" + driver_cache +
                                "/cuda UNICACHE_PERSISTENT_CACHE_DIR=" + store + " ";
  return {
      {"1", "no caching", "every request compiles its kernels for its shapes and packs its weights",
       off + "UNICACHE_KERNEL_CACHE=0 ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE=0 UNICACHE_PERSISTENT_CACHE=0 "
             "UNICACHE_KERNEL_SHAPES=specialized"},
      {"2", "per shape", "compiled per shape, cached in memory (oneDNN's primitive cache)",
       off + "UNICACHE_KERNEL_SHAPES=specialized UNICACHE_PERSISTENT_CACHE=0"},
      {"3", "shape-agnostic", "one kernel per configuration, cached in memory",
       off + "UNICACHE_KERNEL_SHAPES=agnostic UNICACHE_PERSISTENT_CACHE=0"},
      {"4", "warm store", "3 + the persistent store, filled by an earlier process",
       off + "UNICACHE_KERNEL_SHAPES=agnostic UNICACHE_PERSISTENT_CACHE=1"},
      {"4d", "warm store + driver cache", "4 with the driver's own cache on and warm",
       driver_on + "UNICACHE_KERNEL_SHAPES=agnostic UNICACHE_PERSISTENT_CACHE=1", true},
      {"4b", "bundle", "3 + a persistent store holding only a bundle built ahead of time (--bundle)",
       "POCL_KERNEL_CACHE=0 CUDA_CACHE_DISABLE=1 UNICACHE_PERSISTENT_CACHE_DIR=" + store +
           "-bundle UNICACHE_KERNEL_SHAPES=agnostic UNICACHE_PERSISTENT_CACHE=1"},
      {"5", "adaptive", "generic kernel at once, hot shape classes specialized in the background (the default)",
       off + "UNICACHE_KERNEL_SHAPES=adaptive UNICACHE_PERSISTENT_CACHE=0"},
      {"5w", "adaptive, warm store", "5 + the persistent store, filled by a warm-up process that specialized every class",
       off + "UNICACHE_KERNEL_SHAPES=adaptive UNICACHE_PERSISTENT_CACHE=1"},
      {"5wd", "adaptive, warm store + driver cache", "5w with the driver's own cache on and warm",
       driver_on + "UNICACHE_KERNEL_SHAPES=adaptive UNICACHE_PERSISTENT_CACHE=1", true},
      {"dnnl", "oneDNN per shape", "oneDNN primitive per shape through its primitive cache", "", false, true},
      {"dnnl_rt", "oneDNN runtime dims", "one oneDNN primitive per configuration, M = DNNL_RUNTIME_DIM_VAL", "",
       false, true},
  };
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

std::string json_string(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

int run_device(const options& o, const std::string& dev) {
  const fs::path work = fs::temp_directory_path() / ("unicache_dynamic_shapes_" + std::to_string(::getpid()) + "_" + dev);
  fs::remove_all(work);
  fs::create_directories(work);
  const std::string store = (work / "store").string(), driver_cache = (work / "driver").string();
  const std::string base = "--device " + dev + " " + o.trace_args() + (o.quiet ? " --quiet" : "");
  const bool tty = ::isatty(STDERR_FILENO);

  struct result {
    mode_spec spec;
    child_run run;
  };
  std::vector<result> results;
  std::string device_name;
  for (const mode_spec& m : all_modes(store, driver_cache)) {
    if (std::find(o.modes.begin(), o.modes.end(), m.id) == o.modes.end()) continue;
    if ((m.gpu_only && dev == "cpu") || (m.cpu_only && dev != "cpu")) continue;
    auto show = [&](const std::string& line) {
      if (o.quiet || line.rfind("PROGRESS ", 0) != 0) return;
      std::size_t done = 0, total = 0;
      std::sscanf(line.c_str(), "PROGRESS %zu %zu", &done, &total);
      std::fprintf(stderr, "%s[%s] mode %-4s %-26s request %zu/%zu%s", tty ? "\r" : "", dev.c_str(), m.id.c_str(),
                   m.name.c_str(), done, total, tty ? "   " : "\n");
      std::fflush(stderr);
    };
    if (m.id == "4b") {
      if (o.bundle.empty()) continue;
      store_config config;
      config.directory = store + "-bundle";
      const bundle_report r = kernel_store(config).import_bundle(o.bundle);
      if (r.imported == 0 || !r.refused.empty()) {
        std::fprintf(stderr, "bench_dynamic_shapes: the bundle %s imported %llu entries, %zu refused\n",
                     o.bundle.c_str(), static_cast<unsigned long long>(r.imported), r.refused.size());
        return 1;
      }
    }
    if (m.id == "4" || m.id == "4d") {
      // Fill the store (and the driver cache) in a process of its own: two
      // requests build every configuration of the layer.
      options fill = o;
      fill.requests = 2;
      run_child(m.environment, "--mode 3 --device " + dev + " " + fill.trace_args() + " --quiet");
    }
    if (m.id == "5w" || m.id == "5wd") {
      // A warm-up process (a deployment's, or CI's) runs the trace with
      // every class specialized at its first use and waits for the builds:
      // the store gets the generic kernels, and every class's tiles and binary.
      run_child("UNICACHE_SPECIALIZE_THRESHOLD=0 " + m.environment, "--mode 5 " + base + " --quiet");
    }
    std::string args = "--mode " + m.id + " " + base;
    if (m.id == "2" && o.record_trace) args += " --trace-out " + (fs::path(o.out) / ("trace_" + dev + ".csv")).string();
    if (o.requests_out) {
      args += " --requests-csv " + (fs::path(o.out) / ("requests_" + dev + "_" + m.id + ".csv")).string();
    }
    child_run run = run_child(m.environment, args, show);
    if (!o.quiet && tty) std::fprintf(stderr, "\n");
    if (!run.ok) {
      std::fprintf(stderr, "bench_dynamic_shapes: mode %s on %s failed:\n%s\n", m.id.c_str(), dev.c_str(),
                   run.output.c_str());
      fs::remove_all(work);
      return 1;
    }
    if (m.id != "dnnl" && m.id != "dnnl_rt") device_name = run.device;
    results.push_back({m, std::move(run)});
  }
  fs::remove_all(work);
  if (results.empty()) return 0;

  const fs::path path = fs::path(o.out) / ("dynamic_shapes_" + dev + ".json");
  std::ofstream out(path);
  out << "{\n  \"benchmark\": \"bench_dynamic_shapes\",\n  \"version\": " << json_string(UNICACHE_VERSION_STRING)
      << ",\n  \"date\": " << json_string(today()) << ",\n  \"machine\": " << json_string(machine_name())
      << ",\n  \"cores\": " << ::sysconf(_SC_NPROCESSORS_ONLN) << ",\n  \"device\": " << json_string(device_name)
      << ",\n  \"backend\": " << json_string(dev) << ",\n  \"trace\": {\"requests\": " << o.requests
      << ", \"seed\": " << o.seed << ", \"max_batch\": " << o.max_batch << ", \"max_seq\": " << o.max_seq
      << ", \"hidden\": " << o.hidden << ", \"ffn\": " << o.ffn
      << ", \"lengths\": \"lognormal(ln 48, 0.9) clamped to [1, max_seq], padded to the batch's longest\""
      << ", \"budget_s\": " << json_number(o.budget_s) << "},\n  \"modes\": [\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const result& r = results[i];
    out << "    {\"id\": " << json_string(r.spec.id) << ", \"name\": " << json_string(r.spec.name)
        << ", \"description\": " << json_string(r.spec.description);
    const double run = r.run.values.count("requests_run") ? r.run.values.at("requests_run") : 0;
    out << ", \"prefix\": " << (run < o.requests ? "true" : "false");
    for (const auto& [k, v] : r.run.values) out << ", " << json_string(k) << ": " << json_number(v);
    if (run > 0) {
      out << ", \"compile_pack_ms_per_request\": " << json_number(r.run.values.at("compile_pack_ms") / run);
      out << ", \"wall_ms_per_request\": " << json_number(r.run.values.at("wall_ms") / run);
    }
    out << "}" << (i + 1 < results.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
  out.close();
  if (!out) {
    std::fprintf(stderr, "bench_dynamic_shapes: cannot write %s\n", path.c_str());
    return 1;
  }

  // The table.
  std::printf("\n%s: %s\n", dev.c_str(), device_name.c_str());
  std::printf("%-30s %8s %11s %10s %8s %8s %7s %6s %10s %6s %7s\n", "mode", "requests", "wall ms/req", "first ms",
              "p50 ms", "p99 ms", "built", "loaded", "comp+pack", "hit %", "RSS MB");
  for (const result& r : results) {
    const auto& v = r.run.values;
    auto get = [&](const char* k) { return v.count(k) ? v.at(k) : NAN; };
    const double hits = get("kernel_cache_hits"), misses = get("kernel_cache_misses");
    const double hit_ratio = std::isfinite(hits) && hits + misses > 0 ? 100 * hits / (hits + misses) : NAN;
    std::printf("%-30s %8.0f %11.2f %10.1f %8.2f %8.2f %7.0f %6.0f %10.0f %6.1f %7.0f\n",
                (r.spec.id + " " + r.spec.name).c_str(), get("requests_run"), get("wall_ms") / get("requests_run"),
                get("first_request_ms"), get("p50_ms"), get("p99_ms"), get("compiles"), get("loads"),
                get("compile_pack_ms"), hit_ratio, get("peak_rss_mb"));
  }
  std::printf("(built: kernels compiled; loaded: from the store; comp+pack: ms compiling, loading and packing;\n"
              " hit %%: kernel cache; nan: not measured for that mode)\n");
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

// Why `dev` cannot run here, or "". OpenCL says nothing before a context is
// made: a machine without a device fails in the child, with OpenCL's error.
std::string unavailable(const std::string& dev) {
#if !UNICACHE_GPU_WITH_OPENCL
  if (dev == "opencl") return "this build has no OpenCL backend (UNICACHE_WITH_OPENCL=OFF)";
#endif
#if UNICACHE_GPU_WITH_CUDA
  if (dev == "cuda" && !cuda::available()) return "the CUDA backend is unavailable: " + cuda::unavailable_reason();
#else
  if (dev == "cuda") return "this build has no CUDA backend (UNICACHE_WITH_CUDA=OFF)";
#endif
  return "";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

const char* const kUsage =
    "usage: bench_dynamic_shapes [--device cpu|opencl|cuda|all] [--requests N] [--seed S]\n"
    "           [--max-batch B] [--max-seq L] [--hidden H] [--ffn F] [--budget-s S]\n"
    "           [--modes 1,2,3,4,4d,5,5w,5wd,dnnl,dnnl_rt] [--out DIR] [--record-trace]\n"
    "           [--quiet] [--demo] [--shapes-out FILE] [--graph-out FILE]\n"
    "           [--requests-out]\n"
    "\n"
    "A serving workload whose shapes change on every request (the matmuls of a\n"
    "BERT-base encoder layer, M = batch x longest sequence), run through\n"
    "unicache in each mode and through oneDNN directly, each mode a fresh\n"
    "process: 1 no caching, 2 per shape, 3 shape-agnostic, 4 warm store,\n"
    "4d 4 with the driver's cache warm (GPU), 5 adaptive, 5w adaptive and warm,\n"
    "5wd 5w with the driver's cache warm (GPU);\n"
    "dnnl and dnnl_rt, oneDNN per shape and with runtime dimensions (CPU).\n"
    "Writes <out>/dynamic_shapes_<device>.json.\n"
    "\n"
    "  --device D       cpu, opencl, cuda, or all that this build and machine\n"
    "                   can run (default all)\n"
    "  --requests N     requests in the trace (default 1000)\n"
    "  --seed S         the trace's seed (default 2026)\n"
    "  --max-batch B    sequences per request, at most (default 8)\n"
    "  --max-seq L      tokens per sequence, at most (default 512)\n"
    "  --hidden H       the layer's hidden size (default 768)\n"
    "  --ffn F          its FFN size (default 3072)\n"
    "  --budget-s S     a mode starts no request after S seconds (default 100)\n"
    "  --modes LIST     the modes to run (default all)\n"
    "  --out DIR        where the JSON goes (default .)\n"
    "  --record-trace   also write <out>/trace_<device>.csv from mode 2, for\n"
    "                   bench_policy --trace\n"
    "  --quiet          no progress on stderr\n"
    "  --demo           the README demo: 40 short requests, modes 1-5, at most\n"
    "                   10 s each, JSON under the temporary directory\n"
    "  --shapes-out F   write the trace's rows per request to F and stop\n"
    "  --bundle F       also mode 4b: a store holding only the bundle F (built\n"
    "                   ahead of time: `unicache-store precompile --out F`)\n"
    "  --graph-out F    write the layer as graph JSON, a request per distinct M\n"
    "                   of the trace (for `unicache-store precompile`), and stop\n"
    "  --requests-out   also write <out>/requests_<device>_<mode>.csv: per\n"
    "                   request, its latency, compile() and execute() time,\n"
    "                   and the builds, loads and specializations so far\n"
    "(--child, --mode, --trace-out and --requests-csv are how it starts its own\n"
    "processes.)\n";

}  // namespace

int main(int argc, char** argv) {
  options o;
  bool child = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--child") {
        child = true;
      } else if (a == "--device") {
        o.device = next();
      } else if (a == "--requests") {
        o.requests = std::stoi(next());
      } else if (a == "--seed") {
        o.seed = static_cast<unsigned>(std::stoul(next()));
      } else if (a == "--max-batch") {
        o.max_batch = std::stoi(next());
      } else if (a == "--max-seq") {
        o.max_seq = std::stoi(next());
      } else if (a == "--hidden") {
        o.hidden = std::stoll(next());
      } else if (a == "--ffn") {
        o.ffn = std::stoll(next());
      } else if (a == "--budget-s") {
        o.budget_s = std::stod(next());
      } else if (a == "--modes") {
        o.modes = split(next(), ',');
      } else if (a == "--out") {
        o.out = next();
      } else if (a == "--record-trace") {
        o.record_trace = true;
      } else if (a == "--quiet") {
        o.quiet = true;
      } else if (a == "--demo") {
        // The README demo: a short trace (40 requests of up to 4 x 128
        // tokens), every mode for at most 10 s, on the CPU and the default
        // GPU devices (as --device all); JSON under the temporary directory.
        o.requests = 40;
        o.max_batch = 4;
        o.max_seq = 128;
        o.budget_s = 10;
        o.modes = {"1", "2", "3", "4", "5"};
        o.out = (fs::temp_directory_path() / "unicache_demo").string();
      } else if (a == "--shapes-out") {
        o.shapes_out = next();
      } else if (a == "--bundle") {
        o.bundle = next();
      } else if (a == "--graph-out") {
        o.graph_out = next();
      } else if (a == "--mode") {
        o.mode = next();
      } else if (a == "--trace-out") {
        o.trace_path = next();
      } else if (a == "--requests-out") {
        o.requests_out = true;
      } else if (a == "--requests-csv") {
        o.requests_path = next();
      } else if (a == "--help" || a == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
      } else {
        throw std::invalid_argument("unknown argument " + a);
      }
    }
    if (o.requests < 1 || o.max_batch < 1 || o.max_seq < 1 || o.hidden < 1 || o.ffn < 1 || o.budget_s <= 0) {
      throw std::invalid_argument("sizes, counts and the budget must be positive");
    }
    if (o.device != "cpu" && o.device != "opencl" && o.device != "cuda" && o.device != "all") {
      throw std::invalid_argument("--device must be cpu, opencl, cuda or all");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dynamic_shapes: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    if (child) {
      if (o.mode == "dnnl") return child_onednn(o, false);
      if (o.mode == "dnnl_rt") return child_onednn(o, true);
      return child_unicache(o);
    }
    if (!o.graph_out.empty()) {
      // The layer for `unicache-store precompile`, with one request per
      // distinct M of the trace (the first request's first).
      const layer l(o.hidden, o.ffn);
      std::vector<shape_request> requests;
      std::set<std::int64_t> seen;
      for (const request& r : make_trace(o.requests, o.seed, o.max_batch, o.max_seq)) {
        if (seen.insert(r.rows()).second) requests.push_back({{l.g.tensors()[0].id, {r.rows(), o.hidden}}});
      }
      std::ofstream(o.graph_out) << to_json(l.g, requests);
      std::printf("wrote the layer with %zu requests to %s\n", requests.size(), o.graph_out.c_str());
      return 0;
    }
    if (!o.shapes_out.empty()) {
      // The trace for another framework's replay (scripts/torch_dynamic_shapes.py).
      std::ofstream shapes(o.shapes_out);
      shapes << "# bench_dynamic_shapes trace: " << o.trace_args() << "\n# rows (M) per request\n";
      for (const request& r : make_trace(o.requests, o.seed, o.max_batch, o.max_seq)) shapes << r.rows() << "\n";
      return shapes ? 0 : 1;
    }
    fs::create_directories(o.out);
    int status = 0;
    for (const std::string dev : {"cpu", "opencl", "cuda"}) {
      if (o.device != dev && o.device != "all") continue;
      // "all" runs what this build and machine can; a device named alone must run.
      const std::string why = unavailable(dev);
      if (!why.empty()) {
        std::fprintf(stderr, "bench_dynamic_shapes: %s %s: %s\n", o.device == "all" ? "skipping" : "cannot run",
                     dev.c_str(), why.c_str());
        if (o.device != "all") status |= 1;
        continue;
      }
      status |= run_device(o, dev);
    }
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dynamic_shapes: %s\n", e.what());
    return 1;
  }
}
