// A program that registers no tier scheme (the core alone): a remote URL is
// refused saying which component registers redis:// and how, by the store,
// by its maintenance, and from the environment (one warning, the local
// store only). A program of its own: the registry has no unregister.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "unicache/error.hpp"
#include "unicache/storage_tier.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

TEST(TierRegistryEmpty, ARemoteURLSaysWhichComponentRegistersRedis) {
  ASSERT_TRUE(tier_schemes().empty()) << "this program registers nothing";
  kernel_store store(store_config{false, ""});
  try {
    store.set_remote("redis://127.0.0.1:1");
    FAIL() << "a URL accepted with no scheme registered";
  } catch (const invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no remote tier scheme is registered"), std::string::npos) << what;
    EXPECT_NE(what.find("unicache::register_redis_tiers()"), std::string::npos) << what;
  }
  EXPECT_THROW(remote_maintenance("redis://127.0.0.1:1"), invalid_argument);

  // The process's store reads the environment at its first use.
  ::setenv("UNICACHE_PERSISTENT_CACHE", "0", 1);
  ::setenv("UNICACHE_REMOTE_CACHE", "redis://user:secret-password@127.0.0.1:1", 1);
  ::testing::internal::CaptureStderr();
  const remote_stats r = kernel_store::instance().remote_tier_stats();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::unsetenv("UNICACHE_REMOTE_CACHE");
  EXPECT_FALSE(r.enabled) << "the local store only";
  EXPECT_NE(err.find("no remote tier scheme is registered"), std::string::npos) << err;
  EXPECT_EQ(err.find("secret-password"), std::string::npos) << "the value is not echoed: " << err;
}

}  // namespace
}  // namespace unicache
