// Softmax over the last axis in plain C++: no oneDNN primitive, so every row
// length runs without building anything.
#pragma once

#include <cstdint>

namespace unicache::onednn_cpu::detail {

// y = exp(x - max) / sum(exp(x - max)) for each of `rows` rows of `cols`
// floats, row-major; x and y may be the same buffer. Accurate to a few ulps
// (exp within 1 ulp of libm's, the sum in f32); an element more than about
// 87.7 below its row's maximum (a -inf mask, say) gives exactly 0, and a NaN
// makes its row NaN. Vectorized for the machine it runs on (AVX-512, AVX2 or
// baseline x86-64, chosen when the library loads) and, for tensors of more
// than 2^16 elements, split over rows on oneDNN's threads (parallel.hpp).
// Thread-safe: it keeps no state.
void softmax_rows(const float* x, float* y, std::int64_t rows, std::int64_t cols);

}  // namespace unicache::onednn_cpu::detail
