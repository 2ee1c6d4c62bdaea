// Numerics every backend must meet: each op and fused pattern on random data
// and odd shapes (1, 7, 129, 1000), against the plain C++ references. A
// backend's test instantiates the suite with a Device type that has
//   engine eng; stream strm;
//   std::vector<float> run(graph&, const std::vector<shape_t>&, std::vector<std::vector<float>*>, version);
// (run compiles the graph's only partition for the shapes, executes it on
// the data and returns the output).
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(cpu, BackendNumerics, cpu_device);
//   INSTANTIATE_TYPED_TEST_SUITE_P(cpu_specialized, BackendNumerics, specialized<cpu_device>);
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "reference_ops.hpp"
#include "scoped_settings.hpp"
#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"

namespace unicache::testing {

// Tolerances (documented in docs/api.md): MatMul accumulates K products in
// f32, so its absolute tolerance grows with sqrt(K); eltwise ops and
// Softmax are within a few ulps of the libm reference.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > atol + rtol * std::abs(want[i])) {
      FAIL() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
    }
  }
}
inline double matmul_atol(std::int64_t k) { return 1e-5 * std::sqrt(static_cast<double>(k)) + 1e-6; }

// A Device that compiles shape-specialized kernels (the default is agnostic).
template <typename Device>
struct specialized : Device {
  scoped_kernel_shapes mode{kernel_shapes::specialized};
};

// A Device with `std::string unavailable() const` (non-empty: why the
// device is missing) skips the suite instead of failing it.
template <typename Device>
class BackendNumerics : public ::testing::Test {
 protected:
  void SetUp() override {
    if constexpr (requires { device.unavailable(); }) {
      if (const std::string why = device.unavailable(); !why.empty()) GTEST_SKIP() << why;
    }
  }
  Device device;
  std::vector<float> run(graph& g, const std::vector<shape_t>& shapes, std::vector<std::vector<float>*> data) {
    return device.run(g, shapes, std::move(data), 0);
  }
};
TYPED_TEST_SUITE_P(BackendNumerics);

TYPED_TEST_P(BackendNumerics, MatMulWithOddShapesTransposesAndConstantWeights) {
  struct mm_case {
    std::int64_t m, k, n;
    bool ta, tb, constant_b;
  };
  for (const mm_case c : {mm_case{1, 7, 129, false, false, true}, mm_case{7, 129, 1000, false, true, true},
                          mm_case{129, 1000, 7, true, false, false}, mm_case{1000, 1, 129, true, true, false},
                          mm_case{1000, 129, 1000, false, false, true}, mm_case{129, 7, 1, false, true, false},
                          mm_case{1, 1, 1, false, false, false}, mm_case{130, 17, 257, true, true, true},
                          mm_case{33, 128, 96, false, true, false},  // an unpacked transposed B, N % 4 == 0
                          // K a multiple of every BK, M and N not of the tiles: work-groups inside the
                          // matrix (the GEMM's loop without bounds tests) and at its edges in one GEMM.
                          mm_case{130, 64, 257, false, false, true}, mm_case{130, 64, 260, false, true, false},
                          mm_case{130, 64, 260, true, false, false}}) {
    SCOPED_TRACE(::testing::Message() << "M=" << c.m << " K=" << c.k << " N=" << c.n << " ta=" << c.ta
                                      << " tb=" << c.tb << " constant_b=" << c.constant_b);
    graph g;
    const shape_t as = c.ta ? shape_t{c.k, c.m} : shape_t{c.m, c.k};
    const shape_t bs = c.tb ? shape_t{c.n, c.k} : shape_t{c.k, c.n};
    auto a = c.ta ? g.tensor({as[0], -1}) : g.tensor({-1, as[1]});
    auto b = g.tensor(bs, c.constant_b ? tensor_property::constant : tensor_property::variable);
    auto y = g.tensor({-1, -1});
    g.add_op(op_kind::matmul, {a, b}, {y}, c.ta, c.tb);
    auto av = random_data(as, 1), bv = random_data(bs, 2);
    const auto got = this->run(g, {as, bs}, {&av, &bv});
    expect_close(got, ref_matmul(av, bv, c.m, c.k, c.n, c.ta, c.tb), matmul_atol(c.k), 1e-5, "matmul");
  }
}

TYPED_TEST_P(BackendNumerics, FusedMatMulBiasGeluMatchesTheReference) {
  const std::int64_t m = 129, k = 1000, n = 7;
  graph g;
  auto x = g.tensor({-1, k}), w = g.tensor({k, n}, tensor_property::constant), b = g.tensor({n}, tensor_property::constant);
  auto mm = g.tensor({-1, n}), s = g.tensor({-1, n}), y = g.tensor({-1, n});
  g.add_op(op_kind::matmul, {x, w}, {mm});
  g.add_op(op_kind::add, {b, mm}, {s});  // the operand first: still fused
  g.add_op(op_kind::gelu_erf, {s}, {y});
  auto xv = random_data({m, k}, 3), wv = random_data({k, n}, 4), bv = random_data({n}, 5);
  const auto got = this->run(g, {{m, k}, {k, n}, {n}}, {&xv, &wv, &bv});
  auto want = ref_binary(ref_matmul(xv, wv, m, k, n, false, false), {m, n}, bv, {n}, {m, n}, true);
  for (auto& v : want) v = ref_eltwise(4, v);
  expect_close(got, want, matmul_atol(k), 1e-5, "matmul+bias+gelu");
}

TYPED_TEST_P(BackendNumerics, FusedChainsWithEveryPostOpMatchTheReference) {
  // MatMul -> Multiply (full) -> Add (per-row [M,1]) -> ReLU -> Sigmoid -> Tanh -> GELU(tanh)
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
  const auto got = this->run(g, {{m, k}, {k, n}, {m, n}, {m, 1}}, {&xv, &wv, &sv, &rv});
  auto want = ref_binary(ref_matmul(xv, wv, m, k, n, false, false), {m, n}, sv, {m, n}, {m, n}, false);
  want = ref_binary(want, {m, n}, rv, {m, 1}, {m, n}, true);
  for (auto& v : want) v = ref_eltwise(5, ref_eltwise(7, ref_eltwise(6, ref_eltwise(3, v))));
  expect_close(got, want, matmul_atol(k), 1e-5, "matmul chain");
}

TYPED_TEST_P(BackendNumerics, BatchedMatMulWithASharedWeightMatchesTheReference) {
  const std::int64_t batch = 3, m = 7, k = 129, n = 1;
  graph g;
  auto x = g.tensor({batch, m, k}), w = g.tensor({k, n}, tensor_property::constant), y = g.tensor({batch, m, n});
  g.add_op(op_kind::matmul, {x, w}, {y});
  auto xv = random_data({batch, m, k}, 10), wv = random_data({k, n}, 11);
  const auto got = this->run(g, {{batch, m, k}, {k, n}}, {&xv, &wv});
  std::vector<float> want;
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    std::vector<float> slice(xv.begin() + bi * m * k, xv.begin() + (bi + 1) * m * k);
    const auto part = ref_matmul(slice, wv, m, k, n, false, false);
    want.insert(want.end(), part.begin(), part.end());
  }
  expect_close(got, want, matmul_atol(k), 1e-5, "batched matmul");
}

TYPED_TEST_P(BackendNumerics, BatchedMatMulWithBatchedOperandsMatchesTheReference) {
  const std::int64_t batch = 2, m = 129, k = 7, n = 33;
  graph g;
  auto x = g.tensor({batch, m, k}), w = g.tensor({batch, k, n}), bias = g.tensor({batch, 1, n});
  auto mm = g.tensor({batch, m, n}), y = g.tensor({batch, m, n});
  g.add_op(op_kind::matmul, {x, w}, {mm});
  g.add_op(op_kind::add, {mm, bias}, {y});
  auto xv = random_data({batch, m, k}, 15), wv = random_data({batch, k, n}, 16), bv = random_data({batch, 1, n}, 17);
  const auto got = this->run(g, {{batch, m, k}, {batch, k, n}, {batch, 1, n}}, {&xv, &wv, &bv});
  std::vector<float> want;
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    std::vector<float> xs(xv.begin() + bi * m * k, xv.begin() + (bi + 1) * m * k);
    std::vector<float> ws(wv.begin() + bi * k * n, wv.begin() + (bi + 1) * k * n);
    std::vector<float> bs(bv.begin() + bi * n, bv.begin() + (bi + 1) * n);
    const auto part = ref_binary(ref_matmul(xs, ws, m, k, n, false, false), {m, n}, bs, {1, n}, {m, n}, true);
    want.insert(want.end(), part.begin(), part.end());
  }
  expect_close(got, want, matmul_atol(k), 1e-5, "batched matmul with batched bias");
}

TYPED_TEST_P(BackendNumerics, BinaryOpsBroadcastLikeNumpy) {
  struct binary_case {
    shape_t a, b;
    bool add;
  };
  for (const binary_case& c : {binary_case{{129, 7}, {129, 7}, true}, binary_case{{1000, 129}, {129}, false},
                               binary_case{{1, 7}, {129, 7}, true},     // first operand broadcasts
                               binary_case{{129, 1}, {1, 1000}, false},  // both broadcast
                               binary_case{{7}, {1}, true}, binary_case{{3, 1, 7}, {129, 1}, false}}) {
    SCOPED_TRACE(shape_to_string(c.a) + (c.add ? " + " : " * ") + shape_to_string(c.b));
    graph g;
    auto a = g.tensor(c.a), b = g.tensor(c.b);
    const shape_t out_shape = broadcast_shape(c.a, c.b, "test");
    auto y = g.tensor(out_shape);
    g.add_op(c.add ? op_kind::add : op_kind::multiply, {a, b}, {y});
    auto av = random_data(c.a, 12), bv = random_data(c.b, 13);
    expect_close(this->run(g, {c.a, c.b}, {&av, &bv}), ref_binary(av, c.a, bv, c.b, out_shape, c.add), 1e-6, 1e-6,
                 "binary");
  }
}

TYPED_TEST_P(BackendNumerics, EltwiseOpsAndSoftmaxMatchTheReference) {
  for (const op_kind kind : {op_kind::relu, op_kind::gelu_erf, op_kind::gelu_tanh, op_kind::sigmoid, op_kind::tanh,
                             op_kind::softmax, op_kind::sqrt, op_kind::rsqrt, op_kind::silu}) {
    for (const shape_t& s : {shape_t{1}, shape_t{7, 129}, shape_t{1000, 7}, shape_t{3, 1, 1000}, shape_t{37, 512}, shape_t{3, 5000}}) {
      SCOPED_TRACE(std::string(to_string(kind)) + " " + shape_to_string(s));
      graph g;
      auto x = g.tensor(s), y = g.tensor(s);
      g.add_op(kind, {x}, {y});
      const bool positive = kind == op_kind::sqrt || kind == op_kind::rsqrt;  // their domain
      auto xv = random_data(s, 14, positive ? 0.01f : -4.f, 4.f);
      std::vector<float> want;
      if (kind == op_kind::softmax) {
        want = ref_softmax(xv, elements(s) / s.back(), s.back());
      } else {
        for (float v : xv) want.push_back(ref_eltwise(static_cast<int>(kind), v));
      }
      expect_close(this->run(g, {s}, {&xv}), want, 2e-6, 2e-5, to_string(kind));
    }
  }
}

// Odd row counts (several power-of-two blocks on the CPU), a row of one,
// BERT's epsilon, constant and variable parameters, and rows far from zero
// (a one-pass variance would lose the deviations' digits).
TYPED_TEST_P(BackendNumerics, LayerNormMatchesTheReference) {
  struct ln_case {
    shape_t shape;
    float epsilon, offset;
    bool constant;
  };
  for (const ln_case& c : {ln_case{{1}, 1e-5f, 0.f, true}, ln_case{{7, 129}, 1e-5f, 0.f, true},
                           ln_case{{1000, 7}, 1e-12f, 0.f, false}, ln_case{{3, 5, 768}, 1e-12f, 0.f, true},
                           ln_case{{300, 33}, 1e-3f, 100.f, false}, ln_case{{2, 1}, 1e-5f, 0.f, true}}) {
    SCOPED_TRACE(shape_to_string(c.shape) + " epsilon " + std::to_string(c.epsilon));
    const std::int64_t cols = c.shape.back();
    const auto property = c.constant ? tensor_property::constant : tensor_property::variable;
    graph g;
    auto x = g.tensor(c.shape), gamma = g.tensor({cols}, property), beta = g.tensor({cols}, property);
    auto y = g.tensor(c.shape);
    g.set_attribute(g.add_op(op_kind::layer_norm, {x, gamma, beta}, {y}), op_attribute::epsilon, c.epsilon);
    auto xv = random_data(c.shape, 20, -4.f + c.offset, 4.f + c.offset);
    auto gv = random_data({cols}, 21, 0.5f, 1.5f), bv = random_data({cols}, 22);
    const auto want = ref_layer_norm(xv, elements(c.shape) / cols, cols, gv, bv, c.epsilon);
    expect_close(this->run(g, {c.shape, {cols}, {cols}}, {&xv, &gv, &bv}), want, 2e-5, 2e-5, "LayerNorm");
  }
}

// RMSNorm (Llama's): the LayerNorm cases' shapes, no mean subtracted, no beta.
TYPED_TEST_P(BackendNumerics, RmsNormMatchesTheReference) {
  struct rms_case {
    shape_t shape;
    float epsilon;
    bool constant;
  };
  for (const rms_case& c : {rms_case{{1}, 1e-6f, true}, rms_case{{7, 129}, 1e-5f, true},
                            rms_case{{1000, 7}, 1e-6f, false}, rms_case{{3, 5, 1024}, 1e-6f, true},
                            rms_case{{300, 33}, 1e-3f, false}}) {
    SCOPED_TRACE(shape_to_string(c.shape) + " epsilon " + std::to_string(c.epsilon));
    const std::int64_t cols = c.shape.back();
    graph g;
    auto x = g.tensor(c.shape), gamma = g.tensor({cols}, c.constant ? tensor_property::constant : tensor_property::variable);
    auto y = g.tensor(c.shape);
    g.set_attribute(g.add_op(op_kind::rms_norm, {x, gamma}, {y}), op_attribute::epsilon, c.epsilon);
    auto xv = random_data(c.shape, 23, -4.f, 4.f);
    auto gv = random_data({cols}, 24, 0.5f, 1.5f);
    const auto want = ref_rms_norm(xv, elements(c.shape) / cols, cols, gv, c.epsilon);
    expect_close(this->run(g, {c.shape, {cols}}, {&xv, &gv}), want, 2e-5, 2e-5, "RMSNorm");
  }
}

// A gate projection with SiLU fused (Llama's MLP), and Rsqrt after an Add.
TYPED_TEST_P(BackendNumerics, FusedMatMulSiluAndRsqrtMatchTheReference) {
  const shape_t xs{5, 96}, ws{96, 40};
  for (const op_kind post : {op_kind::silu, op_kind::rsqrt}) {
    SCOPED_TRACE(to_string(post));
    graph g;
    auto x = g.tensor(xs), w = g.tensor(ws, tensor_property::constant), c = g.tensor({40}, tensor_property::constant);
    auto mm = g.tensor({5, 40}), added = g.tensor({5, 40}), y = g.tensor({5, 40});
    g.add_op(op_kind::matmul, {x, w}, {mm});
    g.add_op(op_kind::add, {mm, c}, {added});
    g.add_op(post, {added}, {y});
    auto xv = random_data(xs, 26, -1.f, 1.f), wv = random_data(ws, 27, -0.2f, 0.2f);
    auto cv = random_data({40}, 28, 8.f, 9.f);  // keeps Rsqrt's operand positive
    auto want = ref_matmul(xv, wv, 5, 96, 40, false, false);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = ref_eltwise(static_cast<int>(post), want[i] + cv[i % 40]);
    expect_close(this->run(g, {xs, ws, {40}}, {&xv, &wv, &cv}), want, 1e-5, 1e-5, to_string(post));
  }
}

// Attention's scores: a batched MatMul of Q by K transposed, scaled by a
// constant scalar (fused), as a frontend maps [batch * heads, seq, head].
TYPED_TEST_P(BackendNumerics, AttentionScoresBatchedMatMulTransposedAndScaledMatchTheReference) {
  const std::int64_t batch = 6, seq = 33, head = 64;
  graph g;
  auto q = g.tensor({-1, -1, head}), k = g.tensor({-1, -1, head}), scale = g.tensor({1}, tensor_property::constant);
  auto scores = g.tensor({-1, -1, -1}), y = g.tensor({-1, -1, -1});
  g.add_op(op_kind::matmul, {q, k}, {scores}, false, true);
  g.add_op(op_kind::multiply, {scores, scale}, {y});
  auto qv = random_data({batch, seq, head}, 23), kv = random_data({batch, seq, head}, 24);
  std::vector<float> sv{0.125f};
  const auto got = this->run(g, {{batch, seq, head}, {batch, seq, head}, {1}}, {&qv, &kv, &sv});
  std::vector<float> want;
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    std::vector<float> qs(qv.begin() + bi * seq * head, qv.begin() + (bi + 1) * seq * head);
    std::vector<float> ks(kv.begin() + bi * seq * head, kv.begin() + (bi + 1) * seq * head);
    for (float v : ref_matmul(qs, ks, seq, head, seq, false, true)) want.push_back(v * 0.125f);
  }
  expect_close(got, want, matmul_atol(head), 1e-5, "scaled Q K^T");
}

// Attention's scores with a bias per product (a mask that differs over the
// batch, expanded over the heads), fused into the GEMM: a length that is a
// multiple of 4 (rows read 4-wide by the GPU GEMMs) and one that is not
// (rows not 16-byte aligned, a ragged last group).
TYPED_TEST_P(BackendNumerics, AttentionScoresWithABiasPerProductMatchTheReference) {
  const std::int64_t head = 64;
  graph g;
  auto q = g.tensor({-1, -1, head}), k = g.tensor({-1, -1, head}), bias = g.tensor({-1, -1, -1});
  auto scores = g.tensor({-1, -1, -1}), y = g.tensor({-1, -1, -1});
  g.add_op(op_kind::matmul, {q, k}, {scores}, false, true);
  g.add_op(op_kind::add, {scores, bias}, {y});
  for (const auto& [batch, seq] : {std::pair<std::int64_t, std::int64_t>{4, 68}, {5, 33}}) {
    auto qv = random_data({batch, seq, head}, 27), kv = random_data({batch, seq, head}, 28);
    auto bv = random_data({batch, seq, seq}, 29);
    const auto got = this->run(g, {{batch, seq, head}, {batch, seq, head}, {batch, seq, seq}}, {&qv, &kv, &bv});
    std::vector<float> want;
    for (std::int64_t bi = 0; bi < batch; ++bi) {
      std::vector<float> qs(qv.begin() + bi * seq * head, qv.begin() + (bi + 1) * seq * head);
      std::vector<float> ks(kv.begin() + bi * seq * head, kv.begin() + (bi + 1) * seq * head);
      const auto part = ref_matmul(qs, ks, seq, head, seq, false, true);
      for (std::int64_t i = 0; i < seq * seq; ++i) want.push_back(part[i] + bv[bi * seq * seq + i]);
    }
    expect_close(got, want, matmul_atol(head), 1e-5, "Q K^T + bias, length " + std::to_string(seq));
  }
}

// Attention's probabilities times V: a batch whose N (the head size) is half
// the generic tiles' BN or less, which GPU backends run on those tiles turned
// around (gpu::kernels::batch_tiles); M and K past one 128-row tile, neither a
// multiple of a tile.
TYPED_TEST_P(BackendNumerics, AttentionValuesBatchedMatMulWithANarrowNMatchesTheReference) {
  const std::int64_t batch = 3, seq = 130, head = 64;
  graph g;
  auto p = g.tensor({-1, -1, -1}), v = g.tensor({-1, -1, head}), y = g.tensor({-1, -1, head});
  g.add_op(op_kind::matmul, {p, v}, {y});
  auto pv = random_data({batch, seq, seq}, 25), vv = random_data({batch, seq, head}, 26);
  const auto got = this->run(g, {{batch, seq, seq}, {batch, seq, head}}, {&pv, &vv});
  std::vector<float> want;
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    std::vector<float> ps(pv.begin() + bi * seq * seq, pv.begin() + (bi + 1) * seq * seq);
    std::vector<float> vs(vv.begin() + bi * seq * head, vv.begin() + (bi + 1) * seq * head);
    const auto part = ref_matmul(ps, vs, seq, seq, head, false, false);
    want.insert(want.end(), part.begin(), part.end());
  }
  expect_close(got, want, matmul_atol(seq), 1e-5, "P V");
}

// Attention in one op: each layout; a length past one block of query rows
// and one of keys (neither a multiple); head sizes 64, 40 (not a multiple
// of 16) and 128 (the GPU kernel's largest, fewer rows per work-group);
// value sizes 4, 67 and 68 (PoCL once miscompiled the kernel at those); a
// mask per batch and one per query row; causal with more queries than keys;
// a batch whose mask hides every key (its rows are 0s).
TYPED_TEST_P(BackendNumerics, AttentionMatchesTheReference) {
  struct attention_case {
    attention_sizes z;
    bool blhd, causal;
    shape_t mask;  // rank 4, broadcast to [b, h, l, s]; empty: no mask
    float scale;   // 0: the default, 1 / sqrt(d)
  };
  const float minus_inf = -INFINITY;
  for (const attention_case& c :
       {attention_case{{2, 3, 70, 45, 64, 64}, false, false, {}, 0.f},
        attention_case{{2, 3, 70, 45, 32, 40}, false, true, {2, 1, 70, 45}, 0.3f},
        attention_case{{3, 4, 33, 33, 64, 64}, true, false, {3, 1, 1, 33}, 0.f},
        attention_case{{1, 5, 130, 130, 128, 128}, false, true, {}, 0.f},
        attention_case{{2, 2, 9, 77, 16, 16}, true, true, {1, 2, 9, 77}, 0.25f},
        attention_case{{1, 1, 70, 40, 16, 4}, false, false, {}, 0.f},
        attention_case{{2, 2, 37, 29, 64, 68}, true, false, {}, 0.f},
        attention_case{{1, 2, 20, 50, 128, 67}, false, true, {}, 0.f}}) {
    const attention_sizes& z = c.z;
    SCOPED_TRACE(std::string(c.blhd ? "blhd" : "bhld") + (c.causal ? " causal" : "") + " L " + std::to_string(z.l) +
                 " S " + std::to_string(z.s) + " D " + std::to_string(z.d) + " Dv " + std::to_string(z.dv) +
                 " mask " + shape_to_string(c.mask));
    const shape_t qs = c.blhd ? shape_t{z.b, z.l, z.h, z.d} : shape_t{z.b, z.h, z.l, z.d};
    const shape_t ks = c.blhd ? shape_t{z.b, z.s, z.h, z.d} : shape_t{z.b, z.h, z.s, z.d};
    const shape_t vs = c.blhd ? shape_t{z.b, z.s, z.h, z.dv} : shape_t{z.b, z.h, z.s, z.dv};
    graph g;
    std::vector<logical_tensor> in{g.tensor({-1, -1, -1, z.d}), g.tensor({-1, -1, -1, z.d}),
                                   g.tensor({-1, -1, -1, z.dv})};
    if (!c.mask.empty()) in.push_back(g.tensor(shape_t(4, -1)));
    const std::uint64_t op = g.add_op(op_kind::attention, in, {g.tensor({-1, -1, -1, z.dv})});
    g.set_attribute(op, op_attribute::layout, std::vector<std::int64_t>{c.blhd ? 1 : 0});
    if (c.causal) g.set_attribute(op, op_attribute::causal, std::vector<std::int64_t>{1});
    if (c.scale != 0.f) g.set_attribute(op, op_attribute::scale, c.scale);
    auto qv = random_data(qs, 31), kv = random_data(ks, 32), vv = random_data(vs, 33);
    std::vector<float> mv;
    std::vector<shape_t> shapes{qs, ks, vs};
    std::vector<std::vector<float>*> data{&qv, &kv, &vv};
    if (!c.mask.empty()) {
      mv = random_data(c.mask, 34, -2.f, 2.f);
      for (std::size_t i = 0; i < mv.size(); i += 5) mv[i] = minus_inf;  // hidden keys
      std::fill(mv.begin(), mv.begin() + c.mask[3], minus_inf);  // the mask's first row hides every key
      shapes.push_back(c.mask);
      data.push_back(&mv);
    }
    const double scale = c.scale != 0.f ? c.scale : 1.0 / std::sqrt(static_cast<double>(z.d));
    const auto want = ref_attention(qv, kv, vv, mv, c.mask, z, c.blhd, c.causal, scale);
    expect_close(this->run(g, shapes, data), want, matmul_atol(z.d) + 1e-5, 1e-4, "Attention");
  }
}

// Transpose: attention's head split and merge ([B, S, h, d] <-> [B, h, S,
// d]), a full reversal, axes of size 1, a rank-6 tensor, the identity and a
// tensor large enough to be split over threads; declared with -1 dims.
TYPED_TEST_P(BackendNumerics, TransposeMatchesTheReference) {
  struct transpose_case {
    shape_t shape;
    std::vector<std::int64_t> permutation;
  };
  for (const transpose_case& c : {transpose_case{{2, 7, 3, 5}, {0, 2, 1, 3}}, transpose_case{{2, 3, 7, 5}, {0, 2, 1, 3}},
                                  transpose_case{{3, 4, 5}, {2, 1, 0}}, transpose_case{{1, 9, 1, 4}, {3, 2, 0, 1}},
                                  transpose_case{{2, 1, 3, 2, 2, 3}, {5, 0, 4, 1, 3, 2}},
                                  transpose_case{{6, 5}, {0, 1}}, transpose_case{{5}, {0}},
                                  transpose_case{{4, 77, 12, 64}, {0, 2, 1, 3}}, transpose_case{{300, 257}, {1, 0}}}) {
    SCOPED_TRACE(shape_to_string(c.shape) + " by " + shape_to_string(c.permutation));
    graph g;
    auto x = g.tensor(shape_t(c.shape.size(), -1)), y = g.tensor(shape_t(c.shape.size(), -1));
    g.set_attribute(g.add_op(op_kind::transpose, {x}, {y}), op_attribute::permutation, c.permutation);
    auto xv = random_data(c.shape, 25);
    expect_close(this->run(g, {c.shape}, {&xv}), ref_transpose(xv, c.shape, c.permutation), 0, 0, "Transpose");
  }
}

REGISTER_TYPED_TEST_SUITE_P(BackendNumerics, MatMulWithOddShapesTransposesAndConstantWeights,
                            FusedMatMulBiasGeluMatchesTheReference, FusedChainsWithEveryPostOpMatchTheReference,
                            BatchedMatMulWithASharedWeightMatchesTheReference,
                            BatchedMatMulWithBatchedOperandsMatchesTheReference, BinaryOpsBroadcastLikeNumpy,
                            EltwiseOpsAndSoftmaxMatchTheReference, LayerNormMatchesTheReference,
                            RmsNormMatchesTheReference, FusedMatMulSiluAndRsqrtMatchTheReference,
                            AttentionScoresBatchedMatMulTransposedAndScaledMatchTheReference,
                            AttentionScoresWithABiasPerProductMatchTheReference,
                            AttentionValuesBatchedMatMulWithANarrowNMatchesTheReference,
                            AttentionMatchesTheReference, TransposeMatchesTheReference);

}  // namespace unicache::testing
