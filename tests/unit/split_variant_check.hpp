// A generic GEMM configuration's two split-K variants on a GPU backend: K
// shared out for a few rows, not for many. A shape whose variant is not
// built yet runs on the other one while its own builds in the background;
// a stored one loads in line, and without background threads it is built
// in line, as before. For the
// OpenCL and CUDA tests:
//
//   check_split_variant_built_in_background(eng, opencl::stats,
//       [&](const compiled_partition& cp, const std::vector<const std::vector<float>*>& data) { return run_compiled(eng, strm, cp, data); });
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend_numerics.hpp"
#include "mlp_partition.hpp"
#include "scoped_settings.hpp"
#include "unicache/compiler.hpp"
#include "unicache/gpu.hpp"
#include "unicache/kernel_generator.hpp"
#include "unicache/specialization.hpp"
#include "unicache/store.hpp"

namespace unicache::testing {

template <typename Run>
void check_split_variant_built_in_background(const engine& eng, gpu::backend_stats (*stats)(), Run run) {
  const gpu::engine_facts& f = gpu::device_of(eng.get_backend())->facts(eng);
  if (f.compute_units < 1) GTEST_SKIP() << "the device's compute units are unknown: no split-K";
  // One column of tiles and K = 768: a few rows fill too few tiles and
  // share K out; 2 x compute units + 1 tiles of rows do not.
  const std::int64_t k = 768, n = f.gemm.bn, few = 3, many = f.gemm.bm * (2 * f.compute_units + 1), more = many + 5;
  ASSERT_EQ(gpu::kernels::gemm_splits(few, n, k, 1, f.gemm, f.compute_units), gpu::kernels::kGenericSplitK);
  ASSERT_EQ(gpu::kernels::gemm_splits(many, n, k, 1, f.gemm, f.compute_units), 1);
  ASSERT_EQ(gpu::kernels::gemm_splits(more, n, k, 1, f.gemm, f.compute_units), 1);
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  const partition& p = g.partitions()[0];
  const auto w = random_data({k, n}, 70), b = random_data({n}, 71);
  auto check = [&](std::int64_t m, const char* what) {
    const auto x = random_data({m, k}, 72 + static_cast<unsigned>(m % 1000));
    compiled_partition cp = compile(p, {{m, k}, {k, n}, {n}}, eng);
    expect_close(run(cp, {&x, &w, &b}), mlp_reference(x, w, b, m, k, n), matmul_atol(k), 1e-5, what);
  };
  auto kernels_made = [&] {
    const gpu::backend_stats s = stats();
    return s.programs_from_source + s.programs_from_binary;
  };
  // Nothing of this configuration anywhere yet: the split variant is built in line.
  auto forget = [] {
    wait_for_specializations();
    kernel_cache().clear();
    kernel_store::instance().clear();
  };
  {
    scoped_specialize_settings background([](specialize_settings& s) {
      s.threads = std::max(s.threads, 1u);
      s.threshold = 1e6;  // no shape class turns hot: the counts are this test's
    });
    forget();
    check(few, "few rows, K split");
    const std::uint64_t deferred = stats().split_variants_deferred, made = kernels_made();
    const std::uint64_t entries = kernel_cache().stats(eng.scope()).entries;
    check(many, "many rows, on the split variant");
    EXPECT_EQ(stats().split_variants_deferred - deferred, 1u) << "many rows took the split variant";
    wait_for_specializations();
    EXPECT_EQ(kernels_made() - made, 1u) << "the unsplit GEMM, built in the background";
    EXPECT_EQ(kernel_cache().stats(eng.scope()).entries - entries, 1u)
        << "the unsplit GEMM's entry: the stand-in compiled partition is not kept";
    check(more, "more rows, on the unsplit variant");
    EXPECT_EQ(stats().split_variants_deferred - deferred, 1u) << "the unsplit variant was ready";
    EXPECT_EQ(kernels_made() - made, 1u) << "nothing more built";
    // With the unsplit variant in the store (after its first launch), a new
    // process's many rows load it in line: only a build is deferred.
    wait_for_specializations();
    kernel_cache().clear();
    check(few, "few rows, K split, from the store");
    const std::uint64_t deferred_before_load = stats().split_variants_deferred, loaded = stats().programs_from_binary;
    check(many, "many rows, the unsplit variant from the store");
    EXPECT_EQ(stats().split_variants_deferred - deferred_before_load, 0u) << "the stored variant was loaded in line";
    EXPECT_GE(stats().programs_from_binary - loaded, 1u);
  }
  {
    scoped_no_specialization in_line;
    forget();
    check(few, "few rows, K split, no background");
    const std::uint64_t deferred = stats().split_variants_deferred, made = kernels_made();
    check(many, "many rows, no background");
    EXPECT_EQ(stats().split_variants_deferred - deferred, 0u);
    EXPECT_EQ(kernels_made() - made, 1u) << "the unsplit GEMM, built in line";
  }
  {
    // A batch of matrices never takes the split variant (its workspace and
    // sum are one matrix's), though one matrix of the same configuration
    // built it.
    scoped_specialize_settings background([](specialize_settings& s) {
      s.threads = std::max(s.threads, 1u);
      s.threshold = 1e6;
    });
    forget();
    graph bg;
    auto a = bg.tensor({-1, -1, k}), bm = bg.tensor({-1, k, n}), c = bg.tensor({-1, -1, n});
    bg.add_op(op_kind::matmul, {a, bm}, {c});
    bg.finalize();
    auto batched = [&](std::int64_t batch, std::int64_t m) {
      const auto x = random_data({batch, m, k}, 80 + static_cast<unsigned>(batch));
      const auto y = random_data({batch, k, n}, 90 + static_cast<unsigned>(batch));
      compiled_partition cp = compile(bg.partitions()[0], {{batch, m, k}, {batch, k, n}}, eng);
      std::vector<float> want;
      for (std::int64_t i = 0; i < batch; ++i) {
        const std::vector<float> xi(x.begin() + i * m * k, x.begin() + (i + 1) * m * k);
        const std::vector<float> yi(y.begin() + i * k * n, y.begin() + (i + 1) * k * n);
        const std::vector<float> ci = ref_matmul(xi, yi, m, k, n, false, false);
        want.insert(want.end(), ci.begin(), ci.end());
      }
      expect_close(run(cp, {&x, &y}), want, matmul_atol(k), 1e-5, "batch " + std::to_string(batch));
    };
    batched(1, few);
    const std::uint64_t deferred = stats().split_variants_deferred;
    batched(3, few);
    EXPECT_EQ(stats().split_variants_deferred - deferred, 0u) << "a batch is never on the split variant";
  }
}

}  // namespace unicache::testing
