// The kernel of an eltwise, Softmax or LayerNorm partition: oneDNN
// primitives over power-of-two blocks of rows, so that new shapes reuse
// them, and Softmax in plain C++ with no primitive at all.
#pragma once

#include <cstdint>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "primitives.hpp"

namespace unicache::onednn_cpu::detail {

// Row counts that add up to `rows`, largest first, each a power of two no
// larger than `largest` (itself a power of two): 300 -> 256, 32, 8, 4.
std::vector<std::int64_t> power_of_two_blocks(std::int64_t rows, std::int64_t largest);
// The largest block of rows of `row_length` elements: a power of two, at most
// 2^22 elements (16 MiB of f32) unless one row is longer.
std::int64_t largest_block_rows(std::int64_t row_length);

// ReLU, GELU, Sigmoid, Tanh, Sqrt, Rsqrt, SiLU, Softmax, LayerNorm and
// RMSNorm (last axis), SRC -> DST
// (LayerNorm: with gamma as SCALE and beta as SHIFT). Each row is
// independent, so the tensor runs as blocks of rows, one primitive per
// block size from the kernel cache: every shape of a partition shares at
// most log2(rows) + 1 primitives per row length, where a primitive per shape
// would build one for each new batch or sequence length. Softmax builds
// none: oneDNN's would be one per row length too, and attention's row
// length is the sequence length, new with almost every request, so it runs
// softmax_rows (plain C++) on the whole tensor; RMSNorm (which oneDNN 2.x
// lacks) runs rms_norm_rows.
class row_wise_kernel final : public compiled_kernel {
 public:
  row_wise_kernel(const partition& p, const std::vector<logical_tensor>& in, const engine& e);

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  struct block {
    std::int64_t rows = 0;
    dnnl::memory::desc md;
    std::shared_ptr<const cached_primitive> prim;
  };
  std::int64_t row_length_ = 1;
  std::int64_t rows_ = 1;
  bool layer_norm_ = false;
  bool softmax_ = false;             // softmax_rows; blocks_ stays empty
  bool rms_norm_ = false;            // rms_norm_rows; blocks_ stays empty
  float epsilon_ = 0.f;
  dnnl::memory::desc parameter_md_;  // LayerNorm's gamma and beta: [row length]
  std::vector<block> blocks_;        // in row order, covering every row once
};

}  // namespace unicache::onednn_cpu::detail
