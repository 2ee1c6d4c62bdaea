// Transpose on the CPU: the permuted input's strides, simplified
// (plan_transpose), then rows of the output copied in parallel.
#include "transpose_kernel.hpp"

#include <algorithm>
#include <cstring>

#include "parallel.hpp"

namespace unicache::onednn_cpu::detail {
namespace {

// Below this many elements a copy runs on the calling thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;
// A parallel copy splits its rows into ranges of about this many elements.
constexpr std::int64_t kTaskElements = std::int64_t{1} << 14;

void copy_along(const transpose_plan& plan, const float* in, float* out) {
  const std::size_t rank = plan.dims.size();
  const std::int64_t cols = plan.dims.back(), col_stride = plan.strides.back();
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < rank; ++d) rows *= plan.dims[d];
  auto run = [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t row = first; row < last; ++row) {
      std::int64_t offset = 0, rest = row;
      for (std::size_t d = rank - 1; d-- > 0;) {
        offset += rest % plan.dims[d] * plan.strides[d];
        rest /= plan.dims[d];
      }
      const float* src = in + offset;
      float* dst = out + row * cols;
      if (col_stride == 1) {
        std::memcpy(dst, src, static_cast<std::size_t>(cols) * sizeof(float));
      } else {
        for (std::int64_t c = 0; c < cols; ++c) dst[c] = src[c * col_stride];
      }
    }
  };
  if (rows == 1 || rows * cols <= kParallelElements) {
    run(0, rows);
    return;
  }
  parallel_ranges(rows, std::max<std::int64_t>(1, kTaskElements / cols), run);
}

}  // namespace

transpose_kernel::transpose_kernel(const partition& p, const std::vector<logical_tensor>& in)
    : plan_(plan_transpose(in[0].shape, p.ops().front().permutation)) {}

void transpose_kernel::execute(stream& /*s: the copy is done on return*/, const std::vector<tensor>& inputs,
                               const std::vector<tensor>& outputs) const {
  copy_along(plan_, static_cast<const float*>(inputs[0].data), static_cast<float*>(outputs[0].data));
}

}  // namespace unicache::onednn_cpu::detail
