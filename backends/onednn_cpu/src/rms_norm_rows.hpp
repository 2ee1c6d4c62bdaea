// RMSNorm over rows in plain C++ (oneDNN 2.x's layer normalization has no
// RMS form): y = x / sqrt(mean(x^2) + epsilon) * gamma, per row.
#pragma once

#include <cstdint>

namespace unicache::onednn_cpu::detail {

// Rows of `cols` floats, x to y (y may be x); gamma holds `cols` floats. The
// mean square is accumulated in double, as the row may be long. Runs on the
// backend's threads (parallel_ranges) when the tensor is large.
void rms_norm_rows(const float* x, const float* gamma, float* y, std::int64_t rows, std::int64_t cols, float epsilon);

}  // namespace unicache::onednn_cpu::detail
