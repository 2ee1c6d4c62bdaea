/* mkdtemp under -std=c99 */
#define _XOPEN_SOURCE 700
/* The C interface, from C: every function of unicache.h, including misuse
 * (null and destroyed handles, buffers too small, bad graphs, shapes and
 * blobs). A tiny harness: CHECK counts failures; the exit code is 0 when
 * none failed, 77 (CTest's skip) when the build has no CPU backend for the
 * parts that need one. */
#include <ftw.h>
#include <unistd.h>

#include "c_test.h"

/* The store's directory, made by test_store and removed at the end. */
static char store_dir[] = "/tmp/unicache-c-api-XXXXXX";
static int store_dir_made = 0;

static int remove_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void test_status_and_version(void) {
  CHECK(strcmp(unicache_status_name(UNICACHE_BUFFER_TOO_SMALL), "UNICACHE_BUFFER_TOO_SMALL") == 0);
  CHECK(strcmp(unicache_status_name((unicache_status_t)999), "UNICACHE_UNKNOWN_STATUS") == 0);
  CHECK(unicache_version() != NULL && strlen(unicache_version()) > 0);
  CHECK(unicache_last_error() != NULL);
}

static void test_cache_settings(void) {
  size_t mb = 0;
  unicache_policy_t policy = UNICACHE_POLICY_DEFAULT;
  OK(unicache_set_cache_capacity(UNICACHE_CONSTANT_TENSOR_CACHE, UNICACHE_ENGINE_GPU, 512, UNICACHE_POLICY_LRU));
  OK(unicache_get_cache_capacity(UNICACHE_CONSTANT_TENSOR_CACHE, UNICACHE_ENGINE_GPU, &mb, &policy));
  CHECK(mb == 512 && policy == UNICACHE_POLICY_LRU);
  OK(unicache_set_constant_tensor_cache_capacity(UNICACHE_ENGINE_CPU, 256));
  OK(unicache_get_constant_tensor_cache_capacity(UNICACHE_ENGINE_CPU, &mb));
  CHECK(mb == 256);
  OK(unicache_set_kernel_cache_capacity(64));
  OK(unicache_get_kernel_cache_capacity(&mb));
  CHECK(mb == 64);
  /* Misuse: unknown kinds and policies, null outputs, a capacity that does not fit. */
  CHECK_STATUS(unicache_set_cache_capacity(UNICACHE_KERNEL_CACHE, (unicache_engine_kind_t)7, 1, UNICACHE_POLICY_LRU),
               UNICACHE_INVALID_ARGUMENT);
  CHECK(strstr(unicache_last_error(), "engine kind") != NULL);
  CHECK_STATUS(unicache_set_cache_capacity((unicache_cache_t)9, UNICACHE_ENGINE_CPU, 1, UNICACHE_POLICY_LRU),
               UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_set_cache_capacity(UNICACHE_KERNEL_CACHE, UNICACHE_ENGINE_CPU, 1, (unicache_policy_t)42),
               UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_get_kernel_cache_capacity(NULL), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_set_kernel_cache_capacity((size_t)-1), UNICACHE_CACHE_ERROR);
  OK(unicache_get_kernel_cache_capacity(&mb));
  CHECK(mb == 64);  /* a refused setting changes nothing */
  unicache_cache_stats_t stats;
  OK(unicache_get_cache_stats(UNICACHE_KERNEL_CACHE, &stats));
  CHECK_STATUS(unicache_get_cache_stats(UNICACHE_KERNEL_CACHE, NULL), UNICACHE_INVALID_ARGUMENT);
}

static int evicted = 0;
static void on_evict(void* user_data, unicache_engine_kind_t kind, int device_id, uint64_t context_id,
                     uint32_t owner_id, const void* key, size_t key_size) {
  (void)kind, (void)device_id, (void)context_id, (void)owner_id, (void)key, (void)key_size;
  ++*(int*)user_data;
}

static void test_eviction_callbacks(void) {
  uint64_t sub = 0;
  OK(unicache_add_eviction_callback(UNICACHE_KERNEL_CACHE, 0xC0DE0001u, on_evict, &evicted, &sub));
  CHECK(sub != 0);
  CHECK_STATUS(unicache_add_eviction_callback(UNICACHE_KERNEL_CACHE, 1, NULL, NULL, &sub), UNICACHE_INVALID_ARGUMENT);
  OK(unicache_remove_eviction_callback(UNICACHE_KERNEL_CACHE, 0xC0DE0001u, sub));
  CHECK_STATUS(unicache_remove_eviction_callback(UNICACHE_KERNEL_CACHE, 0xC0DE0001u, sub), UNICACHE_INVALID_ARGUMENT);
}

static void test_store(void) {
  char* dir = store_dir;
  store_dir_made = mkdtemp(dir) != NULL;
  CHECK(store_dir_made);
  OK(unicache_store_set_directory(dir));
  OK(unicache_store_set_enabled(1));
  OK(unicache_store_set_capacity_mb(64));
  size_t size = 0;
  OK(unicache_store_get_directory(NULL, &size));
  CHECK(size == strlen(dir) + 1);
  char small[4];
  size_t small_size = sizeof small;
  CHECK_STATUS(unicache_store_get_directory(small, &small_size), UNICACHE_BUFFER_TOO_SMALL);
  CHECK(small_size == strlen(dir) + 1);
  char* got = malloc(size);
  OK(unicache_store_get_directory(got, &size));
  CHECK(strcmp(got, dir) == 0);
  free(got);
  unicache_store_stats_t stats;
  OK(unicache_store_get_stats(&stats));
  CHECK_STATUS(unicache_store_set_directory(NULL), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_store_set_remote("http://user:hunter2@example", NULL), UNICACHE_INVALID_ARGUMENT);
  CHECK(strstr(unicache_last_error(), "hunter2") == NULL);  /* never quotes a password */
  OK(unicache_store_set_remote(NULL, NULL));                 /* off */
  OK(unicache_store_set_size_eviction(1));
  /* Misses that explain themselves: the switch, and a miss nobody recorded. */
  OK(unicache_set_explain_misses(1));
  OK(unicache_set_explain_misses(0));
  size_t line_size = 0;
  CHECK_STATUS(unicache_store_explain_miss("0123456789abcdef", NULL, &line_size), UNICACHE_STORE_ERROR);
  CHECK(strstr(unicache_last_error(), "UNICACHE_EXPLAIN_MISSES") != NULL);
  CHECK_STATUS(unicache_store_explain_miss("not hex", NULL, &line_size), UNICACHE_STORE_ERROR);
  CHECK_STATUS(unicache_store_explain_miss(NULL, NULL, &line_size), UNICACHE_INVALID_ARGUMENT);
}

static void test_blobs(void) {
  const unicache_device_identity_t gpu = {"Platform", "GPU 1", "OpenCL 3.0", "driver 9"};
  const unicache_device_identity_t other = {"Platform", "GPU 2", "OpenCL 3.0", "driver 9"};
  const char key[] = "opencl-c gemm tile=64";
  const uint8_t binary[5] = {1, 2, 3, 4, 5};
  size_t id_size = 0;
  OK(unicache_blob_id(&gpu, key, sizeof key - 1, NULL, &id_size));
  CHECK(id_size == 33);
  size_t blob_size = 0;
  OK(unicache_blob_serialize(&gpu, key, sizeof key - 1, binary, sizeof binary, NULL, &blob_size));
  uint8_t* blob = malloc(blob_size);
  OK(unicache_blob_serialize(&gpu, key, sizeof key - 1, binary, sizeof binary, blob, &blob_size));
  size_t key_size = 0, binary_size = 0;
  OK(unicache_blob_deserialize(&gpu, blob, blob_size, NULL, &key_size, NULL, &binary_size));
  CHECK(key_size == sizeof key - 1 && binary_size == sizeof binary);
  char got_key[64];
  uint8_t got_binary[5];
  size_t small_key = 3;
  CHECK_STATUS(unicache_blob_deserialize(&gpu, blob, blob_size, got_key, &small_key, got_binary, &binary_size),
               UNICACHE_BUFFER_TOO_SMALL);
  CHECK(small_key == sizeof key - 1);
  key_size = sizeof got_key;
  OK(unicache_blob_deserialize(&gpu, blob, blob_size, got_key, &key_size, got_binary, &binary_size));
  CHECK(key_size == sizeof key - 1 && memcmp(got_key, key, key_size) == 0);
  CHECK(memcmp(got_binary, binary, sizeof binary) == 0);
  CHECK_STATUS(unicache_blob_deserialize(&other, blob, blob_size, got_key, &key_size, got_binary, &binary_size),
               UNICACHE_INVALID_ARGUMENT);  /* another device */
  CHECK(strlen(unicache_last_error()) > 0);
  blob[blob_size - 1] ^= 1;
  CHECK_STATUS(unicache_blob_deserialize(&gpu, blob, blob_size, got_key, &key_size, got_binary, &binary_size),
               UNICACHE_INVALID_ARGUMENT);  /* corrupt */
  CHECK_STATUS(unicache_blob_deserialize(&gpu, blob, 4, got_key, &key_size, got_binary, &binary_size),
               UNICACHE_INVALID_ARGUMENT);  /* truncated */
  free(blob);
  const unicache_device_identity_t incomplete = {"Platform", NULL, "OpenCL 3.0", "driver 9"};
  CHECK_STATUS(unicache_blob_id(&incomplete, key, sizeof key - 1, NULL, &id_size), UNICACHE_INVALID_ARGUMENT);
}

static void test_graph_misuse(void) {
  unicache_graph_t g = NULL;
  OK(unicache_graph_create(&g));
  const int64_t a[2] = {2, 3}, c[2] = {4, 5};
  unicache_logical_tensor_t ta, tc, tout;
  OK(unicache_graph_add_tensor(g, 2, a, 0, &ta));
  OK(unicache_graph_add_tensor(g, 2, c, 0, &tc));
  OK(unicache_graph_add_tensor(g, 2, a, 0, &tout));
  uint64_t in[2] = {ta.id, tc.id}, out[1] = {tout.id};
  OK(unicache_graph_add_op(g, UNICACHE_OP_MATMUL, in, 2, out, 1, 0, 0, NULL));
  CHECK_STATUS(unicache_graph_finalize(g), UNICACHE_INVALID_GRAPH);  /* K: 3 against 4 */
  CHECK(strlen(unicache_last_error()) > 0);
  size_t count = 0;
  CHECK_STATUS(unicache_graph_get_partition_count(g, &count), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_graph_add_op(g, (unicache_op_kind_t)99, in, 2, out, 1, 0, 0, NULL), UNICACHE_INVALID_ARGUMENT);
  uint64_t missing[1] = {12345};
  CHECK(unicache_graph_add_op(g, UNICACHE_OP_RELU, missing, 1, out, 1, 0, 0, NULL) != UNICACHE_SUCCESS);
  const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK_STATUS(unicache_graph_add_tensor(g, 9, nine, 0, &ta), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_graph_add_tensor(g, 2, NULL, 0, &ta), UNICACHE_INVALID_ARGUMENT);
  OK(unicache_graph_destroy(g));
  CHECK_STATUS(unicache_graph_destroy(g), UNICACHE_INVALID_HANDLE);  /* twice: detected */
  OK(unicache_graph_destroy(NULL));
  CHECK_STATUS(unicache_graph_finalize(NULL), UNICACHE_INVALID_HANDLE);
  CHECK_STATUS(unicache_graph_create(NULL), UNICACHE_INVALID_ARGUMENT);
}

/* LayerNorm with its epsilon set through the attribute call, on the CPU:
 * rows whose variance plus epsilon is 4, so the result is exact. */
static int test_layer_norm(void) {
  unicache_engine_t eng = NULL;
  unicache_status_t s = unicache_engine_create_cpu(0, &eng);
  if (s == UNICACHE_UNSUPPORTED) return 77;
  OK(s);
  unicache_stream_t strm = NULL;
  OK(unicache_stream_create(eng, &strm));
  unicache_graph_t g = NULL;
  OK(unicache_graph_create(&g));
  const int64_t xs[2] = {-1, 4}, ps[1] = {4};
  unicache_logical_tensor_t x, gamma, beta, y;
  OK(unicache_graph_add_tensor(g, 2, xs, 0, &x));
  OK(unicache_graph_add_tensor(g, 1, ps, 1, &gamma));
  OK(unicache_graph_add_tensor(g, 1, ps, 1, &beta));
  OK(unicache_graph_add_tensor(g, 2, xs, 0, &y));
  uint64_t in_ids[3] = {x.id, gamma.id, beta.id}, out_ids[1] = {y.id}, ln = 0, relu = 0;
  OK(unicache_graph_add_op(g, UNICACHE_OP_LAYER_NORM, in_ids, 3, out_ids, 1, 0, 0, &ln));
  CHECK_STATUS(unicache_graph_set_op_attr_f32(g, ln, UNICACHE_OP_ATTR_EPSILON, -1.0f), UNICACHE_INVALID_GRAPH);
  CHECK(strstr(unicache_last_error(), "epsilon") != NULL);
  CHECK_STATUS(unicache_graph_set_op_attr_f32(g, ln, (unicache_op_attr_t)5, 1.0f), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_graph_set_op_attr_f32(g, 77, UNICACHE_OP_ATTR_EPSILON, 1.0f), UNICACHE_INVALID_GRAPH);
  CHECK_STATUS(unicache_graph_set_op_attr_f32(NULL, ln, UNICACHE_OP_ATTR_EPSILON, 1.0f), UNICACHE_INVALID_HANDLE);
  OK(unicache_graph_set_op_attr_f32(g, ln, UNICACHE_OP_ATTR_EPSILON, 2.75f));
  {
    const int64_t perm[7] = {1, 0, 2, 3, 4, 5, 6};
    CHECK_STATUS(unicache_graph_set_op_attr_i64s(g, ln, UNICACHE_OP_ATTR_PERMUTATION, perm, 2), UNICACHE_INVALID_GRAPH);
    CHECK(strstr(unicache_last_error(), "has no permutation") != NULL);
    CHECK_STATUS(unicache_graph_set_op_attr_i64s(g, ln, (unicache_op_attr_t)5, perm, 2), UNICACHE_INVALID_ARGUMENT);
    CHECK_STATUS(unicache_graph_set_op_attr_i64s(g, ln, UNICACHE_OP_ATTR_PERMUTATION, NULL, 2),
                 UNICACHE_INVALID_ARGUMENT);
    CHECK_STATUS(unicache_graph_set_op_attr_i64s(g, ln, UNICACHE_OP_ATTR_PERMUTATION, perm, 7), UNICACHE_INVALID_GRAPH);
    CHECK_STATUS(unicache_graph_set_op_attr_i64s(g, ln, UNICACHE_OP_ATTR_PERMUTATION, perm, (size_t)-1),
                 UNICACHE_INVALID_GRAPH);
    CHECK_STATUS(unicache_graph_set_op_attr_i64s(g, ln, UNICACHE_OP_ATTR_EPSILON, perm, 2), UNICACHE_INVALID_ARGUMENT);
    CHECK(strstr(unicache_last_error(), "unicache_graph_set_op_attr_f32") != NULL);
    CHECK_STATUS(unicache_graph_set_op_attr_f32(g, ln, UNICACHE_OP_ATTR_PERMUTATION, 1.0f), UNICACHE_INVALID_ARGUMENT);
    /* A Transpose of its own graph: [2,3] -> [3,2], finalized. */
    unicache_graph_t tg = NULL;
    OK(unicache_graph_create(&tg));
    const int64_t ts[2] = {2, 3}, tts[2] = {3, 2};
    unicache_logical_tensor_t tx, ty;
    OK(unicache_graph_add_tensor(tg, 2, ts, 0, &tx));
    OK(unicache_graph_add_tensor(tg, 2, tts, 0, &ty));
    uint64_t tin[1] = {tx.id}, tout[1] = {ty.id}, top = 0;
    OK(unicache_graph_add_op(tg, UNICACHE_OP_TRANSPOSE, tin, 1, tout, 1, 0, 0, &top));
    CHECK_STATUS(unicache_graph_finalize(tg), UNICACHE_INVALID_GRAPH); /* no permutation yet */
    OK(unicache_graph_set_op_attr_i64s(tg, top, UNICACHE_OP_ATTR_PERMUTATION, perm, 2));
    OK(unicache_graph_finalize(tg));
    OK(unicache_graph_destroy(tg));
  }
  OK(unicache_graph_mark_output(g, y.id));  /* read by the caller: a partition's output anyway */
  CHECK_STATUS(unicache_graph_mark_output(g, 12345), UNICACHE_INVALID_GRAPH);
  OK(unicache_graph_finalize(g));
  unicache_partition_t p = NULL;
  OK(unicache_graph_get_partition(g, 0, &p));
  const int32_t ndims[3] = {2, 1, 1};
  const int64_t rows_shape[2] = {2, 4};
  const int64_t* shapes[3] = {rows_shape, ps, ps};
  unicache_compiled_partition_t cp = NULL;
  unicache_build_stats_t before, after;
  OK(unicache_engine_get_build_stats(eng, &before));
  OK(unicache_compile(p, 3, ndims, shapes, eng, &cp));
  OK(unicache_engine_get_build_stats(eng, &after));
  CHECK(after.built == before.built + 1);  /* one LayerNorm primitive: two rows, one block */
  CHECK_STATUS(unicache_engine_get_build_stats(eng, NULL), UNICACHE_INVALID_ARGUMENT);
  float xv[8] = {1, 2, 3, 4, 11, 12, 13, 14}, gv[4] = {1, 2, 1, 2}, bv[4] = {0, 0, 1, 1}, yv[8] = {0};
  const float want[4] = {-0.75f, -0.5f, 1.25f, 2.5f};
  unicache_tensor_t in[3] = {{x, xv, 0}, {gamma, gv, 1}, {beta, bv, 1}}, out[1] = {{y, yv, 0}};
  in[0].desc.dims[0] = 2;
  out[0].desc.dims[0] = 2;
  OK(unicache_compiled_partition_execute(cp, strm, in, 3, out, 1));
  OK(unicache_stream_wait(strm));
  for (int i = 0; i < 8; ++i) CHECK(fabsf(yv[i] - want[i % 4]) < 1e-5f);
  /* An epsilon on an op without one. */
  const int64_t one[1] = {4};
  unicache_logical_tensor_t a, b;
  OK(unicache_graph_add_tensor(g, 1, one, 0, &a));
  OK(unicache_graph_add_tensor(g, 1, one, 0, &b));
  uint64_t relu_in[1] = {a.id}, relu_out[1] = {b.id};
  OK(unicache_graph_add_op(g, UNICACHE_OP_RELU, relu_in, 1, relu_out, 1, 0, 0, &relu));
  CHECK_STATUS(unicache_graph_set_op_attr_f32(g, relu, UNICACHE_OP_ATTR_EPSILON, 1.0f), UNICACHE_INVALID_GRAPH);
  OK(unicache_compiled_partition_destroy(cp));
  OK(unicache_graph_destroy(g));
  OK(unicache_stream_destroy(strm));
  OK(unicache_engine_destroy(eng));
  return 0;
}

static int test_compile_and_execute(void) {
  unicache_engine_t eng = NULL;
  unicache_status_t s = unicache_engine_create_cpu(0, &eng);
  if (s == UNICACHE_UNSUPPORTED) return 77;
  OK(s);
  unicache_engine_kind_t kind;
  OK(unicache_engine_get_kind(eng, &kind));
  CHECK(kind == UNICACHE_ENGINE_CPU);
  unicache_stream_t strm = NULL;
  OK(unicache_stream_create(eng, &strm));

  unicache_logical_tensor_t x, w, b, y;
  unicache_graph_t g = mlp(&x, &w, &b, &y);
  size_t count = 0;
  OK(unicache_graph_get_partition_count(g, &count));
  CHECK(count == 1);
  unicache_partition_t p = NULL;
  OK(unicache_graph_get_partition(g, 0, &p));
  CHECK_STATUS(unicache_graph_get_partition(g, 1, &p), UNICACHE_INVALID_ARGUMENT);
  size_t inputs = 0;
  OK(unicache_partition_get_input_count(p, &inputs));
  char fingerprint[33];
  size_t fingerprint_size = sizeof fingerprint;
  OK(unicache_partition_get_fingerprint(p, fingerprint, &fingerprint_size));
  CHECK(fingerprint_size == 33 && strlen(fingerprint) == 32);
  CHECK(inputs == 3);

  float wv[K * N], bv[N];
  c_test_weights(wv, bv);
  char first_id[64] = "";
  for (int64_t m = 1; m <= 9; m += 4) {
    c_test_shapes sh;
    c_test_shapes_for(&sh, m);
    const int32_t* ndims = sh.ndims;
    const int64_t* const* shapes = sh.shapes;
    unicache_compiled_partition_t cp = NULL;
    OK(unicache_compile(p, 3, ndims, shapes, eng, &cp));
    unicache_logical_tensor_t out;
    OK(unicache_compiled_partition_get_output(cp, 0, &out));
    CHECK(out.ndims == 2 && out.dims[0] == m && out.dims[1] == N);

    float* xv = malloc(sizeof(float) * (size_t)(m * K));
    float* yv = malloc(sizeof(float) * (size_t)(m * N));
    c_test_input(xv, m);
    unicache_tensor_t in[3] = {{x, xv, 0}, {w, wv, 1}, {b, bv, 1}};
    in[0].desc.dims[0] = m;
    unicache_tensor_t outs[1] = {{out, yv, 0}};
    OK(unicache_compiled_partition_execute(cp, strm, in, 3, outs, 1));
    OK(unicache_stream_wait(strm));
    c_test_check_mlp(xv, wv, bv, yv, m);
    /* Misuse: too few tensors, a wrong shape. */
    CHECK_STATUS(unicache_compiled_partition_execute(cp, strm, in, 2, outs, 1), UNICACHE_EXECUTE_FAILED);
    in[0].desc.dims[0] = m + 1;
    CHECK_STATUS(unicache_compiled_partition_execute(cp, strm, in, 3, outs, 1), UNICACHE_EXECUTE_FAILED);

    /* The blob id and blob, through the size-query pattern. */
    size_t id_size = 0;
    OK(unicache_compiled_partition_get_cache_blob_id(cp, NULL, &id_size));
    CHECK(id_size == 33);
    char id[33];
    size_t small = 8;
    CHECK_STATUS(unicache_compiled_partition_get_cache_blob_id(cp, id, &small), UNICACHE_BUFFER_TOO_SMALL);
    CHECK(small == 33);
    OK(unicache_compiled_partition_get_cache_blob_id(cp, id, &id_size));
    if (m == 1) {
      strcpy(first_id, id);
    } else {
      CHECK(strcmp(first_id, id) == 0);  /* shape-agnostic: one id for every shape */
    }
    size_t blob_size = 0;
    OK(unicache_compiled_partition_get_cache_blob(cp, NULL, &blob_size));
    CHECK(blob_size > 0);
    uint8_t* blob = malloc(blob_size);
    OK(unicache_compiled_partition_get_cache_blob(cp, blob, &blob_size));
    unicache_compiled_partition_t again = NULL;
    OK(unicache_compile_from_cache_blob(p, 3, ndims, shapes, eng, blob, blob_size, &again));
    OK(unicache_compiled_partition_destroy(again));
    blob[blob_size / 2] ^= 0x5a;  /* corrupt */
    CHECK_STATUS(unicache_compile_from_cache_blob(p, 3, ndims, shapes, eng, blob, blob_size, &again),
                 UNICACHE_COMPILE_FAILED);
    free(blob);
    free(xv);
    free(yv);
    OK(unicache_compiled_partition_destroy(cp));
    CHECK_STATUS(unicache_compiled_partition_destroy(cp), UNICACHE_INVALID_HANDLE);
  }
  /* Shapes that do not fit the partition. */
  c_test_shapes wrong;
  c_test_shapes_for(&wrong, 4);
  wrong.xs[1] = K + 1;
  unicache_compiled_partition_t bad = NULL;
  CHECK_STATUS(unicache_compile(p, 3, wrong.ndims, wrong.shapes, eng, &bad), UNICACHE_COMPILE_FAILED);
  CHECK_STATUS(unicache_compile(p, 2, wrong.ndims, wrong.shapes, eng, &bad), UNICACHE_COMPILE_FAILED);
  CHECK_STATUS(unicache_compile(p, 3, wrong.ndims, wrong.shapes, NULL, &bad), UNICACHE_INVALID_HANDLE);
  CHECK_STATUS(unicache_compile(NULL, 3, wrong.ndims, wrong.shapes, eng, &bad), UNICACHE_INVALID_HANDLE);

  unicache_cache_stats_t stats;
  OK(unicache_get_cache_stats(UNICACHE_KERNEL_CACHE, &stats));
  CHECK(stats.misses > 0 && stats.hits > 0);  /* the second and third shapes hit the kernel */

  /* The blob id before compiling equals the compiled partition's. */
  {
    c_test_shapes s5;
    c_test_shapes_for(&s5, 5);
    char before[33], after[33];
    size_t before_size = sizeof before, after_size = sizeof after;
    OK(unicache_get_cache_blob_id(p, 3, s5.ndims, s5.shapes, eng, before, &before_size));
    unicache_compiled_partition_t cp5 = NULL;
    OK(unicache_compile(p, 3, s5.ndims, s5.shapes, eng, &cp5));
    OK(unicache_compiled_partition_get_cache_blob_id(cp5, after, &after_size));
    CHECK(strcmp(before, after) == 0);
    OK(unicache_compiled_partition_destroy(cp5));
  }

  /* Evictions reach a C callback: shrinking the kernel cache to nothing
   * evicts the compiled partition cached above. */
  evicted = 0;
  uint64_t sub = 0;
  OK(unicache_add_eviction_callback(UNICACHE_KERNEL_CACHE, 0xC0DE0001u, on_evict, &evicted, &sub));
  OK(unicache_set_kernel_cache_capacity(0));
  CHECK(evicted > 0);
  OK(unicache_remove_eviction_callback(UNICACHE_KERNEL_CACHE, 0xC0DE0001u, sub));
  OK(unicache_set_kernel_cache_capacity(64));
  OK(unicache_graph_finalize(g));  /* again: idempotent, the partition handle stays valid */
  size_t again = 0;
  OK(unicache_partition_get_input_count(p, &again));
  CHECK(again == 3);

  OK(unicache_graph_destroy(g));
  OK(unicache_stream_destroy(strm));
  OK(unicache_engine_destroy(eng));
  CHECK_STATUS(unicache_engine_destroy(eng), UNICACHE_INVALID_HANDLE);
  /* A handle of another type given to a destroy function: refused, and the
   * handle stays usable. */
  unicache_graph_t g2 = NULL;
  OK(unicache_graph_create(&g2));
  CHECK_STATUS(unicache_stream_destroy((unicache_stream_t)(void*)g2), UNICACHE_INVALID_HANDLE);
  OK(unicache_graph_finalize(g2));
  OK(unicache_graph_destroy(g2));
  CHECK_STATUS(unicache_stream_create(eng, &strm), UNICACHE_INVALID_HANDLE);
  return 0;
}

int main(void) {
  test_status_and_version();
  test_cache_settings();
  test_eviction_callbacks();
  test_store();
  test_blobs();
  test_graph_misuse();
  const int compiled = test_compile_and_execute();
  test_layer_norm();
  if (store_dir_made) nftw(store_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
  if (compiled == 77 && !failures) {
    fprintf(stderr, "skipped: this build has no CPU backend\n");
    return 77;
  }
  return c_test_finish();
}
