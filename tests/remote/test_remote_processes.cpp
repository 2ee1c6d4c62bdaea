// The remote tier across processes, against a real redis-server: a second
// process with an empty local store hits; eight processes share one server
// while a ninth plants junk under their keys, with zero corrupt reads; a
// server that dies in the middle of a run fails nothing, and is used again
// once it is back and the breaker's back-off is over.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "redis_test.hpp"
#include "store_test_support.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {


// Forks `count` children running body(i) and returns their pids. The caller
// must have no other thread running: a child of fork() inherits every lock
// held at that moment (a sanitizer's thread registry while a thread starts,
// say) and would hang on it. An alarm ends any child that hangs.
template <typename Body>
std::vector<pid_t> spawn_children(int count, Body body) {
  std::vector<pid_t> pids;
  for (int i = 0; i < count; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(60);
      ::_exit(body(i));
    }
    pids.push_back(pid);
  }
  return pids;
}

// Waits for the children and returns their exit statuses (128 + signal when
// one was killed).
std::vector<int> reap_children(const std::vector<pid_t>& pids) {
  std::vector<int> statuses;
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    statuses.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return statuses;
}

template <typename Body>
std::vector<int> run_children(int count, Body body) {
  return reap_children(spawn_children(count, body));
}

class RemoteProcesses : public testing::redis_test {
 protected:
  testing::temp_dir root_;
};

TEST_F(RemoteProcesses, ASecondProcessWithAnEmptyLocalStoreHits) {
  const std::string url = server_.url();
  const std::string root = root_.path();
  const auto writer = run_children(1, [&](int) {
    kernel_store store(testing::store_in(root + "/a"));
    store.set_remote(url);
    store.put(testing::gpu_a(), "opencl-c gemm", testing::binary_for("gemm", 200000));
    store.flush_remote();
    return store.remote_tier_stats().puts == 1 ? 0 : 1;
  });
  ASSERT_EQ(writer[0], 0);
  const auto reader = run_children(1, [&](int) {
    kernel_store store(testing::store_in(root + "/b"));
    store.set_remote(url);
    const auto got = store.get(testing::gpu_a(), "opencl-c gemm");
    return got == testing::binary_for("gemm", 200000) ? 0 : 1;
  });
  EXPECT_EQ(reader[0], 0);
}

TEST_F(RemoteProcesses, EightProcessesAndAVandalShareOneServerWithZeroCorruptReads) {
  constexpr int kKeys = 24, kRounds = 150;
  const std::string url = server_.url();
  const std::string root = root_.path();
  // Exit codes: 0 fine; 3 a corrupt read (served bytes that are not the key's).
  const auto statuses = run_children(9, [&](int child) {
    std::mt19937 rng(static_cast<unsigned>(child) * 7919u + 1);
    std::uniform_int_distribution<int> pick(0, kKeys - 1);
    if (child == 8) {
      // The vandal: junk, another key's valid entry, and truncated entries
      // under the others' Redis keys.
      redis::redis_connection c(parse_redis_url(url));
      testing::redis_tier shape(parse_redis_url(url + "?read_only=1"), "");
      for (int round = 0; round < kRounds * 2; ++round) {
        const std::string key = "opencl-c k" + std::to_string(pick(rng));
        const std::string where = shape.redis().entry_key(testing::gpu_a(), key);
        byte_vector value;
        switch (round % 3) {
          case 0: value = {'j', 'u', 'n', 'k'}; break;
          case 1: value = shape.encode(testing::gpu_a(), "opencl-c other", testing::binary_for("other", 3000)); break;
          default: {
            value = shape.encode(testing::gpu_a(), key, testing::binary_for(key, 3000));
            value.resize(value.size() / 2);
          }
        }
        c.set(where, value);
      }
      return 0;
    }
    kernel_store store(testing::store_in(root + "/p" + std::to_string(child)));
    store.set_remote(url);
    int corrupt = 0;
    for (int round = 0; round < kRounds; ++round) {
      const std::string key = "opencl-c k" + std::to_string(pick(rng));
      const byte_vector want = testing::binary_for(key, 3000);
      if (const auto got = store.get(testing::gpu_a(), key)) {
        if (*got != want) ++corrupt;
      } else {
        store.put(testing::gpu_a(), key, want);
      }
    }
    store.flush_remote();
    return corrupt ? 3 : 0;
  });
  for (int i = 0; i < 9; ++i) EXPECT_EQ(statuses[static_cast<std::size_t>(i)], 0) << "process " << i;
}

TEST_F(RemoteProcesses, ALeaseHolderKilledMidBuildHandsTheBuildToOneOtherAfterItsTtl) {
  constexpr int kWaiters = 4;
  constexpr int kLeaseMs = 2000, kBuildMs = 200;
  const std::string url = server_.url("lease_ms=" + std::to_string(kLeaseMs));
  const std::string root = root_.path();
  const std::string key = "cuda gemm_64x64";
  const byte_vector want = testing::binary_for(key, 4000);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  // The holder: takes the lease, says so, and hangs in its "build" until killed.
  const pid_t holder = ::fork();
  if (holder == 0) {
    ::alarm(60);
    kernel_store store(testing::store_in(root + "/holder"));
    store.set_remote(url);
    const char said = store.get_or_lease(testing::gpu_a(), key).leased ? 'L' : 'x';
    (void)!::write(ready[1], &said, 1);
    for (;;) ::pause();
  }
  char said = 0;
  ASSERT_EQ(::read(ready[0], &said, 1), 1);
  ASSERT_EQ(said, 'L') << "the first process got the lease";
  // Exit codes: 10 built it, 11 loaded it, 3 a wrong binary, 4 waited
  // longer than a ttl and one build (with a second of slack).
  const std::vector<pid_t> waiters = spawn_children(kWaiters, [&](int child) {
    kernel_store store(testing::store_in(root + "/w" + std::to_string(child)));
    store.set_remote(url);
    const auto start = std::chrono::steady_clock::now();
    kernel_store::lookup found = store.get_or_lease(testing::gpu_a(), key);
    int code = 11;
    if (!found.binary) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kBuildMs));  // the build
      store.put(testing::gpu_a(), key, want);
      found.binary = want;
      code = 10;
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    store.flush_remote();
    if (*found.binary != want) return 3;
    if (waited > std::chrono::milliseconds(kLeaseMs + kBuildMs + 1000)) return 4;
    return code;
  });
  // The holder dies mid-build, with the waiters already waiting. (From this
  // thread: the waiters were forked with no other thread running.)
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(holder, SIGKILL);
  const std::vector<int> statuses = reap_children(waiters);
  ::waitpid(holder, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  int built = 0, loaded = 0;
  for (const int status : statuses) {
    EXPECT_TRUE(status == 10 || status == 11) << "exit " << status;
    built += status == 10;
    loaded += status == 11;
  }
  EXPECT_EQ(built, 1) << "one process built it after the dead holder's ttl";
  EXPECT_EQ(loaded, kWaiters - 1) << "the others loaded that one's binary";
}

TEST_F(RemoteProcesses, AServerThatDiesMidRunFailsNothingAndIsUsedAgainWhenBack) {
  kernel_store store(testing::store_in(root_.path()));
  store.set_remote(server_.url("connect_timeout_ms=100&timeout_ms=300&breaker_s=1"));
  const device_identity device = testing::gpu_a();
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 40; ++i) {
    if (i == 10) server_.kill();
    const std::string key = "opencl-c k" + std::to_string(i);
    EXPECT_EQ(store.get(device, key), std::nullopt);
    EXPECT_TRUE(store.put(device, key, testing::binary_for(key, 500))) << "the local store keeps working";
    EXPECT_EQ(store.get(device, key), testing::binary_for(key, 500));
  }
  store.flush_remote();
  ::testing::internal::GetCapturedStderr();
  const remote_stats down = store.remote_tier_stats();
  EXPECT_GE(down.errors + down.timeouts, 1u);
  EXPECT_GT(down.skipped, 0u) << "the breaker opened";
  ASSERT_TRUE(server_.start());
  if (server_.port() != parse_redis_url(store.remote_tier_stats().url).port) GTEST_SKIP() << "the port was taken";
  // Once the back-off is over (1 s, or 2 or 4 if a failure came after it
  // opened), writes go out again.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (store.remote_tier_stats().puts == down.puts && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    store.put(device, "opencl-c after", testing::binary_for("after", 500));
    store.flush_remote();
  }
  EXPECT_GT(store.remote_tier_stats().puts, down.puts) << "writes go out again";
  testing::temp_dir other;
  kernel_store fresh(testing::store_in(other.path()));
  fresh.set_remote(server_.url());
  EXPECT_EQ(fresh.get(device, "opencl-c after"), testing::binary_for("after", 500));
}

}  // namespace
}  // namespace unicache
