// The oneDNN CPU backend: numerics of every op and fused pattern against
// plain C++ references, constant weights through the constant tensor cache,
// and compiled partitions through the kernel cache.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <oneapi/dnnl/dnnl.hpp>
#include <thread>

#include "reference_ops.hpp"
#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"
#include "unicache/onednn_cpu.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

// Tolerances (documented in docs/api.md): MatMul accumulates K products in
// f32, so its absolute tolerance grows with sqrt(K); eltwise ops and
// Softmax are within a few ulps of the libm reference.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > atol + rtol * std::abs(want[i])) {
      FAIL() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
    }
  }
}
double matmul_atol(std::int64_t k) { return 1e-5 * std::sqrt(static_cast<double>(k)) + 1e-6; }

struct fixture : ::testing::Test {
  engine eng = onednn_cpu::make_engine();
  stream strm = make_stream(eng);

  // Compiles the graph's only partition for `shapes` and runs it.
  std::vector<float> run(graph& g, const std::vector<shape_t>& shapes, std::vector<std::vector<float>*> data,
                         std::uint64_t version = 0) {
    g.finalize();
    EXPECT_EQ(g.partitions().size(), 1u);
    const partition& p = g.partitions()[0];
    compiled_partition cp = compile(p, shapes, eng);
    std::vector<tensor> in;
    for (std::size_t i = 0; i < shapes.size(); ++i) in.push_back({cp.inputs()[i], data[i]->data(), version});
    std::vector<float> out(static_cast<std::size_t>(elements(cp.outputs()[0].shape)));
    cp.execute(strm, in, {{cp.outputs()[0], out.data(), 0}});
    return out;
  }
};

struct mm_case {
  std::int64_t m, k, n;
  bool ta, tb, constant_b;
};

class MatMulNumerics : public fixture, public ::testing::WithParamInterface<mm_case> {};

TEST_P(MatMulNumerics, MatchesTheReference) {
  const mm_case c = GetParam();
  graph g;
  const shape_t as = c.ta ? shape_t{c.k, c.m} : shape_t{c.m, c.k};
  const shape_t bs = c.tb ? shape_t{c.n, c.k} : shape_t{c.k, c.n};
  auto a = g.tensor({-1, as[1]}), b = g.tensor(bs, c.constant_b ? tensor_property::constant : tensor_property::variable);
  auto y = g.tensor({-1, -1});
  if (c.ta) a = g.tensor({as[0], -1});
  g.add_op(op_kind::matmul, {a, b}, {y}, c.ta, c.tb);
  auto av = random_data(as, 1), bv = random_data(bs, 2);
  const auto got = run(g, {as, bs}, {&av, &bv});
  expect_close(got, ref_matmul(av, bv, c.m, c.k, c.n, c.ta, c.tb), matmul_atol(c.k), 1e-5, "matmul");
}

INSTANTIATE_TEST_SUITE_P(OddShapes, MatMulNumerics,
                         ::testing::Values(mm_case{1, 7, 129, false, false, true}, mm_case{7, 129, 1000, false, true, true},
                                           mm_case{129, 1000, 7, true, false, false},
                                           mm_case{1000, 1, 129, true, true, false},
                                           mm_case{1000, 129, 1000, false, false, true},
                                           mm_case{129, 7, 1, false, true, false}));

TEST_F(fixture, FusedMatMulBiasGeluMatchesTheReference) {
  const std::int64_t m = 129, k = 1000, n = 7;
  graph g;
  auto x = g.tensor({-1, k}), w = g.tensor({k, n}, tensor_property::constant), b = g.tensor({n}, tensor_property::constant);
  auto mm = g.tensor({-1, n}), s = g.tensor({-1, n}), y = g.tensor({-1, n});
  g.add_op(op_kind::matmul, {x, w}, {mm});
  g.add_op(op_kind::add, {b, mm}, {s});  // the operand first: still fused
  g.add_op(op_kind::gelu_erf, {s}, {y});
  auto xv = random_data({m, k}, 3), wv = random_data({k, n}, 4), bv = random_data({n}, 5);
  const auto got = run(g, {{m, k}, {k, n}, {n}}, {&xv, &wv, &bv});
  auto want = ref_binary(ref_matmul(xv, wv, m, k, n, false, false), {m, n}, bv, {n}, {m, n}, true);
  for (auto& v : want) v = ref_eltwise(4, v);
  expect_close(got, want, matmul_atol(k), 1e-5, "matmul+bias+gelu");
}

TEST_F(fixture, FusedChainsWithEveryPostOpMatchTheReference) {
  // MatMul -> Multiply (full) -> Add (per-row [M,1]: may need the unfused
  // path) -> ReLU -> Sigmoid -> Tanh -> GELU(tanh)
  const std::int64_t m = 7, k = 129, n = 1000;
  graph g;
  auto x = g.tensor({m, k}), w = g.tensor({k, n}), scale = g.tensor({m, n}), row = g.tensor({m, 1});
  std::vector<logical_tensor> t;
  for (int i = 0; i < 6; ++i) t.push_back(g.tensor({m, n}));
  g.add_op(op_kind::matmul, {x, w}, {t[0]});
  g.add_op(op_kind::multiply, {t[0], scale}, {t[1]});
  g.add_op(op_kind::add, {t[1], row}, {t[2]});
  g.add_op(op_kind::relu, {t[2]}, {t[3]});
  g.add_op(op_kind::sigmoid, {t[3]}, {t[4]});
  g.add_op(op_kind::tanh, {t[4]}, {t[5]});
  auto out = g.tensor({m, n});
  g.add_op(op_kind::gelu_tanh, {t[5]}, {out});
  auto xv = random_data({m, k}, 6), wv = random_data({k, n}, 7), sv = random_data({m, n}, 8), rv = random_data({m, 1}, 9);
  const auto got = run(g, {{m, k}, {k, n}, {m, n}, {m, 1}}, {&xv, &wv, &sv, &rv});
  auto want = ref_binary(ref_matmul(xv, wv, m, k, n, false, false), {m, n}, sv, {m, n}, {m, n}, false);
  want = ref_binary(want, {m, n}, rv, {m, 1}, {m, n}, true);
  for (auto& v : want) v = ref_eltwise(5, ref_eltwise(7, ref_eltwise(6, ref_eltwise(3, v))));
  expect_close(got, want, matmul_atol(k), 1e-5, "matmul chain");
}

TEST_F(fixture, BatchedMatMulWithASharedWeightMatchesTheReference) {
  const std::int64_t batch = 3, m = 7, k = 129, n = 1;
  graph g;
  auto x = g.tensor({batch, m, k}), w = g.tensor({k, n}, tensor_property::constant), y = g.tensor({batch, m, n});
  g.add_op(op_kind::matmul, {x, w}, {y});
  auto xv = random_data({batch, m, k}, 10), wv = random_data({k, n}, 11);
  const auto got = run(g, {{batch, m, k}, {k, n}}, {&xv, &wv});
  std::vector<float> want;
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    std::vector<float> slice(xv.begin() + bi * m * k, xv.begin() + (bi + 1) * m * k);
    const auto part = ref_matmul(slice, wv, m, k, n, false, false);
    want.insert(want.end(), part.begin(), part.end());
  }
  expect_close(got, want, matmul_atol(k), 1e-5, "batched matmul");
}

struct binary_case {
  shape_t a, b;
  bool add;
};
class BinaryNumerics : public fixture, public ::testing::WithParamInterface<binary_case> {};

TEST_P(BinaryNumerics, BroadcastsLikeNumpy) {
  const binary_case c = GetParam();
  graph g;
  auto a = g.tensor(c.a), b = g.tensor(c.b);
  const shape_t out_shape = broadcast_shape(c.a, c.b, "test");
  auto y = g.tensor(out_shape);
  g.add_op(c.add ? op_kind::add : op_kind::multiply, {a, b}, {y});
  auto av = random_data(c.a, 12), bv = random_data(c.b, 13);
  expect_close(run(g, {c.a, c.b}, {&av, &bv}), ref_binary(av, c.a, bv, c.b, out_shape, c.add), 1e-6, 1e-6, "binary");
}

INSTANTIATE_TEST_SUITE_P(Shapes, BinaryNumerics,
                         ::testing::Values(binary_case{{129, 7}, {129, 7}, true}, binary_case{{1000, 129}, {129}, false},
                                           binary_case{{1, 7}, {129, 7}, true},     // first operand broadcasts
                                           binary_case{{129, 1}, {1, 1000}, false},  // both broadcast
                                           binary_case{{7}, {1}, true}, binary_case{{3, 1, 7}, {129, 1}, false}));

class UnaryNumerics : public fixture, public ::testing::WithParamInterface<op_kind> {};

TEST_P(UnaryNumerics, MatchesTheReference) {
  const op_kind kind = GetParam();
  for (const shape_t& s : {shape_t{1}, shape_t{7, 129}, shape_t{1000, 7}}) {
    graph g;
    auto x = g.tensor(s), y = g.tensor(s);
    g.add_op(kind, {x}, {y});
    auto xv = random_data(s, 14, -4.f, 4.f);
    std::vector<float> want;
    if (kind == op_kind::softmax) {
      want = ref_softmax(xv, elements(s) / s.back(), s.back());
    } else {
      for (float v : xv) want.push_back(ref_eltwise(static_cast<int>(kind), v));
    }
    expect_close(run(g, {s}, {&xv}), want, 2e-6, 2e-5, to_string(kind));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryNumerics,
                         ::testing::Values(op_kind::relu, op_kind::gelu_erf, op_kind::gelu_tanh, op_kind::sigmoid,
                                           op_kind::tanh, op_kind::softmax),
                         [](const auto& info) {
                           std::string n = to_string(info.param);
                           std::erase_if(n, [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); });
                           return n;
                         });

// --- Constant weights and the caches ----------------------------------------

// Whether this CPU's oneDNN keeps a weight in another layout than the
// user's (otherwise there is nothing to pack, and the backend uses the
// user's memory directly).
bool primitive_repacks(std::int64_t m, std::int64_t k, std::int64_t n) {
  using md = dnnl::memory::desc;
  using dnnl::memory;
  const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  const md a({m, k}, memory::data_type::f32, memory::format_tag::ab);
  const md b_any({k, n}, memory::data_type::f32, memory::format_tag::any);
  const md b({k, n}, memory::data_type::f32, memory::format_tag::ab);
  const md c({m, n}, memory::data_type::f32, memory::format_tag::ab);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b_any, c), e).weights_desc() != b;
}

struct weights_fixture : fixture {
  static constexpr std::int64_t m = 16, k = 64, n = 48;
  graph g;
  compiled_partition cp;
  std::vector<float> x = random_data({m, k}, 20), w = random_data({k, n}, 21);

  void SetUp() override {
    if (!primitive_repacks(m, k, n)) GTEST_SKIP() << "this CPU's oneDNN keeps the user's weight layout: nothing to pack";
    auto xt = g.tensor({-1, k}), wt = g.tensor({k, n}, tensor_property::constant), yt = g.tensor({-1, n});
    g.add_op(op_kind::matmul, {xt, wt}, {yt});
    g.finalize();
    cp = compile(g.partitions()[0], {{m, k}, {k, n}}, eng);
  }
  std::vector<float> execute(stream& s, std::uint64_t version = 0, std::vector<float>* weight = nullptr) {
    std::vector<float> y(m * n);
    cp.execute(s, {{cp.inputs()[0], x.data(), 0}, {cp.inputs()[1], (weight ? weight : &w)->data(), version}},
               {{cp.outputs()[0], y.data(), 0}});
    return y;
  }
  cache_stats stats() { return constant_tensor_cache().stats(eng.scope()); }
};

TEST_F(weights_fixture, FirstExecutionPacksTheWeightAndTheRestReuseIt) {
  const cache_stats before = stats();
  const auto first = execute(strm);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(execute(strm), first);
  const cache_stats after = stats();
  EXPECT_EQ(after.misses - before.misses, 1u) << "one pack";
  EXPECT_EQ(after.inserts - before.inserts, 1u);
  expect_close(first, ref_matmul(x, w, m, k, n, false, false), matmul_atol(k), 1e-5, "packed weight");
}

TEST_F(weights_fixture, ConcurrentFirstExecutionsPackOnce) {
  const cache_stats before = stats();
  constexpr int kThreads = 8;
  std::latch start(kThreads);
  std::vector<std::vector<float>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      stream s = make_stream(eng);  // one stream per thread
      start.arrive_and_wait();
      results[t] = execute(s, /*version=*/777);
    });
  }
  for (auto& t : threads) t.join();
  const cache_stats after = stats();
  EXPECT_EQ(after.misses - before.misses, 1u) << "eight first executions, one pack";
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
}

TEST_F(weights_fixture, ANewVersionOfTheWeightIsPackedAgain) {
  execute(strm, 1);
  const cache_stats before = stats();
  for (float& v : w) v = -v;  // the framework changed the weight in place...
  const auto y = execute(strm, 2);  // ...and bumped its version
  EXPECT_EQ(stats().misses - before.misses, 1u);
  expect_close(y, ref_matmul(x, w, m, k, n, false, false), matmul_atol(k), 1e-5, "repacked weight");
}

TEST_F(weights_fixture, EvictionDropsTheBackendsHandleAndTheNextExecutionRepacks) {
  execute(strm, 30);
  const cache_stats before = stats();
  constant_tensor_cache().clear();  // evicts every packed weight: callbacks run
  EXPECT_EQ(stats().entries, 0u);
  const auto y = execute(strm, 30);
  EXPECT_EQ(stats().misses - before.misses, 1u) << "packed again after eviction";
  expect_close(y, ref_matmul(x, w, m, k, n, false, false), matmul_atol(k), 1e-5, "after eviction");
}

TEST_F(fixture, ASeenShapeCompilesFromTheCacheAndANewShapeCompilesOnce) {
  graph g;
  auto x = g.tensor({-1, 32}), w = g.tensor({32, 16}), y = g.tensor({-1, 16});
  g.add_op(op_kind::matmul, {x, w}, {y});
  g.finalize();
  const partition& p = g.partitions()[0];
  const cache_stats before = kernel_cache().stats(eng.scope());
  compiled_partition a = compile(p, {{5, 32}, {32, 16}}, eng);
  compiled_partition b = compile(p, {{5, 32}, {32, 16}}, eng);
  compiled_partition c = compile(p, {{6, 32}, {32, 16}}, eng);
  EXPECT_EQ(a.outputs()[0].shape, (shape_t{5, 16}));
  EXPECT_EQ(c.outputs()[0].shape, (shape_t{6, 16}));
  const cache_stats after = kernel_cache().stats(eng.scope());
  EXPECT_GE(after.hits - before.hits, 1u) << "the second compile of [5,32] is a hit";
  // Two partition entries (5 and 6 rows) and their two primitives.
  EXPECT_EQ(after.inserts - before.inserts, 4u);
}

TEST_F(fixture, BadShapesAreRejectedWithClearErrors) {
  graph g;
  auto x = g.tensor({-1, 32}), w = g.tensor({32, 16}), y = g.tensor({-1, 16});
  g.add_op(op_kind::matmul, {x, w}, {y});
  g.finalize();
  const partition& p = g.partitions()[0];
  EXPECT_THROW(compile(p, {{5, 31}, {32, 16}}, eng), compile_error) << "declared K is 32";
  EXPECT_THROW(compile(p, {{5, 32}}, eng), compile_error) << "one shape missing";
  EXPECT_THROW(compile(p, {{-1, 32}, {32, 16}}, eng), compile_error) << "not concrete";
  compiled_partition cp = compile(p, {{5, 32}, {32, 16}}, eng);
  std::vector<float> buf(5 * 32);
  try {
    cp.execute(strm, {{cp.inputs()[0], buf.data(), 0}}, {});
    FAIL() << "accepted a wrong number of tensors";
  } catch (const compile_error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 2 inputs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace unicache
