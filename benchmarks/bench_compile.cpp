// bench_compile: the cost of compile() for a shape seen before (a
// compiled-partition cache hit, key construction included) against what
// oneDNN costs for the same matmul when its own primitive cache hits
// (creating the primitive_desc and the primitive again), the execution
// overhead of a compiled partition over calling the oneDNN primitive, and
// what checking a packed weight's contents costs per execution
// (BM_execute_constant_check/<mode>: none, sampled, full; the hashes alone:
// BM_constant_sample_hash, BM_constant_fingerprint).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "unicache/compiler.hpp"
#include "unicache/config.hpp"
#include "unicache/constant_registry.hpp"
#include "unicache/graph.hpp"
#include "unicache/onednn_cpu.hpp"

namespace {

using namespace unicache;

// MatMul [M,768]x[768,3072] + bias + GELU: the FFN's first partition.
struct ffn_partition {
  std::int64_t m, k = 768, n = 3072;
  graph g;
  explicit ffn_partition(std::int64_t rows) : m(rows) {
    auto x = g.tensor({-1, k}), w = g.tensor({k, n}, tensor_property::constant), b = g.tensor({n}, tensor_property::constant);
    auto h = g.tensor({-1, n}), hb = g.tensor({-1, n}), y = g.tensor({-1, n});
    g.add_op(op_kind::matmul, {x, w}, {h});
    g.add_op(op_kind::add, {h, b}, {hb});
    g.add_op(op_kind::gelu_erf, {hb}, {y});
    g.finalize();
  }
  std::vector<std::vector<std::int64_t>> shapes() const { return {{m, k}, {k, n}, {n}}; }
};

void BM_compile_seen_shape_unicache(benchmark::State& state) {
  ffn_partition f(32);
  engine eng = onednn_cpu::make_engine();
  compile(f.g.partitions()[0], f.shapes(), eng);  // first compile: a miss
  for (auto _ : state) {
    compiled_partition cp = compile(f.g.partitions()[0], f.shapes(), eng);
    benchmark::DoNotOptimize(cp);
  }
}

void BM_compile_seen_shape_onednn_primitive_cache(benchmark::State& state) {
  using dnnl::algorithm, dnnl::memory, dnnl::matmul, dnnl::post_ops, dnnl::primitive_attr;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  const memory::desc a({32, 768}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc w({768, 3072}, memory::data_type::f32, memory::format_tag::any);
  const memory::desc bias({1, 3072}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc c({32, 3072}, memory::data_type::f32, memory::format_tag::ab);
  auto make = [&] {
    post_ops ops;
    ops.append_binary(algorithm::binary_add, bias);
    ops.append_eltwise(1.f, algorithm::eltwise_gelu_erf, 0.f, 0.f);
    primitive_attr attr;
    attr.set_post_ops(ops);
    matmul::primitive_desc pd(matmul::desc(a, w, c), attr, eng);
    return matmul(pd);
  };
  make();  // warm oneDNN's primitive cache
  for (auto _ : state) {
    matmul p = make();
    benchmark::DoNotOptimize(p);
  }
}

// Execution: a small shape so that the fixed cost shows.
constexpr std::int64_t kM = 1, kK = 64, kN = 64;

void BM_execute_compiled_partition(benchmark::State& state) {
  graph g;
  auto x = g.tensor({kM, kK}), w = g.tensor({kK, kN}), y = g.tensor({kM, kN});
  g.add_op(op_kind::matmul, {x, w}, {y});
  g.finalize();
  engine eng = onednn_cpu::make_engine();
  stream strm = make_stream(eng);
  compiled_partition cp = compile(g.partitions()[0], {{kM, kK}, {kK, kN}}, eng);
  std::vector<float> xv(kM * kK, 1.f), wv(kK * kN, 1.f), yv(kM * kN);
  const std::vector<tensor> in{{cp.inputs()[0], xv.data()}, {cp.inputs()[1], wv.data()}};
  const std::vector<tensor> out{{cp.outputs()[0], yv.data()}};
  for (auto _ : state) cp.execute(strm, in, out);
}

void BM_execute_onednn_primitive_directly(benchmark::State& state) {
  using dnnl::memory, dnnl::matmul;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const memory::desc a({kM, kK}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc w({kK, kN}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc c({kM, kN}, memory::data_type::f32, memory::format_tag::ab);
  matmul p(matmul::primitive_desc(matmul::desc(a, w, c), eng));
  std::vector<float> xv(kM * kK, 1.f), wv(kK * kN, 1.f), yv(kM * kN);
  // The best case for the direct call: memory objects and arguments made once.
  const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(a, eng, xv.data())},
                                             {DNNL_ARG_WEIGHTS, memory(w, eng, wv.data())},
                                             {DNNL_ARG_DST, memory(c, eng, yv.data())}};
  for (auto _ : state) {
    p.execute(strm, args);
    strm.wait();
  }
}

// The FFN partition (a 9 MB constant weight, packed by the shape-specialized
// primitive) executed at M = 32 under each constant_check mode.
void BM_execute_constant_check(benchmark::State& state) {
  const auto mode = static_cast<constant_check>(state.range(0));
  const kernel_shapes saved_shapes = current_kernel_shapes();
  const constant_check saved_check = current_constant_check();
  set_kernel_shapes(kernel_shapes::specialized);
  set_constant_check(mode);
  ffn_partition f(32);
  engine eng = onednn_cpu::make_engine();
  stream strm = make_stream(eng);
  compiled_partition cp = compile(f.g.partitions()[0], f.shapes(), eng);
  std::vector<float> xv(static_cast<std::size_t>(f.m * f.k), 0.5f), wv(static_cast<std::size_t>(f.k * f.n), 0.25f);
  std::vector<float> bv(static_cast<std::size_t>(f.n), 1.f), yv(static_cast<std::size_t>(f.m * f.n));
  const std::vector<tensor> in{{cp.inputs()[0], xv.data()}, {cp.inputs()[1], wv.data()}, {cp.inputs()[2], bv.data()}};
  const std::vector<tensor> out{{cp.outputs()[0], yv.data()}};
  cp.execute(strm, in, out);  // packs
  for (auto _ : state) cp.execute(strm, in, out);
  state.SetLabel(std::string(to_string(mode)));
  set_constant_check(saved_check);
  set_kernel_shapes(saved_shapes);
}

// The host-side work of each check on the FFN weight (768 x 3072 floats,
// 9 MB): the sampled hash every execution pays, and the full fingerprint
// paid when a weight is first packed (or every execution with `full`).
void BM_constant_sample_hash(benchmark::State& state) {
  std::vector<float> w(768 * 3072, 0.25f);
  for (auto _ : state) benchmark::DoNotOptimize(host_sample_hash(w.data(), w.size() * sizeof(float)));
}

void BM_constant_fingerprint(benchmark::State& state) {
  std::vector<float> w(768 * 3072, 0.25f);
  for (auto _ : state) benchmark::DoNotOptimize(fingerprint_of(w.data(), w.size() * sizeof(float)));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(w.size() * sizeof(float)));
}

BENCHMARK(BM_compile_seen_shape_unicache);
BENCHMARK(BM_compile_seen_shape_onednn_primitive_cache);
BENCHMARK(BM_execute_compiled_partition);
BENCHMARK(BM_execute_onednn_primitive_directly);
BENCHMARK(BM_execute_constant_check)
    ->ArgName("mode")
    ->Arg(static_cast<int>(constant_check::none))
    ->Arg(static_cast<int>(constant_check::sampled))
    ->Arg(static_cast<int>(constant_check::full))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_constant_sample_hash);
BENCHMARK(BM_constant_fingerprint)->Unit(benchmark::kMicrosecond);

// --help (Google Benchmark calls it, then exits 0).
void print_usage() {
  std::fputs(
      "usage: bench_compile [Google Benchmark options]\n"
      "\n"
      "What compile() costs for a shape seen before (a compiled-partition cache\n"
      "hit) against oneDNN's own primitive cache hit for the same matmul, the\n"
      "overhead of executing a compiled partition over the oneDNN primitive, and\n"
      "what checking a packed weight's contents costs per execution\n"
      "(BM_execute_constant_check/mode:M: none, sampled, full), on the oneDNN CPU\n"
      "backend.\n"
      "\n"
      "Google Benchmark options:\n",
      stdout);
  benchmark::PrintDefaultHelp();
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv, print_usage);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
