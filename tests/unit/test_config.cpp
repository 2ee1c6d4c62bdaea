#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <random>
#include <string>

#include "unicache/config.hpp"
#include "util/env.hpp"
#include "util/parse.hpp"

namespace unicache {
namespace {

TEST(CapacitySpec, ParsesKindsSizesAndOptionalPolicies) {
  const capacity_spec spec = parse_capacity_spec("cpu:10240:NO_EVICT;gpu:2048:LRU");
  ASSERT_TRUE(spec.ok()) << spec.error;
  ASSERT_EQ(spec.settings.size(), 2u);
  EXPECT_EQ(spec.settings[0].kind, engine_kind::cpu);
  EXPECT_EQ(spec.settings[0].capacity_mb, 10240u);
  EXPECT_EQ(spec.settings[0].policy, eviction_policy::no_evict);
  EXPECT_EQ(spec.settings[1].kind, engine_kind::gpu);
  EXPECT_EQ(spec.settings[1].capacity_mb, 2048u);
  EXPECT_EQ(spec.settings[1].policy, eviction_policy::lru);

  const capacity_spec no_policy = parse_capacity_spec("gpu:0");
  ASSERT_TRUE(no_policy.ok());
  EXPECT_EQ(no_policy.settings[0].capacity_mb, 0u);
  EXPECT_FALSE(no_policy.settings[0].policy.has_value());
}

TEST(CapacitySpec, NamesAreCaseInsensitiveAndSpacesAroundTokensAreIgnored) {
  const capacity_spec spec = parse_capacity_spec(" CPU : 5 : cost ; Gpu:7:Default ");
  ASSERT_TRUE(spec.ok()) << spec.error;
  EXPECT_EQ(spec.settings[0].policy, eviction_policy::cost);
  EXPECT_EQ(spec.settings[1].kind, engine_kind::gpu);
  EXPECT_EQ(spec.settings[1].policy, eviction_policy::library_default);
  EXPECT_EQ(parse_capacity_spec("cpu:1:no_evict").settings.at(0).policy, eviction_policy::no_evict);
  EXPECT_EQ(parse_capacity_spec("cpu:1:lRu").settings.at(0).policy, eviction_policy::lru);
}

struct malformed_case {
  const char* text;
  const char* bad_token;
};

class CapacitySpecMalformed : public ::testing::TestWithParam<malformed_case> {};

TEST_P(CapacitySpecMalformed, IsRejectedNamingTheBadToken) {
  const capacity_spec spec = parse_capacity_spec(GetParam().text);
  EXPECT_FALSE(spec.ok()) << GetParam().text;
  EXPECT_TRUE(spec.settings.empty()) << "a rejected value must set nothing";
  EXPECT_EQ(spec.bad_token, GetParam().bad_token) << spec.error;
  EXPECT_FALSE(spec.error.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CapacitySpecMalformed,
    ::testing::Values(malformed_case{"cpu:-1", "-1"}, malformed_case{"cpu:+1", "+1"},
                      malformed_case{"cpu:99999999999999999999999", "99999999999999999999999"},
                      malformed_case{"cpu:17592186044416", "17592186044416"},  // 2^44 MB overflows bytes
                      malformed_case{"tpu:10", "tpu"}, malformed_case{"cpu:10:FIFO", "FIFO"},
                      malformed_case{"cpu:10;;gpu:5", ""}, malformed_case{"cpu:10;", ""},
                      malformed_case{";cpu:10", ""}, malformed_case{"", ""},
                      malformed_case{"cpu", "cpu"}, malformed_case{"cpu:", "cpu:"},
                      malformed_case{"cpu:1.5", "1.5"}, malformed_case{"cpu:1e3", "1e3"},
                      malformed_case{"cpu:10:LRU:x", "cpu:10:LRU:x"},
                      malformed_case{"cpu:1;cpu:2", "cpu"}, malformed_case{"garbage", "garbage"},
                      malformed_case{"cpu:10 20", "10 20"}, malformed_case{":10", ""},
                      malformed_case{"cpu:10:", ""}));

TEST(CapacitySpec, LargestSizeThatFitsInBytesIsAccepted) {
  const std::size_t max_mb = std::numeric_limits<std::size_t>::max() >> 20;
  const capacity_spec spec = parse_capacity_spec("cpu:" + std::to_string(max_mb));
  ASSERT_TRUE(spec.ok()) << spec.error;
  EXPECT_EQ(spec.settings[0].capacity_mb, max_mb);
}

// Seeded random strings over the specification's alphabet and beyond: the
// parser never crashes, and every accepted string really is well formed
// (re-rendering it parses to the same settings).
TEST(CapacitySpec, RandomInputsNeverCrashAndAcceptedOnesRoundTrip) {
  std::mt19937_64 rng(20261122);
  const std::string alphabet = "cpugCPUG:;0123456789 -+NO_EVICTLRUCOSTDEFAULTxyz\t\n\x01\xff";
  const char* pieces[] = {"cpu", "gpu", ":", ";", "10", "0", "NO_EVICT", "lru", "COST", "default",
                          "18446744073709551615", "-", " "};
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string text;
    if (i % 2 == 0) {
      // Structured: one or two well-formed parts, then a few mutations.
      const int parts = 1 + static_cast<int>(rng() % 2);
      for (int p = 0; p < parts; ++p) {
        if (p) text += ';';
        text += (p == 0) == (rng() % 2 == 0) ? "cpu" : "gpu";
        text += ":" + std::to_string(rng() % 100000);
        if (rng() % 2) text += std::string(":") + pieces[6 + rng() % 4];
      }
      for (int m = static_cast<int>(rng() % 3); m > 0 && !text.empty(); --m) {
        const std::size_t at = rng() % text.size();
        switch (rng() % 3) {
          case 0: text[at] = alphabet[rng() % alphabet.size()]; break;
          case 1: text.erase(at, 1); break;
          default: text.insert(at, pieces[rng() % std::size(pieces)]); break;
        }
      }
    } else {
      const int length = static_cast<int>(rng() % 24);
      for (int j = 0; j < length; ++j) {
        if (rng() % 3 == 0) {
          text += alphabet[rng() % alphabet.size()];
        } else {
          text += pieces[rng() % std::size(pieces)];
        }
      }
    }
    const capacity_spec spec = parse_capacity_spec(text);
    if (!spec.ok()) {
      ASSERT_FALSE(spec.error.empty());
      ASSERT_NE(text.find(spec.bad_token), std::string::npos) << "bad token not in input: " << text;
      continue;
    }
    ++accepted;
    std::string rendered;
    for (const capacity_setting& s : spec.settings) {
      if (!rendered.empty()) rendered += ';';
      rendered += std::string(to_string(s.kind)) + ":" + std::to_string(s.capacity_mb);
      if (s.policy) rendered += ":" + std::string(to_string(*s.policy));
    }
    const capacity_spec again = parse_capacity_spec(rendered);
    ASSERT_TRUE(again.ok()) << text << " -> " << rendered;
    ASSERT_EQ(again.settings.size(), spec.settings.size());
  }
  EXPECT_GT(accepted, 10000) << "the generator should produce some valid specifications";
}

TEST(Switch, AcceptsOnlyZeroAndOne) {
  EXPECT_EQ(parse_switch("0"), false);
  EXPECT_EQ(parse_switch(" 1 "), true);
  for (const char* bad : {"", "2", "yes", "true", "01", "-1"}) EXPECT_FALSE(parse_switch(bad)) << bad;
}

TEST(Decimal, ADigitAboveASmallBoundIsRefused) {
  EXPECT_EQ(detail::parse_decimal("1", 1), 1u);
  EXPECT_EQ(detail::parse_decimal("2", 1), std::nullopt) << "above the bound";
  EXPECT_EQ(detail::parse_decimal("9", 8), std::nullopt);
  EXPECT_EQ(detail::parse_decimal("10", 9), std::nullopt);
  EXPECT_EQ(detail::parse_decimal("18446744073709551615", UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(detail::parse_decimal("18446744073709551616", UINT64_MAX), std::nullopt);
}

class EnvironmentTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name : {"ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY",
                             "ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE", "UNICACHE_VERBOSE",
                             "UNICACHE_KERNEL_CACHE_CAPACITY", "UNICACHE_KERNEL_CACHE"}) {
      unsetenv(name);
    }
  }
};

TEST_F(EnvironmentTest, CapacityVariableSetsTheConstantTensorCache) {
  setenv("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY", "cpu:10240:NO_EVICT;gpu:2048:LRU", 1);
  const cache_config c = cache_config::constant_tensor_cache_from_environment();
  EXPECT_EQ(c.cpu.capacity_mb, 10240u);
  EXPECT_EQ(c.cpu.policy, eviction_policy::no_evict);
  EXPECT_EQ(c.gpu.capacity_mb, 2048u);
  EXPECT_EQ(c.gpu.policy, eviction_policy::lru);
}

TEST_F(EnvironmentTest, KindsNotNamedKeepTheirDefaults) {
  setenv("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY", "gpu:7", 1);
  const cache_config defaults;
  const cache_config c = cache_config::constant_tensor_cache_from_environment();
  EXPECT_EQ(c.cpu.capacity_mb, defaults.cpu.capacity_mb);
  EXPECT_EQ(c.gpu.capacity_mb, 7u);
  EXPECT_EQ(c.gpu.policy, defaults.gpu.policy);
}

TEST_F(EnvironmentTest, MalformedValuePrintsOneLineNamingVariableAndTokenAndKeepsDefaults) {
  setenv("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY", "cpu:100;gpu:lots", 1);
  ::testing::internal::CaptureStderr();
  const cache_config c = cache_config::constant_tensor_cache_from_environment();
  const std::string err = ::testing::internal::GetCapturedStderr();
  const cache_config defaults;
  EXPECT_EQ(c.cpu.capacity_mb, defaults.cpu.capacity_mb) << "a bad value is ignored whole";
  EXPECT_EQ(c.gpu.capacity_mb, defaults.gpu.capacity_mb);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY"), std::string::npos) << err;
  EXPECT_NE(err.find("\"lots\""), std::string::npos) << err;
}

TEST_F(EnvironmentTest, SwitchesDisableTheCachesAndEnableVerbose) {
  setenv("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE", "0", 1);
  setenv("UNICACHE_KERNEL_CACHE", "0", 1);
  setenv("UNICACHE_VERBOSE", "1", 1);
  EXPECT_FALSE(cache_config::constant_tensor_cache_from_environment().enabled);
  EXPECT_FALSE(cache_config::kernel_cache_from_environment().enabled);
  EXPECT_TRUE(cache_config::kernel_cache_from_environment().verbose);
}

TEST_F(EnvironmentTest, MalformedSwitchIsReportedAndIgnored) {
  setenv("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE", "off", 1);
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(cache_config::constant_tensor_cache_from_environment().enabled);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE=\"off\""), std::string::npos) << err;
}

TEST(QuotedValue, EscapesControlQuoteBackslashAndNonAsciiBytes) {
  EXPECT_EQ(detail::quoted("cpu:1"), "\"cpu:1\"");
  EXPECT_EQ(detail::quoted("a\nb\tc\r\"d\\"), "\"a\\nb\\tc\\r\\\"d\\\\\"");
  EXPECT_EQ(detail::quoted(std::string("\x1b[2J\x7f\xc3\xa9", 7)), "\"\\x1b[2J\\x7f\\xc3\\xa9\"");
  EXPECT_EQ(detail::quoted(std::string("a\0b", 3)), "\"a\\x00b\"");
}

TEST(QuotedValue, LongValuesAreCutAndTheirLengthIsSaid) {
  const std::string value(100000, 'x');
  const std::string shown = detail::quoted(value, 64);
  EXPECT_EQ(shown, "\"" + std::string(64, 'x') + "\"... (100000 bytes)");
}

TEST_F(EnvironmentTest, AHugeValueWithControlCharactersGivesOneShortEscapedLine) {
  std::string value = "cpu:1\x1b[2J\n";
  value += std::string(100000, 'z');
  setenv("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY", value.c_str(), 1);
  ::testing::internal::CaptureStderr();
  const cache_config c = cache_config::constant_tensor_cache_from_environment();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.cpu.capacity_mb, cache_config{}.cpu.capacity_mb);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "the value's newline is escaped, not echoed";
  EXPECT_EQ(err.find('\x1b'), std::string::npos) << "no raw escape sequence reaches the terminal";
  EXPECT_NE(err.find("\\x1b[2J\\n"), std::string::npos) << err.substr(0, 400);
  EXPECT_NE(err.find("(" + std::to_string(value.size()) + " bytes)"), std::string::npos) << err.substr(0, 400);
  EXPECT_LT(err.size(), 600u) << "a 100 KB value must not give a 100 KB line";
}

TEST_F(EnvironmentTest, KernelCacheHasItsOwnVariable) {
  setenv("UNICACHE_KERNEL_CACHE_CAPACITY", "cpu:64:LRU", 1);
  setenv("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY", "cpu:1", 1);
  const cache_config k = cache_config::kernel_cache_from_environment();
  EXPECT_EQ(k.cpu.capacity_mb, 64u);
  EXPECT_EQ(k.cpu.policy, eviction_policy::lru);
  EXPECT_EQ(k.gpu.capacity_mb, 256u);
}

}  // namespace
}  // namespace unicache
