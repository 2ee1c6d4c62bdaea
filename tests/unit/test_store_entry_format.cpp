#include "store/entry_format.hpp"

#include <gtest/gtest.h>

#include <random>

#include "store_test_support.hpp"
#include "unicache/store.hpp"

namespace unicache::detail {
namespace {

using namespace unicache::testing;

byte_vector sample(const hash128& device, std::string_view key = "gemm/f32/64x64",
                   std::size_t binary_bytes = 1000) {
  return encode_entry(device, key, binary_for(std::string(key), binary_bytes), 1700000000);
}

TEST(EntryFormat, RoundTripsKeyBinaryDeviceAndTime) {
  const hash128 d = device_hash(gpu_a());
  const byte_vector bytes = sample(d);
  const parsed_entry e = parse_entry(bytes, &d);
  ASSERT_TRUE(e.ok()) << describe(e.problem);
  EXPECT_EQ(e.key, "gemm/f32/64x64");
  EXPECT_EQ(byte_vector(e.binary.begin(), e.binary.end()), binary_for("gemm/f32/64x64", 1000));
  EXPECT_EQ(e.device, d);
  EXPECT_EQ(e.created_unix, 1700000000);
}

TEST(EntryFormat, EmptyKeyAndEmptyBinaryAreValid) {
  const hash128 d = device_hash(gpu_a());
  const byte_vector bytes = encode_entry(d, "", {}, 0);
  EXPECT_EQ(bytes.size(), kEntryHeaderBytes);
  EXPECT_TRUE(parse_entry(bytes, &d).ok());
}

TEST(EntryFormat, TruncatedOrExtendedFileIsRejected) {
  const hash128 d = device_hash(gpu_a());
  byte_vector bytes = sample(d);
  for (std::size_t keep : {std::size_t{0}, std::size_t{7}, std::size_t{8}, kEntryHeaderBytes - 1,
                           kEntryHeaderBytes, bytes.size() - 1}) {
    const byte_vector cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep));
    EXPECT_FALSE(parse_entry(cut, &d).ok()) << keep;
  }
  EXPECT_EQ(parse_entry(byte_vector(bytes.begin(), bytes.end() - 1), &d).problem, entry_problem::truncated);
  bytes.push_back(0);
  EXPECT_EQ(parse_entry(bytes, &d).problem, entry_problem::truncated);
  EXPECT_EQ(parse_entry(byte_vector{}, &d).problem, entry_problem::not_an_entry);
}

TEST(EntryFormat, ForeignBytesAreNotAnEntry) {
  const hash128 d = device_hash(gpu_a());
  byte_vector elf(200, 0);
  elf[0] = 0x7f, elf[1] = 'E', elf[2] = 'L', elf[3] = 'F';
  EXPECT_EQ(parse_entry(elf, &d).problem, entry_problem::not_an_entry);
}

TEST(EntryFormat, AnotherFormatVersionIsRejected) {
  const hash128 d = device_hash(gpu_a());
  byte_vector bytes = sample(d);
  bytes[8] = static_cast<unsigned char>(kStoreFormatVersion + 1);
  EXPECT_EQ(parse_entry(bytes, &d).problem, entry_problem::wrong_version);
}

TEST(EntryFormat, AnotherDeviceIsRejected) {
  const hash128 a = device_hash(gpu_a());
  const hash128 b = device_hash(pocl_cpu());
  EXPECT_EQ(parse_entry(sample(a), &b).problem, entry_problem::wrong_device);
  EXPECT_TRUE(parse_entry(sample(a), nullptr).ok()) << "the maintenance tool accepts any device";
}

TEST(EntryFormat, AnyFlippedBitIsDetected) {
  const hash128 d = device_hash(gpu_a());
  const byte_vector bytes = sample(d, "k", 64);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      byte_vector flipped = bytes;
      flipped[i] ^= static_cast<unsigned char>(1u << bit);
      EXPECT_FALSE(parse_entry(flipped, &d).ok()) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(EntryFormat, EveryDeviceFieldChangesTheDeviceHash) {
  const device_identity base = gpu_a();
  const hash128 h = device_hash(base);
  for (int field = 0; field < 4; ++field) {
    device_identity other = base;
    std::string* f[] = {&other.platform_name, &other.device_name, &other.device_version, &other.driver_version};
    *f[field] += "x";
    EXPECT_NE(device_hash(other), h) << field;
  }
  // Field boundaries matter: moving a character between fields is another device.
  device_identity shifted = base;
  shifted.platform_name += shifted.device_name.substr(0, 1);
  shifted.device_name.erase(0, 1);
  EXPECT_NE(device_hash(shifted), h);
}

TEST(EntryFormat, KeyHashIsStableAcrossProcessesAndMachines) {
  // XXH3-128 in canonical (big-endian) form: this value is the same everywhere.
  EXPECT_EQ(to_hex(key_hash("unicache")), "02e82872995631738a0b61071777432d");
}

// Seeded random inputs: the parser never crashes or reads out of bounds
// (AddressSanitizer in CI), and accepts nothing it should not.
TEST(EntryFormat, RandomAndMutatedBytesNeverCrashTheParser) {
  const hash128 d = device_hash(gpu_a());
  const byte_vector valid = sample(d, "key", 300);
  std::mt19937_64 rng(3);
  int accepted = 0;
  for (int i = 0; i < 100000; ++i) {
    byte_vector input;
    if (i % 2 == 0) {
      input.resize(rng() % 512);
      for (auto& b : input) b = static_cast<unsigned char>(rng());
    } else {
      input = valid;
      for (int m = 1 + static_cast<int>(rng() % 4); m > 0; --m) {
        switch (rng() % 3) {
          case 0: input[rng() % input.size()] = static_cast<unsigned char>(rng()); break;
          case 1: input.resize(rng() % (input.size() + 1)); break;
          default: input.insert(input.begin() + static_cast<std::ptrdiff_t>(rng() % (input.size() + 1)),
                                static_cast<unsigned char>(rng()));
        }
        if (input.empty()) break;
      }
    }
    const parsed_entry e = parse_entry(input, &d);
    if (e.ok()) {
      ++accepted;
      ASSERT_EQ(input, valid) << "a mutated entry was accepted";
    }
  }
  EXPECT_LT(accepted, 100000);
}

}  // namespace
}  // namespace unicache::detail
