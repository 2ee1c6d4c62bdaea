// bench_gpu_gemm: GFLOP/s of the generated GEMM (a MatMul partition, fp32,
// device buffers, 1 or 10 executions per iteration and one wait) on the
// default device of each GPU backend that is built and available (OpenCL:
// UNICACHE_OPENCL_DEVICE, else the first GPU; CUDA: UNICACHE_CUDA_DEVICE,
// else device 0), square sizes: BM_gemm/<backend>/n:N/constant_b:0|1/queued:1|10
// (queued: executions enqueued per wait; 10 is how a server or torch runs
// them, one synchronization for many kernels).
// scripts/torch_matmul.py measures torch.matmul on the same GPU for the
// comparison in docs/benchmarks.md.
// BM_constant_check/<backend>/mode:M: one execution of a [32,768]x[768,3070]
// MatMul with a constant (packed) weight under each constant_check mode:
// what checking the weight's contents costs per execution on the device.
// BM_compile_new_shape/<backend>/mode:M: compile() of a shape not seen
// before, kernel-shape mode agnostic (0) or adaptive (2): a new shape's
// host cost, the kernels already built.
// BM_enqueue/<backend>/path:P: the host time of one execute() that enqueues
// and does not wait (a BERT projection at eight M of eight shape classes):
// the shape-agnostic kernel (0), adaptive dispatch on the generic kernel (1),
// and on every class's specialized kernel (2); us_per_execute. What adaptive
// dispatch itself costs per execution is the difference.
//
//   bench_gpu_gemm [--backend=opencl|cuda|all] [Google Benchmark flags]
//
// The benchmarks are registered at run time, for the backends that can make
// an engine here; "all" (the default) skips the others with a note, a
// backend named alone must be available.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "gpu_backends.hpp"
#include "unicache/cache.hpp"
#include "unicache/compiler.hpp"
#include "unicache/config.hpp"
#include "unicache/graph.hpp"
#include "unicache/specialization.hpp"

namespace {

using namespace unicache;
using gpu_backends::buffers;

// A failure (a backend error, a size the device cannot hold) skips that
// benchmark, with the error as its message, and the others still run.
template <class Backend>
void BM_gemm(benchmark::State& state) {
  try {
    const std::int64_t n = state.range(0);
    const bool constant_b = state.range(1) != 0;
    const std::int64_t queued = state.range(2);  // executions enqueued per wait
    graph g;
    auto a = g.tensor({-1, n}), b = g.tensor({n, n}, constant_b ? tensor_property::constant : tensor_property::variable);
    auto c = g.tensor({-1, n});
    g.add_op(op_kind::matmul, {a, b}, {c});
    g.finalize();
    engine eng = Backend::make_engine();
    stream strm = make_stream(eng);
    std::vector<float> host(static_cast<std::size_t>(n * n));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (auto& v : host) v = dist(rng);
    const std::size_t bytes = host.size() * sizeof(float);
    buffers<Backend> device(eng);
    void* ab = device.make(bytes, host.data());
    void* bb = device.make(bytes, host.data());
    void* cb = device.make(bytes);
    compiled_partition cp = compile(g.partitions()[0], {{n, n}, {n, n}}, eng);
    const std::vector<tensor> in{{cp.inputs()[0], ab}, {cp.inputs()[1], bb}};
    const std::vector<tensor> out{{cp.outputs()[0], cb}};
    cp.execute(strm, in, out);  // builds, packs a constant B, warms up
    strm.wait();
    for (auto _ : state) {
      for (std::int64_t q = 0; q < queued; ++q) cp.execute(strm, in, out);
      strm.wait();
    }
    state.counters["GFLOP"] = benchmark::Counter(2.0 * static_cast<double>(n) * n * n * 1e-9 * static_cast<double>(queued),
                                                 benchmark::Counter::kIsIterationInvariantRate);
    state.SetLabel(Backend::device_name(eng));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

template <class Backend>
void BM_constant_check(benchmark::State& state) {
  const auto mode = static_cast<constant_check>(state.range(0));
  const constant_check saved = current_constant_check();
  set_constant_check(mode);
  try {
    // N off the GEMM tile: a weight in the packed layout is read in place,
    // with no check to measure.
    constexpr std::int64_t m = 32, k = 768, n = 3070;
    graph g;
    auto a = g.tensor({-1, k}), b = g.tensor({k, n}, tensor_property::constant), c = g.tensor({-1, n});
    g.add_op(op_kind::matmul, {a, b}, {c});
    g.finalize();
    engine eng = Backend::make_engine();
    stream strm = make_stream(eng);
    std::vector<float> host(static_cast<std::size_t>(k * n), 0.25f);
    buffers<Backend> device(eng);
    void* ab = device.make(static_cast<std::size_t>(m * k) * sizeof(float), host.data());
    void* bb = device.make(host.size() * sizeof(float), host.data());
    void* cb = device.make(static_cast<std::size_t>(m * n) * sizeof(float));
    compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}}, eng);
    const std::vector<tensor> in{{cp.inputs()[0], ab}, {cp.inputs()[1], bb}};
    const std::vector<tensor> out{{cp.outputs()[0], cb}};
    cp.execute(strm, in, out);  // builds and packs
    strm.wait();
    for (auto _ : state) {
      cp.execute(strm, in, out);
      strm.wait();
    }
    state.SetLabel(std::string(to_string(mode)) + " " + Backend::device_name(eng));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  set_constant_check(saved);
}

// compile() of a shape never seen before (the partition's kernels cached):
// a BERT FFN MatMul + bias + GELU, M new at each iteration, in the
// kernel-shape mode `range(0)`: what a serving trace's new shape costs on the
// host, and what adaptive mode's shape class adds to it.
template <class Backend>
void BM_compile_new_shape(benchmark::State& state) {
  const auto mode = static_cast<kernel_shapes>(state.range(0));
  const kernel_shapes saved = current_kernel_shapes();
  set_kernel_shapes(mode);
  try {
    constexpr std::int64_t k = 768, n = 3072;
    graph g;
    auto a = g.tensor({-1, k}), w = g.tensor({k, n}, tensor_property::constant), bias = g.tensor({n});
    auto mm = g.tensor({-1, n}), sum = g.tensor({-1, n}), y = g.tensor({-1, n});
    g.add_op(op_kind::matmul, {a, w}, {mm});
    g.add_op(op_kind::add, {mm, bias}, {sum});
    g.add_op(op_kind::gelu_erf, {sum}, {y});
    g.finalize();
    engine eng = Backend::make_engine();
    const partition& p = g.partitions()[0];
    // New shapes across repetitions too; each mode counts M from 1 (its
    // compiled partitions are its own), so both see the same Ms.
    static std::int64_t next_ms[3] = {1, 1, 1};
    std::int64_t& next_m = next_ms[static_cast<int>(mode) % 3];
    kernel_cache().clear();  // the other mode's partitions go: each starts from an empty cache
    // Builds the kernels of both split-K regimes (few rows split K, many do
    // not), so that no iteration builds or loads one.
    compile(p, {{next_m++, k}, {k, n}, {n}}, eng);
    compile(p, {{4096, k}, {k, n}, {n}}, eng);
    for (auto _ : state) benchmark::DoNotOptimize(compile(p, {{next_m++, k}, {k, n}, {n}}, eng));
    state.SetLabel(std::string(to_string(mode)) + " " + Backend::device_name(eng));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  set_kernel_shapes(saved);
}

// What one execute() holds the host for, enqueueing and never waiting: a
// BERT projection (MatMul + bias, K = N = 768) at eight M of eight shape
// classes, each compiled before timing, eight executions per iteration
// (one per M) and a wait after the timed part. `path`: 0 the
// shape-agnostic kernel (kernel_shapes::agnostic); 1 adaptive, every class
// on its generic kernel (never hot); 2 adaptive, every class on its
// specialized kernel (built and judged before timing). The difference
// between the three is adaptive dispatch's own host cost.
template <class Backend>
void BM_enqueue(benchmark::State& state) {
  const int path = static_cast<int>(state.range(0));
  const kernel_shapes saved = current_kernel_shapes();
  const specialize_settings saved_settings = current_specialize_settings();
  set_kernel_shapes(path == 0 ? kernel_shapes::agnostic : kernel_shapes::adaptive);
  specialize_settings settings = saved_settings;
  // Path 1: specialization off (a class whose tuning the store holds would
  // otherwise be specialized at once); path 2: at first use.
  settings.threads = path == 2 ? std::max(1u, saved_settings.threads) : 0;
  settings.threshold = 0;
  set_specialize_settings(settings);
  const specialization_stats before = specialization::stats();
  try {
    constexpr std::int64_t k = 768, n = 768;
    constexpr std::int64_t ms[] = {3, 6, 12, 24, 40, 72, 130, 250};
    graph g;
    auto a = g.tensor({-1, k}), w = g.tensor({k, n}, tensor_property::constant), bias = g.tensor({n});
    auto mm = g.tensor({-1, n}), y = g.tensor({-1, n});
    g.add_op(op_kind::matmul, {a, w}, {mm});
    g.add_op(op_kind::add, {mm, bias}, {y});
    g.finalize();
    engine eng = Backend::make_engine();
    stream strm = make_stream(eng);
    kernel_cache().clear();  // each path compiles its own kernels
    constexpr std::int64_t top = ms[std::size(ms) - 1];
    std::vector<float> host(static_cast<std::size_t>(std::max(top, k) * std::max(k, n)), 0.5f);  // A, W and bias from it
    buffers<Backend> device(eng);
    void* ab = device.make(static_cast<std::size_t>(top * k) * sizeof(float), host.data());
    void* wb = device.make(static_cast<std::size_t>(k * n) * sizeof(float), host.data());
    void* bb = device.make(static_cast<std::size_t>(n) * sizeof(float), host.data());
    void* yb = device.make(static_cast<std::size_t>(top * n) * sizeof(float));
    struct run {
      compiled_partition cp;
      std::vector<tensor> in, out;
    };
    std::vector<run> runs;
    for (const std::int64_t m : ms) {
      compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, eng);
      std::vector<tensor> in{{cp.inputs()[0], ab}, {cp.inputs()[1], wb}, {cp.inputs()[2], bb}};
      std::vector<tensor> out{{cp.outputs()[0], yb}};
      runs.push_back({std::move(cp), std::move(in), std::move(out)});
    }
    // Warm-up: first launches, and on path 2 every class specialized and
    // judged (its first executions are timed on the device).
    for (int i = 0; i < 2; ++i) {
      for (const run& r : runs) r.cp.execute(strm, r.in, r.out);
      strm.wait();
    }
    if (path == 2) {
      wait_for_specializations();
      for (int i = 0; i < 12; ++i) {
        for (const run& r : runs) r.cp.execute(strm, r.in, r.out);
        strm.wait();
      }
    }
    // The classes these shapes have (a backend may build the first shape
    // of a configuration for its own shapes: it has none), and those that
    // run a specialized kernel (path 2: each one, unless it was slower).
    const specialization_stats t = specialization::stats();
    const auto running = static_cast<double>((t.ready - before.ready) - (t.slower - before.slower) -
                                             (t.failed - before.failed) - (t.evicted - before.evicted));
    state.counters["classes"] = static_cast<double>(t.classes - before.classes);
    state.counters["specialized"] = running;
    double enqueue_s = 0;
    for (auto _ : state) {
      const auto start = std::chrono::steady_clock::now();
      for (const run& r : runs) r.cp.execute(strm, r.in, r.out);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      state.SetIterationTime(took);
      enqueue_s += took;
      strm.wait();
    }
    state.counters["us_per_execute"] =
        enqueue_s * 1e6 / static_cast<double>(state.iterations() * static_cast<std::int64_t>(std::size(ms)));
    state.SetLabel(std::string(path == 0 ? "agnostic" : path == 1 ? "adaptive generic" : "adaptive specialized") + " " +
                   Backend::device_name(eng));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  set_specialize_settings(saved_settings);
  set_kernel_shapes(saved);
}

template <class Backend>
void register_benchmarks() {
  const std::string name = Backend::name;
  benchmark::RegisterBenchmark(("BM_gemm/" + name).c_str(), BM_gemm<Backend>)
      ->ArgNames({"n", "constant_b", "queued"})
      ->ArgsProduct({{256, 1024, 2048, 4096}, {0, 1}, {1, 10}})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("BM_constant_check/" + name).c_str(), BM_constant_check<Backend>)
      ->ArgName("mode")
      ->Arg(static_cast<int>(constant_check::none))
      ->Arg(static_cast<int>(constant_check::sampled))
      ->Arg(static_cast<int>(constant_check::full))
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(("BM_enqueue/" + name).c_str(), BM_enqueue<Backend>)
      ->ArgName("path")
      ->DenseRange(0, 2)
      ->UseManualTime()
      ->Iterations(400)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(("BM_compile_new_shape/" + name).c_str(), BM_compile_new_shape<Backend>)
      ->ArgName("mode")
      ->Arg(static_cast<int>(kernel_shapes::agnostic))
      ->Arg(static_cast<int>(kernel_shapes::adaptive))
      ->Unit(benchmark::kMicrosecond);
}

// Registers the backend's benchmarks if it is wanted and available; false
// when it was asked for by name and cannot run.
template <class Backend>
bool add_backend(const std::string& wanted, int& registered) {
  if (wanted != "all" && wanted != Backend::name) return true;
  const std::string why = Backend::unavailable_reason();
  if (!why.empty()) {
    std::fprintf(stderr, "bench_gpu_gemm: %s %s: %s\n", wanted == "all" ? "skipping" : "cannot run", Backend::name,
                 why.c_str());
    return wanted == "all";
  }
  register_benchmarks<Backend>();
  ++registered;
  return true;
}

// --help, this program's own option and Google Benchmark's.
void print_usage() {
  std::fputs(
      "usage: bench_gpu_gemm [--backend=opencl|cuda|all] [Google Benchmark options]\n"
      "\n"
      "GFLOP/s of the generated GEMM (a MatMul partition, fp32, device buffers,\n"
      "1 or 10 executions per iteration and one wait) on the default device of\n"
      "each GPU backend built and available (UNICACHE_OPENCL_DEVICE and\n"
      "UNICACHE_CUDA_DEVICE pick others), square sizes: BM_gemm/<backend>/n:N/\n"
      "constant_b:0|1/queued:1|10; BM_constant_check/<backend>/mode:M, what checking a\n"
      "constant weight's contents costs per execution; and BM_compile_new_shape/\n"
      "<backend>/mode:M, compile() of a new shape, agnostic (0) or adaptive (2).\n"
      "\n"
      "  --backend=B, --backend B  opencl, cuda, or all (the default: each\n"
      "                            available backend; one named alone must be)\n"
      "\n"
      "Google Benchmark options:\n",
      stdout);
  benchmark::PrintDefaultHelp();
}

}  // namespace

int main(int argc, char** argv) {
  // --backend is this program's own flag: taken out of argv before Google
  // Benchmark sees it (and rejects it as unknown).
  std::string wanted = "all";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--backend=", 10) == 0) {
      wanted = argv[i] + 10;
    } else if (std::strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      wanted = argv[++i];
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  if (wanted != "all" && wanted != "opencl" && wanted != "cuda") {
    std::fprintf(stderr, "bench_gpu_gemm: --backend must be opencl, cuda or all, not '%s'\n", wanted.c_str());
    return 2;
  }
  benchmark::Initialize(&argc, argv, print_usage);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  bool ok = true;
  int registered = 0;
#if UNICACHE_GPU_WITH_OPENCL
  ok = add_backend<gpu_backends::opencl_backend>(wanted, registered) && ok;
#else
  if (wanted == "opencl") {
    std::fprintf(stderr, "bench_gpu_gemm: this build has no OpenCL backend (UNICACHE_WITH_OPENCL=OFF)\n");
    return 2;
  }
#endif
#if UNICACHE_GPU_WITH_CUDA
  ok = add_backend<gpu_backends::cuda_backend>(wanted, registered) && ok;
#else
  if (wanted == "cuda") {
    std::fprintf(stderr, "bench_gpu_gemm: this build has no CUDA backend (UNICACHE_WITH_CUDA=OFF)\n");
    return 2;
  }
#endif
  if (!ok) return 1;
  if (registered == 0) {
    std::fprintf(stderr, "bench_gpu_gemm: no GPU backend is available\n");
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
