// unicache/kernel_generator.hpp — the generated kernels of the GPU backends,
// in OpenCL C or CUDA C: one generator with a dialect, so both backends run
// the same algorithms (tiled GEMM with a fused post-op chain, weight packing,
// softmax, LayerNorm, eltwise, broadcasting binary).
// For: authors of GPU backends.
//
// Each kernel is generated per configuration, not per shape (unless
// gemm_config::fixed_mnk asks for a GEMM with its sizes compiled in): sizes
// and strides are kernel arguments, and each kernel has a fixed work-group
// (block) size, so a driver that compiles per local size (PoCL) compiles once
// and a stored binary serves every shape.
//
// Launch geometry below is in work-items (OpenCL's global size); a CUDA grid
// is that divided by the block (local) size, which always divides it.
// Errors: throws compile_error for an op the generator has no code for or
// tiles it cannot use. Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/backend_support.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/config.hpp"
#include "unicache/graph.hpp"
#include "unicache/kernel_path.hpp"
#include "unicache/op_geometry.hpp"
#include "unicache/store.hpp"

namespace unicache::gpu::kernels {

enum class dialect : std::uint8_t {
  opencl_c,  // OpenCL C 1.2 (kernel_source::language "opencl-c")
  cuda_c,    // CUDA C++ for NVRTC, extern "C" kernels ("cuda-c")
};

// The GEMM's blocking: a work-group computes a bm x bn tile of C in steps of
// bk, each work-item an rm x rn register block. rm and rn are multiples of
// 4, and bm*bk and bk*bn are multiples of 4 * work-items (one vector load
// per work-item and step at least).
struct gemm_tiles {
  int bm = 64, bn = 64, bk = 16;
  int rm = 4, rn = 4;
  // Split-K: K's tiles shared out among this many parts (1 to 64), each
  // part's sums written to a workspace and added by gemm_reduce, which
  // applies the post-op chain (where M x N alone has too few tiles to fill
  // the device). Compiled in: each split is a kernel of its own.
  int split_k = 1;
  int local_x() const { return bn / rn; }
  int local_y() const { return bm / rm; }
  friend bool operator==(const gemm_tiles&, const gemm_tiles&) = default;
};

// "BMxBNxBK/RMxRN", then "/splitS" for split-K: for diagnostics.
std::string to_string(const gemm_tiles& t);

// C = A x B with the post-op chain applied in the epilogue (each binary
// post-op reads one extra operand with its own strides).
//   args: A, B, C, int M, N, K, long lda, ldb, ldc, long batch strides sa, sb, sc,
//         then per binary post-op: buffer, long batch, row and column strides.
//   global: (ceil(N/bn) * local_x, ceil(M/bm) * local_y, batch * split_k), local (local_x, local_y, 1).
// With tiles.split_k > 1 (one matrix only), C is the workspace (split_k x M
// x N, ldc = N, sc = M * N) and no post-op runs: gemm_reduce_source finishes.
// With packed_b, B is the packed weight: K x N padded with zeros to
// multiples of (bk, bn), row-major, leading dimension the padded N.
struct gemm_config {
  bool transpose_a = false;
  bool transpose_b = false;
  bool packed_b = false;
  std::vector<op_kind> chain;  // post-ops after the MatMul, in order
  gemm_tiles tiles;
  // Set for a shape-specialized kernel: M, N, K compiled in (the size
  // arguments are then ignored).
  std::optional<std::array<long, 3>> fixed_mnk;
};
kernel_source gemm_source(dialect d, const gemm_config& c);
// gemm_source(d, c).config without generating the source: what the kernel
// cache knows the GEMM by.
std::string gemm_kernel_config(dialect d, const gemm_config& c);

// Split-K's second step for `c` (its tiles.split_k and chain): C = the sum
// of the workspace's parts, with the post-op chain. One matrix (batch 1).
//   args: W, C, int M, N, long ldc, then per binary post-op as gemm's.
//   global: M * N rounded up to work_group, local (work_group).
kernel_source gemm_reduce_source(dialect d, const gemm_config& c, int work_group);

// Packs B (K x N, or N x K if transposed) into the layout gemm expects with
// packed_b (the padding is the caller's: Kp, Np).
//   args: B, P, int K, N, long ldb, int padded K, int padded N.
//   global: (padded N rounded up to work_group, padded K), local (work_group, 1).
kernel_source pack_source(dialect d, bool transpose_b, int work_group);

// Softmax over the last axis, a team of `team` work-items per row (a power
// of two up to work_group, which is one), work_group / team rows per
// work-group; softmax_team gives the team for rows of `cols`: 32, or the
// whole group for rows longer than 1024.
//   args: x, y, int cols, long rows, int team.
//   global: (ceil(rows / (work_group / team)) * work_group), local (work_group).
kernel_source softmax_source(dialect d, int work_group);
int softmax_team(int work_group, std::int64_t cols);

// LayerNorm over the last axis, one work-group per row: (x - mean) /
// sqrt(var + epsilon) * gamma + beta; with `rms`, RMSNorm: x / sqrt(mean(x^2)
// + epsilon) * gamma (beta is not read).
//   args: x, gamma, beta, y, int cols, float epsilon.
//   global: (rows * work_group), local (work_group).
kernel_source layer_norm_source(dialect d, int work_group, bool rms = false);

// Transpose as plan_transpose gives it, padded in front to 6 dims of 1:
// y[i] = x[sum of i's index along dim k times stride k].
//   args: x, y, long n, int d1..d5, long s0..s5.
//   global: n rounded up, local (work_group).
kernel_source transpose_source(dialect d, int work_group);

// Scaled dot-product attention (op_kind::attention) of one configuration:
// head sizes (Q and K's, V's) up to kAttentionMaxHeadSize, causal or not,
// with or without a mask. Work-groups of 256 (16 x 16), each for
// attention_rows query rows of one batch and head; the tensors are read
// through strides (each row's elements contiguous), the mask's strides 0
// where it broadcasts.
//   args: Q, K, V, mask (any buffer without one), O, int L, S, H, blocks
//   (ceil(L / rows)), float scale, long strides of Q, K, V, O per batch, head
//   and row (12), long mask strides per batch, head, row and column.
//   global: (blocks * H * B * 256), local (256).
inline constexpr int kAttentionMaxHeadSize = 128;
struct attention_config {
  int head_size = 64;   // Q's and K's last dim
  int value_size = 64;  // V's
  bool causal = false;
  bool mask = false;
};
kernel_source attention_source(dialect d, const attention_config& c);
int attention_rows(int head_size, int value_size);
// The local memory one work-group of attention_source uses: at most 41 KB
// (38.7 KB at head size 64, 40.8 KB at 128).
std::size_t attention_local_bytes(int head_size, int value_size);

// y = f(x) elementwise.  args: x, y, long n.  global: n rounded up, local (work_group).
kernel_source eltwise_source(dialect d, op_kind kind, int work_group);

// y = a (+|*) b with numpy broadcasting over up to four dims (leading dims
// of size 1 pad lower ranks; a broadcast dim has stride 0).
//   args: a, b, y, long n, int d1, d2, d3, long a0..a3, long b0..b3.
//   global: n rounded up, local (work_group).
kernel_source binary_source(dialect d, op_kind kind, int work_group);

// --- What the kernels are given ----------------------------------------------
// Sizes, strides and configurations worked out from a partition and its
// shapes, the same for every backend that launches these kernels.

// The number of elements of `shape`.
std::int64_t elements(const std::vector<std::int64_t>& shape);
// The smallest multiple of `multiple` that is at least n.
std::size_t round_up(std::int64_t n, std::int64_t multiple);
// A MatMul's sizes from its inputs' shapes (rank 2 or 3) and transposes:
// what gemm_problem and a backend's kernel_configuration derive them from.
// nullopt for another rank.
struct matmul_sizes {
  std::int64_t m, n, k, batch;
};
std::optional<matmul_sizes> matmul_sizes_of(const op& mm, const std::vector<std::int64_t>& a,
                                            const std::vector<std::int64_t>& b);

// A MatMul -> (Add|Multiply)* -> eltwise* partition as the GEMM kernel runs it.
struct gemm_problem {
  gemm_config config;  // the kernel (tiles and shape mode applied)
  long m = 0, n = 0, k = 0, batch = 1;
  long lda = 0, ldb = 0, sa = 0, sb = 0;  // leading dims and batch strides of A and B
  // One per binary post-op: its input's index and strides in C's terms.
  struct post {
    std::size_t input;
    long batch_stride, row_stride, column_stride;
  };
  std::vector<post> posts;
  // The packed weight's padded sizes (config.packed_b: a constant rank-2 B).
  long packed_k = 0, packed_n = 0;

  // Throws compile_error for a post-op operand of a higher rank than C, a
  // post-op that broadcasts C to a larger shape (the GEMM computes the
  // MatMul's shape), or a size the kernels' 32-bit size arguments cannot
  // hold (M, N or K above 2^31 - 1).
  gemm_problem(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
               const gemm_tiles& tiles, kernel_shapes mode);
  // The same problem with `rows` rows (M), for a kernel of a shape class
  // that serves every M of the class. Only for one matrix (batch 1, no
  // batch strides).
  gemm_problem with_rows(long rows) const;
  // The work-items (global) and work-group (local) of the launch.
  std::array<std::size_t, 3> global() const;
  std::array<std::size_t, 3> local() const;

  // The packed weight (config.packed_b): its layout's key in the constant
  // tensor cache, its size, and the pack kernel's work-items for a
  // work-group of `work_group`.
  cache_key packed_layout() const;
  std::size_t packed_bytes() const;
  std::array<std::size_t, 3> pack_global(int work_group) const;
};

// The split-K parts for the generic GEMM of `g` (its tiles) on a device of
// `compute_units` (SMs, OpenCL compute units): 4 where M x N has too few
// tiles to fill the device (at most 1.5 per compute unit, or 4 for a K of
// 2048 or more, where each part has more work and the sum costs less in
// comparison) and K is at least 512, else 1; 1 for a batch. Each split is a
// kernel of its own, so a configuration has at most two. Measured on the
// H100 over a BERT layer's matmuls (docs/benchmarks.md).
int gemm_splits(const gemm_problem& g, int compute_units);
// The generic tiles for a batch of products (attention's: a batch has no
// shape class, so it is never tuned) whose N is at most half the tiles' BN
// where BM is below BN: the same tiles turned around (BM and BN, RM and RN
// swapped: as many work-items, the same local memory), so no half of every
// tile computes columns past N. Any other problem keeps `generic`. BERT's
// probabilities times V (N = 64, batch 84, M = K = 469) took 154.6 us with
// 64x128 tiles and 85.1 us with 128x64 on the H200 (docs/benchmarks.md).
gemm_tiles batch_tiles(const gemm_problem& g, const gemm_tiles& generic);
// The parts gemm_splits shares K out in when it does.
inline constexpr int kGenericSplitK = 4;
// The most a split-K GEMM's workspace may take (split x M x N floats).
inline constexpr std::size_t kMaxSplitWorkspaceBytes = std::size_t{64} << 20;
// Whether the GEMM of `g` may share K out in `splits` parts at all, whatever
// it would choose: one matrix (the workspace and the sum are one matrix's),
// K at least 512, and a workspace within kMaxSplitWorkspaceBytes. Always
// true for 1 part.
bool gemm_split_allowed(const gemm_problem& g, int splits);
// The same for a GEMM of these sizes with `tiles` (what a backend's
// kernel_configuration knows before it has a problem).
int gemm_splits(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch, const gemm_tiles& tiles,
                int compute_units);

// --- Adaptive GEMMs ----------------------------------------------------------------
// What the GPU backends share for kernel_shapes::adaptive: a GEMM's shape
// class is M's power-of-two range [2^(b-1), 2^b) with N and K (and the
// configuration: transposes, packing, chain); its specialized kernel is the
// GEMM with the tiles that ran fastest for the class among a few candidates.

// The class of `g`; an empty key for a batched problem (batch > 1) or a
// transposed A (its leading dimension is M), which stay on the generic kernel.
shape_class gemm_shape_class(const gemm_problem& g);
// Tiles worth timing for `g`'s class: small-M tiles for a few rows (split-K
// ones where K is long), larger ones for many, and always `generic` (the
// backend's plan) unsplit and split 4 ways (where K is at least 512 and
// the workspace stays within 64 MiB at the class's largest M), so the
// choice is never worse than the generic kernel as timed. Each is valid
// for gemm_source.
std::vector<gemm_tiles> gemm_candidates(const gemm_problem& g, const gemm_tiles& generic);
// Device memory that timing `candidates` for `g` takes (scratch A, the
// largest padded B, C, the post-op operands and the largest split-K
// workspace), and the most a backend
// spends on it: a class that would need more keeps the generic kernel (its
// backend gives it no class), so tuning never takes memory a workload of
// large weights needs.
std::size_t gemm_tuning_bytes(const gemm_problem& g, const std::vector<gemm_tiles>& candidates);
inline constexpr std::size_t max_gemm_tuning_bytes = std::size_t{256} << 20;
// The persistent store's key of the tiles chosen for `g`'s class by
// `backend` (the device identity is the store's own part of the key).
std::string gemm_tuning_key(std::string_view backend, const gemm_problem& g);
// A tuning choice as the store keeps it, and back: nullopt for bytes that
// are not one of `allowed` (a stored value never chooses a kernel of its own).
byte_vector encode_tiles(const gemm_tiles& t);
std::optional<gemm_tiles> decode_tiles(byte_span stored, const std::vector<gemm_tiles>& allowed);

// The tiles the persistent store holds for `g`'s class on `device` (by
// `backend`), if they are one of `candidates`.
std::optional<gemm_tiles> stored_tiles(std::string_view backend, const device_identity& device, const gemm_problem& g,
                                       const std::vector<gemm_tiles>& candidates);

// What a GPU backend's backend::specialization_class returns, with `plan`
// its generic tiles: for a MatMul partition the GEMM's class (none where
// tuning would need more than max_gemm_tuning_bytes, or where the GEMM
// cannot run these shapes); for other partitions none. No I/O.
shape_class gemm_specialization_class(const partition& p, const std::vector<logical_tensor>& in,
                                      const std::vector<logical_tensor>& out, const gemm_tiles& plan);

// What its backend::specialization_ready returns, with `d` its dialect and
// `id` its cache entries' id: true when every candidate of the class is in
// the kernel cache already or the store holds the class's tiles (one store
// read).
bool gemm_specialization_ready(const partition& p, const std::vector<logical_tensor>& in,
                               const std::vector<logical_tensor>& out, const gemm_tiles& plan, dialect d,
                               const engine& e, owner_id id, const device_identity& device);

// The floats of a scratch B that every candidate can read (padded to its tiles).
std::size_t gemm_scratch_b_floats(const gemm_problem& g, const std::vector<gemm_tiles>& candidates);

// The fastest of `candidates`: `make(tiles)` builds a candidate and returns a
// callable that runs it once and waits for it; each is run once to warm up
// (the driver's first launch) and then timed three times, the best counting.
// A candidate whose build or run throws error is skipped; compile_error if
// none ran, naming `what`. `report` (if given) gets each candidate's time,
// "<to_string(tiles)>=<us>" separated by spaces, or "=failed".
template <typename Make>
gemm_tiles fastest_tiles(const std::vector<gemm_tiles>& candidates, Make make, const std::string& what,
                         std::string* report = nullptr) {
  std::optional<gemm_tiles> best;
  double best_ns = 0;
  std::string errors;
  for (const gemm_tiles& t : candidates) {
    const std::string name = to_string(t);
    try {
      auto run = make(t);
      run();
      double ns = 0;
      for (int rep = 0; rep < 3; ++rep) {
        const auto start = std::chrono::steady_clock::now();
        run();
        const double took = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
        ns = rep == 0 ? took : std::min(ns, took);
      }
      if (!best || ns < best_ns) {
        best = t;
        best_ns = ns;
      }
      if (report) *report += (report->empty() ? "" : " ") + name + "=" + std::to_string(static_cast<long>(ns / 1e3));
    } catch (const error& err) {
      errors += std::string(errors.empty() ? "" : "; ") + err.what();
      if (report) *report += (report->empty() ? "" : " ") + name + "=failed";
    }
  }
  if (!best) throw compile_error("no GEMM candidate ran for " + what + ": " + errors);
  return *best;
}

// A GPU backend's tuning of `g`'s class: fastest_tiles, one verbose line
//   unicache_verbose,tuning,<backend>,class="...",chosen=<tiles>,us="<tiles>=<us> ..."
// and the choice put in the persistent store for the next process.
template <typename Make>
gemm_tiles tune_gemm(std::string_view backend, const device_identity& device, const gemm_problem& g,
                     const std::vector<gemm_tiles>& candidates, Make make) {
  const std::string description = gemm_shape_class(g).description;
  std::string report;
  const gemm_tiles chosen = fastest_tiles(candidates, make, std::string(backend) + " " + description, &report);
  if (support::verbose()) {
    support::verbose_line("unicache_verbose,tuning," + std::string(backend) + ",class=" +
                          support::quoted(description, 96) + ",chosen=" + to_string(chosen) +
                          ",us=" + support::quoted(report, 400));
  }
  kernel_store::instance().put(device, gemm_tuning_key(backend, g), encode_tiles(chosen));
  return chosen;
}

// Add / Multiply with numpy broadcasting as the binary kernel runs it.
struct binary_problem {
  std::vector<std::int64_t> out;  // the output's shape at rank 4
  std::vector<long> a_strides, b_strides;
  // Throws compile_error above rank 4.
  binary_problem(const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out);
};

}  // namespace unicache::gpu::kernels
