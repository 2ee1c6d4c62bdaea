// bench_opencl_gemm: GFLOP/s of the generated GEMM (a MatMul partition,
// fp32, device buffers, one execution per iteration including its wait) on
// the default OpenCL device, square sizes. scripts/torch_matmul.py measures
// torch.matmul on the same GPU for the comparison in docs/benchmarks.md.
// BM_opencl_constant_check/<mode>: one execution of a [32,768]x[768,3072]
// MatMul with a constant (packed) weight under each constant_check mode:
// what checking the weight's contents costs per execution on the device.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "unicache/compiler.hpp"
#include "unicache/config.hpp"
#include "unicache/graph.hpp"
#include "unicache/opencl.hpp"

namespace {

using namespace unicache;

void BM_opencl_gemm(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const bool constant_b = state.range(1) != 0;
  graph g;
  auto a = g.tensor({-1, n}), b = g.tensor({n, n}, constant_b ? tensor_property::constant : tensor_property::variable);
  auto c = g.tensor({-1, n});
  g.add_op(op_kind::matmul, {a, b}, {c});
  g.finalize();
  engine eng = opencl::make_engine();
  stream strm = make_stream(eng);
  std::vector<float> host(static_cast<std::size_t>(n * n));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto& v : host) v = dist(rng);
  const std::size_t bytes = host.size() * sizeof(float);
  cl_mem ab = opencl::make_buffer(eng, bytes, host.data()), bb = opencl::make_buffer(eng, bytes, host.data());
  cl_mem cb = opencl::make_buffer(eng, bytes);
  compiled_partition cp = compile(g.partitions()[0], {{n, n}, {n, n}}, eng);
  const std::vector<tensor> in{{cp.inputs()[0], ab}, {cp.inputs()[1], bb}};
  const std::vector<tensor> out{{cp.outputs()[0], cb}};
  cp.execute(strm, in, out);  // builds, packs a constant B, warms up
  for (auto _ : state) cp.execute(strm, in, out);
  state.counters["GFLOP"] =
      benchmark::Counter(2.0 * static_cast<double>(n) * n * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(opencl::info(eng).device_name);
  for (cl_mem m : {ab, bb, cb}) clReleaseMemObject(m);
}
BENCHMARK(BM_opencl_gemm)
    ->ArgNames({"n", "constant_b"})
    ->ArgsProduct({{256, 1024, 2048, 4096}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_opencl_constant_check(benchmark::State& state) {
  const auto mode = static_cast<constant_check>(state.range(0));
  const constant_check saved = current_constant_check();
  set_constant_check(mode);
  constexpr std::int64_t m = 32, k = 768, n = 3072;
  graph g;
  auto a = g.tensor({-1, k}), b = g.tensor({k, n}, tensor_property::constant), c = g.tensor({-1, n});
  g.add_op(op_kind::matmul, {a, b}, {c});
  g.finalize();
  engine eng = opencl::make_engine();
  stream strm = make_stream(eng);
  std::vector<float> host(static_cast<std::size_t>(k * n), 0.25f);
  cl_mem ab = opencl::make_buffer(eng, static_cast<std::size_t>(m * k) * sizeof(float), host.data());
  cl_mem bb = opencl::make_buffer(eng, host.size() * sizeof(float), host.data());
  cl_mem cb = opencl::make_buffer(eng, static_cast<std::size_t>(m * n) * sizeof(float));
  compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}}, eng);
  const std::vector<tensor> in{{cp.inputs()[0], ab}, {cp.inputs()[1], bb}};
  const std::vector<tensor> out{{cp.outputs()[0], cb}};
  cp.execute(strm, in, out);  // builds and packs
  for (auto _ : state) cp.execute(strm, in, out);
  state.SetLabel(std::string(to_string(mode)) + " " + opencl::info(eng).device_name);
  for (cl_mem mem : {ab, bb, cb}) clReleaseMemObject(mem);
  set_constant_check(saved);
}
BENCHMARK(BM_opencl_constant_check)
    ->ArgName("mode")
    ->Arg(static_cast<int>(constant_check::none))
    ->Arg(static_cast<int>(constant_check::sampled))
    ->Arg(static_cast<int>(constant_check::full))
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
