// The kernel generator: one body per kernel, written against a few macros
// that each dialect's prelude defines (qualifiers, work-item indices,
// barriers, vector loads, math functions).
#include "unicache/kernel_generator.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/store.hpp"

namespace unicache::kernels {
namespace {

// OpenCL C 1.2; no fast-math in either dialect (multiply-adds are contracted
// to FMAs, NVRTC's default, said explicitly): results must match the CPU
// reference. (NVRTC's target architecture is the backend's option, and part
// of the device identity, not of the source.)
constexpr const char* kOpenclOptions = "-cl-std=CL1.2";
constexpr const char* kCudaOptions = "--fmad=true";

constexpr const char* kOpenclPrelude = R"CLC(
#define KERNEL(X, Y) __attribute__((reqd_work_group_size(X, Y, 1))) __kernel void
#define DEVICE_FN inline
#define GLOBAL __global
#define SHARED __local
#define SHARED_PTR __local
#define RESTRICT restrict
#define ALIGN16 __attribute__((aligned(16)))
#define LOCAL_X ((int)get_local_id(0))
#define LOCAL_Y ((int)get_local_id(1))
#define GROUP_X ((int)get_group_id(0))
#define GROUP_Y ((int)get_group_id(1))
#define GROUP_Z ((int)get_group_id(2))
#define GLOBAL_X ((long)get_global_id(0))
#define GLOBAL_Y ((long)get_global_id(1))
#define SYNC() barrier(CLK_LOCAL_MEM_FENCE)
#define VEC4 float4
#define MAKE4(a, b, c, d) ((float4)((a), (b), (c), (d)))
#define LOAD4(p) vload4(0, (p))
#define ALIGNED16(p) 1 /* vload4 needs only the element's alignment */
#define F_FMA fma
#define F_MAX fmax
#define F_EXP exp
#define F_ERF erf
#define F_TANH tanh
#define NEG_INF (-INFINITY)
)CLC";

constexpr const char* kCudaPrelude = R"CUDA(
#define KERNEL(X, Y) extern "C" __global__ void __launch_bounds__((X) * (Y))
#define DEVICE_FN __device__ __forceinline__
#define GLOBAL
#define SHARED __shared__
#define SHARED_PTR
#define RESTRICT __restrict__
#define ALIGN16 __align__(16)
#define LOCAL_X ((int)threadIdx.x)
#define LOCAL_Y ((int)threadIdx.y)
#define GROUP_X ((int)blockIdx.x)
#define GROUP_Y ((int)blockIdx.y)
#define GROUP_Z ((int)blockIdx.z)
#define GLOBAL_X ((long)blockIdx.x * blockDim.x + threadIdx.x)
#define GLOBAL_Y ((long)blockIdx.y * blockDim.y + threadIdx.y)
#define SYNC() __syncthreads()
#define VEC4 float4
#define MAKE4(a, b, c, d) make_float4((a), (b), (c), (d))
#define LOAD4(p) (*(const float4*)(p))
#define ALIGNED16(p) ((((unsigned long long)(p)) & 15) == 0) /* a float4 load needs 16 bytes */
#define F_FMA fmaf
#define F_MAX fmaxf
#define F_EXP expf
#define F_ERF erff
#define F_TANH tanhf
#define NEG_INF (-__int_as_float(0x7f800000))
)CUDA";

constexpr const char* kEltwiseFunctions = R"SRC(
DEVICE_FN float u_relu(float x) { return F_MAX(x, 0.0f); }
DEVICE_FN float u_gelu_erf(float x) { return 0.5f * x * (1.0f + F_ERF(x * 0.70710678118654752f)); }
DEVICE_FN float u_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + F_TANH(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
DEVICE_FN float u_sigmoid(float x) { return 1.0f / (1.0f + F_EXP(-x)); }
DEVICE_FN float u_tanh(float x) { return F_TANH(x); }
)SRC";

const char* eltwise_function(op_kind k) {
  switch (k) {
    case op_kind::relu: return "u_relu";
    case op_kind::gelu_erf: return "u_gelu_erf";
    case op_kind::gelu_tanh: return "u_gelu_tanh";
    case op_kind::sigmoid: return "u_sigmoid";
    case op_kind::tanh: return "u_tanh";
    default: throw compile_error(std::string("kernel generator: ") + to_string(k) + " is not an eltwise op");
  }
}

std::string define(const char* name, long value) {
  return std::string("#define ") + name + " " + std::to_string(value) + "\n";
}

void replace(std::string& s, const std::string& what, const std::string& with) {
  const auto at = s.find(what);
  if (at != std::string::npos) s.replace(at, what.size(), with);
}

// The GEMM. Work-item (tx, ty) owns rows g*TY*4 + ty*4 + i and columns
// h*TX*4 + tx*4 + j of the tile (4-wide groups, so its operands are read
// from shared memory as vectors). Tiles are double-buffered in shared
// memory: the next step's tile is loaded into registers while this one is
// multiplied, one barrier per step. A's tile is stored transposed (k-major).
// A tile wholly inside the matrix with 4-aligned rows is loaded as vectors;
// an edge tile element by element with zeros outside.
constexpr const char* kGemm = R"SRC(
#define TX (BN / RN)
#define TY (BM / RM)
#define NT (TX * TY)
#define A_LOADS (BM * BK / 4 / NT)
#define B_LOADS (BK * BN / 4 / NT)
KERNEL(TX, TY) gemm(GLOBAL const float* RESTRICT A, GLOBAL const float* RESTRICT B,
                    GLOBAL float* RESTRICT C, const int M_ARG, const int N_ARG, const int K_ARG,
                    const long lda, const long ldb, const long ldc,
                    const long sa, const long sb, const long sc POST_PARAMS) {
#ifdef FIXED_M
  /* A shape-specialized kernel: the sizes are constants. */
  const int M = FIXED_M, N = FIXED_N, K = FIXED_K;
#else
  const int M = M_ARG, N = N_ARG, K = K_ARG;
#endif
  SHARED float As[2][BK][BM] ALIGN16;
  SHARED float Bs[2][BK][BN] ALIGN16;
  const int tx = LOCAL_X, ty = LOCAL_Y;
  const int tid = ty * TX + tx;
  const int bm = GROUP_Y * BM, bn = GROUP_X * BN;
#if SPLIT_K > 1
  /* Split-K: z is (batch, part); part p sums K's tiles [KB, KE) (whole
     tiles of BK, so tile loads keep their bounds) into its own slice of the
     workspace C, M x N with ldc = N, and gemm_reduce adds the parts. */
  const long batch = GROUP_Z / SPLIT_K;
  const int part = GROUP_Z % SPLIT_K;
  const int KCH = ((K + SPLIT_K - 1) / SPLIT_K + BK - 1) / BK * BK;
  const int KB = part * KCH, KE = KB + KCH < K ? KB + KCH : K;
  C += (long)GROUP_Z * sc;
#else
  const long batch = GROUP_Z;
  const int KB = 0, KE = K;
  C += batch * sc;
#endif
  A += batch * sa;
  B += batch * sb;
  /* Whether vector loads are aligned: the batch's base (a caller may pass any
     pointer) and every row. */
  const int a_vec = ALIGNED16(A) && (lda % 4 == 0);
#if !PACKED_B
  const int b_vec = ALIGNED16(B) && (ldb % 4 == 0);
#endif
  VEC4 ra[A_LOADS], rb[B_LOADS];
  float acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;

#define LOAD_TILES(k0)                                                                            \
  {                                                                                               \
    const int a_full = a_vec && bm + BM <= M && (k0) + BK <= K;                                   \
    for (int l = 0; l < A_LOADS; ++l) ra[l] = load_a(A, lda, M, K, bm, (k0), tid + l * NT, a_full); \
    B_LOAD(k0)                                                                                    \
  }

  LOAD_TILES(KB)
  for (int l = 0; l < A_LOADS; ++l) store_a(As[0], ra[l], tid + l * NT);
  for (int l = 0; l < B_LOADS; ++l) store_b(Bs[0], rb[l], tid + l * NT);
  SYNC();
  int cur = 0;
  for (int k0 = KB; k0 < KE; k0 += BK) {
    const int more = k0 + BK < KE;
    if (more) LOAD_TILES(k0 + BK)
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[RM], b[RN];
#pragma unroll
      for (int g = 0; g < RM / 4; ++g) {
        const VEC4 v = LOAD4(&As[cur][k][g * TY * 4 + ty * 4]);
        a[g * 4 + 0] = v.x; a[g * 4 + 1] = v.y; a[g * 4 + 2] = v.z; a[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int h = 0; h < RN / 4; ++h) {
        const VEC4 v = LOAD4(&Bs[cur][k][h * TX * 4 + tx * 4]);
        b[h * 4 + 0] = v.x; b[h * 4 + 1] = v.y; b[h * 4 + 2] = v.z; b[h * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = F_FMA(a[i], b[j], acc[i][j]);
    }
    if (more) {
      for (int l = 0; l < A_LOADS; ++l) store_a(As[cur ^ 1], ra[l], tid + l * NT);
      for (int l = 0; l < B_LOADS; ++l) store_b(Bs[cur ^ 1], rb[l], tid + l * NT);
    }
    SYNC();
    cur ^= 1;
  }
  for (int i = 0; i < RM; ++i) {
    const int m = bm + (i / 4) * TY * 4 + ty * 4 + (i % 4);
    if (m >= M) continue;
    for (int j = 0; j < RN; ++j) {
      const int n = bn + (j / 4) * TX * 4 + tx * 4 + (j % 4);
      if (n >= N) continue;
      float v = acc[i][j];
#if SPLIT_K == 1
POST_CODE
#endif
      C[m * ldc + n] = v;
    }
  }
}
)SRC";

// Tile loaders of the GEMM (before its body: plain functions, so each
// dialect inlines them). Element e of a tile is one 4-vector.
constexpr const char* kGemmLoaders = R"SRC(
/* Four consecutive elements from p + at: one vector load for a tile wholly
   inside the matrix, else each element whose row is inside and whose index
   along the row (first + j) is below limit, zeros elsewhere. */
DEVICE_FN VEC4 load4(GLOBAL const float* p, long at, int full, int row_in, int first, int limit) {
  if (full) return LOAD4(p + at);
  return MAKE4(row_in && first < limit ? p[at] : 0.0f, row_in && first + 1 < limit ? p[at + 1] : 0.0f,
               row_in && first + 2 < limit ? p[at + 2] : 0.0f, row_in && first + 3 < limit ? p[at + 3] : 0.0f);
}
/* A vector into shared memory at `at`, its elements `stride` apart (1: along
   a tile row; the row length: down a column, transposing). */
DEVICE_FN void store4(SHARED_PTR float* at, int stride, VEC4 v) {
  at[0] = v.x; at[stride] = v.y; at[2 * stride] = v.z; at[3 * stride] = v.w;
}

#if TRANS_A
/* A is K x M: a tile row (fixed k) is contiguous along m. */
DEVICE_FN VEC4 load_a(GLOBAL const float* A, long lda, int M, int K, int bm, int k0, int e, int full) {
  const int k = e / (BM / 4), m = (e % (BM / 4)) * 4;
  return load4(A, (long)(k0 + k) * lda + bm + m, full, k0 + k < K, bm + m, M);
}
DEVICE_FN void store_a(SHARED_PTR float (*As)[BM], VEC4 v, int e) {
  store4(&As[e / (BM / 4)][(e % (BM / 4)) * 4], 1, v);
}
#else
/* A is M x K: a tile row (fixed m) is contiguous along k; stored transposed. */
DEVICE_FN VEC4 load_a(GLOBAL const float* A, long lda, int M, int K, int bm, int k0, int e, int full) {
  const int m = e / (BK / 4), k = (e % (BK / 4)) * 4;
  return load4(A, (long)(bm + m) * lda + k0 + k, full, bm + m < M, k0 + k, K);
}
DEVICE_FN void store_a(SHARED_PTR float (*As)[BM], VEC4 v, int e) {
  store4(&As[(e % (BK / 4)) * 4][e / (BK / 4)], BM, v);
}
#endif

#if PACKED_B
/* The packed weight: padded to the tile, so always inside and aligned. */
#define B_LOAD(k0) for (int l = 0; l < B_LOADS; ++l) rb[l] = load_b(B, ldb, (k0), bn, tid + l * NT);
DEVICE_FN VEC4 load_b(GLOBAL const float* B, long ldb, int k0, int bn, int e) {
  const int k = e / (BN / 4), n = (e % (BN / 4)) * 4;
  return LOAD4(B + (long)(k0 + k) * ldb + bn + n);
}
#else
#define B_LOAD(k0)                                                                                  \
  {                                                                                                 \
    const int b_full = b_vec && bn + BN <= N && (k0) + BK <= K;                                     \
    for (int l = 0; l < B_LOADS; ++l) rb[l] = load_b(B, ldb, N, K, bn, (k0), tid + l * NT, b_full); \
  }
#if TRANS_B
/* B is N x K: a tile column (fixed n) is contiguous along k. */
DEVICE_FN VEC4 load_b(GLOBAL const float* B, long ldb, int N, int K, int bn, int k0, int e, int full) {
  const int n = e / (BK / 4), k = (e % (BK / 4)) * 4;
  return load4(B, (long)(bn + n) * ldb + k0 + k, full, bn + n < N, k0 + k, K);
}
#else
/* B is K x N: a tile row (fixed k) is contiguous along n. */
DEVICE_FN VEC4 load_b(GLOBAL const float* B, long ldb, int N, int K, int bn, int k0, int e, int full) {
  const int k = e / (BN / 4), n = (e % (BN / 4)) * 4;
  return load4(B, (long)(k0 + k) * ldb + bn + n, full, k0 + k < K, bn + n, N);
}
#endif
#endif

#if PACKED_B || !TRANS_B
DEVICE_FN void store_b(SHARED_PTR float (*Bs)[BN], VEC4 v, int e) {
  store4(&Bs[e / (BN / 4)][(e % (BN / 4)) * 4], 1, v);
}
#else
DEVICE_FN void store_b(SHARED_PTR float (*Bs)[BN], VEC4 v, int e) {
  store4(&Bs[(e % (BK / 4)) * 4][e / (BK / 4)], BN, v);
}
#endif
)SRC";

// Split-K's second step: the parts' sums added, the post-op chain applied.
constexpr const char* kGemmReduce = R"SRC(
KERNEL(WG, 1) gemm_reduce(GLOBAL const float* RESTRICT W, GLOBAL float* RESTRICT C, const int M, const int N,
                          const long ldc POST_PARAMS) {
  const long i = GLOBAL_X;
  if (i >= (long)M * N) return;
  const long batch = 0;
  const int m = (int)(i / N), n = (int)(i % N);
  float v = 0.0f;
  for (int p = 0; p < SPLIT_K; ++p) v += W[(long)p * M * N + i];
POST_CODE
  C[m * ldc + n] = v;
}
)SRC";

constexpr const char* kPack = R"SRC(
KERNEL(WG, 1) pack_b(GLOBAL const float* RESTRICT B, GLOBAL float* RESTRICT P, const int K, const int N,
                     const long ldb, const int Kp, const int Np) {
  const long n = GLOBAL_X, k = GLOBAL_Y;
  if (n >= Np || k >= Kp) return;
  float v = 0.0f;
#if TRANS_B
  if (n < N && k < K) v = B[n * ldb + k];
#else
  if (n < N && k < K) v = B[k * ldb + n];
#endif
  P[k * (long)Np + n] = v;
}
)SRC";

constexpr const char* kSoftmax = R"SRC(
KERNEL(WG, 1) softmax(GLOBAL const float* RESTRICT x, GLOBAL float* RESTRICT y, const int cols) {
  SHARED float red[WG];
  const int l = LOCAL_X;
  const long row = GROUP_X;
  x += row * cols;
  y += row * cols;
  float m = NEG_INF;
  for (int c = l; c < cols; c += WG) m = F_MAX(m, x[c]);
  red[l] = m;
  SYNC();
  for (int s = WG / 2; s > 0; s >>= 1) {
    if (l < s) red[l] = F_MAX(red[l], red[l + s]);
    SYNC();
  }
  m = red[0];
  SYNC();
  float sum = 0.0f;
  for (int c = l; c < cols; c += WG) sum += F_EXP(x[c] - m);
  red[l] = sum;
  SYNC();
  for (int s = WG / 2; s > 0; s >>= 1) {
    if (l < s) red[l] += red[l + s];
    SYNC();
  }
  const float inv = 1.0f / red[0];
  for (int c = l; c < cols; c += WG) y[c] = F_EXP(x[c] - m) * inv;
}
)SRC";

constexpr const char* kEltwise = R"SRC(
KERNEL(WG, 1) eltwise(GLOBAL const float* RESTRICT x, GLOBAL float* RESTRICT y, const long n) {
  const long i = GLOBAL_X;
  if (i < n) y[i] = FUNC(x[i]);
}
)SRC";

constexpr const char* kBinary = R"SRC(
KERNEL(WG, 1) binary(GLOBAL const float* RESTRICT a, GLOBAL const float* RESTRICT b,
                     GLOBAL float* RESTRICT y, const long n, const int d1, const int d2, const int d3,
                     const long a0, const long a1, const long a2, const long a3,
                     const long b0, const long b1, const long b2, const long b3) {
  const long i = GLOBAL_X;
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
)SRC";

// The kernel configuration key: the dialect, then what the caller adds.
cache_key config_key(dialect d, const char* kernel) {
  cache_key key;
  key.add(kernel).add(static_cast<std::uint8_t>(d));
  return key;
}

kernel_source make(dialect d, const cache_key& config, const std::string& defines, const std::string& body,
                   const char* name) {
  kernel_source s;
  s.config = std::string(config.bytes());
  s.language = d == dialect::cuda_c ? "cuda-c" : "opencl-c";
  s.source = std::string("/* unicache generated */\n") + (d == dialect::cuda_c ? kCudaPrelude : kOpenclPrelude) +
             defines + kEltwiseFunctions + body;
  s.options = d == dialect::cuda_c ? kCudaOptions : kOpenclOptions;
  s.kernel_name = name;
  return s;
}

// Fills a GEMM body's POST_PARAMS (each binary post-op's operand and its
// strides) and POST_CODE (the chain applied to v at row m, column n).
void post_chain(std::string& body, const std::vector<op_kind>& chain) {
  std::string params, code;
  int binary_index = 0;
  for (op_kind k : chain) {
    if (is_binary(k)) {
      const std::string p = "P" + std::to_string(binary_index++);
      params += ", GLOBAL const float* RESTRICT " + p + ", const long " + p + "b, const long " + p + "m, const long " +
                p + "n";
      code += "      v = v " + std::string(k == op_kind::add ? "+" : "*") + " " + p + "[batch * " + p + "b + m * " + p +
              "m + n * " + p + "n];\n";
    } else {
      code += "      v = " + std::string(eltwise_function(k)) + "(v);\n";
    }
  }
  replace(body, "POST_PARAMS", params);
  replace(body, "POST_CODE", code);
}

void check_tiles(const gemm_tiles& t) {
  const int threads = t.local_x() * t.local_y();
  const bool ok = t.bm > 0 && t.bn > 0 && t.bk > 0 && t.rm > 0 && t.rn > 0 && t.rm % 4 == 0 && t.rn % 4 == 0 &&
                  t.bm % t.rm == 0 && t.bn % t.rn == 0 && t.bk % 4 == 0 && (t.bm * t.bk) % (4 * threads) == 0 &&
                  (t.bk * t.bn) % (4 * threads) == 0 && t.split_k >= 1 && t.split_k <= 64;
  if (!ok) {
    throw compile_error("kernel generator: GEMM tiles " + std::to_string(t.bm) + "x" + std::to_string(t.bn) + "x" +
                        std::to_string(t.bk) + " with register blocks " + std::to_string(t.rm) + "x" +
                        std::to_string(t.rn) + " split " + std::to_string(t.split_k) + " ways are not usable");
  }
}

// The GEMM's configuration bytes (its kernel-cache key).
cache_key gemm_key(dialect d, const gemm_config& c) {
  const gemm_tiles& t = c.tiles;
  cache_key key = config_key(d, "gemm");
  key.add(c.transpose_a).add(c.transpose_b).add(c.packed_b);
  key.add(t.bm).add(t.bn).add(t.bk).add(t.rm).add(t.rn).add(static_cast<std::uint64_t>(c.chain.size()));
  key.add(c.fixed_mnk.has_value());
  if (c.fixed_mnk) key.add((*c.fixed_mnk)[0]).add((*c.fixed_mnk)[1]).add((*c.fixed_mnk)[2]);
  for (op_kind k : c.chain) key.add(k);
  if (t.split_k > 1) key.add("split").add(t.split_k);  // (absent for 1: the keys of earlier stores stay valid)
  return key;
}

}  // namespace

std::string gemm_kernel_config(dialect d, const gemm_config& c) { return std::string(gemm_key(d, c).bytes()); }

kernel_source gemm_source(dialect d, const gemm_config& c) {
  const gemm_tiles& t = c.tiles;
  check_tiles(t);
  const cache_key key = gemm_key(d, c);
  std::string body = kGemm;
  post_chain(body, c.chain);
  std::string defines = define("BM", t.bm) + define("BN", t.bn) + define("BK", t.bk) + define("RM", t.rm) +
                        define("RN", t.rn) + define("TRANS_A", c.transpose_a) + define("TRANS_B", c.transpose_b) +
                        define("PACKED_B", c.packed_b) + define("SPLIT_K", t.split_k);
  if (c.fixed_mnk) {
    defines += define("FIXED_M", (*c.fixed_mnk)[0]) + define("FIXED_N", (*c.fixed_mnk)[1]) +
               define("FIXED_K", (*c.fixed_mnk)[2]);
  }
  return make(d, key, defines, std::string(kGemmLoaders) + body, "gemm");
}

kernel_source gemm_reduce_source(dialect d, const gemm_config& c, int work_group) {
  cache_key key = config_key(d, "gemm_reduce");
  key.add(c.tiles.split_k).add(work_group).add(static_cast<std::uint64_t>(c.chain.size()));
  for (op_kind k : c.chain) key.add(k);
  std::string body = kGemmReduce;
  post_chain(body, c.chain);
  return make(d, key, define("WG", work_group) + define("SPLIT_K", c.tiles.split_k), body, "gemm_reduce");
}

kernel_source pack_source(dialect d, bool transpose_b, int work_group) {
  cache_key key = config_key(d, "pack_b");
  key.add(transpose_b).add(work_group);
  return make(d, key, define("WG", work_group) + define("TRANS_B", transpose_b), kPack, "pack_b");
}

kernel_source softmax_source(dialect d, int work_group) {
  cache_key key = config_key(d, "softmax");
  key.add(work_group);
  return make(d, key, define("WG", work_group), kSoftmax, "softmax");
}

kernel_source eltwise_source(dialect d, op_kind kind, int work_group) {
  cache_key key = config_key(d, "eltwise");
  key.add(kind).add(work_group);
  return make(d, key, define("WG", work_group) + "#define FUNC " + eltwise_function(kind) + "\n", kEltwise, "eltwise");
}

kernel_source binary_source(dialect d, op_kind kind, int work_group) {
  cache_key key = config_key(d, "binary");
  key.add(kind).add(work_group);
  return make(d, key, define("WG", work_group) + "#define OP " + (kind == op_kind::add ? "+" : "*") + "\n", kBinary,
              "binary");
}

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::size_t round_up(std::int64_t n, std::int64_t multiple) {
  return static_cast<std::size_t>((n + multiple - 1) / multiple * multiple);
}

std::vector<long> broadcast_strides(const std::vector<std::int64_t>& shape) {
  std::vector<long> out(shape.size());
  long stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    out[d] = shape[d] == 1 ? 0 : stride;
    stride *= static_cast<long>(shape[d]);
  }
  return out;
}

gemm_problem::gemm_problem(const partition& p, const std::vector<logical_tensor>& in,
                           const std::vector<logical_tensor>& out, const gemm_tiles& tiles, kernel_shapes mode) {
  const op& mm = p.ops().front();
  const std::vector<std::int64_t>& a = in[0].shape;
  const std::vector<std::int64_t>& b = in[1].shape;
  const std::vector<std::int64_t>& c = out[0].shape;
  const std::size_t rank = c.size();
  m = c[rank - 2];
  n = c[rank - 1];
  k = mm.transpose_a ? a[a.size() - 2] : a.back();
  // The GEMM computes the MatMul's own output: a post-op that broadcasts it
  // to a larger shape ([1, n] + [4, n]) is not something it can fuse.
  const std::int64_t mm_m = mm.transpose_a ? a.back() : a[a.size() - 2];
  const std::int64_t mm_n = mm.transpose_b ? b[b.size() - 2] : b.back();
  const std::int64_t mm_batch = std::max(a.size() == 3 ? a[0] : 1, b.size() == 3 ? b[0] : 1);
  if (mm_m != m || mm_n != n || (rank == 3 && mm_batch != c[0])) {
    throw compile_error("a post-op broadcasts the MatMul's output to " + shape_to_string(c) +
                        ", a larger shape: not fusable into the GEMM");
  }
  constexpr std::int64_t int_max = std::numeric_limits<int>::max();
  if (m > int_max || n > int_max || k > int_max) {
    throw compile_error("MatMul sizes " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) +
                        ": the kernels take M, N and K as 32-bit integers (at most 2147483647)");
  }
  batch = rank == 3 ? c[0] : 1;
  lda = a.back();
  ldb = b.back();
  sa = a.size() == 3 && a[0] != 1 ? m * k : 0;
  sb = b.size() == 3 && b[0] != 1 ? k * n : 0;
  config.transpose_a = mm.transpose_a;
  config.transpose_b = mm.transpose_b;
  config.packed_b = in[1].is_constant() && b.size() == 2;
  config.tiles = tiles;
  if (mode == kernel_shapes::specialized) config.fixed_mnk = std::array<long, 3>{m, n, k};
  std::size_t next_input = 2;
  for (std::size_t i = 1; i < p.ops().size(); ++i) {
    const op_kind kind = p.ops()[i].kind;
    config.chain.push_back(kind);
    if (!is_binary(kind)) continue;
    const std::vector<std::int64_t>& operand = in[next_input].shape;
    if (operand.size() > rank) {
      throw compile_error("post-op operand " + shape_to_string(operand) + " has a higher rank than the MatMul's output " +
                          shape_to_string(c));
    }
    const std::vector<long> st = broadcast_strides(to_rank(operand, 3));
    posts.push_back({next_input++, rank == 3 ? st[0] : 0, st[1], st[2]});
  }
  if (config.packed_b) {
    packed_k = static_cast<long>(round_up(k, tiles.bk));
    packed_n = static_cast<long>(round_up(n, tiles.bn));
  }
}

std::string to_string(const gemm_tiles& t) {
  return std::to_string(t.bm) + "x" + std::to_string(t.bn) + "x" + std::to_string(t.bk) + "/" + std::to_string(t.rm) +
         "x" + std::to_string(t.rn) + (t.split_k > 1 ? "/split" + std::to_string(t.split_k) : "");
}

gemm_problem gemm_problem::with_rows(long rows) const {
  gemm_problem out = *this;
  out.m = rows;
  if (config.fixed_mnk) (*out.config.fixed_mnk)[0] = rows;
  return out;
}

shape_class gemm_shape_class(const gemm_problem& g) {
  // A transposed A's leading dimension is M: a kernel of one M only.
  if (g.batch != 1 || g.sa != 0 || g.m < 1 || g.config.transpose_a) return {};
  const int bits = std::bit_width(static_cast<unsigned long>(g.m));
  cache_key key;
  key.add("gemm-class/1").add(bits).add(g.n).add(g.k).add(g.lda).add(g.ldb);
  key.add(g.config.transpose_a).add(g.config.transpose_b).add(g.config.packed_b);
  for (op_kind k : g.config.chain) key.add(static_cast<std::uint8_t>(k));
  for (const gemm_problem::post& p : g.posts) key.add(p.batch_stride).add(p.row_stride).add(p.column_stride);
  const long low = 1L << (bits - 1), high = (1L << bits) - 1;
  return {std::string(key.bytes()),
          "GEMM M " + std::to_string(low) + ".." + std::to_string(high) + " N " + std::to_string(g.n) + " K " +
              std::to_string(g.k)};
}

std::vector<gemm_tiles> gemm_candidates(const gemm_problem& g, const gemm_tiles& generic) {
  // bm, bn, bk, rm, rn; work-items (bn/rn) x (bm/rm). Few rows: narrow tiles
  // so that the device has blocks to run; many: larger register blocks.
  static const gemm_tiles small_m[] = {{16, 64, 16, 4, 4}, {32, 64, 16, 4, 4}, {32, 64, 16, 4, 8}, {32, 128, 16, 4, 8}};
  static const gemm_tiles medium_m[] = {{32, 64, 16, 4, 8}, {64, 64, 16, 4, 4}, {64, 64, 16, 8, 8},
                                        {32, 128, 16, 4, 8}, {64, 128, 16, 8, 8}};
  static const gemm_tiles large_m[] = {{64, 64, 16, 8, 8}, {64, 128, 16, 8, 8}, {128, 64, 16, 8, 8}, {128, 128, 8, 8, 8}};
  std::vector<gemm_tiles> out;
  auto add = [&](const gemm_tiles& t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  // The bounds are powers of two: every M of a class (a power-of-two range)
  // gets the same candidates, so a stored choice is one of them.
  if (g.m < 32) {
    for (const gemm_tiles& t : small_m) add(t);
  } else if (g.m < 512) {
    for (const gemm_tiles& t : medium_m) add(t);
  } else {
    for (const gemm_tiles& t : large_m) add(t);
  }
  if (g.m < 256 && g.k >= 1024 && g.batch == 1) {
    // Few rows, long K: narrow tiles with K shared out.
    for (int split : {2, 4, 8}) {
      if (g.k / split < 256) break;
      gemm_tiles t = g.m < 32 ? gemm_tiles{16, 64, 16, 4, 4} : gemm_tiles{32, 64, 16, 4, 8};
      t.split_k = split;
      add(t);
    }
  }
  add(generic);
  return out;
}

std::optional<gemm_tiles> stored_tiles(std::string_view backend, const device_identity& device, const gemm_problem& g,
                                       const std::vector<gemm_tiles>& candidates) {
  const std::optional<byte_vector> stored = kernel_store::instance().get(device, gemm_tuning_key(backend, g));
  if (!stored) return std::nullopt;
  return decode_tiles(*stored, candidates);
}

namespace {

// The tiered GEMM of a fused MatMul partition at these shapes, if it has one.
std::optional<gemm_problem> tiered_gemm(const partition& p, const std::vector<logical_tensor>& in,
                                        const std::vector<logical_tensor>& out, const gemm_tiles& plan) {
  if (p.pattern() != partition::kind::fused_matmul) return std::nullopt;
  try {
    return gemm_problem(p, in, out, plan, kernel_shapes::tiered);
  } catch (const compile_error&) {
    return std::nullopt;
  }
}

}  // namespace

shape_class gemm_specialization_class(const partition& p, const std::vector<logical_tensor>& in,
                                      const std::vector<logical_tensor>& out, const gemm_tiles& plan) {
  const std::optional<gemm_problem> g = tiered_gemm(p, in, out, plan);
  if (!g) return {};
  shape_class c = gemm_shape_class(*g);
  if (c.key.empty()) return c;
  if (gemm_tuning_bytes(*g, gemm_candidates(*g, plan)) > max_gemm_tuning_bytes) return {};
  return c;
}

bool gemm_specialization_ready(const partition& p, const std::vector<logical_tensor>& in,
                               const std::vector<logical_tensor>& out, const gemm_tiles& plan, dialect d,
                               const engine& e, backend_id id, const device_identity& device) {
  const std::optional<gemm_problem> g = tiered_gemm(p, in, out, plan);
  if (!g || !e.owner()) return false;
  const std::vector<gemm_tiles> candidates = gemm_candidates(*g, plan);
  const cache_scope scope = e.scope();
  const bool built = std::all_of(candidates.begin(), candidates.end(), [&](const gemm_tiles& t) {
    gemm_config config = g->config;
    config.tiles = t;
    return kernel_cache().contains(scope, id, gemm_kernel_config(d, config));
  });
  return built || stored_tiles(e.owner()->name(), device, *g, candidates).has_value();
}

std::size_t gemm_scratch_b_floats(const gemm_problem& g, const std::vector<gemm_tiles>& candidates) {
  std::size_t b = static_cast<std::size_t>(g.k * g.n);
  for (const gemm_tiles& t : candidates) b = std::max(b, round_up(g.k, t.bk) * round_up(g.n, t.bn));
  return b;
}

std::size_t gemm_tuning_bytes(const gemm_problem& g, const std::vector<gemm_tiles>& candidates) {
  std::size_t floats = static_cast<std::size_t>(g.m * g.k) + gemm_scratch_b_floats(g, candidates) +
                       static_cast<std::size_t>(g.m * g.n);
  floats += g.posts.size() * static_cast<std::size_t>(g.m * g.n);  // at most C's size each
  int split = 1;
  for (const gemm_tiles& t : candidates) split = std::max(split, t.split_k);
  if (split > 1) floats += static_cast<std::size_t>(split) * static_cast<std::size_t>(g.m * g.n);
  return floats * sizeof(float);
}

std::string gemm_tuning_key(std::string_view backend, const gemm_problem& g) {
  cache_key key;
  key.add("gemm-tuning/1").add(backend).add(gemm_shape_class(g).key);
  return std::string(key.bytes());
}

byte_vector encode_tiles(const gemm_tiles& t) {
  cache_key out;
  out.add("tiles/2").add(t.bm).add(t.bn).add(t.bk).add(t.rm).add(t.rn).add(t.split_k);
  return byte_vector(out.bytes().begin(), out.bytes().end());
}

std::optional<gemm_tiles> decode_tiles(byte_span stored, const std::vector<gemm_tiles>& allowed) {
  for (const gemm_tiles& t : allowed) {
    const byte_vector want = encode_tiles(t);
    if (stored.size() == want.size() && std::equal(want.begin(), want.end(), stored.begin())) return t;
  }
  return std::nullopt;
}

std::array<std::size_t, 3> gemm_problem::global() const {
  const gemm_tiles& t = config.tiles;
  return {round_up(n, t.bn) / t.rn, round_up(m, t.bm) / t.rm, static_cast<std::size_t>(batch * t.split_k)};
}

std::array<std::size_t, 3> gemm_problem::local() const {
  return {static_cast<std::size_t>(config.tiles.local_x()), static_cast<std::size_t>(config.tiles.local_y()), 1};
}

cache_key gemm_problem::packed_layout() const {
  cache_key layout;
  layout.add("packed-b").add(config.transpose_b).add(k).add(n).add(ldb).add(packed_k).add(packed_n);
  return layout;
}

std::size_t gemm_problem::packed_bytes() const { return static_cast<std::size_t>(packed_k * packed_n) * sizeof(float); }

std::array<std::size_t, 3> gemm_problem::pack_global(int work_group) const {
  return {round_up(packed_n, work_group), static_cast<std::size_t>(packed_k), 1};
}

binary_problem::binary_problem(const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out_tensors) {
  const std::vector<std::int64_t>& c = out_tensors[0].shape;
  if (c.size() > 4) {
    throw compile_error("Add/Multiply of rank " + std::to_string(c.size()) + " (at most 4 is supported)");
  }
  out = to_rank(c, 4);
  a_strides = broadcast_strides(to_rank(in[0].shape, 4));
  b_strides = broadcast_strides(to_rank(in[1].shape, 4));
}

}  // namespace unicache::kernels
