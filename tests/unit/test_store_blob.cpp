#include <gtest/gtest.h>

#include <random>

#include "store_test_support.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

TEST(StoreBlob, IdIsStableHexAndDependsOnDeviceAndKey) {
  const std::string id = blob_id(gpu_a(), "gemm/64");
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(id, blob_id(gpu_a(), "gemm/64"));
  EXPECT_NE(id, blob_id(pocl_cpu(), "gemm/64"));
  EXPECT_NE(id, blob_id(gpu_a(), "gemm/32"));
}

TEST(StoreBlob, RoundTripsKeyAndBinary) {
  const byte_vector binary = binary_for("k", 5000);
  const byte_vector blob = serialize_blob(gpu_a(), "k", binary);
  const blob_contents back = deserialize_blob(gpu_a(), blob);
  EXPECT_EQ(back.key, "k");
  EXPECT_EQ(back.binary, binary);
}

void expect_rejected(const byte_vector& blob, const device_identity& device, const std::string& reason) {
  try {
    deserialize_blob(device, blob);
    ADD_FAILURE() << "accepted; expected: " << reason;
  } catch (const store_error& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST(StoreBlob, BlobOfAnotherDeviceIsRejectedWithAClearError) {
  expect_rejected(serialize_blob(gpu_a(), "k", binary_for("k", 10)), pocl_cpu(), "another device");
}

TEST(StoreBlob, CorruptTruncatedOrForeignBlobsAreRejectedWithAClearError) {
  byte_vector blob = serialize_blob(gpu_a(), "k", binary_for("k", 100));
  byte_vector corrupt = blob;
  corrupt.back() ^= 1;
  expect_rejected(corrupt, gpu_a(), "checksum");
  expect_rejected(byte_vector(blob.begin(), blob.end() - 10), gpu_a(), "truncated");
  expect_rejected(byte_vector{'h', 'e', 'l', 'l', 'o'}, gpu_a(), "not a unicache");
  byte_vector newer = blob;
  newer[8] = 99;
  expect_rejected(newer, gpu_a(), "format version");
}

TEST(StoreBlob, RandomBytesAreRejectedNeverCrash) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20000; ++i) {
    byte_vector junk(rng() % 300);
    for (auto& b : junk) b = static_cast<unsigned char>(rng());
    EXPECT_THROW(deserialize_blob(gpu_a(), junk), store_error);
  }
}

}  // namespace
}  // namespace unicache
