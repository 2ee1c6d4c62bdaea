// Real processes on one store: concurrent writers, readers and evictions,
// writers killed with SIGKILL at random points, and a FIFO planted where an
// entry goes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "store/shard_record.hpp"
#include "store/store_testing.hpp"
#include "store_test_support.hpp"
#include "unicache/store.hpp"
#include "util/lock_file.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

constexpr int kKeys = 200;
std::string key_of(int i) { return "kernel/" + std::to_string(i); }
std::size_t size_of(int i) { return 512 + static_cast<std::size_t>(i % 16) * 512; }  // 0.5-8 KB

// Exit code of a worker: 0, or 1 if it read a binary that is not what was
// written for its key.
int hammer(const std::string& dir, std::uint64_t max_bytes, int operations, unsigned seed) {
  kernel_store store(store_in(dir, max_bytes));
  std::mt19937 rng(seed);
  for (int op = 0; op < operations; ++op) {
    const int k = static_cast<int>(rng() % kKeys);
    if (rng() % 2) {
      store.put(gpu_a(), key_of(k), binary_for(key_of(k), size_of(k)));
    } else if (const auto got = store.get(gpu_a(), key_of(k))) {
      if (*got != binary_for(key_of(k), size_of(k))) return 1;
    }
  }
  wait_for_eviction();  // the cleanups this process asked for: the limit holds at the end
  return store.writable() ? 0 : 2;
}

TEST(StoreProcesses, EightProcessesHammeringOneTinyStoreNeverReadAWrongBinary) {
  temp_dir dir;
  constexpr int kProcesses = 8;
  constexpr int kOperations = 10000;
  // ~100 entries, 7 per shard, of 200 keys: evictions all the time
  constexpr std::uint64_t kMaxBytes = 512 * 1024;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(hammer(dir.path(), kMaxBytes, kOperations, 1000u + static_cast<unsigned>(p)));
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status)) << "worker died";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: a wrong binary was read; 2: writes failed";
  }
  kernel_store store(store_in(dir.path(), kMaxBytes));
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_GT(s.entries, 0u);
  EXPECT_LE(s.bytes, kMaxBytes + 8 * 1024 * kProcesses) << "bounded by the limit (plus in-flight writes)";
  EXPECT_EQ(s.recorded_bytes, s.bytes) << "the size file equals the recount";
  EXPECT_EQ(s.temporary_files, 0u);
  EXPECT_TRUE(store.verify(false).empty());
  EXPECT_FALSE(a_shard_is_locked(dir.path()));
}

// A child that writes and evicts until killed.
[[noreturn]] void write_forever(const std::string& dir, unsigned seed) {
  kernel_store store(store_in(dir, 128 * 1024));
  std::mt19937 rng(seed);
  for (;;) {
    const int k = static_cast<int>(rng() % kKeys);
    store.put(gpu_a(), key_of(k), binary_for(key_of(k), size_of(k)));
    if (rng() % 4 == 0) store.get(gpu_a(), key_of(static_cast<int>(rng() % kKeys)));
  }
}

TEST(StoreProcesses, WriterKilledAtRandomPointsLeavesNoVisibleDamageAndNoLock) {
  temp_dir dir;
  std::mt19937 rng(77);
  constexpr int kTrials = 120;
  int trials_with_temporaries = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const pid_t pid = ::fork();
    if (pid == 0) write_forever(dir.path(), 500u + static_cast<unsigned>(trial));
    // A random kill point: from right after start to a few milliseconds in.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 8000));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);

    ASSERT_FALSE(a_shard_is_locked(dir.path())) << "trial " << trial;
    kernel_store store(store_in(dir.path(), 128 * 1024));
    const auto bad = store.verify(false);
    ASSERT_TRUE(bad.empty()) << "trial " << trial << ": " << bad.front().path << ": " << bad.front().problem;
    if (store.stats(/*recount=*/true).temporary_files > 0) ++trials_with_temporaries;
    // Every visible entry reads back as what was written for its key.
    for (int k = 0; k < kKeys; ++k) {
      if (auto got = store.get(gpu_a(), key_of(k))) {
        ASSERT_EQ(*got, binary_for(key_of(k), size_of(k))) << "trial " << trial;
      }
    }
  }
  RecordProperty("trials_that_left_a_temporary_file", trials_with_temporaries);

  // The tool agrees: verify is clean; --fix clears what dead writers left
  // and the recount matches.
  const std::string tool = std::string(UNICACHE_STORE_TOOL) + " --dir " + dir.path() + " verify";
  EXPECT_EQ(std::system((tool + " > /dev/null").c_str()), 0);
  kernel_store store(store_in(dir.path(), 128 * 1024));
  store.verify(true);
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.temporary_files, 0u);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
}

// An evictor killed at random points of its batches: the store reads
// correctly, no lock stays held, and a record the dead batch left marked is
// recounted by the next process that takes the shard's lock.
TEST(StoreProcesses, AnEvictorKilledMidBatchLeavesRecordsThatAreRebuilt) {
  temp_dir dir;
  constexpr int kEntries = 300;
  const std::uint64_t entry_bytes = 1024 + detail::kEntryHeaderBytes + 8;
  const std::uint64_t limit = limit_with_shard_share(40 * entry_bytes);
  auto open_store = [&](bool evict) {
    store_config c = store_in(dir.path(), limit);
    c.size_eviction = evict;
    auto store = std::make_unique<kernel_store>(c);
    detail::store_access::use_key_hasher(*store, &shard_zero_hash);
    return store;
  };
  const detail::directory_handle shards_dir = [&] {
    open_store(false);
    return detail::directory_handle::open(dir.path() + "/v2/shards");
  }();
  const detail::shard_record record(shards_dir, detail::shard_record_name(0), 0600);
  std::mt19937 rng(2026);
  int marked = 0;
  // Kill points: in most trials as soon as the record shows a batch's mark
  // (watched from the trigger put's return, however slow the child is, as
  // under a sanitizer), in the others a random time after that put;
  // until at least one landed inside a batch.
  for (int trial = 0; trial < 60 && (trial < 8 || marked == 0); ++trial) {
    {
      const auto filler = open_store(false);  // refill shard 0 without evicting
      for (int k = 0; k < kEntries; ++k) filler->put(gpu_a(), key_of(k), binary_for(key_of(k), 1024));
    }
    int started[2];
    ASSERT_EQ(::pipe(started), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(started[0]);
      const auto store = open_store(true);
      store->put(gpu_a(), "trigger", binary_for("trigger", 1024));
      const char c = 1;
      (void)!::write(started[1], &c, 1);
      wait_for_eviction();
      ::_exit(0);
    }
    ::close(started[1]);
    char c;
    (void)!::read(started[0], &c, 1);  // or end of file: the child died
    ::close(started[0]);
    if (trial % 4 == 3) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 10000));
    } else {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (std::chrono::steady_clock::now() < give_up) {
        const std::optional<detail::shard_totals> now = record.read();
        if (now && now->pending_removal != 0) break;
      }
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);

    ASSERT_FALSE(a_shard_is_locked(dir.path())) << "trial " << trial;
    const std::optional<detail::shard_totals> left = record.read();
    ASSERT_TRUE(left) << "trial " << trial;
    if (left->pending_removal != 0) ++marked;
    const auto store = open_store(true);
    // Any put of a new key into the shard takes its lock and finds the
    // mark, if any.
    const std::string after = "after/" + std::to_string(trial);
    ASSERT_TRUE(store->put(gpu_a(), after, binary_for(after, 1024)));
    wait_for_eviction();
    const store_stats recorded = store->stats();
    const store_stats counted = store->stats(/*recount=*/true);
    ASSERT_FALSE(recorded.recounted) << "trial " << trial << ": every record is valid again";
    ASSERT_EQ(recorded.entries, counted.entries) << "trial " << trial;
    ASSERT_EQ(recorded.bytes, counted.bytes) << "trial " << trial;
    for (int k = 0; k < kEntries; ++k) {
      if (auto got = store->get(gpu_a(), key_of(k))) {
        ASSERT_EQ(*got, binary_for(key_of(k), 1024)) << "trial " << trial;
      }
    }
  }
  RecordProperty("trials_killed_mid_batch", marked);
  EXPECT_GT(marked, 0) << "no kill landed inside a batch: the case was not tested";
}

TEST(StoreProcesses, AFifoPlantedInAnEntrysPlaceStallsNoProcess) {
  temp_dir dir;
  ASSERT_TRUE(kernel_store(store_in(dir.path())).put(gpu_a(), key_of(0), binary_for(key_of(0), size_of(0))));
  const std::string key_dir = entry_dir_of(dir.path(), gpu_a(), key_of(1));
  std::filesystem::create_directories(key_dir);
  ASSERT_EQ(::mkfifo((key_dir + "/0.entry").c_str(), 0600), 0);
  // Every process uses the FIFO's key and others; one that blocked on the
  // FIFO (while holding the store's lock, every other one behind it) is
  // ended by its alarm.
  constexpr int kProcesses = 4;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(kHangAlarmSeconds);
      kernel_store store(store_in(dir.path()));
      for (int op = 0; op < 200; ++op) {
        const int k = op % 2 ? 1 : (op + p) % kKeys;
        store.put(gpu_a(), key_of(k), binary_for(key_of(k), size_of(k)));
        const auto got = store.get(gpu_a(), key_of(k));
        if (got && *got != binary_for(key_of(k), size_of(k))) ::_exit(1);
      }
      ::_exit(store.get(gpu_a(), key_of(1)) ? 0 : 3);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) << "a process blocked on the FIFO";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "1: a wrong binary; 3: the key was not stored";
  }
}

}  // namespace
}  // namespace unicache
