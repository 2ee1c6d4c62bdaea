// What the kernels are launched with: sizes, strides and work-items worked out
// from a partition and its shapes (gemm_problem and its split-K parts,
// binary_problem); the ops' own geometry is op_geometry.hpp's.
#include <algorithm>
#include <limits>
#include <string>

#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/kernel_generator.hpp"

namespace unicache::gpu::kernels {

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::size_t round_up(std::int64_t n, std::int64_t multiple) {
  return static_cast<std::size_t>((n + multiple - 1) / multiple * multiple);
}

std::optional<matmul_sizes> matmul_sizes_of(const op& mm, const std::vector<std::int64_t>& a,
                                            const std::vector<std::int64_t>& b) {
  if (a.size() < 2 || a.size() > 3 || b.size() < 2 || b.size() > 3) return std::nullopt;
  return matmul_sizes{mm.transpose_a ? a.back() : a[a.size() - 2], mm.transpose_b ? b[b.size() - 2] : b.back(),
                      mm.transpose_a ? a[a.size() - 2] : a.back(),
                      std::max(a.size() == 3 ? a[0] : 1, b.size() == 3 ? b[0] : 1)};
}

gemm_problem::gemm_problem(const partition& p, const std::vector<logical_tensor>& in,
                           const std::vector<logical_tensor>& out, const gemm_tiles& tiles, kernel_shapes mode) {
  const op& mm = p.ops().front();
  const std::vector<std::int64_t>& a = in[0].shape;
  const std::vector<std::int64_t>& b = in[1].shape;
  const std::vector<std::int64_t>& c = out[0].shape;
  const std::size_t rank = c.size();
  const std::optional<matmul_sizes> mm_sizes = matmul_sizes_of(mm, a, b);
  if (!mm_sizes || rank < 2 || rank > 3) {
    throw compile_error("MatMul of " + shape_to_string(a) + " and " + shape_to_string(b) + " into " +
                        shape_to_string(c) + ": the GEMM takes ranks 2 and 3");
  }
  m = c[rank - 2];
  n = c[rank - 1];
  k = mm_sizes->k;
  // The GEMM computes the MatMul's own output: a post-op that broadcasts it
  // to a larger shape ([1, n] + [4, n]) is not something it can fuse.
  if (mm_sizes->m != m || mm_sizes->n != n || (rank == 3 && mm_sizes->batch != c[0])) {
    throw compile_error("a post-op broadcasts the MatMul's output to " + shape_to_string(c) +
                        ", a larger shape: not fusable into the GEMM");
  }
  constexpr std::int64_t int_max = std::numeric_limits<int>::max();
  if (m > int_max || n > int_max || k > int_max) {
    throw compile_error("MatMul sizes " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) +
                        ": the kernels take M, N and K as 32-bit integers (at most 2147483647)");
  }
  batch = rank == 3 ? c[0] : 1;
  lda = a.back();
  ldb = b.back();
  sa = a.size() == 3 && a[0] != 1 ? m * k : 0;
  sb = b.size() == 3 && b[0] != 1 ? k * n : 0;
  config.transpose_a = mm.transpose_a;
  config.transpose_b = mm.transpose_b;
  // A constant weight is packed (padded to the tile, transposes resolved)
  // unless it is in that layout already: not transposed, K and N multiples
  // of the tile. Then the GEMM reads it where it is, as a variable B:
  // nothing to copy, keep or check.
  config.packed_b = in[1].is_constant() && b.size() == 2 &&
                    (mm.transpose_b || k % tiles.bk != 0 || n % tiles.bn != 0);
  config.tiles = tiles;
  if (mode == kernel_shapes::specialized) config.fixed_mnk = std::array<long, 3>{m, n, k};
  std::size_t next_input = 2;
  for (std::size_t i = 1; i < p.ops().size(); ++i) {
    const op_kind kind = p.ops()[i].kind;
    config.chain.push_back(kind);
    if (!is_binary(kind)) continue;
    const std::vector<std::int64_t>& operand = in[next_input].shape;
    if (operand.size() > rank) {
      throw compile_error("post-op operand " + shape_to_string(operand) + " has a higher rank than the MatMul's output " +
                          shape_to_string(c));
    }
    const std::vector<long> st = broadcast_strides(to_rank(operand, 3));
    posts.push_back({next_input++, rank == 3 ? st[0] : 0, st[1], st[2]});
  }
  if (config.packed_b) {
    packed_k = static_cast<long>(round_up(k, tiles.bk));
    packed_n = static_cast<long>(round_up(n, tiles.bn));
  }
}

gemm_problem gemm_problem::with_rows(long rows) const {
  gemm_problem out = *this;
  out.m = rows;
  if (config.fixed_mnk) (*out.config.fixed_mnk)[0] = rows;
  return out;
}

std::array<std::size_t, 3> gemm_problem::global() const {
  const gemm_tiles& t = config.tiles;
  return {round_up(n, t.bn) / t.rn, round_up(m, t.bm) / t.rm, static_cast<std::size_t>(batch * t.split_k)};
}

int gemm_splits(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch, const gemm_tiles& t,
                int compute_units) {
  if (batch != 1 || compute_units < 1 || k < 512 || m < 1 || n < 1 || t.bm < 1 || t.bn < 1) return 1;
  const std::int64_t tiles = (m + t.bm - 1) / t.bm * ((n + t.bn - 1) / t.bn);
  const std::int64_t enough = k >= 2048 ? std::int64_t{4} * compute_units : std::int64_t{3} * compute_units / 2;
  return tiles <= enough ? kGenericSplitK : 1;
}

bool gemm_split_allowed(const gemm_problem& g, int splits) {
  if (splits == 1) return true;
  return splits > 1 && g.batch == 1 && g.k >= 512 && g.m > 0 && g.n > 0 &&
         static_cast<std::size_t>(splits) * static_cast<std::size_t>(g.m) * static_cast<std::size_t>(g.n) *
                 sizeof(float) <=
             kMaxSplitWorkspaceBytes;
}

gemm_tiles batch_tiles(const gemm_problem& g, const gemm_tiles& generic) {
  if (g.batch <= 1 || generic.bm >= generic.bn || g.n * 2 > generic.bn) return generic;
  gemm_tiles turned = generic;
  turned.bm = generic.bn;
  turned.bn = generic.bm;
  turned.rm = generic.rn;
  turned.rn = generic.rm;
  return turned;
}

int gemm_splits(const gemm_problem& g, int compute_units) {
  return gemm_splits(g.m, g.n, g.k, g.batch, g.config.tiles, compute_units);
}

std::array<std::size_t, 3> gemm_problem::local() const {
  return {static_cast<std::size_t>(config.tiles.local_x()), static_cast<std::size_t>(config.tiles.local_y()), 1};
}

cache_key gemm_problem::packed_layout() const {
  cache_key layout;
  layout.add("packed-b").add(config.transpose_b).add(k).add(n).add(ldb).add(packed_k).add(packed_n);
  return layout;
}

std::size_t gemm_problem::packed_bytes() const { return static_cast<std::size_t>(packed_k * packed_n) * sizeof(float); }

std::array<std::size_t, 3> gemm_problem::pack_global(int work_group) const {
  return {round_up(packed_n, work_group), static_cast<std::size_t>(packed_k), 1};
}

binary_problem::binary_problem(const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out_tensors) {
  const std::vector<std::int64_t>& c = out_tensors[0].shape;
  if (c.size() > 4) {
    throw compile_error("Add/Multiply of rank " + std::to_string(c.size()) + " (at most 4 is supported)");
  }
  out = to_rank(c, 4);
  a_strides = broadcast_strides(to_rank(in[0].shape, 4));
  b_strides = broadcast_strides(to_rank(in[1].shape, 4));
}

}  // namespace unicache::gpu::kernels
