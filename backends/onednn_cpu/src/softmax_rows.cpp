// Softmax over rows in plain C++: Cephes' expf on 16-float vectors (GCC's
// vector extensions), built once per instruction set and picked at load time.
#include "softmax_rows.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "parallel.hpp"

// The vector helpers below return 64-byte vectors (and take them by
// reference): GCC warns that such a return differs with and without
// AVX-512, but they are always inlined, so no call returns one.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace unicache::onednn_cpu::detail {
namespace {

// Below this many elements a tensor runs on the calling thread: handing it
// to other threads costs more than it saves.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;
// A parallel run splits its rows into tasks of at least this many elements.
constexpr std::int64_t kTaskElements = std::int64_t{1} << 14;

// One AVX-512 register, two AVX2 ones, four SSE ones: the compiler splits a
// vector for the instruction set of each clone of softmax_row_range.
constexpr std::int64_t kLanes = 16;
using vfloat = float __attribute__((vector_size(kLanes * sizeof(float))));
using vuint = std::uint32_t __attribute__((vector_size(kLanes * sizeof(float))));
using vint = std::int32_t __attribute__((vector_size(kLanes * sizeof(float))));

// The integer types of exp_nonpositive's bit operations, for float and vfloat.
template <typename F>
struct bits_of {
  using type = std::int32_t;
};
template <>
struct bits_of<vfloat> {
  using type = vint;
};

// exp(x) for x <= 0 (an element minus its row's maximum), on a float or a
// vfloat: within 1 ulp of libm's while the result is a normal float (checked
// for every float down to -87.3), 0 below about -87.7 (where exp leaves the
// normal floats), NaN for NaN. Cephes' expf: x = n ln2 + r with
// |r| <= ln2/2 (ln2 in two parts, so that n ln2 is exact), exp(r) by a
// degree-6 polynomial, 2^n written into the exponent field. No branch: n is
// rounded to nearest by adding 1.5 * 2^23, whose low mantissa bits then hold
// n; x is clamped at -88, where n = -127 and the exponent field 0 makes 2^n,
// and the result, exactly 0.
template <typename F>
[[gnu::always_inline]] inline F exp_nonpositive(const F& x) {
  using I = typename bits_of<F>::type;
  constexpr float kLowest = -88.f;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  const F lowest = kLowest + F{};
  const F xc = x < lowest ? lowest : x;  // a NaN stays NaN
  const F t = xc * kLog2e + kRound;
  const F n = t - kRound;
  const F r = (xc - n * kLn2Hi) - n * kLn2Lo;
  F p = 1.9875691500e-4f + F{};
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const I biased_n = std::bit_cast<I>(t) - std::bit_cast<std::int32_t>(kRound) + 127;
  return p * std::bit_cast<F>(biased_n << 23);
}

[[gnu::always_inline]] inline vfloat load(const float* p) {
  vfloat v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store(float* p, const vfloat& v) { std::memcpy(p, &v, sizeof v); }
[[gnu::always_inline]] inline vfloat max_of(const vfloat& a, const vfloat& b) { return a > b ? a : b; }

// The largest lane and the sum of the lanes, in four halving steps.
[[gnu::always_inline]] inline float reduce_max(const vfloat& lanes) {
  vfloat v = lanes;
  v = max_of(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  v = max_of(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  v = max_of(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  v = max_of(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
  return v[0];
}
[[gnu::always_inline]] inline float reduce_sum(const vfloat& lanes) {
  vfloat v = lanes;
  v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  return v[0];
}

// A row shorter than a vector, one element at a time.
[[gnu::always_inline]] inline void softmax_short_row(const float* in, float* out, std::int64_t cols) {
  float max = in[0];
  for (std::int64_t c = 1; c < cols; ++c) max = in[c] > max ? in[c] : max;
  float sum = 0.f;
  for (std::int64_t c = 0; c < cols; ++c) {
    out[c] = exp_nonpositive(in[c] - max);
    sum += out[c];
  }
  const float inverse = 1.f / sum;
  for (std::int64_t c = 0; c < cols; ++c) out[c] *= inverse;
}

// Rows [first, last) of `cols` >= kLanes elements, a vector at a time. A
// row that is not a whole number of vectors ends with the vector of its
// last kLanes elements (the window), which overlaps the one before: its
// max is harmless twice, its lanes already counted are masked out of the
// sum, and its lanes written twice get the same value twice. The window is
// computed before the row's first store, so that in place it reads the
// input; no load reads a partly overlapping earlier store (which would
// stall store-to-load forwarding).
[[gnu::always_inline]] inline void softmax_long_rows(const float* x, float* y, std::int64_t cols, std::int64_t first,
                                                     std::int64_t last) {
  const std::int64_t body = cols - cols % kLanes, window = cols - kLanes;
  vuint lane{};
  for (std::int64_t l = 0; l < kLanes; ++l) lane[l] = static_cast<std::uint32_t>(l);
  const vint window_only = lane >= static_cast<std::uint32_t>(body - window);  // lanes past the body
  for (std::int64_t row = first; row < last; ++row) {
    const float* in = x + row * cols;
    float* out = y + row * cols;
    const vfloat last_in = load(in + window);
    vfloat max = last_in;
    for (std::int64_t c = 0; c < body; c += kLanes) max = max_of(max, load(in + c));
    const vfloat row_max = reduce_max(max) + vfloat{};
    const vfloat last_e = exp_nonpositive(last_in - row_max);
    vfloat sum = window_only ? last_e : vfloat{};
    for (std::int64_t c = 0; c < body; c += kLanes) {
      const vfloat e = exp_nonpositive(load(in + c) - row_max);
      store(out + c, e);
      sum += e;
    }
    const float inverse = 1.f / reduce_sum(sum);
    for (std::int64_t c = 0; c < body; c += kLanes) store(out + c, load(out + c) * inverse);
    store(out + window, last_e * inverse);
  }
}

// GCC and clang build a clone of this per instruction set and pick one when
// the library loads (an ifunc: x86-64 ELF); elsewhere it is built once for
// the target.
#if defined(__x86_64__) && defined(__ELF__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void softmax_row_range(const float* x, float* y, std::int64_t cols, std::int64_t first, std::int64_t last) {
  if (cols >= kLanes) {
    softmax_long_rows(x, y, cols, first, last);
    return;
  }
  for (std::int64_t row = first; row < last; ++row) softmax_short_row(x + row * cols, y + row * cols, cols);
}

}  // namespace

void softmax_rows(const float* x, float* y, std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  if (rows == 1 || rows * cols <= kParallelElements) {
    softmax_row_range(x, y, cols, 0, rows);
    return;
  }
  const std::int64_t grain = std::max<std::int64_t>(1, kTaskElements / cols);
  parallel_ranges(rows, grain, [&](std::int64_t first, std::int64_t last) { softmax_row_range(x, y, cols, first, last); });
}

}  // namespace unicache::onednn_cpu::detail
