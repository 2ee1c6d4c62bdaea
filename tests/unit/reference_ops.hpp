// Plain C++ reference implementations of the graph's ops, for numerics
// tests. Row-major f32; deliberately simple.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace unicache::testing {

using shape_t = std::vector<std::int64_t>;

inline std::int64_t elements(const shape_t& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

inline std::vector<float> random_data(const shape_t& s, unsigned seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(elements(s)));
  for (auto& x : v) x = dist(rng);
  return v;
}

// C[M,N] = op(A) op(B); A is [M,K] (or [K,M] if ta), B [K,N] (or [N,K] if tb).
inline std::vector<float> ref_matmul(const std::vector<float>& a, const std::vector<float>& b, std::int64_t m,
                                     std::int64_t k, std::int64_t n, bool ta, bool tb) {
  std::vector<float> c(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const float av = ta ? a[p * m + i] : a[i * k + p];
        const float bv = tb ? b[j * k + p] : b[p * n + j];
        acc += static_cast<double>(av) * bv;
      }
      c[i * n + j] = static_cast<float>(acc);
    }
  }
  return c;
}

// out = a (op) b with numpy broadcasting to `out_shape`.
inline std::vector<float> ref_binary(const std::vector<float>& a, shape_t as, const std::vector<float>& b, shape_t bs,
                                     const shape_t& out_shape, bool add) {
  while (as.size() < out_shape.size()) as.insert(as.begin(), 1);
  while (bs.size() < out_shape.size()) bs.insert(bs.begin(), 1);
  std::vector<float> out(static_cast<std::size_t>(elements(out_shape)));
  std::vector<std::int64_t> idx(out_shape.size(), 0);
  for (std::size_t flat = 0; flat < out.size(); ++flat) {
    std::int64_t oa = 0, ob = 0;
    for (std::size_t d = 0; d < out_shape.size(); ++d) {
      oa = oa * as[d] + (as[d] == 1 ? 0 : idx[d]);
      ob = ob * bs[d] + (bs[d] == 1 ? 0 : idx[d]);
    }
    out[flat] = add ? a[oa] + b[ob] : a[oa] * b[ob];
    for (std::size_t d = out_shape.size(); d-- > 0;) {
      if (++idx[d] < out_shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// op_kind values: relu=3, gelu_erf, gelu_tanh, sigmoid, tanh; sqrt=11, rsqrt, silu
inline float ref_eltwise(int kind, float x) {
  switch (kind) {
    case 3: return x > 0 ? x : 0;
    case 4: return 0.5f * x * (1.f + std::erf(x / std::sqrt(2.f)));
    case 5: return 0.5f * x * (1.f + std::tanh(std::sqrt(2.f / 3.14159265358979f) * (x + 0.044715f * x * x * x)));
    case 6: return 1.f / (1.f + std::exp(-x));
    case 7: return std::tanh(x);
    case 11: return static_cast<float>(std::sqrt(static_cast<double>(x)));
    case 12: return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x)));
    case 13: return static_cast<float>(x / (1.0 + std::exp(-static_cast<double>(x))));
  }
  return NAN;
}

inline std::vector<float> ref_softmax(std::vector<float> x, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * cols;
    float mx = row[0];
    for (std::int64_t c = 1; c < cols; ++c) mx = std::max(mx, row[c]);
    double sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(row[c] - mx));
    for (std::int64_t c = 0; c < cols; ++c) row[c] = static_cast<float>(std::exp(static_cast<double>(row[c] - mx)) / sum);
  }
  return x;
}

// torch.permute: output dim i is input dim permutation[i], written dense.
inline std::vector<float> ref_transpose(const std::vector<float>& x, const shape_t& shape,
                                        const std::vector<std::int64_t>& permutation) {
  const std::size_t rank = shape.size();
  std::vector<std::int64_t> in_strides(rank, 1), out_shape(rank);
  for (std::size_t d = rank; d-- > 1;) in_strides[d - 1] = in_strides[d] * shape[d];
  for (std::size_t d = 0; d < rank; ++d) out_shape[d] = shape[static_cast<std::size_t>(permutation[d])];
  std::vector<float> out(x.size());
  std::vector<std::int64_t> index(rank, 0);
  for (std::size_t e = 0; e < out.size(); ++e) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < rank; ++d) offset += index[d] * in_strides[static_cast<std::size_t>(permutation[d])];
    out[e] = x[static_cast<std::size_t>(offset)];
    for (std::size_t d = rank; d-- > 0;) {  // next output index, last axis fastest
      if (++index[d] < out_shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// Scaled dot-product attention in double, two passes per row: sizes b, h,
// l, s, d, dv; Q, K, V in layout bhld ([b, h, l, d]) or blhd ([b, l, h, d]);
// `mask` (may be empty) broadcasts to [b, h, l, s] as `mask_shape` of rank 4
// says; causal hides key j from query i where j > i; a row whose every score
// is -inf gives 0s. The output is in the inputs' layout.
struct attention_sizes {
  std::int64_t b, h, l, s, d, dv;
};
inline std::vector<float> ref_attention(const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, const std::vector<float>& mask,
                                        const shape_t& mask_shape, const attention_sizes& z, bool blhd, bool causal,
                                        double scale) {
  auto at = [&](std::int64_t bi, std::int64_t hi, std::int64_t row, std::int64_t rows, std::int64_t width) {
    return blhd ? ((bi * rows + row) * z.h + hi) * width : ((bi * z.h + hi) * rows + row) * width;
  };
  std::vector<float> out(static_cast<std::size_t>(z.b * z.h * z.l * z.dv));
  std::vector<double> scores(static_cast<std::size_t>(z.s));
  for (std::int64_t bi = 0; bi < z.b; ++bi) {
    for (std::int64_t hi = 0; hi < z.h; ++hi) {
      for (std::int64_t i = 0; i < z.l; ++i) {
        double top = -INFINITY;
        for (std::int64_t j = 0; j < z.s; ++j) {
          double dot = 0;
          for (std::int64_t e = 0; e < z.d; ++e) {
            dot += static_cast<double>(q[at(bi, hi, i, z.l, z.d) + e]) * k[at(bi, hi, j, z.s, z.d) + e];
          }
          double score = dot * scale;
          if (!mask.empty()) {
            const std::int64_t mi = ((mask_shape[0] == 1 ? 0 : bi) * mask_shape[1] + (mask_shape[1] == 1 ? 0 : hi)) *
                                        mask_shape[2] * mask_shape[3] +
                                    (mask_shape[2] == 1 ? 0 : i) * mask_shape[3] + (mask_shape[3] == 1 ? 0 : j);
            score += mask[static_cast<std::size_t>(mi)];
          }
          if (causal && j > i) score = -INFINITY;
          scores[static_cast<std::size_t>(j)] = score;
          top = std::max(top, score);
        }
        double sum = 0;
        for (double& score : scores) sum += score = std::isinf(top) ? 0.0 : std::exp(score - top);
        for (std::int64_t e = 0; e < z.dv; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j < z.s; ++j) acc += scores[static_cast<std::size_t>(j)] * v[at(bi, hi, j, z.s, z.dv) + e];
          out[at(bi, hi, i, z.l, z.dv) + e] = sum > 0 ? static_cast<float>(acc / sum) : 0.f;
        }
      }
    }
  }
  return out;
}

// LayerNorm over rows of `cols`, in double: (x - mean) / sqrt(var + eps) * gamma + beta.
inline std::vector<float> ref_rms_norm(std::vector<float> x, std::int64_t rows, std::int64_t cols,
                                       const std::vector<float>& gamma, double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * cols;
    double squares = 0;
    for (std::int64_t c = 0; c < cols; ++c) squares += static_cast<double>(row[c]) * row[c];
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(cols) + eps);
    for (std::int64_t c = 0; c < cols; ++c) row[c] = static_cast<float>(row[c] * inv * gamma[c]);
  }
  return x;
}

inline std::vector<float> ref_layer_norm(std::vector<float> x, std::int64_t rows, std::int64_t cols,
                                         const std::vector<float>& gamma, const std::vector<float>& beta, double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * cols;
    double mean = 0, var = 0;
    for (std::int64_t c = 0; c < cols; ++c) mean += row[c];
    mean /= static_cast<double>(cols);
    for (std::int64_t c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(cols) + eps);
    for (std::int64_t c = 0; c < cols; ++c) row[c] = static_cast<float>((row[c] - mean) * inv * gamma[c] + beta[c]);
  }
  return x;
}

}  // namespace unicache::testing
