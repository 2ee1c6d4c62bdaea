// A GEMM's shape class (M's power-of-two range with N, K and the
// configuration), and the two answers a GPU backend gives about specializing
// a partition for one: its class, and whether its tuned kernel is at hand.
#include <algorithm>
#include <bit>
#include <optional>
#include <string>

#include "unicache/cache.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/kernel_generator.hpp"

namespace unicache::gpu::kernels {

shape_class gemm_shape_class(const gemm_problem& g) {
  // A transposed A's leading dimension is M: a kernel of one M only.
  if (g.batch != 1 || g.sa != 0 || g.m < 1 || g.config.transpose_a) return {};
  const int bits = std::bit_width(static_cast<unsigned long>(g.m));
  cache_key key;
  key.add("gemm-class/1").add(bits).add(g.n).add(g.k).add(g.lda).add(g.ldb);
  key.add(g.config.transpose_a).add(g.config.transpose_b).add(g.config.packed_b);
  for (op_kind k : g.config.chain) key.add(static_cast<std::uint8_t>(k));
  for (const gemm_problem::post& p : g.posts) key.add(p.batch_stride).add(p.row_stride).add(p.column_stride);
  const long low = 1L << (bits - 1), high = (1L << bits) - 1;
  return {std::string(key.bytes()),
          "GEMM M " + std::to_string(low) + ".." + std::to_string(high) + " N " + std::to_string(g.n) + " K " +
              std::to_string(g.k)};
}

namespace {

// The adaptive GEMM of a fused MatMul partition at these shapes, if it has one.
std::optional<gemm_problem> adaptive_gemm(const partition& p, const std::vector<logical_tensor>& in,
                                        const std::vector<logical_tensor>& out, const gemm_tiles& plan) {
  if (p.pattern() != partition::kind::fused_matmul) return std::nullopt;
  try {
    return gemm_problem(p, in, out, plan, kernel_shapes::adaptive);
  } catch (const compile_error&) {
    return std::nullopt;
  }
}

}  // namespace

shape_class gemm_specialization_class(const partition& p, const std::vector<logical_tensor>& in,
                                      const std::vector<logical_tensor>& out, const gemm_tiles& plan) {
  const std::optional<gemm_problem> g = adaptive_gemm(p, in, out, plan);
  if (!g) return {};
  shape_class c = gemm_shape_class(*g);
  if (c.key.empty()) return c;
  if (gemm_tuning_bytes(*g, gemm_candidates(*g, plan)) > max_gemm_tuning_bytes) return {};
  return c;
}

bool gemm_specialization_ready(const partition& p, const std::vector<logical_tensor>& in,
                               const std::vector<logical_tensor>& out, const gemm_tiles& plan, dialect d,
                               const engine& e, owner_id id, const device_identity& device) {
  const std::optional<gemm_problem> g = adaptive_gemm(p, in, out, plan);
  if (!g || !e.get_backend()) return false;
  const std::vector<gemm_tiles> candidates = gemm_candidates(*g, plan);
  const cache_scope scope = e.scope();
  const bool built = std::all_of(candidates.begin(), candidates.end(), [&](const gemm_tiles& t) {
    gemm_config config = g->config;
    config.tiles = t;
    return kernel_cache().contains(scope, id, gemm_kernel_config(d, config));
  });
  return built || stored_tiles(e.get_backend()->name(), device, *g, candidates).has_value();
}

}  // namespace unicache::gpu::kernels
