#include "codegen.hpp"

#include <string>

#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"

namespace unicache::opencl::detail {
namespace {

// OpenCL C 1.2; no fast-math: results must match the CPU reference.
constexpr const char* kOptions = "-cl-std=CL1.2";

constexpr const char* kEltwiseFunctions = R"CLC(
inline float u_relu(float x) { return fmax(x, 0.0f); }
inline float u_gelu_erf(float x) { return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f)); }
inline float u_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
inline float u_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }
inline float u_tanh(float x) { return tanh(x); }
)CLC";

const char* eltwise_function(op_kind k) {
  switch (k) {
    case op_kind::relu: return "u_relu";
    case op_kind::gelu_erf: return "u_gelu_erf";
    case op_kind::gelu_tanh: return "u_gelu_tanh";
    case op_kind::sigmoid: return "u_sigmoid";
    case op_kind::tanh: return "u_tanh";
    default: throw compile_error(std::string("opencl: ") + to_string(k) + " is not an eltwise op");
  }
}

std::string define(const char* name, long value) {
  return std::string("#define ") + name + " " + std::to_string(value) + "\n";
}

void replace(std::string& s, const std::string& what, const std::string& with) {
  const auto at = s.find(what);
  if (at != std::string::npos) s.replace(at, what.size(), with);
}

constexpr const char* kGemm = R"CLC(
#define TX (BN / RN)
#define TY (BM / RM)
#define NT (TX * TY)
__attribute__((reqd_work_group_size(TX, TY, 1)))
__kernel void gemm(__global const float* restrict A, __global const float* restrict B,
                   __global float* restrict C, const int M_ARG, const int N_ARG, const int K_ARG,
                   const long lda, const long ldb, const long ldc,
                   const long sa, const long sb, const long sc POST_PARAMS) {
#ifdef FIXED_M
  /* A shape-specialized kernel: the sizes are constants. */
  const int M = FIXED_M, N = FIXED_N, K = FIXED_K;
#else
  const int M = M_ARG, N = N_ARG, K = K_ARG;
#endif
  /* +1: the column a work-item writes while loading and the row it reads
     while multiplying fall in different local-memory banks. */
  __local float As[BK][BM + 1];
  __local float Bs[BK][BN + 1];
  const int tx = get_local_id(0), ty = get_local_id(1);
  const int tid = ty * TX + tx;
  const int bm = get_group_id(1) * BM, bn = get_group_id(0) * BN;
  const long batch = get_group_id(2);
  A += batch * sa;
  B += batch * sb;
  C += batch * sc;
  float acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += BK) {
    /* Tiles are loaded along the contiguous dimension, zero outside. */
    for (int e = tid; e < BM * BK; e += NT) {
#if TRANS_A
      const int m = e % BM, k = e / BM;
      const int gm = bm + m, gk = k0 + k;
      As[k][m] = (gm < M && gk < K) ? A[gk * lda + gm] : 0.0f;
#else
      const int k = e % BK, m = e / BK;
      const int gm = bm + m, gk = k0 + k;
      As[k][m] = (gm < M && gk < K) ? A[gm * lda + gk] : 0.0f;
#endif
    }
    for (int e = tid; e < BK * BN; e += NT) {
#if PACKED_B
      const int n = e % BN, k = e / BN;
      Bs[k][n] = B[(k0 + k) * ldb + bn + n];
#elif TRANS_B
      const int k = e % BK, n = e / BK;
      const int gn = bn + n, gk = k0 + k;
      Bs[k][n] = (gn < N && gk < K) ? B[gn * ldb + gk] : 0.0f;
#else
      const int n = e % BN, k = e / BN;
      const int gn = bn + n, gk = k0 + k;
      Bs[k][n] = (gn < N && gk < K) ? B[gk * ldb + gn] : 0.0f;
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[RM], b[RN];
      for (int i = 0; i < RM; ++i) a[i] = As[k][ty + i * TY];
      for (int j = 0; j < RN; ++j) b[j] = Bs[k][tx + j * TX];
      for (int i = 0; i < RM; ++i)
        for (int j = 0; j < RN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < RM; ++i) {
    const int m = bm + ty + i * TY;
    if (m >= M) continue;
    for (int j = 0; j < RN; ++j) {
      const int n = bn + tx + j * TX;
      if (n >= N) continue;
      float v = acc[i][j];
POST_CODE      C[m * ldc + n] = v;
    }
  }
}
)CLC";

constexpr const char* kPack = R"CLC(
__attribute__((reqd_work_group_size(WG, 1, 1)))
__kernel void pack_b(__global const float* restrict B, __global float* restrict P, const int K, const int N,
                     const long ldb, const int Kp, const int Np) {
  const int n = get_global_id(0), k = get_global_id(1);
  if (n >= Np || k >= Kp) return;
  float v = 0.0f;
#if TRANS_B
  if (n < N && k < K) v = B[n * ldb + k];
#else
  if (n < N && k < K) v = B[k * ldb + n];
#endif
  P[k * (long)Np + n] = v;
}
)CLC";

constexpr const char* kSoftmax = R"CLC(
__attribute__((reqd_work_group_size(WG, 1, 1)))
__kernel void softmax(__global const float* restrict x, __global float* restrict y, const int cols) {
  __local float red[WG];
  const int l = get_local_id(0);
  const long row = get_group_id(0);
  x += row * cols;
  y += row * cols;
  float m = -INFINITY;
  for (int c = l; c < cols; c += WG) m = fmax(m, x[c]);
  red[l] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = WG / 2; s > 0; s >>= 1) {
    if (l < s) red[l] = fmax(red[l], red[l + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  m = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  float sum = 0.0f;
  for (int c = l; c < cols; c += WG) sum += exp(x[c] - m);
  red[l] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = WG / 2; s > 0; s >>= 1) {
    if (l < s) red[l] += red[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float inv = 1.0f / red[0];
  for (int c = l; c < cols; c += WG) y[c] = exp(x[c] - m) * inv;
}
)CLC";

constexpr const char* kEltwise = R"CLC(
__attribute__((reqd_work_group_size(WG, 1, 1)))
__kernel void eltwise(__global const float* restrict x, __global float* restrict y, const long n) {
  const long i = get_global_id(0);
  if (i < n) y[i] = FUNC(x[i]);
}
)CLC";

constexpr const char* kBinary = R"CLC(
__attribute__((reqd_work_group_size(WG, 1, 1)))
__kernel void binary(__global const float* restrict a, __global const float* restrict b,
                     __global float* restrict y, const long n, const int d1, const int d2, const int d3,
                     const long a0, const long a1, const long a2, const long a3,
                     const long b0, const long b1, const long b2, const long b3) {
  const long i = get_global_id(0);
  if (i >= n) return;
  long r = i;
  const long i3 = r % d3; r /= d3;
  const long i2 = r % d2; r /= d2;
  const long i1 = r % d1;
  const long i0 = r / d1;
  const float x = a[i0 * a0 + i1 * a1 + i2 * a2 + i3 * a3];
  const float z = b[i0 * b0 + i1 * b1 + i2 * b2 + i3 * b3];
  y[i] = x OP z;
}
)CLC";

kernel_source make(std::string config, std::string defines, const char* body, const char* name) {
  kernel_source s;
  s.config = std::move(config);
  s.source = std::string("/* unicache generated */\n") + defines + kEltwiseFunctions + body;
  s.options = kOptions;
  s.kernel_name = name;
  return s;
}

}  // namespace

kernel_source gemm_source(const gemm_config& c) {
  const gemm_tiles& t = c.tiles;
  cache_key key;
  key.add("gemm").add(c.transpose_a).add(c.transpose_b).add(c.packed_b);
  key.add(t.bm).add(t.bn).add(t.bk).add(t.rm).add(t.rn).add(static_cast<std::uint64_t>(c.chain.size()));
  key.add(c.fixed_mnk.has_value());
  if (c.fixed_mnk) key.add((*c.fixed_mnk)[0]).add((*c.fixed_mnk)[1]).add((*c.fixed_mnk)[2]);
  std::string params, code;
  int binary_index = 0;
  for (op_kind k : c.chain) {
    key.add(k);
    if (is_binary(k)) {
      const std::string p = "P" + std::to_string(binary_index++);
      params += ", __global const float* restrict " + p + ", const long " + p + "b, const long " + p +
                "m, const long " + p + "n";
      code += "      v = v " + std::string(k == op_kind::add ? "+" : "*") + " " + p + "[batch * " + p + "b + m * " + p +
              "m + n * " + p + "n];\n";
    } else {
      code += "      v = " + std::string(eltwise_function(k)) + "(v);\n";
    }
  }
  std::string body = kGemm;
  replace(body, "POST_PARAMS", params);
  replace(body, "POST_CODE", code);
  std::string defines = define("BM", t.bm) + define("BN", t.bn) + define("BK", t.bk) + define("RM", t.rm) +
                        define("RN", t.rn) + define("TRANS_A", c.transpose_a) + define("TRANS_B", c.transpose_b) +
                        define("PACKED_B", c.packed_b);
  if (c.fixed_mnk) {
    defines += define("FIXED_M", (*c.fixed_mnk)[0]) + define("FIXED_N", (*c.fixed_mnk)[1]) +
               define("FIXED_K", (*c.fixed_mnk)[2]);
  }
  return make(std::string(key.bytes()), defines, body.c_str(), "gemm");
}

kernel_source pack_source(bool transpose_b, int work_group) {
  cache_key key;
  key.add("pack_b").add(transpose_b).add(work_group);
  return make(std::string(key.bytes()), define("WG", work_group) + define("TRANS_B", transpose_b), kPack, "pack_b");
}

kernel_source softmax_source(int work_group) {
  cache_key key;
  key.add("softmax").add(work_group);
  return make(std::string(key.bytes()), define("WG", work_group), kSoftmax, "softmax");
}

kernel_source eltwise_source(op_kind kind, int work_group) {
  cache_key key;
  key.add("eltwise").add(kind).add(work_group);
  return make(std::string(key.bytes()),
              define("WG", work_group) + "#define FUNC " + eltwise_function(kind) + "\n", kEltwise, "eltwise");
}

kernel_source binary_source(op_kind kind, int work_group) {
  cache_key key;
  key.add("binary").add(kind).add(work_group);
  return make(std::string(key.bytes()),
              define("WG", work_group) + "#define OP " + (kind == op_kind::add ? "+" : "*") + "\n", kBinary,
              "binary");
}

}  // namespace unicache::opencl::detail
