// The partition the OpenCL tests and bench_warm_start revolve around:
// MatMul [-1, k] x [k, n] -> Add bias [n] -> GELU(erf), and its reference.
#pragma once

#include "reference_ops.hpp"
#include "unicache/graph.hpp"

namespace unicache::testing {

inline graph mlp_graph(std::int64_t k, std::int64_t n, bool constant_weight) {
  graph g;
  auto x = g.tensor({-1, k});
  auto w = g.tensor({k, n}, constant_weight ? tensor_property::constant : tensor_property::variable);
  auto b = g.tensor({n}, tensor_property::constant), mm = g.tensor({-1, n}), s = g.tensor({-1, n});
  auto y = g.tensor({-1, n});
  g.add_op(op_kind::matmul, {x, w}, {mm});
  g.add_op(op_kind::add, {mm, b}, {s});
  g.add_op(op_kind::gelu_erf, {s}, {y});
  g.finalize();
  return g;
}

inline std::vector<float> mlp_reference(const std::vector<float>& x, const std::vector<float>& w,
                                        const std::vector<float>& b, std::int64_t m, std::int64_t k, std::int64_t n) {
  auto want = ref_binary(ref_matmul(x, w, m, k, n, false, false), {m, n}, b, {n}, {m, n}, true);
  for (auto& v : want) v = ref_eltwise(4, v);
  return want;
}

}  // namespace unicache::testing
