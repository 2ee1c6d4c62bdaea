// RMSNorm over rows: one pass for the mean square, one to scale.
#include "rms_norm_rows.hpp"

#include <algorithm>
#include <cmath>

#include "parallel.hpp"

namespace unicache::onednn_cpu::detail {
namespace {

// Below this many elements a tensor runs on the calling thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;
constexpr std::int64_t kTaskElements = std::int64_t{1} << 14;

void rms_norm_row_range(const float* x, const float* gamma, float* y, std::int64_t cols, float epsilon,
                        std::int64_t first, std::int64_t last) {
  for (std::int64_t row = first; row < last; ++row) {
    const float* in = x + row * cols;
    float* out = y + row * cols;
    double squares = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) squares += static_cast<double>(in[c]) * in[c];
    const float inverse = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(cols) + epsilon));
    for (std::int64_t c = 0; c < cols; ++c) out[c] = in[c] * inverse * gamma[c];
  }
}

}  // namespace

void rms_norm_rows(const float* x, const float* gamma, float* y, std::int64_t rows, std::int64_t cols, float epsilon) {
  if (rows <= 0 || cols <= 0) return;
  if (rows == 1 || rows * cols <= kParallelElements) {
    rms_norm_row_range(x, gamma, y, cols, epsilon, 0, rows);
    return;
  }
  const std::int64_t grain = std::max<std::int64_t>(1, kTaskElements / cols);
  parallel_ranges(rows, grain,
                  [&](std::int64_t first, std::int64_t last) { rms_norm_row_range(x, gamma, y, cols, epsilon, first, last); });
}

}  // namespace unicache::onednn_cpu::detail
