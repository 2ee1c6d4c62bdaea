// The generated kernel source: one body per kernel, written against a few
// macros that each dialect's prelude defines (qualifiers, work-item indices,
// barriers, vector loads, math functions), and the functions that assemble it.
#include <algorithm>
#include <string>

#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/kernel_generator.hpp"

namespace unicache::gpu::kernels {
namespace {

// OpenCL C 1.2; no fast-math in either dialect (multiply-adds are contracted
// to FMAs, NVRTC's default, said explicitly): results must match the CPU
// reference. (NVRTC's target architecture is the backend's option, and part
// of the device identity, not of the source.)
constexpr const char* kOpenclOptions = "-cl-std=CL1.2";
constexpr const char* kCudaOptions = "--fmad=true";

constexpr const char* kOpenclPrelude = R"CLC(
#define KERNEL(X, Y) __attribute__((reqd_work_group_size(X, Y, 1))) __kernel void
#define KERNEL_BLOCKS(X, Y, B) KERNEL(X, Y)
#define DEVICE_FN static inline
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
#define STORE4(p, v) vstore4((v), 0, (p))
#define LOAD4_SHARED(p) vload4(0, (p))
#define STORE4_SHARED(p, v) vstore4((v), 0, (p))
#define STORE_SHARED(p, v) (*(p) = (v))
#define F_FMA fma
#define F_MAX fmax
#define F_EXP exp
#define F_ERF erf
#define F_TANH tanh
#define F_SQRT sqrt
#define F_RSQRT rsqrt
#define NEG_INF (-INFINITY)
)CLC";

constexpr const char* kCudaPrelude = R"CUDA(
#define KERNEL(X, Y) extern "C" __global__ void __launch_bounds__((X) * (Y))
/* B blocks per SM at least: registers are budgeted for them. */
#define KERNEL_BLOCKS(X, Y, B) extern "C" __global__ void __launch_bounds__((X) * (Y), B)
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
#define STORE4(p, v) (*(float4*)(p) = (v))
/* Shared memory through 32-bit addresses. NVRTC, unlike nvcc, addresses
   it with 64-bit pointers (its data layout has no 32-bit shared pointers),
   which made the GEMM 4-5% slower on an H100 (4096^3: 3025 us against
   2903 with these, 2890 for the same source through nvcc). */
#define LOAD4_SHARED(p) u_lds4(p)
#define STORE4_SHARED(p, v) u_sts4((p), (v))
#define STORE_SHARED(p, v) u_sts1((p), (v))
__device__ __forceinline__ unsigned u_shared(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ float4 u_lds4(const float* p) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(u_shared(p)));
  return v;
}
__device__ __forceinline__ void u_sts4(float* p, float4 v) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(u_shared(p)), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ void u_sts1(float* p, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(u_shared(p)), "f"(v) : "memory");
}
#define F_FMA fmaf
#define F_MAX fmaxf
#define F_EXP expf
#define F_ERF erff
#define F_TANH tanhf
#define F_SQRT sqrtf
#define F_RSQRT rsqrtf
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
DEVICE_FN float u_sqrt(float x) { return F_SQRT(x); }
DEVICE_FN float u_rsqrt(float x) { return F_RSQRT(x); }
DEVICE_FN float u_silu(float x) { return x / (1.0f + F_EXP(-x)); }
)SRC";

const char* eltwise_function(op_kind k) {
  switch (k) {
    case op_kind::relu: return "u_relu";
    case op_kind::gelu_erf: return "u_gelu_erf";
    case op_kind::gelu_tanh: return "u_gelu_tanh";
    case op_kind::sigmoid: return "u_sigmoid";
    case op_kind::tanh: return "u_tanh";
    case op_kind::sqrt: return "u_sqrt";
    case op_kind::rsqrt: return "u_rsqrt";
    case op_kind::silu: return "u_silu";
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
/* Three work-groups of 128 to 255 per SM, two of 256 (CUDA): up to 170 or
   128 registers each (larger ones: no minimum). Split-K kernels ran 5-25%
   faster with it on an H100, the others the same. */
#define MIN_GROUPS (NT > 256 ? 1 : NT == 256 ? 2 : NT >= 128 ? 3 : 1)
KERNEL_BLOCKS(TX, TY, MIN_GROUPS) gemm(GLOBAL const float* RESTRICT A, GLOBAL const float* RESTRICT B,
                    GLOBAL float* RESTRICT C, const int M_ARG, const int N_ARG, const int K_ARG,
                    const long lda, const long ldb, const long ldc,
                    const long sa, const long sb, const long sc POST_PARAMS) {
#ifdef FIXED_M
  /* A shape-specialized kernel: the sizes are constants. */
  const int M = FIXED_M, N = FIXED_N, K = FIXED_K;
#else
  const int M = M_ARG, N = N_ARG, K = K_ARG;
#endif
  SHARED float As[2][BK][AS_W] ALIGN16;
  SHARED float Bs[2][BK][BS_W] ALIGN16;
  const int tid = LOCAL_Y * TX + LOCAL_X;
#if TX % 8 == 0 && TY % 4 == 0 && TX > TY
  /* In a work-group wider than tall, each warp of 32 computes an 8 x 4
     patch of work-items (not 16 x 2): it reads 4 of A's vectors and 8 of
     B's per step, 64 + 128 bytes of shared memory, one pass each (2-5%
     faster for 64x128 tiles on an H100; slower for square ones). Loads use
     tid as it is. */
  const int lane = tid % 32, warp = tid / 32;
  const int tx = (warp % (TX / 8)) * 8 + lane % 8, ty = (warp / (TX / 8)) * 4 + lane / 8;
#else
  const int tx = LOCAL_X, ty = LOCAL_Y;
#endif
  const int bm = GROUP_Y * BM, bn = GROUP_X * BN;
#if SPLIT_K > 1
  /* Split-K: z is (batch, part); part p sums K's tiles [KB, KE) (whole
     tiles of BK, so tile loads keep their bounds) into its own slice of the
     workspace C, M x N with ldc = N, and gemm_reduce adds the parts (a part
     past K writes zeros). The number of parts is compiled in: a runtime one
     measured 10% slower with CUDA and 30-58% with NVIDIA's OpenCL. */
  const long batch = GROUP_Z / SPLIT_K;
  const int part = GROUP_Z % SPLIT_K;
  const int KCH = ((K + SPLIT_K - 1) / SPLIT_K + BK - 1) / BK * BK;
  const int KB = part * KCH, KE = KB + KCH < K ? KB + KCH : K;
#else
  const long batch = GROUP_Z;
  const int KB = 0, KE = K;
#endif
  C += (long)GROUP_Z * sc;
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

/* A tile pair loaded into registers (F: known to be wholly inside). */
#define LOAD_TILES(k0, F)                                                                         \
  {                                                                                               \
    const int a_full = (F) || (a_vec && bm + BM <= M && (k0) + BK <= K);                          \
    for (int l = 0; l < A_LOADS; ++l) ra[l] = load_a(A, lda, M, K, bm, (k0), tid + l * NT, a_full); \
    B_LOAD(k0, F)                                                                                 \
  }
#define STORE_TILES(to)                                                                           \
  for (int l = 0; l < A_LOADS; ++l) store_a(As[to], ra[l], tid + l * NT);                        \
  for (int l = 0; l < B_LOADS; ++l) store_b(Bs[to], rb[l], tid + l * NT);
/* Step k of a shared tile pair multiplied into acc. */
#define MULTIPLY_STEP(from, k)                                                                    \
  {                                                                                               \
    float a[RM], b[RN];                                                                           \
    _Pragma("unroll") for (int g = 0; g < RM / 4; ++g) {                                          \
      const VEC4 v = LOAD4_SHARED(&As[from][k][g * TY * 4 + ty * 4]);                             \
      a[g * 4 + 0] = v.x; a[g * 4 + 1] = v.y; a[g * 4 + 2] = v.z; a[g * 4 + 3] = v.w;             \
    }                                                                                             \
    _Pragma("unroll") for (int h = 0; h < RN / 4; ++h) {                                          \
      const VEC4 v = LOAD4_SHARED(&Bs[from][k][h * TX * 4 + tx * 4]);                             \
      b[h * 4 + 0] = v.x; b[h * 4 + 1] = v.y; b[h * 4 + 2] = v.z; b[h * 4 + 3] = v.w;             \
    }                                                                                             \
    _Pragma("unroll") for (int i = 0; i < RM; ++i)                                                \
    _Pragma("unroll") for (int j = 0; j < RN; ++j) acc[i][j] = F_FMA(a[i], b[j], acc[i][j]);     \
  }
/* A shared tile pair multiplied into acc, its BK steps unrolled as asked. */
#define MULTIPLY_TILES(from, UNROLL) _Pragma(UNROLL) for (int k = 0; k < BK; ++k) MULTIPLY_STEP(from, k)
/* The main loop over K's tiles [KB, KE): each tile but the last is
   multiplied while the next is loaded into registers, one barrier per tile;
   the last is peeled off (no test in the loop of whether a next one comes).
   F: every tile of the work-group is inside the matrix and aligned, so
   loads take no bounds test. BODY and LAST: how far the loop's tiles and
   the last one are unrolled. */
#define MAIN_LOOP(F, BODY, LAST)                                                                  \
  {                                                                                               \
    int cur = 0, k0 = KB;                                                                         \
    LOAD_TILES(KB, F)                                                                             \
    STORE_TILES(0)                                                                                \
    SYNC();                                                                                       \
    for (; k0 + BK < KE; k0 += BK) {                                                              \
      LOAD_TILES(k0 + BK, F)                                                                      \
      MULTIPLY_TILES(cur, BODY)                                                                   \
      STORE_TILES(cur ^ 1)                                                                        \
      SYNC();                                                                                     \
      cur ^= 1;                                                                                   \
    }                                                                                             \
    MULTIPLY_TILES(cur, LAST)                                                                     \
  }

  /* A work-group whose tiles are all inside runs a copy of the loop without
     bounds tests, fully unrolled: with the peeled last tile, 4096^3 ran 10%
     faster on an H100. The others (at the edges) and the last tiles unroll
     less: code size is compile time (fully unrolled everywhere: twice the
     compile time of one loop; as here, 1.25 times, at the same speed within
     a few percent). Forms with one loop for both, or a test per tile,
     spilled registers and ran 3-4% slower. (The choice is the same for the
     whole work-group: no divergence.) */
  if (KB < KE) {
    if (a_vec && B_VEC && bm + BM <= M && bn + BN <= N && (KE - KB) % BK == 0) MAIN_LOOP(1, "unroll", "unroll 1")
    else MAIN_LOOP(0, "unroll 8", "unroll 1")
  }
  /* Each row's 4-wide groups are written as vectors where they are inside
     the matrix and C's rows are 16-byte aligned. */
  const int c_vec = ALIGNED16(C) && (ldc % 4 == 0);
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
      acc[i][j] = v;
    }
    for (int h = 0; h < RN / 4; ++h) {
      const int n = bn + h * TX * 4 + tx * 4;
      GLOBAL float* row = C + (long)m * ldc + n;
      if (c_vec && n + 3 < N) {
        STORE4(row, MAKE4(acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]));
      } else {
        for (int j = 0; j < 4 && n + j < N; ++j) row[j] = acc[i][h * 4 + j];
      }
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
/* A vector into shared memory down a column at `at`, its elements `stride`
   (the row length) apart: a transposing store. (Along a row, one vector store.) */
DEVICE_FN void store4(SHARED_PTR float* at, int stride, VEC4 v) {
  STORE_SHARED(at, v.x); STORE_SHARED(at + stride, v.y); STORE_SHARED(at + 2 * stride, v.z);
  STORE_SHARED(at + 3 * stride, v.w);
}
/* The shared tiles' rows: a tile stored transposed gets 4 more floats per row,
   which halves the bank conflicts of its scalar stores (2-way, not 4-way,
   with BK 16; none with BK 8); rows stay 16-byte aligned for the vector reads. */
#if TRANS_A
#define AS_W BM
#else
#define AS_W (BM + 4)
#endif
#if PACKED_B || !TRANS_B
#define BS_W BN
#else
#define BS_W (BN + 4)
#endif

#if TRANS_A
/* A is K x M: a tile row (fixed k) is contiguous along m. */
DEVICE_FN VEC4 load_a(GLOBAL const float* A, long lda, int M, int K, int bm, int k0, int e, int full) {
  const int k = e / (BM / 4), m = (e % (BM / 4)) * 4;
  return load4(A, (long)(k0 + k) * lda + bm + m, full, k0 + k < K, bm + m, M);
}
DEVICE_FN void store_a(SHARED_PTR float (*As)[AS_W], VEC4 v, int e) {
  STORE4_SHARED(&As[e / (BM / 4)][(e % (BM / 4)) * 4], v);
}
#else
/* A is M x K: a tile row (fixed m) is contiguous along k; stored transposed. */
DEVICE_FN VEC4 load_a(GLOBAL const float* A, long lda, int M, int K, int bm, int k0, int e, int full) {
  const int m = e / (BK / 4), k = (e % (BK / 4)) * 4;
  return load4(A, (long)(bm + m) * lda + k0 + k, full, bm + m < M, k0 + k, K);
}
DEVICE_FN void store_a(SHARED_PTR float (*As)[AS_W], VEC4 v, int e) {
  store4(&As[(e % (BK / 4)) * 4][e / (BK / 4)], AS_W, v);
}
#endif

#if PACKED_B
/* The packed weight: padded to the tile, so always inside and aligned. */
#define B_VEC 1
#define B_LOAD(k0, F) for (int l = 0; l < B_LOADS; ++l) rb[l] = load_b(B, ldb, (k0), bn, tid + l * NT);
DEVICE_FN VEC4 load_b(GLOBAL const float* B, long ldb, int k0, int bn, int e) {
  const int k = e / (BN / 4), n = (e % (BN / 4)) * 4;
  return LOAD4(B + (long)(k0 + k) * ldb + bn + n);
}
#else
#define B_VEC b_vec
#define B_LOAD(k0, F)                                                                               \
  {                                                                                                 \
    const int b_full = (F) || (b_vec && bn + BN <= N && (k0) + BK <= K);                            \
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
DEVICE_FN void store_b(SHARED_PTR float (*Bs)[BS_W], VEC4 v, int e) {
  STORE4_SHARED(&Bs[e / (BN / 4)][(e % (BN / 4)) * 4], v);
}
#else
DEVICE_FN void store_b(SHARED_PTR float (*Bs)[BS_W], VEC4 v, int e) {
  store4(&Bs[(e % (BK / 4)) * 4][e / (BK / 4)], BS_W, v);
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

// A team of `team` work-items per row (a power of two up to WG, an
// argument), WG / team rows per work group: rows of attention scores are
// 16-512 long, too short for a whole group each (a group per row spent its
// time in barriers: 4.3x torch's time at 256 on the H100), while a long row
// (a vocabulary) wants the whole group. Reductions go through local memory
// (OpenCL 1.2 has no sub-group shuffles); every work-item of the group
// reaches every barrier, a team past the last row only skips the loads and
// stores.
constexpr const char* kSoftmax = R"SRC(
DEVICE_FN float team_reduce(SHARED_PTR float* red, float v, const int team, const int is_max) {
  const int l = LOCAL_X, lane = l % team;
  red[l] = v;
  SYNC();
  for (int s = team / 2; s > 0; s >>= 1) {
    if (lane < s) red[l] = is_max ? F_MAX(red[l], red[l + s]) : red[l] + red[l + s];
    SYNC();
  }
  const float total = red[l - lane];
  SYNC();
  return total;
}

KERNEL(WG, 1) softmax(GLOBAL const float* RESTRICT x, GLOBAL float* RESTRICT y, const int cols, const long rows,
                      const int team) {
  SHARED float red[WG];
  const int lane = LOCAL_X % team;
  const long row = (long)GROUP_X * (WG / team) + LOCAL_X / team;
  const int n = row < rows ? cols : 0;
  x += row * cols;
  y += row * cols;
  float m = NEG_INF;
  for (int c = lane; c < n; c += team) m = F_MAX(m, x[c]);
  m = team_reduce(red, m, team, 1);
  float sum = 0.0f;
  for (int c = lane; c < n; c += team) sum += F_EXP(x[c] - m);
  const float inv = 1.0f / team_reduce(red, sum, team, 0);
  for (int c = lane; c < n; c += team) y[c] = F_EXP(x[c] - m) * inv;
}
)SRC";

// Two passes over the row (mean, then the mean of squared deviations), as
// oneDNN and torch compute it: one pass of sum and sum of squares loses
// digits when the mean is large against the deviation.
constexpr const char* kLayerNorm = R"SRC(
DEVICE_FN float block_sum(SHARED_PTR float* red, float v) {
  const int l = LOCAL_X;
  red[l] = v;
  SYNC();
  for (int s = WG / 2; s > 0; s >>= 1) {
    if (l < s) red[l] += red[l + s];
    SYNC();
  }
  const float total = red[0];
  SYNC();
  return total;
}

// RMS 1: RMSNorm (no mean subtracted, no beta: beta is not read).
KERNEL(WG, 1) layer_norm(GLOBAL const float* RESTRICT x, GLOBAL const float* RESTRICT gamma,
                         GLOBAL const float* RESTRICT beta, GLOBAL float* RESTRICT y, const int cols,
                         const float epsilon) {
  SHARED float red[WG];
  const int l = LOCAL_X;
  const long row = GROUP_X;
  x += row * cols;
  y += row * cols;
#if RMS
  const float mean = 0.0f;
#else
  float sum = 0.0f;
  for (int c = l; c < cols; c += WG) sum += x[c];
  const float mean = block_sum(red, sum) / (float)cols;
#endif
  float squares = 0.0f;
  for (int c = l; c < cols; c += WG) {
    const float d = x[c] - mean;
    squares += d * d;
  }
  const float inv = 1.0f / F_SQRT(block_sum(red, squares) / (float)cols + epsilon);
#if RMS
  for (int c = l; c < cols; c += WG) y[c] = x[c] * inv * gamma[c];
#else
  for (int c = l; c < cols; c += WG) y[c] = (x[c] - mean) * inv * gamma[c] + beta[c];
#endif
}
)SRC";

constexpr const char* kEltwise = R"SRC(
KERNEL(WG, 1) eltwise(GLOBAL const float* RESTRICT x, GLOBAL float* RESTRICT y, const long n) {
  const long i = GLOBAL_X;
  if (i < n) y[i] = FUNC(x[i]);
}
)SRC";

constexpr const char* kTranspose = R"SRC(
KERNEL(WG, 1) transpose(GLOBAL const float* RESTRICT x, GLOBAL float* RESTRICT y, const long n,
                        const int d1, const int d2, const int d3, const int d4, const int d5,
                        const long s0, const long s1, const long s2, const long s3, const long s4, const long s5) {
  const long i = GLOBAL_X;
  if (i >= n) return;
  long r = i;
  long at = (r % d5) * s5; r /= d5;
  at += (r % d4) * s4; r /= d4;
  at += (r % d3) * s3; r /= d3;
  at += (r % d2) * s2; r /= d2;
  at += (r % d1) * s1; r /= d1;
  y[i] = x[at + r * s0];
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

// Scaled dot-product attention, one work-group of 16 x 16 work-items per BQ
// query rows of one (batch, head): the query rows stay in local memory while
// blocks of BKV keys, then values, pass through one buffer; the scores of a
// block go to local memory only, and a running maximum and sum per row
// (online softmax) rescale what the earlier blocks added. A row whose every
// score is -inf so far keeps 0 as its base (no inf - inf), so it ends with a
// sum of 0 and writes 0s. Rows and columns past L and S, and head columns
// past D up to a multiple of 4, are zero-filled; a causal block stops at its
// last row's key. Local rows are 16-byte aligned and 4 floats longer than
// needed, so that the products read them 4-wide without bank conflicts: a
// work-item computes ATT_RQ rows x 2 keys of the scores, then ATT_RQ rows x
// 4 * ATT_CV value columns (4 adjacent columns every 64).
constexpr const char* kAttention = R"SRC(
#define ATT_RQ (BQ / 16)
#define ATT_CV ((DV + 63) / 64)
#define ATT_TEAM (256 / BQ)
#define ATT_CPT (BKV / ATT_TEAM)
#define ATT_QW (DHP + 4)
#define ATT_KW (DMAXP + 4)
#define ATT_PW (BKV + 4)
KERNEL(256, 1) attention(GLOBAL const float* RESTRICT Q, GLOBAL const float* RESTRICT K,
                         GLOBAL const float* RESTRICT V, GLOBAL const float* RESTRICT M, GLOBAL float* RESTRICT O,
                         const int L, const int S, const int H, const int blocks, const float scale,
                         const long qb, const long qh, const long ql, const long kb, const long kh, const long ks,
                         const long vb, const long vh, const long vs, const long ob, const long oh, const long ol,
                         const long mb, const long mh, const long ml, const long ms) {
  SHARED float Qs[BQ * ATT_QW] ALIGN16;
  SHARED float KVs[BKV * ATT_KW] ALIGN16;
  SHARED float Ps[BQ * ATT_PW] ALIGN16;
  SHARED float row_max[BQ], row_sum[BQ], row_scale[BQ];
  SHARED float red_max[256], red_sum[256];
  const int l = LOCAL_X, tx = l % 16, ty = l / 16;
  const int group = GROUP_X;
  const int q0 = (group % blocks) * BQ;
  const int bh = group / blocks;
  const long h = bh % H, b = bh / H;
  Q += b * qb + h * qh;
  K += b * kb + h * kh;
  V += b * vb + h * vh;
  O += b * ob + h * oh;
#if HAS_MASK
  M += b * mb + h * mh;
#endif
  for (int i = l; i < BQ * DHP; i += 256) {
    const int r = i / DHP, d = i % DHP;
    Qs[r * ATT_QW + d] = q0 + r < L && d < DH ? Q[(long)(q0 + r) * ql + d] : 0.0f;
  }
  if (l < BQ) {
    row_max[l] = NEG_INF;
    row_sum[l] = 0.0f;
  }
  float o[ATT_RQ][4 * ATT_CV];
  for (int i = 0; i < ATT_RQ; ++i)
    for (int j = 0; j < 4 * ATT_CV; ++j) o[i][j] = 0.0f;
#if CAUSAL
  const int end = q0 + BQ < S ? q0 + BQ : S;
#else
  const int end = S;
#endif
  for (int k0 = 0; k0 < end; k0 += BKV) {
    SYNC();  /* the last block's values are read; Qs and the row state are written */
    for (int i = l; i < BKV * DHP; i += 256) {
      const int c = i / DHP, d = i % DHP;
      KVs[c * ATT_KW + d] = k0 + c < S && d < DH ? K[(long)(k0 + c) * ks + d] : 0.0f;
    }
    SYNC();
    float s[ATT_RQ][2];
    for (int i = 0; i < ATT_RQ; ++i) s[i][0] = s[i][1] = 0.0f;
    for (int d = 0; d < DHP; d += 4) {
      const VEC4 k0v = LOAD4_SHARED(&KVs[tx * ATT_KW + d]);
      const VEC4 k1v = LOAD4_SHARED(&KVs[(tx + 16) * ATT_KW + d]);
      for (int i = 0; i < ATT_RQ; ++i) {
        const VEC4 qv = LOAD4_SHARED(&Qs[(ty * ATT_RQ + i) * ATT_QW + d]);
        s[i][0] = F_FMA(qv.x, k0v.x, F_FMA(qv.y, k0v.y, F_FMA(qv.z, k0v.z, F_FMA(qv.w, k0v.w, s[i][0]))));
        s[i][1] = F_FMA(qv.x, k1v.x, F_FMA(qv.y, k1v.y, F_FMA(qv.z, k1v.z, F_FMA(qv.w, k1v.w, s[i][1]))));
      }
    }
    for (int i = 0; i < ATT_RQ; ++i) {
      const int r = ty * ATT_RQ + i;
      for (int j = 0; j < 2; ++j) {
        const int c = tx + 16 * j;
        float v = s[i][j] * scale;
#if HAS_MASK
        if (q0 + r < L && k0 + c < S) v += M[(long)(q0 + r) * ml + (long)(k0 + c) * ms];
#endif
#if CAUSAL
        if (k0 + c > q0 + r) v = NEG_INF;
#endif
        Ps[r * ATT_PW + c] = k0 + c < S ? v : NEG_INF;
      }
    }
    SYNC();  /* the keys are read: the values go to the same buffer */
    for (int i = l; i < BKV * DVP; i += 256) {
      const int c = i / DVP, d = i % DVP;
      KVs[c * ATT_KW + d] = k0 + c < S && d < DV ? V[(long)(k0 + c) * vs + d] : 0.0f;
    }
    const int row = l / ATT_TEAM, first = (l % ATT_TEAM) * ATT_CPT;
    float m = NEG_INF;
    for (int c = first; c < first + ATT_CPT; ++c) m = F_MAX(m, Ps[row * ATT_PW + c]);
    red_max[l] = m;
    SYNC();
    for (int t = 0; t < ATT_TEAM; ++t) m = F_MAX(m, red_max[row * ATT_TEAM + t]);
    const float old_max = row_max[row];
    const float new_max = F_MAX(old_max, m);
    const float base = new_max == NEG_INF ? 0.0f : new_max;
    float sum = 0.0f;
    for (int c = first; c < first + ATT_CPT; ++c) {
      const float p = F_EXP(Ps[row * ATT_PW + c] - base);
      Ps[row * ATT_PW + c] = p;
      sum += p;
    }
    red_sum[l] = sum;
    SYNC();
    if (l % ATT_TEAM == 0) {
      float total = 0.0f;
      for (int t = 0; t < ATT_TEAM; ++t) total += red_sum[l + t];
      const float rescale = F_EXP(old_max - base);
      row_max[row] = new_max;
      row_sum[row] = row_sum[row] * rescale + total;
      row_scale[row] = rescale;
    }
    SYNC();
    for (int i = 0; i < ATT_RQ; ++i) {
      const float rescale = row_scale[ty * ATT_RQ + i];
      for (int j = 0; j < 4 * ATT_CV; ++j) o[i][j] *= rescale;
    }
    for (int c = 0; c < BKV; c += 4) {
      VEC4 p4[ATT_RQ];
      for (int i = 0; i < ATT_RQ; ++i) p4[i] = LOAD4_SHARED(&Ps[(ty * ATT_RQ + i) * ATT_PW + c]);
      for (int u = 0; u < ATT_CV; ++u) {
        const int d = tx * 4 + 64 * u;
        if (d < DV) {
          const VEC4 v0 = LOAD4_SHARED(&KVs[c * ATT_KW + d]), v1 = LOAD4_SHARED(&KVs[(c + 1) * ATT_KW + d]);
          const VEC4 v2 = LOAD4_SHARED(&KVs[(c + 2) * ATT_KW + d]), v3 = LOAD4_SHARED(&KVs[(c + 3) * ATT_KW + d]);
          for (int i = 0; i < ATT_RQ; ++i) {
            const VEC4 p = p4[i];
            float* out = &o[i][4 * u];
            out[0] = F_FMA(p.w, v3.x, F_FMA(p.z, v2.x, F_FMA(p.y, v1.x, F_FMA(p.x, v0.x, out[0]))));
            out[1] = F_FMA(p.w, v3.y, F_FMA(p.z, v2.y, F_FMA(p.y, v1.y, F_FMA(p.x, v0.y, out[1]))));
            out[2] = F_FMA(p.w, v3.z, F_FMA(p.z, v2.z, F_FMA(p.y, v1.z, F_FMA(p.x, v0.z, out[2]))));
            out[3] = F_FMA(p.w, v3.w, F_FMA(p.z, v2.w, F_FMA(p.y, v1.w, F_FMA(p.x, v0.w, out[3]))));
          }
        }
      }
    }
  }
  SYNC();  /* a group with no block still set the row state */
  for (int i = 0; i < ATT_RQ; ++i) {
    const int r = ty * ATT_RQ + i;
    if (q0 + r >= L) continue;
    const float total = row_sum[r];
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int u = 0; u < ATT_CV; ++u) {
      for (int e = 0; e < 4; ++e) {
        const int d = tx * 4 + 64 * u + e;
        if (d < DV) O[(long)(q0 + r) * ol + d] = o[i][4 * u + e] * inv;
      }
    }
  }
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
  const bool positive = t.bm > 0 && t.bn > 0 && t.bk > 0 && t.rm > 0 && t.rn > 0;
  const int threads = positive ? t.local_x() * t.local_y() : 1;  // (no division by a zero register block)
  const bool ok = positive && t.rm % 4 == 0 && t.rn % 4 == 0 &&
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
  kernel_source s = make(d, key, defines, std::string(kGemmLoaders) + body, "gemm");
  if (c.fixed_mnk) {
    s.shape_class = "M=" + std::to_string((*c.fixed_mnk)[0]) + " N=" + std::to_string((*c.fixed_mnk)[1]) +
                    " K=" + std::to_string((*c.fixed_mnk)[2]);
  }
  return s;
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
  key.add(work_group).add("teams");
  return make(d, key, define("WG", work_group), kSoftmax, "softmax");
}

int softmax_team(int work_group, std::int64_t cols) {
  return cols > 1024 || work_group < 32 ? work_group : 32;
}

kernel_source layer_norm_source(dialect d, int work_group, bool rms) {
  cache_key key = config_key(d, "layer_norm");
  key.add(work_group).add(rms);
  return make(d, key, define("WG", work_group) + define("RMS", rms ? 1 : 0), kLayerNorm, "layer_norm");
}

kernel_source eltwise_source(dialect d, op_kind kind, int work_group) {
  cache_key key = config_key(d, "eltwise");
  key.add(kind).add(work_group);
  return make(d, key, define("WG", work_group) + "#define FUNC " + eltwise_function(kind) + "\n", kEltwise, "eltwise");
}

kernel_source transpose_source(dialect d, int work_group) {
  cache_key key = config_key(d, "transpose");
  key.add(work_group);
  return make(d, key, define("WG", work_group), kTranspose, "transpose");
}

int attention_rows(int head_size, int value_size) { return std::max(head_size, value_size) <= 64 ? 64 : 32; }

namespace {
// A head size padded for the kernel's rows: to float4s for Q's; to 8 for the
// values' and the key buffer's, since PoCL 3.1 (LLVM 15) miscompiled the
// value tile's load for value sizes 1-4 and 65-68 at 4 (wrong results; a
// barrier after the load, or no optimization, gave the right ones; CUDA was
// right either way). AttentionMatchesTheReference has such sizes.
int attention_padded(int size, int multiple) { return (size + multiple - 1) / multiple * multiple; }
}  // namespace

std::size_t attention_local_bytes(int head_size, int value_size) {
  const int rows = attention_rows(head_size, value_size);
  const int floats = rows * (attention_padded(head_size, 4) + 4) +                    // Q
                     32 * (attention_padded(std::max(head_size, value_size), 8) + 4) +  // keys, then values
                     rows * (32 + 4) + 3 * rows + 2 * 256;                            // scores, row state, sums
  return static_cast<std::size_t>(floats) * sizeof(float);
}

kernel_source attention_source(dialect d, const attention_config& c) {
  if (c.head_size < 1 || c.value_size < 1 || c.head_size > kAttentionMaxHeadSize ||
      c.value_size > kAttentionMaxHeadSize) {
    throw compile_error("kernel generator: attention with head sizes " + std::to_string(c.head_size) + " and " +
                        std::to_string(c.value_size) + " (1 to " + std::to_string(kAttentionMaxHeadSize) + ")");
  }
  cache_key key = config_key(d, "attention");
  key.add(c.head_size).add(c.value_size).add(c.causal).add(c.mask);
  const int rows = attention_rows(c.head_size, c.value_size);
  const std::string defines = define("BQ", rows) + define("BKV", 32) + define("DH", c.head_size) +
                              define("DV", c.value_size) + define("DHP", attention_padded(c.head_size, 4)) +
                              define("DVP", attention_padded(c.value_size, 8)) +
                              define("DMAXP", attention_padded(std::max(c.head_size, c.value_size), 8)) +
                              define("CAUSAL", c.causal) + define("HAS_MASK", c.mask);
  return make(d, key, defines, kAttention, "attention");
}

kernel_source binary_source(dialect d, op_kind kind, int work_group) {
  cache_key key = config_key(d, "binary");
  key.add(kind).add(work_group);
  return make(d, key, define("WG", work_group) + "#define OP " + (kind == op_kind::add ? "+" : "*") + "\n", kBinary,
              "binary");
}

}  // namespace unicache::gpu::kernels
