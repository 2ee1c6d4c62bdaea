// The specialized kernels (kernel_shapes::adaptive): which M share a class, and
// the kernel that runs any M of a class on the class's primitive.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "packed_weights.hpp"
#include "primitives.hpp"

namespace unicache::onednn_cpu::detail {

// --- The specialized kernels (kernel_shapes::adaptive) -------------------------------
//
// A class is a fused MatMul of a plain row-major A (rank 2, or rank 3 with a
// batch of 1) with a constant rank-2 weight and M >= 16, with M in
// [q g, (q + 1) g) where the granularity g is 1/16 of M's power of two (at
// least 16 rows): eight classes per octave of M, M rounded down by less than
// an eighth. Its kernel is one primitive created for exactly q g rows, with
// the weight in the layout it picks (oneDNN's brgemm kernels, weights packed
// once into the constant tensor cache); any M of the class runs its first
// q g rows there and the rest (fewer than g) on the generic runtime-dims
// primitive (rows of a row-major A and C are contiguous). A post-op operand
// with M rows is offset with the rows; one broadcast over rows is passed as is.

inline constexpr std::int64_t kSmallestGranularity = 16;

// The rows of M's class's primitive (q g above).
std::int64_t class_rows(std::int64_t m);

// A tensor of rank <= 3 seen as rows x columns (a leading batch must be 1).
std::array<std::int64_t, 2> rows_columns(const std::vector<std::int64_t>& shape);

// The rows of a matmul partition's A, if a specialized kernel can chunk it: 0 otherwise.
std::int64_t chunkable_rows(const partition& p, const std::vector<logical_tensor>& in);

class chunked_matmul_kernel final : public compiled_kernel {
 public:
  chunked_matmul_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
                        const engine& e);

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  struct post {
    op_kind kind;
    std::size_t input;
    bool full_rows;  // one value per row of C (offset with each chunk), else broadcast over rows
    std::int64_t columns = 1;
  };
  struct chunk {
    std::int64_t rows = 0;  // 0: any (the runtime-dims primitive)
    std::shared_ptr<const cached_primitive> prim;
    weight_slot slot;  // per primitive: each may want its own layout
  };

  dnnl::memory::desc post_md(const post& x, std::int64_t rows) const;

  // A fused matmul primitive for `rows` rows (DNNL_RUNTIME_DIM_VAL: any).
  std::shared_ptr<const cached_primitive> make(const engine& e, std::int64_t rows) const;

  void run(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs,
           const chunk& c, std::int64_t row, std::int64_t rows) const;

  std::int64_t k_ = 0, n_ = 0;
  dnnl::memory::desc b_user_md_;
  std::vector<post> posts_;
  chunk generic_;
  chunk fixed_;  // the class's rows
};

}  // namespace unicache::onednn_cpu::detail
