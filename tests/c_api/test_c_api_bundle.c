/* mkdtemp under -std=c99 */
#define _XOPEN_SOURCE 700
/* The C interface's store bundles, from C: a bundle written here, as
 * docs/design.md describes the format, from two blobs (one of them then
 * damaged) is imported, the store is exported again, and misuse is
 * reported. The same harness as test_c_api.c. */
#include <ftw.h>
#include <unistd.h>

#include <xxhash.h>

#include "c_test.h"

static char dir[] = "/tmp/unicache-c-bundle-XXXXXX";

static int remove_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void put_le(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

/* A record of `entry` (a blob: the store's entry format), unsigned. */
static size_t put_record(uint8_t* out, const uint8_t* entry, size_t entry_size, const char* description) {
  const size_t d = strlen(description);
  memcpy(out, "UCRECORD", 8);
  memcpy(out + 8, entry + 16, 16); /* the device hash, as in the entry's header */
  put_le(out + 24, entry_size, 8);
  put_le(out + 32, d, 4);
  put_le(out + 36, 0, 4);
  put_le(out + 40, XXH3_64bits(description, d), 8);
  put_le(out + 48, XXH3_64bits(out, 48), 8);
  memcpy(out + 56, description, d);
  memcpy(out + 56 + d, entry, entry_size);
  return 56 + d + entry_size;
}

static void write_bytes(const char* path, const uint8_t* bytes, size_t size) {
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(bytes, 1, size, f) == size);
  fclose(f);
}

/* The bundle of two blobs for `gpu`, the second one's binary damaged. */
static size_t two_record_bundle(uint8_t* out) {
  const unicache_device_identity_t gpu = {"Platform", "GPU 1", "OpenCL 3.0", "driver 9"};
  const uint8_t binary[5] = {1, 2, 3, 4, 5};
  size_t at = 32, records_at = 32;
  memcpy(out, "UCBUNDLE", 8);
  put_le(out + 8, 1, 4);
  put_le(out + 12, 32, 4);
  put_le(out + 16, 1700000000, 8);
  put_le(out + 24, XXH3_64bits(out, 24), 8);
  for (int i = 0; i < 2; ++i) {
    const char* key = i == 0 ? "gemm tile=64" : "gemm tile=128";
    uint8_t blob[256];
    size_t blob_size = sizeof blob;
    OK(unicache_blob_serialize(&gpu, key, strlen(key), binary, sizeof binary, blob, &blob_size));
    if (i == 1) blob[blob_size - 1] ^= 1;
    at += put_record(out + at, blob, blob_size, "Platform / GPU 1 / OpenCL 3.0 / driver 9");
  }
  memcpy(out + at, "UCBTRAIL", 8);
  put_le(out + at + 8, 2, 8);
  put_le(out + at + 16, at - records_at, 8);
  put_le(out + at + 24, XXH3_64bits(out + at, 24), 8);
  return at + 32;
}

static void test_import_and_export(const char* base) {
  char path[512], out[512], refusals[256];
  uint8_t bundle[1024];
  const size_t size = two_record_bundle(bundle);
  snprintf(path, sizeof path, "%s/two.ucbundle", base);
  write_bytes(path, bundle, size);

  unicache_bundle_report_t report;
  OK(unicache_store_import_bundle(path, NULL, &report, refusals, sizeof refusals));
  CHECK(report.records == 2 && report.imported == 1 && report.already_present == 0 && report.refused == 1);
  CHECK(report.bytes == size);
  CHECK(strcmp(refusals, "record 2: entry corrupt (checksum mismatch)\n") == 0);
  /* Again, with room for no whole line: the count still says. */
  OK(unicache_store_import_bundle(path, "", &report, refusals, 8));
  CHECK(report.imported == 0 && report.already_present == 1 && report.refused == 1);
  CHECK(refusals[0] == '\0');
  unicache_store_stats_t stats;
  OK(unicache_store_get_stats(&stats));
  CHECK(stats.entries == 1);

  snprintf(out, sizeof out, "%s/out.ucbundle", base);
  OK(unicache_store_export_bundle(out, NULL, NULL, &report, NULL, 0));
  CHECK(report.records == 1 && report.refused == 0);
  const unicache_bundle_filter_t only_cuda = {"cuda-c", NULL, 0};
  OK(unicache_store_export_bundle(out, &only_cuda, NULL, &report, NULL, 0));
  CHECK(report.records == 0);

  /* A bundle cut short, and a file that is none: nothing imported. */
  write_bytes(path, bundle, size - 1);
  CHECK_STATUS(unicache_store_import_bundle(path, NULL, &report, NULL, 0), UNICACHE_STORE_ERROR);
  CHECK(strstr(unicache_last_error(), "is truncated") != NULL);
  write_bytes(path, (const uint8_t*)"not a bundle at all, just some text", 35);
  CHECK_STATUS(unicache_store_import_bundle(path, NULL, &report, NULL, 0), UNICACHE_STORE_ERROR);
  CHECK(strstr(unicache_last_error(), "is not a unicache bundle") != NULL);
}

static void test_misuse(const char* base) {
  char path[512];
  unicache_bundle_report_t report;
  CHECK_STATUS(unicache_store_import_bundle(NULL, NULL, &report, NULL, 0), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_store_export_bundle(NULL, NULL, NULL, &report, NULL, 0), UNICACHE_INVALID_ARGUMENT);
  snprintf(path, sizeof path, "%s/out.ucbundle", base);
  CHECK_STATUS(unicache_store_export_bundle(path, NULL, NULL, NULL, NULL, 0), UNICACHE_INVALID_ARGUMENT);
  CHECK_STATUS(unicache_store_export_bundle(path, NULL, "/no/such/secret", &report, NULL, 0),
               UNICACHE_INVALID_ARGUMENT);
  snprintf(path, sizeof path, "%s/no/such/dir/out.ucbundle", base);
  CHECK_STATUS(unicache_store_export_bundle(path, NULL, NULL, &report, NULL, 0), UNICACHE_STORE_ERROR);
  CHECK(strstr(unicache_last_error(), "cannot write the bundle") != NULL);
  CHECK_STATUS(unicache_store_import_bundle(base, NULL, &report, NULL, 0), UNICACHE_STORE_ERROR);
  CHECK(strstr(unicache_last_error(), "is a directory") != NULL);
}

int main(void) {
  char store[512];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(store, sizeof store, "%s/store", dir);
  OK(unicache_store_set_directory(store));
  OK(unicache_store_set_enabled(1));
  test_import_and_export(dir);
  test_misuse(dir);
  nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
  return c_test_finish();
}
