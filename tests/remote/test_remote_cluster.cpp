// The remote tier and the kernel store on a real three-master Redis Cluster
// (redis_cluster_server.hpp): entries, leases and counters land on every
// master and read back; maintenance walks every master; a master killed
// while processes use the cluster costs rebuilds, never a wrong binary or a
// hang.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "redis_cluster_server.hpp"
#include "redis_test.hpp"
#include "remote/redis_cluster.hpp"
#include "store_test_support.hpp"
#include "unicache/remote.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using redis::redis_connection;
using redis::redis_status;
using testing::redis_tier;

constexpr int kMasters = testing::redis_cluster_server::kMasters;

// The entries (not the counters' keys) that master `node` holds.
std::uint64_t keys_on(const redis_config& node) {
  const redis::redis_result r = redis_connection(node).command({"KEYS", "unicache:1:*"});
  return std::stoull(std::string(r.value.begin(), r.value.end()));
}

class RemoteCluster : public testing::redis_cluster_test {
 protected:
  testing::temp_dir root_;
};

TEST_F(RemoteCluster, EntriesSpreadOverEveryMasterAndReadBackWithTheirCountersAndLeases) {
  const device_identity device = testing::gpu_a();
  {
    redis_tier writer(config(), "a secret for the cluster, long enough");
    for (int i = 0; i < 60; ++i) {
      const std::string key = "cuda k" + std::to_string(i);
      ASSERT_EQ(writer.put(device, key, testing::binary_for(key, 2000)).status, tier_status::done);
    }
    writer.flush();
    EXPECT_EQ(writer.counters().puts.load(), 60u);
    EXPECT_EQ(writer.counters().errors.load() + writer.counters().dropped.load(), 0u);
  }
  for (int i = 0; i < kMasters; ++i) EXPECT_GT(keys_on(cluster_->node_config(i)), 0u) << "master " << i;

  redis_tier reader(config(), "a secret for the cluster, long enough");
  for (int i = 0; i < 60; ++i) {
    const std::string key = "cuda k" + std::to_string(i);
    EXPECT_EQ(reader.get(device, key).binary, testing::binary_for(key, 2000)) << key;
  }
  // A lease lives in its entry's slot: granted on a key of any master, held
  // against a second asker.
  redis_tier other(config(), "a secret for the cluster, long enough");
  for (int i = 0; i < 6; ++i) {
    const std::string key = "cuda new" + std::to_string(i);
    const lease_result granted = reader.lease(device, key);
    ASSERT_EQ(granted.status, lease_status::granted) << key;
    reader.put(device, key, testing::binary_for(key, 100));
    reader.release_lease(device, key, granted.token);
  }
  reader.flush();
  EXPECT_EQ(other.lease(device, "cuda new3").status, lease_status::hit) << "the holder's value";
  // The counters' script touches two keys of one slot.
  redis::redis_cluster router(config());
  const redis::redis_result hits = router.command(reader.redis().stats_key(), {"HGET", reader.redis().stats_key(), "hits"});
  EXPECT_EQ(hits.value, (byte_vector{'6', '0'})) << hits.message;
  EXPECT_EQ(reader.counters().errors.load(), 0u);
}

TEST_F(RemoteCluster, MaintenanceWalksEveryMaster) {
  {
    redis_tier writer(config(), "");
    for (int i = 0; i < 30; ++i) writer.put(testing::gpu_a(), "cuda k" + std::to_string(i), testing::binary_for("k", 500));
    writer.flush();
  }
  remote_maintenance tool(cluster_->url());
  const remote_summary s = tool.stats();
  EXPECT_EQ(s.entries, 30u);
  EXPECT_EQ(s.fleet.puts, 30u);
  EXPECT_EQ(tool.list().size(), 30u);
  EXPECT_TRUE(tool.verify(false).empty());
  EXPECT_EQ(tool.clear(), 30u);
  EXPECT_EQ(tool.stats().entries, 0u);
}

TEST_F(RemoteCluster, AKilledMasterCostsItsOwnKeysAndTheTierGoesOnWithTheOthers) {
  const device_identity device = testing::gpu_a();
  const std::string options = "timeout_ms=300&connect_timeout_ms=100";
  {
    redis_tier writer(config(options), "");
    for (int i = 0; i < 60; ++i) writer.put(device, "cuda k" + std::to_string(i), testing::binary_for("k", 700));
    writer.flush();
  }
  const std::uint64_t elsewhere = keys_on(cluster_->node_config(0)) + keys_on(cluster_->node_config(2));
  ASSERT_GT(keys_on(cluster_->node_config(1)), 0u);
  cluster_->kill(1);
  redis_tier reader(config(options), "");
  ::testing::internal::CaptureStderr();
  std::uint64_t hits = 0;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 60; ++i) {
      const tier_result r = reader.get(device, "cuda k" + std::to_string(i));
      if (r.status == tier_status::hit) {
        EXPECT_EQ(r.binary, testing::binary_for("k", 700));
        ++hits;
      }
    }
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(hits, 2 * elsewhere) << "every key of the other masters, both rounds: the tier's breaker stayed closed";
  EXPECT_EQ(reader.counters().skipped.load(), 0u);
  EXPECT_EQ(reader.counters().errors.load() + reader.counters().timeouts.load(), 2 * (60 - elsewhere));
  EXPECT_NE(err.find("remote kernel cache:"), std::string::npos) << "one warning";
  int granted = 0;
  for (int i = 0; i < 12; ++i) granted += reader.lease(device, "cuda new" + std::to_string(i)).status == lease_status::granted;
  EXPECT_GT(granted, 0) << "leases on the other masters";
}

TEST_F(RemoteCluster, AMasterKilledMidRunCostsRebuildsNeverAWrongBinaryOrAHang) {
  constexpr int kProcesses = 4, kKeys = 48;
  const std::string url = cluster_->url("connect_timeout_ms=200&timeout_ms=300&breaker_s=1&lease_ms=2000");
  const std::string root = root_.path();
  // Exit codes: 0 every kernel right; 3 a wrong binary; 4 nothing at all.
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(120);
      ::testing::internal::CaptureStderr();  // the breaker's one warning
      kernel_store store(testing::store_in(root + "/p" + std::to_string(p)));
      store.set_remote(url);
      int wrong = 0, none = 0;
      for (int round = 0; round < 3; ++round) {
        for (int k = 0; k < kKeys; ++k) {
          const std::string key = "cuda k" + std::to_string((k + p * 5) % kKeys);
          const byte_vector want = testing::binary_for(key, 3000);
          kernel_store::lookup found = store.get_or_lease(testing::gpu_a(), key);
          if (!found.binary) {  // built here
            store.put(testing::gpu_a(), key, want);
            found.binary = store.get(testing::gpu_a(), key);
          }
          if (!found.binary) ++none;
          else if (*found.binary != want) ++wrong;
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      store.flush_remote();
      ::_exit(wrong ? 3 : none ? 4 : 0);
    }
    pids.push_back(pid);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  cluster_->kill(1);
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (WIFEXITED(status)) {
      EXPECT_EQ(WEXITSTATUS(status), 0);
    }
  }
}

}  // namespace
}  // namespace unicache
