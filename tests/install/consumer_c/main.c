/* Builds an eltwise graph, partitions it and, where the installation has a
 * CPU backend, compiles and runs it: the installed C header and library. */
#include <stdio.h>

#include "unicache/unicache.h"

int main(void) {
  unicache_graph_t g = NULL;
  const int64_t shape[2] = {2, 3};
  unicache_logical_tensor_t x, y;
  if (unicache_graph_create(&g) || unicache_graph_add_tensor(g, 2, shape, 0, &x) ||
      unicache_graph_add_tensor(g, 2, shape, 0, &y)) {
    fprintf(stderr, "consumer_c: %s\n", unicache_last_error());
    return 1;
  }
  const uint64_t in[1] = {x.id}, out[1] = {y.id};
  size_t count = 0;
  if (unicache_graph_add_op(g, UNICACHE_OP_RELU, in, 1, out, 1, 0, 0, NULL) || unicache_graph_finalize(g) ||
      unicache_graph_get_partition_count(g, &count) || count != 1) {
    fprintf(stderr, "consumer_c: %s\n", unicache_last_error());
    return 1;
  }
  unicache_engine_t eng = NULL;
  if (unicache_engine_create_cpu(0, &eng) == UNICACHE_SUCCESS) {
    unicache_partition_t p = NULL;
    unicache_stream_t s = NULL;
    unicache_compiled_partition_t cp = NULL;
    const int32_t ndims[1] = {2};
    const int64_t* shapes[1] = {shape};
    float xv[6] = {-1, 2, -3, 4, -5, 6}, yv[6] = {0};
    unicache_tensor_t tin[1] = {{x, xv, 0}}, tout[1] = {{y, yv, 0}};
    if (unicache_graph_get_partition(g, 0, &p) || unicache_stream_create(eng, &s) ||
        unicache_compile(p, 1, ndims, shapes, eng, &cp) ||
        unicache_compiled_partition_execute(cp, s, tin, 1, tout, 1) || yv[0] != 0 || yv[1] != 2) {
      fprintf(stderr, "consumer_c: %s\n", unicache_last_error());
      return 1;
    }
    unicache_compiled_partition_destroy(cp);
    unicache_stream_destroy(s);
    unicache_engine_destroy(eng);
  }
  unicache_graph_destroy(g);
  printf("consumer_c: ok (unicache %s)\n", unicache_version());
  return 0;
}
