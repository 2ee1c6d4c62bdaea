// unicache-store --remote against a real redis-server: stats, list, verify
// (with and without --fix), clear, read-only refusals, and a password that
// is never printed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "redis_test.hpp"
#include "store_test_support.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using run_result = testing::command_result;

run_result tool(const std::string& args) {
  return testing::run_command(std::string(UNICACHE_STORE_TOOL) + " " + args + " 2>&1");
}

class RemoteTool : public testing::redis_test {
 protected:
  RemoteTool() : redis_test("tool-password-123") {}
};

TEST_F(RemoteTool, StatsListVerifyClear) {
  {
    testing::temp_dir dir;
    kernel_store store(testing::store_in(dir.path()));
    store.set_remote(server_.url());
    for (int i = 0; i < 3; ++i) store.put(testing::gpu_a(), "opencl-c k" + std::to_string(i), testing::binary_for("k", 1000));
    store.flush_remote();
    testing::temp_dir other;
    kernel_store reader(testing::store_in(other.path()));
    reader.set_remote(server_.url());
    EXPECT_TRUE(reader.get(testing::gpu_a(), "opencl-c k1").has_value());
    EXPECT_FALSE(reader.get(testing::gpu_a(), "opencl-c none").has_value());
    reader.flush_remote();
  }
  const std::string remote = "--remote '" + server_.url() + "'";
  run_result r = tool(remote + " stats");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("entries:          3"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("tool-password-123"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  hits:           1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  misses:         1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  writes:         3, dropped 0"), std::string::npos) << r.out;

  r = tool(remote + " list --json");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '{') - 1, 3) << r.out;
  EXPECT_NE(r.out.find("\"valid\": true"), std::string::npos) << r.out;

  r = tool(remote + " verify");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("0 bad entries"), std::string::npos) << r.out;

  {
    redis::redis_connection c(parse_redis_url(server_.url()));
    const std::string junk_key = "unicache:1:" + std::string(32, '0') + ":" + std::string(32, '0');
    ASSERT_EQ(c.set(junk_key, byte_vector{'j', 'u', 'n', 'k'}).status, redis::redis_status::ok);
    // Not an entry's name: never listed, verified or removed.
    ASSERT_EQ(c.set("unicache:1:x", byte_vector{'o'}).status, redis::redis_status::ok);
  }
  r = tool(remote + " verify");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("not a unicache entry"), std::string::npos) << r.out;
  r = tool("--remote '" + server_.url("read_only=1") + "' verify --fix");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("read_only=1"), std::string::npos) << r.out;
  r = tool(remote + " verify --fix");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("1 bad entry removed"), std::string::npos) << r.out;

  r = tool(remote + " clear");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("3 remote entries removed"), std::string::npos) << r.out;
  r = tool(remote + " stats");
  EXPECT_NE(r.out.find("entries:          0"), std::string::npos) << r.out;
  redis::redis_connection c(parse_redis_url(server_.url()));
  EXPECT_EQ(c.get("unicache:1:x", 64).status, redis::redis_status::hit) << "another name under the prefix stays";
}

TEST_F(RemoteTool, EnvWithSeveralTiersWorksOnEachInTurn) {
  const std::string near = server_.url("prefix=near"), far = server_.url("prefix=far");
  {
    testing::temp_dir dir;
    kernel_store store(testing::store_in(dir.path()));
    store.set_remote(near + " " + far);
    ASSERT_EQ(store.tier_stats().size(), 2u);
    store.put(testing::gpu_a(), "opencl-c k", testing::binary_for("k", 1000));
    store.flush_remote();
    EXPECT_EQ(store.tier_stats()[0].puts, 1u);
    EXPECT_EQ(store.tier_stats()[1].puts, 1u) << "a put reaches every tier";
    EXPECT_EQ(store.remote_tier_stats().puts, 2u);
    EXPECT_EQ(store.remote_tier_stats().tier, "redis redis");
  }
  const run_result r = testing::run_command("UNICACHE_REMOTE_CACHE='" + near + " " + far + "' " +
                                           std::string(UNICACHE_STORE_TOOL) + " --remote=env stats 2>&1");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("tier 1 of 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tier 2 of 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prefix=near"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prefix=far"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("tool-password-123"), std::string::npos) << r.out;
}

TEST_F(RemoteTool, WithoutTheSecretSignedValuesAreListedAndNeverRemoved) {
  testing::temp_dir dir;
  const std::string secret = dir.path() + "/secret";
  {
    std::ofstream(secret) << "the fleet's secret, long enough\n";
  }
  ::chmod(secret.c_str(), 0600);
  {
    kernel_store store(testing::store_in(dir.path() + "/store"));
    store.set_remote(server_.url(), secret);
    store.put(testing::gpu_a(), "opencl-c signed", testing::binary_for("s", 1000));
    store.flush_remote();
  }
  const std::string remote = "--remote '" + server_.url() + "'";
  run_result r = tool(remote + " verify --fix");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("0 bad entries"), std::string::npos) << r.out;
  r = tool(remote + " list");
  EXPECT_NE(r.out.find("signed; give --secret-file"), std::string::npos) << r.out;
  r = tool(remote + " --secret-file " + dir.path() + "/none verify");
  EXPECT_NE(r.status, 0) << r.out;
  r = tool("--remote '" + server_.url() + "' --secret-file " + secret + " verify");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("0 bad entries"), std::string::npos) << r.out;
}

TEST_F(RemoteTool, ABadUrlOrAWrongPasswordIsReportedWithoutThePassword) {
  run_result r = tool("--remote 'redis://u:hunter2@127.0.0.1:99999' stats");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(r.out.find("hunter2"), std::string::npos) << r.out;
  r = tool("--remote 'redis://wrong-secret-456@127.0.0.1:" + std::to_string(server_.port()) + "' stats");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out.find("wrong-secret-456"), std::string::npos) << r.out;
  r = tool("--remote 'redis://h' prune --max-size 1");
  EXPECT_EQ(r.status, 2) << r.out;
  r = tool("--dir /tmp --remote 'redis://h' stats");
  EXPECT_EQ(r.status, 2) << r.out;
}

}  // namespace
}  // namespace unicache
