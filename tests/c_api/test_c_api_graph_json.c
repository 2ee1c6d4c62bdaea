/* The JSON form of a graph from C: written with the size-query pattern,
 * with and without requests, read back into a finalized graph whose
 * partitions have the same fingerprints (and, where the build has the CPU
 * backend, compile and compute the same), and malformed text refused with
 * UNICACHE_INVALID_GRAPH and a message naming the place. */
#include "c_test.h"

/* The JSON of `g` with `num_requests` requests; malloc'd, the caller frees it. */
static char* graph_json(unicache_graph_t g, const unicache_shape_request_t* requests, size_t num_requests) {
  size_t size = 0;
  OK(unicache_graph_to_json(g, requests, num_requests, NULL, &size));
  char* json = malloc(size);
  OK(unicache_graph_to_json(g, requests, num_requests, json, &size));
  CHECK(size > 0 && json[size - 1] == '\0' && strlen(json) + 1 == size);
  return json;
}

static void fingerprint_of(unicache_graph_t g, size_t index, char out[33]) {
  unicache_partition_t p = NULL;
  size_t size = 33;
  out[0] = '\0';
  OK(unicache_graph_get_partition(g, index, &p));
  OK(unicache_partition_get_fingerprint(p, out, &size));
}

static void test_a_graph_round_trips_with_equal_fingerprints(void) {
  unicache_logical_tensor_t x, w, b, y;
  unicache_graph_t g = mlp(&x, &w, &b, &y);
  char* json = graph_json(g, NULL, 0);
  CHECK(strstr(json, "\"format\": \"unicache-graph\"") != NULL);
  CHECK(strstr(json, "\"kind\": \"MatMul\"") != NULL);
  CHECK(strstr(json, "requests") == NULL);

  /* A buffer too small: the size needed, nothing written. */
  char small[8] = "unset";
  size_t small_size = sizeof small;
  CHECK_STATUS(unicache_graph_to_json(g, NULL, 0, small, &small_size), UNICACHE_BUFFER_TOO_SMALL);
  CHECK(small_size == strlen(json) + 1);
  CHECK(strcmp(small, "unset") == 0);

  /* Read back from a buffer that is not NUL-terminated. */
  const size_t length = strlen(json);
  char* unterminated = malloc(length + 4);
  memcpy(unterminated, json, length);
  memcpy(unterminated + length, "xyz!", 4);
  unicache_graph_t read = NULL;
  OK(unicache_graph_create_from_json(unterminated, length, &read));
  size_t built_count = 0, read_count = 0;
  OK(unicache_graph_get_partition_count(g, &built_count));
  OK(unicache_graph_get_partition_count(read, &read_count));
  CHECK(built_count == 1 && read_count == built_count);
  char built_fp[33], read_fp[33];
  fingerprint_of(g, 0, built_fp);
  fingerprint_of(read, 0, read_fp);
  CHECK(strlen(read_fp) == 32 && strcmp(built_fp, read_fp) == 0);
  char* again = graph_json(read, NULL, 0);
  CHECK(strcmp(again, json) == 0);
  free(again);
  free(unterminated);
  free(json);
  OK(unicache_graph_destroy(read));
  OK(unicache_graph_destroy(g));
}

static void test_requests_are_written_and_checked(void) {
  unicache_logical_tensor_t x, w, b, y;
  unicache_graph_t g = mlp(&x, &w, &b, &y);
  const int64_t four[2] = {4, K}, nine[2] = {9, K}, unknown[2] = {UNICACHE_UNKNOWN_DIM, K}, wrong_k[2] = {4, K + 1};
  unicache_tensor_shape_t first = {x.id, 2, four}, second = {x.id, 2, nine};
  unicache_shape_request_t requests[2] = {{&first, 1}, {&second, 1}};
  char* json = graph_json(g, requests, 2);
  CHECK(strstr(json, "\"requests\": [") != NULL);
  CHECK(strstr(json, "{\"1\": [4, 5]}") != NULL);
  CHECK(strstr(json, "{\"1\": [9, 5]}") != NULL);
  unicache_graph_t read = NULL;
  OK(unicache_graph_create_from_json(json, strlen(json), &read));
  OK(unicache_graph_destroy(read));
  free(json);

  size_t size = 0;
  unicache_tensor_shape_t bad = {x.id, 2, unknown};
  unicache_shape_request_t one = {&bad, 1};
  CHECK_STATUS(unicache_graph_to_json(g, &one, 1, NULL, &size), UNICACHE_INVALID_GRAPH);
  CHECK(strstr(unicache_last_error(), "tensor 1: [-1,5] does not fit") != NULL);
  bad.dims = wrong_k;
  CHECK_STATUS(unicache_graph_to_json(g, &one, 1, NULL, &size), UNICACHE_INVALID_GRAPH);
  unicache_tensor_shape_t twice[2] = {{x.id, 2, four}, {x.id, 2, nine}};
  unicache_shape_request_t duplicate = {twice, 2};
  CHECK_STATUS(unicache_graph_to_json(g, &duplicate, 1, NULL, &size), UNICACHE_INVALID_ARGUMENT);
  CHECK(strstr(unicache_last_error(), "tensor 1 twice") != NULL);
  unicache_tensor_shape_t too_many = {x.id, UNICACHE_MAX_NDIMS + 1, four};
  unicache_shape_request_t ranked = {&too_many, 1};
  CHECK_STATUS(unicache_graph_to_json(g, &ranked, 1, NULL, &size), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_graph_to_json(g, NULL, 1, NULL, &size), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_graph_to_json(g, NULL, 0, NULL, NULL), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_graph_to_json(NULL, NULL, 0, NULL, &size), UNICACHE_INVALID_HANDLE);
  OK(unicache_graph_destroy(g));
}

static void test_malformed_json_is_an_invalid_graph_naming_the_place(void) {
  static const struct {
    const char* json;
    const char* message;
  } cases[] = {
      {"", "graph JSON: at byte 0: expected '{'"},
      {"{\"format\": \"unicache-graph\", \"version\": 1, \"tensors\": [{\"id\": 1, \"shape\": [2]}], \"ops\": "
       "[{\"kind\": \"ReLU\", \"inputs\": [17], \"outputs\": [1]}]}",
       "graph JSON: ops[0].inputs[0]: tensor 17 is not declared"},
      {"{\"format\": \"unicache-graph\", \"version\": 1, \"tensors\": [{\"id\": 1 \"shape\": [2]}]}",
       "graph JSON: at byte 64: expected ',' or '}'"},
      {"{\"format\": \"unicache-graph\", \"version\": 1, \"tensors\": [{\"id\": 1, \"shape\": [2]}], \"ops\": "
       "[{\"kind\": \"LayerNorm\", \"inputs\": [1, 1, 1], \"outputs\": [1], \"epsilon\": NaN}]}",
       "ops[0].epsilon: expected a number"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    unicache_graph_t g = NULL;
    CHECK_STATUS(unicache_graph_create_from_json(cases[i].json, strlen(cases[i].json), &g), UNICACHE_INVALID_GRAPH);
    CHECK(g == NULL);
    if (!strstr(unicache_last_error(), cases[i].message)) {
      fprintf(stderr, "case %zu: want \"%s\", got \"%s\"\n", i, cases[i].message, unicache_last_error());
      ++failures;
    }
  }
  unicache_graph_t g = NULL;
  CHECK_STATUS(unicache_graph_create_from_json(NULL, 0, &g), UNICACHE_INVALID_GRAPH);
  CHECK_STATUS(unicache_graph_create_from_json(NULL, 5, &g), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_graph_create_from_json("{}", 2, NULL), UNICACHE_INVALID_ARGUMENT);
  CHECK(g == NULL);
}

/* The partition read from JSON compiles and computes what the MLP does. */
static int test_a_graph_read_from_json_compiles_and_runs(void) {
  unicache_engine_t eng = NULL;
  unicache_status_t s = unicache_engine_create_cpu(0, &eng);
  if (s == UNICACHE_UNSUPPORTED) return 77;
  OK(s);
  unicache_stream_t strm = NULL;
  OK(unicache_stream_create(eng, &strm));
  unicache_logical_tensor_t x, w, b, y;
  unicache_graph_t built = mlp(&x, &w, &b, &y);
  char* json = graph_json(built, NULL, 0);
  unicache_graph_t g = NULL;
  OK(unicache_graph_create_from_json(json, strlen(json), &g));
  unicache_partition_t p = NULL;
  OK(unicache_graph_get_partition(g, 0, &p));
  const int64_t m = 4;
  c_test_shapes sh;
  c_test_shapes_for(&sh, m);
  unicache_compiled_partition_t cp = NULL;
  OK(unicache_compile(p, 3, sh.ndims, sh.shapes, eng, &cp));
  unicache_logical_tensor_t out;
  OK(unicache_compiled_partition_get_output(cp, 0, &out));
  float xv[4 * K], yv[4 * N], wv[K * N], bv[N];
  c_test_weights(wv, bv);
  c_test_input(xv, m);
  unicache_tensor_t in[3] = {{x, xv, 0}, {w, wv, 1}, {b, bv, 1}};
  in[0].desc.dims[0] = m;
  unicache_tensor_t outs[1] = {{out, yv, 0}};
  OK(unicache_compiled_partition_execute(cp, strm, in, 3, outs, 1));
  OK(unicache_stream_wait(strm));
  c_test_check_mlp(xv, wv, bv, yv, m);
  OK(unicache_compiled_partition_destroy(cp));
  free(json);
  OK(unicache_graph_destroy(g));
  OK(unicache_graph_destroy(built));
  OK(unicache_stream_destroy(strm));
  OK(unicache_engine_destroy(eng));
  return 0;
}

int main(void) {
  test_a_graph_round_trips_with_equal_fingerprints();
  test_requests_are_written_and_checked();
  test_malformed_json_is_an_invalid_graph_naming_the_place();
  if (test_a_graph_read_from_json_compiles_and_runs() == 77) {
    fprintf(stderr, "note: this build has no CPU backend: the compile of a graph read from JSON was not run\n");
  }
  return c_test_finish();
}
