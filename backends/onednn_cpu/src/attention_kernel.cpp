// Attention on the CPU: each query row's scores, their softmax and the
// weighted sum of the values, in one pass.
#include "attention_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "parallel.hpp"

namespace unicache::onednn_cpu::detail {
namespace {

// Below this many multiply-adds (both products) the rows run on the calling thread.
constexpr std::int64_t kParallelWork = std::int64_t{1} << 18;

struct operands {
  const float *q, *k, *v, *mask;
  float* out;
};

// Rows [first, last) of the flattened (batch, head, query row) range, each
// in one pass (online softmax: the output row accumulates the values,
// rescaled when the running maximum grows), so no scores are kept and
// nothing is allocated on the pool's threads.
void attention_rows(const attention_problem& a, const operands& t, std::int64_t first, std::int64_t last) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (std::int64_t row = first; row < last; ++row) {
    const std::int64_t i = row % a.length, bh = row / a.length, h = bh % a.heads, b = bh / a.heads;
    const float* q = t.q + b * a.q[0] + h * a.q[1] + i * a.q[2];
    const float* k = t.k + b * a.k[0] + h * a.k[1];
    const float* v = t.v + b * a.v[0] + h * a.v[1];
    float* out = t.out + b * a.out[0] + h * a.out[1] + i * a.out[2];
    std::fill(out, out + a.value_size, 0.f);
    const std::int64_t visible = a.causal ? std::min(a.source, i + 1) : a.source;
    float top = minus_inf;
    double sum = 0.0;
    for (std::int64_t j = 0; j < visible; ++j) {
      const float* kj = k + j * a.k[2];
      float dot = 0.f;
      for (std::int64_t d = 0; d < a.head_size; ++d) dot += q[d] * kj[d];
      float s = dot * a.scale;
      if (t.mask) s += t.mask[b * a.mask[0] + h * a.mask[1] + i * a.mask[2] + j * a.mask[3]];
      if (s == minus_inf) continue;  // a weight of 0 (a row of -inf only ends with a sum of 0)
      if (s > top) {
        const float rescale = std::exp(top - s);  // 0 for the first score
        for (std::int64_t d = 0; d < a.value_size; ++d) out[d] *= rescale;
        sum *= rescale;
        top = s;
      }
      const float p = std::exp(s - top);
      sum += p;
      const float* vj = v + j * a.v[2];
      for (std::int64_t d = 0; d < a.value_size; ++d) out[d] += p * vj[d];
    }
    const float inverse = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.f;
    for (std::int64_t d = 0; d < a.value_size; ++d) out[d] *= inverse;
  }
}

}  // namespace

attention_kernel::attention_kernel(const partition& p, const std::vector<logical_tensor>& in)
    : problem_(p.ops().front(), in) {}

void attention_kernel::execute(stream& /*s: done on return*/, const std::vector<tensor>& inputs,
                               const std::vector<tensor>& outputs) const {
  const attention_problem& a = problem_;
  const operands t{static_cast<const float*>(inputs[0].data), static_cast<const float*>(inputs[1].data),
                   static_cast<const float*>(inputs[2].data),
                   a.has_mask ? static_cast<const float*>(inputs[3].data) : nullptr,
                   static_cast<float*>(outputs[0].data)};
  const std::int64_t rows = a.batch * a.heads * a.length;
  const std::int64_t per_row = std::max<std::int64_t>(1, a.source * (a.head_size + a.value_size));
  if (rows * per_row <= kParallelWork) {
    attention_rows(a, t, 0, rows);
    return;
  }
  parallel_ranges(rows, std::max<std::int64_t>(1, kParallelWork / 16 / per_row),
                  [&](std::int64_t first, std::int64_t last) { attention_rows(a, t, first, last); });
}

}  // namespace unicache::onednn_cpu::detail
