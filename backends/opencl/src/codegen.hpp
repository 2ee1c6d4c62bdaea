// OpenCL C generation: one kernel per configuration, not per shape (unless
// kernel_shapes::specialized asks for the GEMM's sizes compiled in). Sizes
// and strides are kernel arguments; each kernel has a fixed work-group size
// (reqd_work_group_size), so a driver that compiles a work-group function
// per local size (PoCL) compiles it once and the stored binary serves every
// shape.
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "opencl_internal.hpp"

namespace unicache::opencl::detail {

// C = A x B with the post-op chain applied in the epilogue (each binary
// post-op reads one extra operand with its own strides).
//   args: A, B, C, int M, N, K, long lda, ldb, ldc, long batch strides sa, sb, sc,
//         then per binary post-op: buffer, long batch, row and column strides.
//   NDRange: (ceil(N/bn) * local_x, ceil(M/bm) * local_y, batch), local (local_x, local_y, 1).
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
kernel_source gemm_source(const gemm_config& c);

// Packs B (K x N, or N x K if transposed) into the layout gemm expects with
// packed_b (the padding is the caller's: Kp, Np).  args: B, P, int K, N, long ldb, int padded K, int padded N.
//   NDRange: (padded N rounded up to work_group, padded K), local (work_group, 1).
kernel_source pack_source(bool transpose_b, int work_group);

// Softmax over the last axis, one work-group per row.
//   args: x, y, int cols.  NDRange: (rows * work_group), local (work_group).
kernel_source softmax_source(int work_group);

// y = f(x) elementwise.  args: x, y, long n.  NDRange: n rounded up, local (work_group).
kernel_source eltwise_source(op_kind kind, int work_group);

// y = a (+|*) b with numpy broadcasting over up to four dims (leading dims
// of size 1 pad lower ranks; a broadcast dim has stride 0).
//   args: a, b, y, long n, int d1, d2, d3, long a0..a3, long b0..b3.
//   NDRange: n rounded up, local (work_group).
kernel_source binary_source(op_kind kind, int work_group);

}  // namespace unicache::opencl::detail
