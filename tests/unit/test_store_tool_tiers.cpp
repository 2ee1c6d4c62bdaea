// unicache-store --remote through the scheme registry: a tier and its
// maintenance that this file alone defines and registers get the tool's
// remote commands (stats, list, verify, clear), as redis:// does; a URL of
// no registered scheme, and a scheme registered without maintenance, are
// refused with the reason.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store_tool.hpp"
#include "temp_dir.hpp"
#include "unicache/error.hpp"
#include "unicache/storage_tier.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

// One server per URL: the values the tiers and maintenances of that URL share.
struct memory_server {
  std::mutex mu;
  std::map<std::string, byte_vector> values;  // "device|key" -> value
};
memory_server& server_of(std::string_view url) {
  static std::mutex mu;
  static auto* const servers = new std::map<std::string, std::unique_ptr<memory_server>, std::less<>>();
  std::lock_guard lock(mu);
  auto& s = (*servers)[std::string(url)];
  if (!s) s = std::make_unique<memory_server>();
  return *s;
}

class memory_tier final : public storage_tier {
 public:
  explicit memory_tier(std::string_view url) : server_(server_of(url)) {}
  const char* name() const override { return "mem"; }
  tier_result get(const device_identity& device, std::string_view key) noexcept override {
    std::lock_guard lock(server_.mu);
    const auto it = server_.values.find(where(device, key));
    if (it == server_.values.end()) return {tier_status::miss, std::nullopt};
    return {tier_status::hit, it->second};
  }
  tier_result put(const device_identity& device, std::string_view key, byte_span binary) noexcept override {
    std::lock_guard lock(server_.mu);
    server_.values[where(device, key)] = byte_vector(binary.begin(), binary.end());
    return {tier_status::done, std::nullopt};
  }
  tier_result remove(const device_identity& device, std::string_view key) noexcept override {
    std::lock_guard lock(server_.mu);
    server_.values.erase(where(device, key));
    return {tier_status::done, std::nullopt};
  }
  static std::string where(const device_identity& device, std::string_view key) {
    return device.device_name + "|" + std::string(key);
  }

 private:
  memory_server& server_;
};

// Its maintenance: an empty value is a bad one.
class memory_maintenance final : public tier_maintenance {
 public:
  explicit memory_maintenance(std::string_view url) : url_(url), server_(server_of(url)) {}
  remote_summary stats() override {
    std::lock_guard lock(server_.mu);
    remote_summary s;
    s.url = url_;
    s.entries = server_.values.size();
    for (const auto& [key, value] : server_.values) s.bytes += value.size();
    return s;
  }
  std::vector<remote_entry_info> list() override {
    std::lock_guard lock(server_.mu);
    std::vector<remote_entry_info> out;
    for (const auto& [key, value] : server_.values) out.push_back(describe(key, value));
    return out;
  }
  std::vector<remote_entry_info> verify(bool fix) override {
    std::lock_guard lock(server_.mu);
    std::vector<remote_entry_info> bad;
    for (auto it = server_.values.begin(); it != server_.values.end();) {
      remote_entry_info info = describe(it->first, it->second);
      const bool remove = !info.valid && fix;
      if (!info.valid) bad.push_back(std::move(info));
      it = remove ? server_.values.erase(it) : std::next(it);
    }
    return bad;
  }
  std::uint64_t clear() override {
    std::lock_guard lock(server_.mu);
    const std::uint64_t n = server_.values.size();
    server_.values.clear();
    return n;
  }

 private:
  static remote_entry_info describe(const std::string& key, const byte_vector& value) {
    remote_entry_info info;
    info.server_key = key;
    info.key_preview = key.substr(key.find('|') + 1);
    info.value_bytes = info.binary_bytes = value.size();
    info.valid = !value.empty();
    if (!info.valid) info.problem = "empty value";
    return info;
  }
  const std::string url_;
  memory_server& server_;
};

std::shared_ptr<storage_tier> make_memory_tier(std::string_view url, const std::string& /*secret_file*/) {
  return std::make_shared<memory_tier>(url);
}
std::unique_ptr<tier_maintenance> make_memory_maintenance(std::string_view url, const std::string& /*secret_file*/) {
  return std::make_unique<memory_maintenance>(url);
}

struct tool_result {
  int status = 0;
  std::string out, err;
};

// unicache-store with `args`, in this process.
tool_result tool(std::vector<const char*> args) {
  args.insert(args.begin(), "unicache-store");
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  tool_result r;
  r.status = unicache_store::run(static_cast<int>(args.size()), args.data());
  std::fflush(stdout);
  r.out = ::testing::internal::GetCapturedStdout();
  r.err = ::testing::internal::GetCapturedStderr();
  return r;
}

const device_identity kDevice{"Test Platform", "test device", "1.0", "driver 1"};

class StoreToolTiers : public ::testing::Test {
 protected:
  void SetUp() override {
    register_tier_scheme("mem", &make_memory_tier, &make_memory_maintenance);
    register_tier_scheme("nomaint", &make_memory_tier);
  }
};

TEST_F(StoreToolTiers, TheRemoteCommandsWorkOnARegisteredScheme) {
  {
    // Values put through a store whose chain has the tier, as a fleet's process puts them.
    const testing::temp_dir dir("unicache-tool-tiers");
    kernel_store store(store_config{true, dir.path()});
    store.set_remote("mem://fleet");
    ASSERT_TRUE(store.put(kDevice, "kernel a", byte_vector(100, 1)));
    ASSERT_TRUE(store.put(kDevice, "kernel b", byte_vector(28, 2)));
    store.flush_remote();
  }
  tool_result r = tool({"--remote", "mem://fleet", "stats"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tier:             mem://fleet"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("entries:          2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("server:"), std::string::npos) << "no server figures to show: " << r.out;

  r = tool({"--remote", "mem://fleet", "list"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("kernel a"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kernel b"), std::string::npos) << r.out;

  {
    memory_server& s = server_of("mem://fleet");
    std::lock_guard lock(s.mu);
    s.values["test device|broken"] = {};
  }
  r = tool({"--remote", "mem://fleet", "verify"});
  EXPECT_EQ(r.status, 1) << "a bad value found: " << r.out;
  EXPECT_NE(r.out.find("bad test device|broken: empty value"), std::string::npos) << r.out;
  r = tool({"--remote", "mem://fleet", "verify", "--fix"});
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("removed test device|broken"), std::string::npos) << r.out;
  EXPECT_EQ(tool({"--remote", "mem://fleet", "verify"}).status, 0) << "nothing bad left";

  // --remote=env: each tier UNICACHE_REMOTE_CACHE names, in order.
  ::setenv("UNICACHE_REMOTE_CACHE", "mem://fleet mem://empty", 1);
  r = tool({"--remote=env", "stats"});
  ::unsetenv("UNICACHE_REMOTE_CACHE");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("tier 1 of 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tier:             mem://empty"), std::string::npos) << r.out;

  r = tool({"--remote", "mem://fleet", "clear"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 remote entries removed"), std::string::npos) << r.out;
  EXPECT_NE(tool({"--remote", "mem://fleet", "stats"}).out.find("entries:          0"), std::string::npos);
}

TEST_F(StoreToolTiers, UnknownSchemesAndSchemesWithoutMaintenanceAreRefused) {
  tool_result r = tool({"--remote", "ftp://somewhere", "stats"});
  EXPECT_EQ(r.status, 2) << "a usage error: " << r.err;
  EXPECT_NE(r.err.find("mem://"), std::string::npos) << "names the registered schemes: " << r.err;
  EXPECT_NE(r.err.find("ftp://"), std::string::npos) << r.err;

  r = tool({"--remote", "nomaint://x", "list"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("the nomaint:// tier offers no maintenance"), std::string::npos) << r.err;
  EXPECT_THROW(remote_maintenance("nomaint://x"), invalid_argument);
  EXPECT_NO_THROW(remote_maintenance("mem://x"));
}

}  // namespace
}  // namespace unicache
