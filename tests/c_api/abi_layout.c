/* Prints, as JSON, the size of each structure of unicache.h and the offset
 * and size of each of its fields, as this C compiler lays them out: what
 * python/tests/check_abi.py compares the Python package's ctypes mirrors
 * (python/unicache/_abi.py) with. A field added to a structure here and in
 * the header, but not in the mirror, is a mismatch the check names. */
#include <stddef.h>
#include <stdio.h>

#include "unicache/unicache.h"

static int first_struct = 1, first_field = 1;

static void begin(const char* name, size_t size) {
  printf("%s\n  \"%s\": {\"size\": %zu, \"fields\": {", first_struct ? "" : ",", name, size);
  first_struct = 0;
  first_field = 1;
}

static void field(const char* name, size_t offset, size_t size) {
  printf("%s\"%s\": [%zu, %zu]", first_field ? "" : ", ", name, offset, size);
  first_field = 0;
}

static void end(void) { printf("}}"); }

#define BEGIN(type) begin(#type, sizeof(type))
#define FIELD(type, member) field(#member, offsetof(type, member), sizeof(((type*)0)->member))

int main(void) {
  printf("{");
  BEGIN(unicache_logical_tensor_t);
  FIELD(unicache_logical_tensor_t, id);
  FIELD(unicache_logical_tensor_t, ndims);
  FIELD(unicache_logical_tensor_t, dims);
  FIELD(unicache_logical_tensor_t, is_constant);
  end();
  BEGIN(unicache_tensor_shape_t);
  FIELD(unicache_tensor_shape_t, tensor_id);
  FIELD(unicache_tensor_shape_t, ndims);
  FIELD(unicache_tensor_shape_t, dims);
  end();
  BEGIN(unicache_shape_request_t);
  FIELD(unicache_shape_request_t, shapes);
  FIELD(unicache_shape_request_t, num_shapes);
  end();
  BEGIN(unicache_tensor_t);
  FIELD(unicache_tensor_t, desc);
  FIELD(unicache_tensor_t, data);
  FIELD(unicache_tensor_t, version);
  end();
  BEGIN(unicache_cache_stats_t);
  FIELD(unicache_cache_stats_t, hits);
  FIELD(unicache_cache_stats_t, waits);
  FIELD(unicache_cache_stats_t, misses);
  FIELD(unicache_cache_stats_t, inserts);
  FIELD(unicache_cache_stats_t, evictions);
  FIELD(unicache_cache_stats_t, failures);
  FIELD(unicache_cache_stats_t, refused_full);
  FIELD(unicache_cache_stats_t, refused_oversize);
  FIELD(unicache_cache_stats_t, refused_admission);
  FIELD(unicache_cache_stats_t, bytes);
  FIELD(unicache_cache_stats_t, entries);
  end();
  BEGIN(unicache_build_stats_t);
  FIELD(unicache_build_stats_t, built);
  FIELD(unicache_build_stats_t, loaded);
  FIELD(unicache_build_stats_t, build_ns);
  end();
  BEGIN(unicache_store_stats_t);
  FIELD(unicache_store_stats_t, entries);
  FIELD(unicache_store_stats_t, bytes);
  FIELD(unicache_store_stats_t, devices);
  FIELD(unicache_store_stats_t, temporary_files);
  end();
  BEGIN(unicache_device_identity_t);
  FIELD(unicache_device_identity_t, platform_name);
  FIELD(unicache_device_identity_t, device_name);
  FIELD(unicache_device_identity_t, device_version);
  FIELD(unicache_device_identity_t, driver_version);
  end();
  BEGIN(unicache_bundle_filter_t);
  FIELD(unicache_bundle_filter_t, kind);
  FIELD(unicache_bundle_filter_t, device);
  FIELD(unicache_bundle_filter_t, max_age_days);
  end();
  BEGIN(unicache_bundle_report_t);
  FIELD(unicache_bundle_report_t, records);
  FIELD(unicache_bundle_report_t, imported);
  FIELD(unicache_bundle_report_t, already_present);
  FIELD(unicache_bundle_report_t, refused);
  FIELD(unicache_bundle_report_t, bytes);
  end();
  printf("\n}\n");
  return 0;
}
