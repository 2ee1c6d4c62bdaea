/* What the C interface's C tests share: a tiny harness (CHECK counts
 * failures), the MLP graph, and a run of it for several batch sizes on any
 * engine, with the engine's kind of buffers. */
#ifndef UNICACHE_C_TEST_H
#define UNICACHE_C_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicache/unicache.h"

static int failures = 0;
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              unicache_last_error());                                            \
      ++failures;                                                                \
    }                                                                            \
  } while (0)
#define CHECK_STATUS(call, expected)                                             \
  do {                                                                           \
    unicache_status_t s_ = (call);                                               \
    if (s_ != (expected)) {                                                      \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: %s)\n", __FILE__, __LINE__, #call, \
              unicache_status_name(s_), unicache_status_name(expected), unicache_last_error()); \
      ++failures;                                                                \
    }                                                                            \
  } while (0)
#define OK(call) CHECK_STATUS(call, UNICACHE_SUCCESS)


/* y = relu(x[M,K] @ w[K,N] + b[N]), w and b constant. */
enum { K = 5, N = 3 };

static inline unicache_graph_t mlp(unicache_logical_tensor_t* x, unicache_logical_tensor_t* w, unicache_logical_tensor_t* b,
                            unicache_logical_tensor_t* y) {
  unicache_graph_t g = NULL;
  OK(unicache_graph_create(&g));
  const int64_t xs[2] = {UNICACHE_UNKNOWN_DIM, K}, ws[2] = {K, N}, bs[1] = {N}, ys[2] = {UNICACHE_UNKNOWN_DIM, N};
  unicache_logical_tensor_t mm, sum;
  OK(unicache_graph_add_tensor(g, 2, xs, 0, x));
  OK(unicache_graph_add_tensor(g, 2, ws, 1, w));
  OK(unicache_graph_add_tensor(g, 1, bs, 1, b));
  OK(unicache_graph_add_tensor(g, 2, ys, 0, &mm));
  OK(unicache_graph_add_tensor(g, 2, ys, 0, &sum));
  OK(unicache_graph_add_tensor(g, 2, ys, 0, y));
  uint64_t in[2], out[1], op = 0;
  in[0] = x->id, in[1] = w->id, out[0] = mm.id;
  OK(unicache_graph_add_op(g, UNICACHE_OP_MATMUL, in, 2, out, 1, 0, 0, &op));
  in[0] = mm.id, in[1] = b->id, out[0] = sum.id;
  OK(unicache_graph_add_op(g, UNICACHE_OP_ADD, in, 2, out, 1, 0, 0, &op));
  in[0] = sum.id, out[0] = y->id;
  OK(unicache_graph_add_op(g, UNICACHE_OP_RELU, in, 1, out, 1, 0, 0, &op));
  OK(unicache_graph_finalize(g));
  return g;
}


/* The MLP's input shapes for batch size m, as unicache_compile takes them. */
typedef struct {
  int32_t ndims[3];
  int64_t xs[2], ws[2], bs[1];
  const int64_t* shapes[3];
} c_test_shapes;
static inline void c_test_shapes_for(c_test_shapes* s, int64_t m) {
  s->ndims[0] = 2, s->ndims[1] = 2, s->ndims[2] = 1;
  s->xs[0] = m, s->xs[1] = K, s->ws[0] = K, s->ws[1] = N, s->bs[0] = N;
  s->shapes[0] = s->xs, s->shapes[1] = s->ws, s->shapes[2] = s->bs;
}

/* The MLP's constant weights and bias, and an input of batch size m. */
static inline void c_test_weights(float* wv, float* bv) {
  for (int i = 0; i < K * N; ++i) wv[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < N; ++i) bv[i] = 0.25f * (float)i - 0.3f;
}
static inline void c_test_input(float* xv, int64_t m) {
  for (int64_t i = 0; i < m * K; ++i) xv[i] = (float)((i * 3) % 5) - 2.0f;
}

/* Checks y = relu(x @ w + b) for M = m against a reference computed here. */
static inline void c_test_check_mlp(const float* xv, const float* wv, const float* bv, const float* yv, int64_t m) {
  for (int64_t r = 0; r < m; ++r) {
    for (int c = 0; c < N; ++c) {
      float acc = bv[c];
      for (int k = 0; k < K; ++k) acc += xv[r * K + k] * wv[k * N + c];
      const float want = acc > 0 ? acc : 0;
      CHECK(fabsf(yv[r * N + c] - want) <= 1e-4f * (1 + fabsf(want)));
    }
  }
}

/* The exit code of a test: 1 if a check failed, else 0. */
static inline int c_test_finish(void) {
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}

/* Buffers of an engine: make one holding `bytes` copied from `host`, read
 * one back, free one. The CPU's are host pointers. */
typedef struct {
  void* (*make)(void* ctx, const void* host, size_t bytes);
  void (*read)(void* ctx, void* buffer, void* host, size_t bytes);
  void (*release)(void* ctx, void* buffer);
  void* ctx;
} c_test_buffers;

/* Compiles the MLP for M = 1, 5, 9 on `eng`, runs it on `strm` and checks
 * every result against a reference computed here. */
static inline void c_test_run_mlp(unicache_engine_t eng, unicache_stream_t strm, const c_test_buffers* buffers) {
  unicache_logical_tensor_t x, w, b, y;
  unicache_graph_t g = mlp(&x, &w, &b, &y);
  unicache_partition_t p = NULL;
  OK(unicache_graph_get_partition(g, 0, &p));
  float wv[K * N], bv[N];
  c_test_weights(wv, bv);
  void* wbuf = buffers->make(buffers->ctx, wv, sizeof wv);
  void* bbuf = buffers->make(buffers->ctx, bv, sizeof bv);
  for (int64_t m = 1; m <= 9; m += 4) {
    c_test_shapes sh;
    c_test_shapes_for(&sh, m);
    unicache_compiled_partition_t cp = NULL;
    OK(unicache_compile(p, 3, sh.ndims, sh.shapes, eng, &cp));
    unicache_logical_tensor_t out;
    OK(unicache_compiled_partition_get_output(cp, 0, &out));
    float* xv = malloc(sizeof(float) * (size_t)(m * K));
    float* yv = calloc((size_t)(m * N), sizeof(float));
    c_test_input(xv, m);
    void* xbuf = buffers->make(buffers->ctx, xv, sizeof(float) * (size_t)(m * K));
    void* ybuf = buffers->make(buffers->ctx, yv, sizeof(float) * (size_t)(m * N));
    unicache_tensor_t in[3] = {{x, xbuf, 0}, {w, wbuf, 1}, {b, bbuf, 1}};
    in[0].desc.dims[0] = m;
    unicache_tensor_t outs[1] = {{out, ybuf, 0}};
    OK(unicache_compiled_partition_execute(cp, strm, in, 3, outs, 1));
    OK(unicache_stream_wait(strm));
    buffers->read(buffers->ctx, ybuf, yv, sizeof(float) * (size_t)(m * N));
    c_test_check_mlp(xv, wv, bv, yv, m);
    buffers->release(buffers->ctx, xbuf);
    buffers->release(buffers->ctx, ybuf);
    free(xv);
    free(yv);
    OK(unicache_compiled_partition_destroy(cp));
  }
  buffers->release(buffers->ctx, wbuf);
  buffers->release(buffers->ctx, bbuf);
  OK(unicache_graph_destroy(g));
}

#endif /* UNICACHE_C_TEST_H */
