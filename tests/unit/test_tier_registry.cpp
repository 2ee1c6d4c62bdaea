// Remote tiers by URL scheme: a tier this file alone defines and registers
// joins the kernel store's chain (a local miss asks it, its hit is written
// to the local store, puts reach it), the store names no tier itself, and
// URLs of unknown schemes are refused naming the known ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "store/tier_registry.hpp"
#include "temp_dir.hpp"
#include "unicache/error.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

// A tier in this process's memory: what a test, or a new kind of server,
// needs to implement.
class memory_tier final : public storage_tier {
 public:
  explicit memory_tier(std::string url) : url_(std::move(url)) {}
  const char* name() const override { return "memory"; }
  tier_result get(const device_identity& device, std::string_view key) noexcept override {
    std::lock_guard lock(mu_);
    ++gets_;
    const auto it = values_.find(where(device, key));
    if (it == values_.end()) return {tier_status::miss, std::nullopt};
    return {tier_status::hit, it->second};
  }
  tier_result put(const device_identity& device, std::string_view key, byte_span binary) noexcept override {
    std::lock_guard lock(mu_);
    values_[where(device, key)] = byte_vector(binary.begin(), binary.end());
    return {tier_status::done, std::nullopt};
  }
  tier_result remove(const device_identity& device, std::string_view key) noexcept override {
    std::lock_guard lock(mu_);
    return {values_.erase(where(device, key)) ? tier_status::done : tier_status::skipped, std::nullopt};
  }
  remote_stats statistics() const override {
    std::lock_guard lock(mu_);
    remote_stats s;
    s.enabled = true;
    s.url = url_;
    s.misses = gets_;
    return s;
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return values_.size();
  }

 private:
  static std::string where(const device_identity& device, std::string_view key) {
    return device.device_name + "|" + std::string(key);
  }
  const std::string url_;
  mutable std::mutex mu_;
  std::map<std::string, byte_vector> values_;
  std::uint64_t gets_ = 0;
};

// One tier per URL, as one server is for every process that names it;
// the last one made is the test's to look into.
std::shared_ptr<memory_tier>& last_made() {
  static std::shared_ptr<memory_tier> tier;
  return tier;
}
std::shared_ptr<storage_tier> make_memory_tier(std::string_view url, const std::string& /*secret_file*/) {
  if (url.substr(0, 9) != "memory://") throw invalid_argument("memory tier: a memory:// URL");
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<memory_tier>, std::less<>> servers;
  std::lock_guard lock(mu);
  std::shared_ptr<memory_tier>& tier = servers[std::string(url)];
  if (!tier) tier = std::make_shared<memory_tier>(std::string(url));
  last_made() = tier;
  return tier;
}

const device_identity kDevice{"Test Platform", "test device", "1.0", "driver 1"};

TEST(TierRegistry, ATierRegisteredHereJoinsTheStoresChain) {
  register_tier_scheme("memory", &make_memory_tier);
  const testing::temp_dir dir("unicache-tier-registry");
  kernel_store store(store_config{true, dir.path()});
  store.set_remote("memory://fleet");
  ASSERT_TRUE(last_made());
  const std::shared_ptr<memory_tier> remote_tier = last_made();
  memory_tier& remote = *remote_tier;

  const byte_vector binary{1, 2, 3, 4, 5};
  EXPECT_TRUE(store.put(kDevice, "kernel a", binary));
  store.flush_remote();
  EXPECT_EQ(remote.size(), 1u) << "a put reaches the remote tier";

  // Another store over an empty directory: its local miss asks the tier,
  // and the hit is written to its local store.
  const testing::temp_dir other_dir("unicache-tier-registry");
  kernel_store other(store_config{true, other_dir.path()});
  other.set_remote("memory://fleet");
  EXPECT_EQ(other.get(kDevice, "kernel a"), binary);
  other.set_remote("");
  EXPECT_EQ(other.get(kDevice, "kernel a"), binary) << "written to the local store on the remote hit";
  EXPECT_EQ(other.get(kDevice, "kernel b"), std::nullopt);

  const remote_stats s = store.remote_tier_stats();
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.url, "memory://fleet");
  EXPECT_EQ(other.remote_tier_stats().enabled, false) << "no remote tier now";
}

TEST(TierRegistry, SeveralURLsMakeAChainAskedInOrder) {
  register_tier_scheme("memory", &make_memory_tier);
  const testing::temp_dir dir("unicache-tier-registry");
  {
    kernel_store filler(store_config{false, ""});  // the local tier off: puts go to the remote ones only
    filler.set_remote("memory://far");
    filler.put(kDevice, "kernel far", byte_vector{7, 7});
  }
  const std::shared_ptr<memory_tier> far = last_made();
  kernel_store store(store_config{true, dir.path()});
  store.set_remote("memory://near   memory://far");
  make_memory_tier("memory://near", "");  // the same server the store's chain has
  const std::shared_ptr<memory_tier> near = last_made();
  ASSERT_EQ(store.tier_stats().size(), 2u);
  EXPECT_EQ(store.tier_stats()[0].url, "memory://near");
  EXPECT_EQ(store.tier_stats()[1].url, "memory://far");
  EXPECT_EQ(store.remote_tier_stats().url, "memory://near memory://far");

  EXPECT_EQ(store.get(kDevice, "kernel far"), (byte_vector{7, 7})) << "the far tier answers";
  EXPECT_EQ(near->size(), 1u) << "its hit is written to the nearer tier";
  EXPECT_TRUE(store.put(kDevice, "kernel new", byte_vector{1}));
  EXPECT_EQ(near->size(), 2u);
  EXPECT_EQ(far->size(), 2u) << "a put reaches every tier";

  EXPECT_THROW(store.set_remote("memory://1 memory://2 memory://3 memory://4 memory://5"), invalid_argument);
  EXPECT_THROW(store.set_remote("memory://1 ftp://2"), invalid_argument) << "all or nothing";
  EXPECT_EQ(store.tier_stats().size(), 2u) << "a refused list changes nothing";
}

TEST(TierRegistry, UnknownSchemesAreRefusedNamingTheKnownOnes) {
  register_tier_scheme("memory", &make_memory_tier);
  kernel_store store(store_config{false, ""});
  try {
    store.set_remote("ftp://somewhere");
    FAIL() << "ftp:// accepted";
  } catch (const invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("memory://"), std::string::npos) << what;
    EXPECT_NE(what.find("ftp://"), std::string::npos) << what;
  }
  EXPECT_THROW(store.set_remote("no scheme at all"), invalid_argument);
  EXPECT_THROW(register_tier_scheme("Bad Scheme", &make_memory_tier), invalid_argument);
  const tier_factory another = [](std::string_view url, const std::string& secret_file) {
    return make_memory_tier(url, secret_file);
  };
  EXPECT_THROW(register_tier_scheme("memory", another), invalid_argument) << "taken";
  EXPECT_NO_THROW(register_tier_scheme("memory", &make_memory_tier)) << "the same registration again";
}

// The core names no tier: redis:// is the remote component's to register
// (this program links the core alone).
TEST(TierRegistry, TheCoreRegistersNoSchemeOfItsOwn) {
  const std::vector<std::string> schemes = tier_schemes();
  EXPECT_EQ(std::find(schemes.begin(), schemes.end(), "redis"), schemes.end());
  kernel_store store(store_config{false, ""});
  EXPECT_THROW(store.set_remote("redis://127.0.0.1:1"), invalid_argument);
}

}  // namespace
}  // namespace unicache
