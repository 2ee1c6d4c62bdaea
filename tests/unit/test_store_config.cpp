// The persistent store's settings as the environment gives them.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "unicache/store.hpp"

namespace unicache {
namespace {

class StoreEnvironment : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) {
      if (const char* v = ::getenv(name)) saved_.emplace_back(name, v);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kVariables) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  static constexpr const char* kVariables[] = {
      "UNICACHE_PERSISTENT_CACHE", "UNICACHE_PERSISTENT_CACHE_DIR", "UNICACHE_PERSISTENT_CACHE_MAX_SIZE",
      "UNICACHE_PERSISTENT_CACHE_THRESHOLD", "UNICACHE_PERSISTENT_CACHE_MIN_ENTRY_SIZE",
      "UNICACHE_PERSISTENT_CACHE_MAX_ENTRY_SIZE", "UNICACHE_PERSISTENT_CACHE_EVICTION",
      "UNICACHE_PERSISTENT_CACHE_SHARED", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(StoreEnvironment, DirectoryDefaultsToXdgCacheHomeThenHome) {
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(store_config::from_environment().directory, "/home/u/.cache/unicache");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(store_config::from_environment().directory, "/xdg/unicache");
  ::setenv("UNICACHE_PERSISTENT_CACHE_DIR", "/explicit", 1);
  EXPECT_EQ(store_config::from_environment().directory, "/explicit");
  ::unsetenv("UNICACHE_PERSISTENT_CACHE_DIR");
  ::unsetenv("XDG_CACHE_HOME");
  ::unsetenv("HOME");
  EXPECT_EQ(store_config::from_environment().directory, "") << "no directory: the store stays off";
}

TEST_F(StoreEnvironment, DocumentedDefaults) {
  const store_config c = store_config::from_environment();
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.max_size_bytes, std::uint64_t{1024} << 20);
  EXPECT_EQ(c.threshold_days, 30u);
  EXPECT_EQ(c.min_entry_bytes, 0u);
  EXPECT_EQ(c.max_entry_bytes, std::uint64_t{256} << 20);
  EXPECT_TRUE(c.size_eviction);
  EXPECT_FALSE(c.shared) << "private to its user unless declared shared";
}

TEST_F(StoreEnvironment, EveryVariableIsRead) {
  ::setenv("UNICACHE_PERSISTENT_CACHE", "0", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_MAX_SIZE", "64", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_THRESHOLD", "0", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_MIN_ENTRY_SIZE", "4096", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_MAX_ENTRY_SIZE", "1048576", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_EVICTION", "0", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_SHARED", "1", 1);
  const store_config c = store_config::from_environment();
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.max_size_bytes, std::uint64_t{64} << 20);
  EXPECT_EQ(c.threshold_days, 0u);
  EXPECT_EQ(c.min_entry_bytes, 4096u);
  EXPECT_EQ(c.max_entry_bytes, 1048576u);
  EXPECT_FALSE(c.size_eviction);
  EXPECT_TRUE(c.shared);
}

TEST_F(StoreEnvironment, MaxSizeZeroMeansNoSizeLimit) {
  ::setenv("UNICACHE_PERSISTENT_CACHE_MAX_SIZE", "0", 1);
  ::testing::internal::CaptureStderr();
  const store_config c = store_config::from_environment();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "0 is a meaning, not a mistake";
  EXPECT_EQ(c.max_size_bytes, 0u);
}

TEST_F(StoreEnvironment, MalformedValuesWarnOnceEachAndKeepDefaults) {
  ::setenv("UNICACHE_PERSISTENT_CACHE", "yes", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_MAX_SIZE", "-5", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_THRESHOLD", "a week", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_MAX_ENTRY_SIZE", "99999999999999999999999", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_EVICTION", "off", 1);
  ::setenv("UNICACHE_PERSISTENT_CACHE_SHARED", "\x1b[2Jyes", 1);
  ::testing::internal::CaptureStderr();
  const store_config c = store_config::from_environment();
  const std::string err = ::testing::internal::GetCapturedStderr();
  const store_config defaults;
  EXPECT_EQ(c.enabled, defaults.enabled);
  EXPECT_EQ(c.max_size_bytes, defaults.max_size_bytes);
  EXPECT_EQ(c.threshold_days, defaults.threshold_days);
  EXPECT_EQ(c.max_entry_bytes, defaults.max_entry_bytes);
  EXPECT_EQ(c.size_eviction, defaults.size_eviction);
  EXPECT_EQ(c.shared, defaults.shared);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 6) << err;
  EXPECT_EQ(err.find('\x1b'), std::string::npos) << "values are echoed escaped";
  for (const char* token : {"UNICACHE_PERSISTENT_CACHE=\"yes\"", "\"-5\"", "\"a week\"", "\"99999999999999999999999\"",
                            "UNICACHE_PERSISTENT_CACHE_EVICTION=\"off\"", "UNICACHE_PERSISTENT_CACHE_SHARED=\"\\x1b[2Jyes\""}) {
    EXPECT_NE(err.find(token), std::string::npos) << token << "\n" << err;
  }
}

}  // namespace
}  // namespace unicache
