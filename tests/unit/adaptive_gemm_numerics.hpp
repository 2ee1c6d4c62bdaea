// Adaptive GEMMs of the GPU backends: every tile candidate a class may choose,
// on odd sizes, against the double-precision-accumulated reference. Each
// candidate is forced as the class's choice through the persistent store
// (the tuning record the next process would read), so this also checks that
// a stored choice is used: the class is specialized at its first use, and
// the kernel that runs is the stored one.
//
//   check_every_candidate(device, plan_tiles, "opencl", gpu::kernels::dialect::opencl_c);
//
// `device` has `engine eng` and `run(graph&, shapes, data, version)` (the
// numerics suite's Device). The store must be enabled.
#pragma once

#include <gtest/gtest.h>

#include <utility>

#include "backend_numerics.hpp"
#include "mlp_partition.hpp"
#include "scoped_settings.hpp"
#include "unicache/kernel_generator.hpp"
#include "unicache/store.hpp"
#include "unicache/specialization.hpp"

namespace unicache::testing {

// The GEMM of mlp_graph(k, n) (a constant weight) at M = m, with `tiles`.
inline gpu::kernels::gemm_problem mlp_gemm_problem(std::int64_t m, std::int64_t k, std::int64_t n,
                                              const gpu::kernels::gemm_tiles& tiles) {
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  const partition& p = g.partitions()[0];
  std::vector<logical_tensor> in = p.inputs();
  in[0].shape = {m, k};
  std::vector<logical_tensor> out = p.outputs();
  out[0].shape = {m, n};
  return gpu::kernels::gemm_problem(p, in, out, tiles, kernel_shapes::adaptive);
}

template <typename Device>
void check_every_candidate(Device& device, const gpu::kernels::gemm_tiles& plan, const std::string& backend_name) {
  scoped_kernel_shapes mode(kernel_shapes::adaptive);
  scoped_eager_specialization eager;  // whatever the caller's fixture set
  ASSERT_TRUE(kernel_store::instance().enabled());
  const device_identity identity = device.eng.get_backend()->identity(device.eng);
  constexpr std::int64_t n = 45;  // a multiple of no tile
  // K = 67: a multiple of no tile; K = 1100: long enough for split-K candidates.
  for (const auto& [m, k] : {std::pair<std::int64_t, std::int64_t>{1, 67}, {7, 67}, {33, 67}, {1000, 67}, {20, 1100},
                             {100, 1100}}) {
    graph g = mlp_graph(k, n, /*constant_weight=*/true);
    const gpu::kernels::gemm_problem problem = mlp_gemm_problem(m, k, n, plan);
    const std::string tuning_key = gpu::kernels::gemm_tuning_key(backend_name, problem);
    auto x = random_data({m, k}, static_cast<unsigned>(m + k)), w = random_data({k, n}, 70), b = random_data({n}, 71);
    const auto want = mlp_reference(x, w, b, m, k, n);
    for (const gpu::kernels::gemm_tiles& t : gpu::kernels::gemm_candidates(problem, plan)) {
      const std::string what = "M=" + std::to_string(m) + " K=" + std::to_string(k) + " tiles " + gpu::kernels::to_string(t);
      ASSERT_TRUE(kernel_store::instance().put(identity, tuning_key, gpu::kernels::encode_tiles(t))) << what;
      kernel_cache().clear();  // the class's variant of the previous candidate goes
      const specialization_stats before = specialization::stats();
      // The first run queues the class (a load: its choice is stored), the
      // second runs the candidate.
      for (int round = 0; round < 2; ++round) {
        expect_close(device.run(g, {{m, k}, {k, n}, {n}}, {&x, &w, &b}, 0), want, matmul_atol(k), 1e-5,
                     what + " round " + std::to_string(round));
        wait_for_specializations();
      }
      const specialization_stats after = specialization::stats();
      EXPECT_EQ(after.ready - before.ready, 1u) << what;
      EXPECT_EQ(after.specialized_executions - before.specialized_executions, 1u) << what;
      EXPECT_EQ(after.failed, before.failed) << what;
    }
    kernel_store::instance().remove(identity, tuning_key);
  }
}

}  // namespace unicache::testing
