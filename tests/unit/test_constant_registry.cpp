// constant_registry: packed constants found by their contents. A reader that
// behaves like device memory (it counts what it reads and enforces what
// OpenCL drivers enforce on strided reads) shows what each check reads.
#include <gtest/gtest.h>

#include <optional>

#include <atomic>
#include <cstdint>
#include <vector>

#include "cache_test_support.hpp"
#include "scoped_settings.hpp"
#include "unicache/constant_registry.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

// A weight in "device memory": reads go through read_blocks only.
struct device_weight {
  std::vector<unsigned char> bytes;
  std::uint64_t bytes_read = 0;

  explicit device_weight(std::size_t n, unsigned seed = 1) : bytes(n) { fill(seed); }
  void fill(unsigned seed) {
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 131 + seed * 7919) >> 3);
  }
  constant_source source(std::uint64_t version = 0) const { return {this, version, bytes.size()}; }
};

// What clEnqueueReadBufferRect accepts: the whole rectangle (count rows of
// `stride` bytes) inside the buffer, and rows no shorter than the block.
struct strict_reader {
  device_weight& w;
  void operator()(std::size_t first, std::size_t block, std::size_t stride, std::size_t count,
                  unsigned char* out) const {
    if (count > 1) {
      EXPECT_GE(stride, block);
      EXPECT_LE(first + count * stride, w.bytes.size()) << "the strided read's extent leaves the buffer";
    }
    EXPECT_LE(first + (count - 1) * stride + block, w.bytes.size());
    host_memory_reader{w.bytes.data()}(first, block, stride, count, out);
    w.bytes_read += block * count;
  }
};

struct packed {
  std::vector<unsigned char> copy;
};

struct registry_fixture : ::testing::Test {
  unified_cache cache{config_with(64, eviction_policy::lru)};
  constant_registry<packed> registry{cache, kOwner};
  std::shared_ptr<constant_registry<packed>::slot> slot = registry.make_slot();
  int packs = 0;

  std::shared_ptr<packed> get(device_weight& w, std::uint64_t version = 0,
                              const std::shared_ptr<constant_registry<packed>::slot>& s = nullptr,
                              std::optional<constant_check> check = std::nullopt) {
    cache_key layout;
    layout.add("test-layout");
    return registry.get(
        s ? s : slot, cpu_scope(), w.source(version), layout, w.bytes.size(), strict_reader{w},
        [&] {
          ++packs;
          return std::make_shared<packed>(packed{w.bytes});
        },
        check);
  }
};

TEST(SampleLayout, StaysInsideTheTensorAndReadsAtMostOneKilobyte) {
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{1024}, std::size_t{1025},
                            std::size_t{1039}, std::size_t{4096}, std::size_t{12288}, std::size_t{9437184},
                            (std::size_t{1} << 31) + 7}) {
    const sample_layout s = sample_layout_for(bytes);
    SCOPED_TRACE(bytes);
    EXPECT_LE(s.bytes(), max_sample_bytes);
    EXPECT_EQ(s.bytes(), std::min(bytes, max_sample_bytes));
    if (s.count > 1) {
      EXPECT_GE(s.stride, s.block);
      EXPECT_LE(s.first + s.count * s.stride, bytes);
    }
    if (s.count > 0) {
      EXPECT_LE(s.first + (s.count - 1) * s.stride + s.block, bytes);
    }
  }
}

TEST_F(registry_fixture, TheFirstUseReadsTheWholeWeightOnceAndLaterExecutionsOnlyTheSamples) {
  device_weight w(64 * 1024);
  get(w);
  EXPECT_EQ(w.bytes_read, w.bytes.size() + max_sample_bytes) << "one fingerprint and one sample";
  EXPECT_EQ(packs, 1);
  w.bytes_read = 0;
  for (int i = 0; i < 10; ++i) get(w);
  EXPECT_EQ(w.bytes_read, 10 * max_sample_bytes);
  EXPECT_EQ(packs, 1);
}

TEST_F(registry_fixture, NewContentsAtTheSameSourceArePackedAgainAndTheOldOnesFoundAgain) {
  device_weight w(64 * 1024, 1);
  const auto first = get(w);
  w.fill(2);  // freed and allocated again at the same address, version 0
  const auto second = get(w);
  EXPECT_EQ(packs, 2);
  EXPECT_EQ(second->copy, w.bytes) << "packed from the new contents";
  w.fill(1);  // the first contents come back: found, not packed
  EXPECT_EQ(get(w), first);
  EXPECT_EQ(packs, 2);
}

TEST_F(registry_fixture, AnotherKernelOfTheSameWeightNeitherRereadsNorRepacksIt) {
  device_weight w(64 * 1024);
  get(w);
  w.bytes_read = 0;
  get(w, 0, registry.make_slot());  // another compiled partition (another shape) of the weight
  EXPECT_EQ(w.bytes_read, max_sample_bytes) << "the fingerprint of this (source, sample) is remembered";
  EXPECT_EQ(packs, 1);
  EXPECT_EQ(registry.fingerprints_computed(), 1u);
}

TEST_F(registry_fixture, AVersionBumpFingerprintsAgainAndFindsUnchangedContents) {
  device_weight w(64 * 1024);
  get(w, 1);
  w.bytes_read = 0;
  get(w, 2);
  EXPECT_EQ(w.bytes_read, w.bytes.size() + max_sample_bytes);
  EXPECT_EQ(packs, 1) << "same contents, same packed copy";
}

TEST_F(registry_fixture, FullReadsEverythingEachTimeAndNoneReadsNothing) {
  device_weight w(64 * 1024);
  {
    scoped_constant_check check(constant_check::full);
    get(w);
    get(w);
    EXPECT_EQ(w.bytes_read, 2 * w.bytes.size());
  }
  {
    scoped_constant_check check(constant_check::none);
    w.bytes_read = 0;
    get(w, 3);
    w.fill(9);  // the caller broke its promise: with the check off, not seen
    get(w, 3);
    EXPECT_EQ(w.bytes_read, 0u);
  }
}

// A stream whose caller versions its constants asks for no check on its
// calls alone: address and version identify the weight there, while other
// calls keep the process's sampled check.
TEST_F(registry_fixture, ACallsCheckOverridesTheProcessSettingForThatCallOnly) {
  device_weight w(64 * 1024);
  const auto versioned = [&](std::uint64_t version) {
    return get(w, version, nullptr, constant_check::none);
  };
  const auto first = versioned(1);
  EXPECT_EQ(w.bytes_read, 0u) << "nothing read: not even a fingerprint";
  w.fill(5);  // changed without a bump: not seen, as the caller promised it would not happen
  EXPECT_EQ(versioned(1), first);
  EXPECT_EQ(packs, 1);
  EXPECT_NE(versioned(2), first) << "a bump packs again";
  EXPECT_EQ(packs, 2);
  EXPECT_EQ(w.bytes_read, 0u);
  const auto sampled = get(w, 2, registry.make_slot());  // the process's check (sampled) on another call
  EXPECT_GT(w.bytes_read, 0u);
  EXPECT_EQ(sampled->copy, w.bytes);
}

TEST_F(registry_fixture, AnEvictedPackedCopyIsPackedAgainFromTheSameContents) {
  device_weight w(64 * 1024);
  get(w);
  cache.clear();
  const auto again = get(w);
  EXPECT_EQ(packs, 2);
  EXPECT_EQ(again->copy, w.bytes);
}

TEST_F(registry_fixture, SmallWeightsAreCheckedWhole) {
  device_weight w(100);
  get(w);
  w.bytes[99] ^= 1;  // any change of a weight up to 1 KB is seen
  get(w);
  EXPECT_EQ(packs, 2);
}

}  // namespace
}  // namespace unicache
