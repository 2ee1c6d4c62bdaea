#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>

#include "store/background_evictor.hpp"
#include "store/entry_format.hpp"
#include "store/key_description.hpp"
#include "store/shard_record.hpp"
#include "store/store_testing.hpp"
#include "util/directory_handle.hpp"
#include "store_test_support.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;
namespace fs = std::filesystem;

void set_mtime(const std::string& path, std::int64_t unix_seconds) {
  const struct timespec times[2] = {{0, UTIME_OMIT}, {unix_seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

std::int64_t mtime_of(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return st.st_mtim.tv_sec;
}

void write_bytes(const std::string& path, const byte_vector& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

byte_vector read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return byte_vector(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(KernelStore, PutThenGetReturnsTheBinaryFromItsLayoutPath) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  ASSERT_TRUE(store.enabled());
  const byte_vector binary = binary_for("gemm", 70000);
  EXPECT_TRUE(store.put(gpu_a(), "gemm", binary));
  EXPECT_EQ(store.get(gpu_a(), "gemm"), binary);
  EXPECT_TRUE(fs::exists(entry_dir_of(dir.path(), gpu_a(), "gemm") + "/0.entry"));
  EXPECT_FALSE(store.get(gpu_a(), "softmax").has_value());
}

TEST(KernelStore, ASecondStoreOnTheSameDirectorySeesTheEntries) {
  temp_dir dir;
  kernel_store(store_in(dir.path())).put(gpu_a(), "k", binary_for("k", 100));
  kernel_store other_process_view(store_in(dir.path()));
  EXPECT_EQ(other_process_view.get(gpu_a(), "k"), binary_for("k", 100));
}

TEST(KernelStore, EveryFieldOfTheDeviceIdentitySeparatesBinaries) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  store.put(gpu_a(), "k", binary_for("k", 100));
  for (int field = 0; field < 4; ++field) {
    device_identity upgraded = gpu_a();
    std::string* f[] = {&upgraded.platform_name, &upgraded.device_name, &upgraded.device_version,
                        &upgraded.driver_version};
    *f[field] += ".1";
    EXPECT_FALSE(store.get(upgraded, "k").has_value()) << "field " << field;
  }
  EXPECT_TRUE(store.get(gpu_a(), "k").has_value());
}

detail::hash128 constant_hash(std::string_view) { return detail::key_hash("everything collides"); }

TEST(KernelStore, HashCollisionAddsEntryNPlusOneAndNeverServesAnotherKey) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  detail::store_access::use_key_hasher(store, &constant_hash);
  EXPECT_TRUE(store.put(gpu_a(), "first", binary_for("first", 10)));
  EXPECT_TRUE(store.put(gpu_a(), "second", binary_for("second", 20)));
  EXPECT_TRUE(store.put(gpu_a(), "first", binary_for("first", 10))) << "already there";
  const std::string key_dir =
      dir.path() + "/v2/" + detail::to_hex(detail::device_hash(gpu_a())) + "/" +
      detail::to_hex(constant_hash("")).substr(0, 2) + "/" + detail::to_hex(constant_hash(""));
  EXPECT_TRUE(fs::exists(key_dir + "/0.entry"));
  EXPECT_TRUE(fs::exists(key_dir + "/1.entry"));
  EXPECT_FALSE(fs::exists(key_dir + "/2.entry"));
  EXPECT_EQ(store.get(gpu_a(), "first"), binary_for("first", 10));
  EXPECT_EQ(store.get(gpu_a(), "second"), binary_for("second", 20));
  EXPECT_FALSE(store.get(gpu_a(), "third").has_value()) << "same hash, another key: a miss";
  // Entry 0 evicted: entry 1 is still found.
  fs::remove(key_dir + "/0.entry");
  EXPECT_EQ(store.get(gpu_a(), "second"), binary_for("second", 20));
}

struct damage {
  const char* name;
  byte_vector (*apply)(byte_vector);
};

class KernelStoreDamagedEntry : public ::testing::TestWithParam<damage> {};

TEST_P(KernelStoreDamagedEntry, IsAMissAndIsRemoved) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  ASSERT_TRUE(store.put(gpu_a(), "k", binary_for("k", 4000)));
  const std::string path = entry_dir_of(dir.path(), gpu_a(), "k") + "/0.entry";
  write_bytes(path, GetParam().apply(read_bytes(path)));
  EXPECT_FALSE(store.get(gpu_a(), "k").has_value());
  EXPECT_FALSE(fs::exists(path)) << "a bad entry must be removed";
  store.finish_eviction();  // its size was an estimate: the shard is walked in the background
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.recorded_bytes, s.bytes) << "the record follows the removal";
  EXPECT_TRUE(store.put(gpu_a(), "k", binary_for("k", 4000))) << "and the key can be stored again";
  EXPECT_EQ(store.get(gpu_a(), "k"), binary_for("k", 4000));
}

INSTANTIATE_TEST_SUITE_P(
    Damage, KernelStoreDamagedEntry,
    ::testing::Values(
        damage{"truncated", [](byte_vector b) { b.resize(b.size() / 2); return b; }},
        damage{"empty", [](byte_vector) { return byte_vector{}; }},
        damage{"corrupt", [](byte_vector b) { b[b.size() - 7] ^= 0x40; return b; }},
        damage{"foreign", [](byte_vector b) { std::fill(b.begin(), b.end(), 'z'); return b; }},
        damage{"wrong_version", [](byte_vector b) { b[8] = 2; return b; }},
        damage{"other_device", [](byte_vector b) {
          const auto d = detail::device_hash(pocl_cpu());
          const auto parsed = detail::parse_entry(b, nullptr);
          return detail::encode_entry(d, parsed.key, parsed.binary, 0);
        }}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(KernelStore, RemoveDeletesOnlyThatKeysEntryAndKeepsTheSizeExact) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  const byte_vector rejected = binary_for("gemm", 5000);
  ASSERT_TRUE(store.put(gpu_a(), "gemm", rejected));
  ASSERT_TRUE(store.put(gpu_a(), "softmax", binary_for("softmax", 3000)));
  ASSERT_TRUE(store.put(pocl_cpu(), "gemm", binary_for("gemm", 4000)));
  EXPECT_TRUE(store.remove(gpu_a(), "gemm"));
  EXPECT_FALSE(store.get(gpu_a(), "gemm").has_value());
  EXPECT_TRUE(store.get(gpu_a(), "softmax").has_value()) << "another key stays";
  EXPECT_TRUE(store.get(pocl_cpu(), "gemm").has_value()) << "the same key of another device stays";
  EXPECT_FALSE(store.remove(gpu_a(), "gemm")) << "nothing left to remove";
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  const byte_vector rebuilt = binary_for("gemm-rebuilt", 6000);
  EXPECT_TRUE(store.put(gpu_a(), "gemm", rebuilt)) << "the slot is free for the rebuilt binary";
  EXPECT_EQ(store.get(gpu_a(), "gemm"), rebuilt);
}

// Every shard's size record, for tests that damage them.
std::vector<std::string> record_files(const std::string& root) {
  std::vector<std::string> out;
  for (int s = 0; s < detail::kShards; ++s) out.push_back(root + "/v2/shards/" + detail::shard_record_name(s));
  return out;
}

TEST(KernelStore, ARecordIsWrittenInPlaceButNeverThroughAnotherFilesName) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  detail::store_access::use_key_hasher(store, &shard_zero_hash);
  store.put(gpu_a(), "first", binary_for("first", 1000));
  const std::string record = record_files(dir.path())[0];
  struct stat before {};
  ASSERT_EQ(::stat(record.c_str(), &before), 0);
  store.put(gpu_a(), "second", binary_for("second", 1000));
  struct stat after {};
  ASSERT_EQ(::stat(record.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "updated in place: no file freed per put";
  // A second name of the record's file (a hard link) makes it a file the
  // store no longer owns alone: replaced, the other name left as it was.
  const std::string other = dir.path() + "/someone-elses";
  ASSERT_EQ(::link(record.c_str(), other.c_str()), 0);
  std::ifstream in(other, std::ios::binary);
  const std::string linked_before((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  store.put(gpu_a(), "third", binary_for("third", 1000));
  std::ifstream again(other, std::ios::binary);
  const std::string linked_after((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  EXPECT_EQ(linked_after, linked_before) << "never written through another name";
  struct stat replaced {};
  ASSERT_EQ(::stat(record.c_str(), &replaced), 0);
  EXPECT_NE(replaced.st_ino, before.st_ino);
  EXPECT_EQ(store.stats(/*recount=*/true).recorded_bytes, store.stats(/*recount=*/true).bytes);
}

TEST(KernelStore, RecordsEqualTheRecountAndAreRebuiltWhenMissingOrCorrupt) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  for (int i = 0; i < 40; ++i) store.put(gpu_a(), "k" + std::to_string(i), binary_for("k", 1000 + i));
  store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.entries, 40u);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  const store_stats quick = store.stats();
  EXPECT_FALSE(quick.recounted) << "every record is valid: no walk";
  EXPECT_EQ(quick.entries, 40u);
  EXPECT_EQ(quick.bytes, s.bytes);
  for (const std::string& f : record_files(dir.path())) fs::remove(f);
  const store_stats missing = store.stats();
  EXPECT_TRUE(missing.recounted) << "a missing record makes stats walk";
  EXPECT_EQ(missing.entries, 40u);
  for (int i = 0; i < 200; ++i) store.put(gpu_a(), "after_missing" + std::to_string(i), binary_for("x", 10));
  s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.recorded_bytes, s.bytes) << "a missing record is recounted";
  for (const std::string& f : record_files(dir.path())) write_bytes(f, byte_vector(64, 0xff));
  for (int i = 0; i < 200; ++i) store.put(gpu_a(), "after_corrupt" + std::to_string(i), binary_for("x", 10));
  s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.recorded_bytes, s.bytes) << "a corrupt record is recounted";
  EXPECT_EQ(store.stats().entries, s.entries);
}

TEST(KernelStore, ARecordLeftMidBatchByADeadEvictorIsRecounted) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  detail::store_access::use_key_hasher(store, &shard_zero_hash);
  for (int i = 0; i < 10; ++i) store.put(gpu_a(), "k" + std::to_string(i), binary_for("k", 1000));
  // As a batch that died after marking the record and removing an entry.
  const detail::directory_handle shards = detail::directory_handle::open(dir.path() + "/v2/shards");
  const detail::shard_record record(shards, detail::shard_record_name(0), 0600);
  std::optional<detail::shard_totals> t = record.read();
  ASSERT_TRUE(t);
  t->pending_removal = 1;
  ASSERT_EQ(record.write(*t), 0);
  fs::remove(entry_dir_of(dir.path(), gpu_a(), "k0", &shard_zero_hash) + "/0.entry");
  EXPECT_TRUE(store.stats().recounted) << "stats does not trust a record marked mid-batch";
  // The next holder of the lock clears the mark and has the shard walked
  // in the background, which corrects the count.
  store.put(gpu_a(), "k10", binary_for("k", 1000));
  store.finish_eviction();
  t = record.read();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->pending_removal, 0u);
  EXPECT_EQ(t->entries, 10u) << "nine left, and the new one";
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
}

TEST(KernelStore, OverItsShareAShardsLeastRecentlyUsedEntriesGoUntilHalfItsShare) {
  temp_dir dir;
  const std::uint64_t entry_bytes = 10000 + detail::kEntryHeaderBytes + 2;
  kernel_store store(store_in(dir.path(), limit_with_shard_share(10 * entry_bytes)));
  detail::store_access::use_key_hasher(store, &shard_zero_hash);
  auto path_of = [&](const std::string& key) { return entry_dir_of(dir.path(), gpu_a(), key, &shard_zero_hash); };
  // Ten entries in shard 0, last used at t0 + i (k0 the least recently used)...
  const std::int64_t t0 = 1'700'000'000;
  for (int i = 0; i < 10; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(store.put(gpu_a(), key, binary_for(key, 10000)));
    set_mtime(path_of(key) + "/0.entry", t0 + i);
  }
  // ...then k0 and k1 are used, which records their use (they were old).
  ASSERT_TRUE(store.get(gpu_a(), "k0").has_value());
  ASSERT_TRUE(store.get(gpu_a(), "k1").has_value());
  // One more entry crosses the shard's share: down to half, in the background.
  ASSERT_TRUE(store.put(gpu_a(), "k10", binary_for("k10", 10000)));
  wait_for_eviction();
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_LE(s.bytes, 5 * entry_bytes);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  for (const char* kept : {"k0", "k1", "k10"}) EXPECT_TRUE(store.get(gpu_a(), kept).has_value()) << kept;
  for (const char* gone : {"k2", "k3", "k4", "k5"}) {
    EXPECT_FALSE(store.get(gpu_a(), gone).has_value()) << gone;
    EXPECT_FALSE(fs::exists(path_of(gone))) << gone << ": its key directory goes with its last entry";
  }
}

TEST(KernelStore, OtherShardsAreNotEvictedForOneShardsSize) {
  temp_dir dir;
  const std::uint64_t entry_bytes = 1000 + detail::kEntryHeaderBytes + 2;
  kernel_store store(store_in(dir.path(), limit_with_shard_share(4 * entry_bytes)));
  // Keys of several shards, the least recently used of the store (a
  // store-wide LRU would take them first), then many keys of shard 0 only.
  std::vector<std::string> elsewhere;
  for (int i = 0; elsewhere.size() < 8; ++i) {
    const std::string key = "e" + std::to_string(i);
    if (detail::shard_of(detail::key_hash(key)) == 0) continue;
    ASSERT_TRUE(store.put(gpu_a(), key, binary_for(key, 1000)));
    set_mtime(entry_dir_of(dir.path(), gpu_a(), key) + "/0.entry", 1'600'000'000 + i);
    elsewhere.push_back(key);
  }
  int in_zero = 0;
  for (int i = 0; in_zero < 20; ++i) {
    const std::string key = "z" + std::to_string(i);
    if (detail::shard_of(detail::key_hash(key)) != 0) continue;
    ASSERT_TRUE(store.put(gpu_a(), key, binary_for(key, 1000)));
    ++in_zero;
  }
  wait_for_eviction();
  for (const std::string& key : elsewhere) EXPECT_TRUE(store.get(gpu_a(), key).has_value()) << key;
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  EXPECT_LE(s.entries, elsewhere.size() + 4) << "shard 0 holds at most its share";
}

TEST(KernelStore, ThreadsPutGetAndRemoveWhileTheEvictorCleans) {
  temp_dir dir;
  // About six entries per shard: the evictor runs all the time.
  kernel_store store(store_in(dir.path(), limit_with_shard_share(6 * 2100)));
  constexpr int kThreads = 4;
  std::atomic<int> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1500; ++i) {
        const std::string key = "k" + std::to_string((i * 13 + t * 7) % 400);
        store.put(gpu_a(), key, binary_for(key, 2000));
        if (const auto got = store.get(gpu_a(), key)) {
          ++hits;
          if (*got != binary_for(key, 2000)) ++wrong;
        }
        if (i % 9 == 0) store.remove(gpu_a(), key);
      }
    });
  }
  for (auto& t : threads) t.join();
  store.finish_eviction();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(hits.load(), 0);
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  EXPECT_LE(s.bytes, store.config().max_size_bytes) << "every shard within its share once the evictor is done";
  EXPECT_EQ(store.stats().entries, s.entries);
  EXPECT_TRUE(store.verify(false).empty());
}

// The limit of the stores below, and a store in `dir` filled (without
// evicting) far over that share in shard 0, for tests that stop its cleanup.
constexpr std::uint64_t kCleanupTestLimit = 20 * 1100 * detail::kShards;
void fill_shard_zero(const std::string& dir, int entries) {
  store_config c = store_in(dir, kCleanupTestLimit);
  c.size_eviction = false;
  kernel_store filler(c);
  detail::store_access::use_key_hasher(filler, &shard_zero_hash);
  for (int i = 0; i < entries; ++i) filler.put(gpu_a(), "k" + std::to_string(i), binary_for("k", 1000));
}

TEST(KernelStore, AStoreDestroyedDuringACleanupStopsItAndLeavesItConsistent) {
  temp_dir dir;
  const std::uint64_t limit = kCleanupTestLimit;
  fill_shard_zero(dir.path(), 600);
  {
    kernel_store store(store_in(dir.path(), limit));
    detail::store_access::use_key_hasher(store, &shard_zero_hash);
    ASSERT_TRUE(store.put(gpu_a(), "trigger", binary_for("trigger", 1000)));
  }  // the cleanup it asked for stops after its batch, and the store goes
  kernel_store store(store_in(dir.path(), limit));
  detail::store_access::use_key_hasher(store, &shard_zero_hash);
  EXPECT_FALSE(store.stats().recounted) << "no record left marked";
  ASSERT_TRUE(store.put(gpu_a(), "again", binary_for("again", 1000)));  // asks for the cleanup again
  store.finish_eviction();
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  EXPECT_LE(s.bytes, limit / detail::kShards);
  for (int i = 0; i < 600; ++i) {
    if (const auto got = store.get(gpu_a(), "k" + std::to_string(i))) {
      EXPECT_EQ(*got, binary_for("k", 1000));
    }
  }
}

TEST(KernelStore, AProcessExitingDuringACleanupExitsCleanly) {
  temp_dir dir;
  const std::uint64_t limit = kCleanupTestLimit;
  fill_shard_zero(dir.path(), 600);
  // A store never destroyed (as the process-wide one), its evictor in a
  // cleanup when exit() runs the static destructors.
  const child_result r = run_in_child(
      [&]() -> int {
        auto* store = new kernel_store(store_in(dir.path(), limit));
        detail::store_access::use_key_hasher(*store, &shard_zero_hash);
        store->put(gpu_a(), "trigger", binary_for("trigger", 1000));
        std::exit(0);
      },
      kHangAlarmSeconds);
  EXPECT_EQ(r.status, 0) << r.err;
  // No warning of ours and no sanitizer error (LeakSanitizer may note that
  // a thread of the parent, absent from this child, was not suspended).
  EXPECT_EQ(r.err.find("unicache"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("ERROR"), std::string::npos) << r.err;
  EXPECT_FALSE(a_shard_is_locked(dir.path()));
  kernel_store store(store_in(dir.path(), limit));
  detail::store_access::use_key_hasher(store, &shard_zero_hash);
  EXPECT_FALSE(store.stats().recounted) << "the batch in progress finished before the exit";
  for (int i = 0; i < 600; ++i) {
    if (const auto got = store.get(gpu_a(), "k" + std::to_string(i))) {
      EXPECT_EQ(*got, binary_for("k", 1000));
    }
  }
}

TEST(KernelStore, UseIsRecordedAtMostOnceAMinuteAndNeverReadFromAtime) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  store.put(gpu_a(), "k", binary_for("k", 10));
  const std::string path = entry_dir_of(dir.path(), gpu_a(), "k") + "/0.entry";
  set_mtime(path, 1'000'000'000);
  store.get(gpu_a(), "k");
  store.finish_eviction();  // the use is recorded by the background thread
  const std::int64_t recorded = mtime_of(path);
  EXPECT_GT(recorded, 1'000'000'000);
  set_mtime(path, recorded - 10);  // used 10 s ago: within the minute
  store.get(gpu_a(), "k");
  store.finish_eviction();
  EXPECT_EQ(mtime_of(path), recorded - 10) << "a recent use is not written again";
}

TEST(KernelStore, OneBackgroundThreadPerProcessNamedForTools) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  store.put(gpu_a(), "k", binary_for("k", 10));
  set_mtime(entry_dir_of(dir.path(), gpu_a(), "k") + "/0.entry", 1'000'000'000);
  store.get(gpu_a(), "k");  // an old entry's use: handed to the thread, which starts
  store.finish_eviction();
  int found = 0;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    found += name == detail::kBackgroundThreadName;
  }
  EXPECT_EQ(found, 1);
}

TEST(KernelStore, EntriesUnusedForThresholdDaysAreRemovedByTheDailyWalk) {
  temp_dir dir;
  store_config c = store_in(dir.path());
  c.threshold_days = 7;
  kernel_store store(c);
  detail::store_access::use_key_hasher(store, &shard_zero_hash);
  auto path_of = [&](const std::string& key) { return entry_dir_of(dir.path(), gpu_a(), key, &shard_zero_hash); };
  store.put(gpu_a(), "stale", binary_for("stale", 100));
  store.put(gpu_a(), "fresh", binary_for("fresh", 100));
  const std::int64_t now = ::time(nullptr);
  set_mtime(path_of("stale") + "/0.entry", now - 8 * 86400);
  set_mtime(path_of("fresh") + "/0.entry", now - 6 * 86400);
  // The shard's last walk was two days ago: its next write has it walked
  // (in the background), which ages entries out.
  const detail::directory_handle shards = detail::directory_handle::open(dir.path() + "/v2/shards");
  const detail::shard_record record(shards, detail::shard_record_name(0), 0600);
  auto totals = record.read();
  ASSERT_TRUE(totals);
  totals->last_walk_unix = now - 2 * 86400;
  ASSERT_EQ(record.write(*totals), 0);
  store.put(gpu_a(), "new", binary_for("new", 100));
  wait_for_eviction();
  EXPECT_FALSE(fs::exists(path_of("stale") + "/0.entry"));
  EXPECT_TRUE(store.get(gpu_a(), "fresh").has_value());
  EXPECT_TRUE(store.get(gpu_a(), "new").has_value());
  totals = record.read();
  ASSERT_TRUE(totals);
  EXPECT_GE(totals->last_walk_unix, now) << "the walk is recorded";
  EXPECT_EQ(totals->entries, 2u);
}

TEST(KernelStore, BinariesOutsideTheEntrySizeLimitsAreNotStored) {
  temp_dir dir;
  store_config c = store_in(dir.path());
  c.min_entry_bytes = 100;
  c.max_entry_bytes = 1000;
  kernel_store store(c);
  EXPECT_FALSE(store.put(gpu_a(), "small", binary_for("s", 99)));
  EXPECT_FALSE(store.put(gpu_a(), "large", binary_for("l", 1001)));
  EXPECT_TRUE(store.put(gpu_a(), "fits", binary_for("f", 1000)));
  EXPECT_EQ(store.stats(/*recount=*/true).entries, 1u);
}

TEST(KernelStore, DisabledStoreMissesAndTouchesNothing) {
  temp_dir dir;
  store_config c = store_in(dir.path() + "/never");
  c.enabled = false;
  kernel_store store(c);
  EXPECT_FALSE(store.enabled());
  EXPECT_FALSE(store.put(gpu_a(), "k", binary_for("k", 10)));
  EXPECT_FALSE(store.get(gpu_a(), "k").has_value());
  EXPECT_FALSE(fs::exists(dir.path() + "/never"));
  EXPECT_THROW(store.stats(/*recount=*/true), store_error);
}

TEST(KernelStore, UnusableDirectoryWarnsOnceAndTheProcessCarriesOn) {
  temp_dir dir;
  write_bytes(dir.path() + "/file", {1, 2, 3});  // a file where the store should be
  ::testing::internal::CaptureStderr();
  kernel_store store(store_in(dir.path() + "/file"));
  EXPECT_FALSE(store.put(gpu_a(), "k", binary_for("k", 10)));
  EXPECT_FALSE(store.get(gpu_a(), "k").has_value());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("continuing without persistence"), std::string::npos) << err;
}

// In the child: fill the store until a write fails, then check the store
// carries on. Exit codes: 0 ok, 10 + n for failed checks.
int fill_until_full(const std::string& dir) {
  kernel_store store(store_in(dir));
  if (!store.enabled()) return 10;
  int stored = 0;
  for (int i = 0; i < 200 && store.put(gpu_a(), "k" + std::to_string(i), binary_for("k", 8192)); ++i) ++stored;
  if (stored == 0) return 11;           // the disk must take some entries first
  if (store.writable()) return 12;      // ... and then the failure turns writes off
  for (int i = 0; i < 20; ++i) {
    if (store.put(gpu_a(), "more" + std::to_string(i), binary_for("m", 8192))) return 13;
  }
  if (store.get(gpu_a(), "k0") != binary_for("k", 8192)) return 14;  // what is stored still serves
  return 0;
}

TEST(KernelStore, FullDiskWarnsOnceAndTheProcessCarriesOnWithoutPersistence) {
  temp_dir dir;
  // A real full disk: a 192 KB tmpfs (the shards' 16 size records take 64
  // KB of it, a page each) in a private mount namespace; where
  // mounting is not allowed, a real write failure from the file size limit.
  const child_result r = run_in_child([&] {
    const std::string mount_point = dir.path() + "/disk";
    fs::create_directory(mount_point);
    const bool tmpfs = ::unshare(CLONE_NEWNS) == 0 &&
                       ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                       ::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=192k,mode=0700") == 0;
    if (!tmpfs) {
      ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit limit {48 * 1024, 48 * 1024};
      ::setrlimit(RLIMIT_FSIZE, &limit);  // entries fit; the size file still does
    }
    std::fprintf(stderr, "%s\n", tmpfs ? "mode: tmpfs" : "mode: rlimit");
    return fill_until_full(mount_point);
  });
  RecordProperty("full_disk_mode", r.err.substr(0, r.err.find('\n')));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << "one mode line and one warning:\n" << r.err;
  EXPECT_NE(r.err.find("continuing without persistence"), std::string::npos) << r.err;
}

// Lets everybody read (not write) what is under `dir`: a store an
// administrator prepared for every user.
void make_readable_by_everybody(const std::string& dir) {
  ::chmod(dir.c_str(), 0755);
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    ::chmod(e.path().c_str(), e.is_directory() ? 0755 : 0644);
  }
}

TEST(KernelStore, PermissionErrorWarnsOnceAndStoredBinariesStillServe) {
  temp_dir dir;
  kernel_store(store_in(dir.path())).put(gpu_a(), "k", binary_for("k", 100));
  make_readable_by_everybody(dir.path());  // the store itself creates everything private
  const child_result r = run_in_child([&] {
    if (::geteuid() == 0) {
      // Root ignores permissions: drop to nobody for a real EACCES.
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 20;
    } else {
      ::chmod((dir.path() + "/v2").c_str(), 0555);
      ::chmod((dir.path() + "/v2/shards").c_str(), 0555);
      for (int s = 0; s < detail::kShards; ++s) {  // the lock files exist: their own mode decides
        ::chmod((dir.path() + "/v2/shards/" + detail::shard_lock_name(s)).c_str(), 0400);
      }
    }
    kernel_store store(store_in(dir.path()));
    if (store.writable()) return 21;
    if (store.put(gpu_a(), "new", binary_for("new", 100))) return 22;
    if (store.get(gpu_a(), "k") != binary_for("k", 100)) return 23;
    return 0;
  });
  ::chmod((dir.path() + "/v2").c_str(), 0755);
  ::chmod((dir.path() + "/v2/shards").c_str(), 0755);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(KernelStore, ConcurrentPutsOfOneKeyStoreOneEntryCountedOnce) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) store.put(gpu_a(), "same", binary_for("same", 3000));
    });
  }
  for (auto& t : threads) t.join();
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  EXPECT_EQ(s.temporary_files, 0u);
}

TEST(KernelStore, TemporaryFileOfADeadWriterIsNeverReadAndVerifyFixRemovesIt) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  store.put(gpu_a(), "k", binary_for("k", 100));
  const std::string key_dir = entry_dir_of(dir.path(), gpu_a(), "other");
  fs::create_directories(key_dir);
  const byte_vector full = detail::encode_entry(detail::device_hash(gpu_a()), "other", binary_for("o", 100), 0);
  // A writer that is gone (no process 4194303: above any pid_max) and a
  // running one (this process), whose file is about to be renamed.
  write_bytes(key_dir + "/.tmp.4194303.0", byte_vector(full.begin(), full.begin() + 50));
  const std::string live = key_dir + "/.tmp." + std::to_string(::getpid()) + ".77";
  write_bytes(live, byte_vector(full.begin(), full.begin() + 50));
  EXPECT_FALSE(store.get(gpu_a(), "other").has_value());
  EXPECT_EQ(store.stats(/*recount=*/true).temporary_files, 2u);
  EXPECT_TRUE(store.verify(/*fix=*/true).empty());
  EXPECT_EQ(store.stats(/*recount=*/true).temporary_files, 1u);
  EXPECT_TRUE(fs::exists(live)) << "a running writer's file stays";
  set_mtime(live, ::time(nullptr) - 2 * 3600);
  EXPECT_TRUE(store.verify(/*fix=*/true).empty());
  EXPECT_EQ(store.stats(/*recount=*/true).temporary_files, 0u) << "unless it is hours old";
  EXPECT_TRUE(store.get(gpu_a(), "k").has_value());
}

TEST(KernelStore, VerifyReportsBadEntriesAndFixRemovesThem) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  store.put(gpu_a(), "good", binary_for("good", 100));
  store.put(gpu_a(), "bad", binary_for("bad", 100));
  const std::string bad = entry_dir_of(dir.path(), gpu_a(), "bad") + "/0.entry";
  write_bytes(bad, {1, 2, 3});
  // An intact entry copied under another key's directory is bad too.
  const std::string misplaced_dir = entry_dir_of(dir.path(), gpu_a(), "elsewhere");
  fs::create_directories(misplaced_dir);
  fs::copy_file(entry_dir_of(dir.path(), gpu_a(), "good") + "/0.entry", misplaced_dir + "/0.entry");
  const auto found = store.verify(false);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_TRUE(fs::exists(bad)) << "verify without --fix changes nothing";
  EXPECT_EQ(store.verify(true).size(), 2u);
  EXPECT_TRUE(store.verify(false).empty());
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
}

TEST(KernelStore, PruneAndClear) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  for (int i = 0; i < 10; ++i) store.put(gpu_a(), "k" + std::to_string(i), binary_for("k", 1000));
  const std::uint64_t entry_bytes = store.stats(/*recount=*/true).bytes / 10;
  EXPECT_EQ(store.prune(4 * entry_bytes, 0), 6u);
  EXPECT_EQ(store.stats(/*recount=*/true).entries, 4u);
  store.clear();
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.recorded_bytes, 0u);
}


// --- What other writers may leave in the store: never blocks, never leads
// out of the store, never hides a key for good, never read unbounded.

// The tests create directories themselves; with a known umask they are
// neither group- nor world-writable, as the store requires.
const mode_t kTestUmask = (::umask(022), 022);

// A key's directory made by hand, as another writer might leave it.
std::string make_key_directory(const std::string& root, const device_identity& d, std::string_view key) {
  const std::string path = entry_dir_of(root, d, key);
  fs::create_directories(path);
  return path;
}

// Every file under `dir` with its bytes and mtime: what must not change.
std::map<std::string, std::pair<byte_vector, std::int64_t>> contents_of(const std::string& dir) {
  std::map<std::string, std::pair<byte_vector, std::int64_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[e.path().string()] = {read_bytes(e.path().string()), mtime_of(e.path().string())};
  }
  return out;
}

byte_vector entry_bytes_for(const device_identity& d, std::string_view key, const byte_vector& binary) {
  return detail::encode_entry(detail::device_hash(d), key, binary, 0);
}

TEST(KernelStore, AFifoInAnEntrysPlaceIsSkippedAndNothingBlocks) {
  temp_dir dir;
  ASSERT_TRUE(kernel_store(store_in(dir.path())).put(gpu_a(), "other", binary_for("other", 100)));
  const std::string key_dir = make_key_directory(dir.path(), gpu_a(), "k");
  ASSERT_EQ(::mkfifo((key_dir + "/0.entry").c_str(), 0600), 0);
  // Nothing opens the FIFO's other end: an operation that opens it blocking
  // would wait forever (the alarm ends it).
  const child_result r = run_in_child(
      [&] {
        kernel_store store(store_in(dir.path()));
        if (store.get(gpu_a(), "k")) return 1;
        if (!store.put(gpu_a(), "k", binary_for("k", 100))) return 2;
        if (store.get(gpu_a(), "k") != binary_for("k", 100)) return 3;
        if (!store.put(gpu_a(), "another", binary_for("another", 100))) return 4;
        if (!store.remove(gpu_a(), "k")) return 5;
        if (store.stats(/*recount=*/true).entries != 2) return 6;  // "other" and "another"
        return 0;
      },
      kHangAlarmSeconds);
  EXPECT_FALSE(r.hung()) << "an operation blocked on the FIFO";
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(KernelStore, ASymlinkedKeyDirectoryIsNeverFollowed) {
  temp_dir dir, outside;
  kernel_store store(store_in(dir.path()));
  ASSERT_TRUE(store.put(gpu_a(), "other", binary_for("other", 100)));
  // Elsewhere: a damaged 0.entry (a reader that followed the link would
  // remove it) and a valid entry of the key (it would serve it).
  write_bytes(outside.path() + "/0.entry", {1, 2, 3});
  write_bytes(outside.path() + "/1.entry", entry_bytes_for(gpu_a(), "k", binary_for("k", 100)));
  set_mtime(outside.path() + "/1.entry", 1'000'000'000);
  const std::string key_dir = entry_dir_of(dir.path(), gpu_a(), "k");
  fs::create_directories(fs::path(key_dir).parent_path());
  fs::create_directory_symlink(outside.path(), key_dir);
  const auto before = contents_of(outside.path());

  EXPECT_FALSE(store.get(gpu_a(), "k").has_value());
  const bool stored = store.put(gpu_a(), "k", binary_for("k", 100));
  EXPECT_EQ(store.get(gpu_a(), "k").has_value(), stored) << "put reports what get can read";
  EXPECT_TRUE(store.remove(gpu_a(), "k") == stored);
  store.prune(0, 0);
  EXPECT_EQ(contents_of(outside.path()), before) << "nothing outside the store is read, touched or removed";

  // verify reports the link and --fix removes the link, not what it points to.
  const auto bad = store.verify(false);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].problem.find("symbolic link"), std::string::npos) << bad[0].problem;
  EXPECT_EQ(store.verify(true).size(), 1u);
  EXPECT_FALSE(fs::is_symlink(key_dir));
  EXPECT_EQ(contents_of(outside.path()), before);
  EXPECT_TRUE(store.put(gpu_a(), "k", binary_for("k", 100)));
  EXPECT_EQ(store.get(gpu_a(), "k"), binary_for("k", 100));
}

TEST(KernelStore, ASymlinkedEntryFileIsNeitherReadNorTouched) {
  temp_dir dir, outside;
  kernel_store store(store_in(dir.path()));
  const std::string target = outside.path() + "/target.entry";
  write_bytes(target, entry_bytes_for(gpu_a(), "k", binary_for("k", 100)));
  set_mtime(target, 1'000'000'000);
  const std::string key_dir = make_key_directory(dir.path(), gpu_a(), "k");
  fs::create_symlink(target, key_dir + "/0.entry");
  const auto before = contents_of(outside.path());

  EXPECT_FALSE(store.get(gpu_a(), "k").has_value()) << "a link is not an entry";
  EXPECT_TRUE(store.put(gpu_a(), "k", binary_for("k", 100))) << "stored beside the link";
  EXPECT_EQ(store.get(gpu_a(), "k"), binary_for("k", 100));
  store.verify(true);
  EXPECT_EQ(contents_of(outside.path()), before) << "the link's target is not read, touched or removed";
  EXPECT_EQ(store.get(gpu_a(), "k"), binary_for("k", 100));
}

TEST(KernelStore, WalksNeverFollowLinksOutOfTheStore) {
  temp_dir dir, outside;
  kernel_store store(store_in(dir.path()));
  ASSERT_TRUE(store.put(gpu_a(), "k", binary_for("k", 100)));
  // Outside: a tree shaped like a device's directory, with an old entry.
  const std::string real_key_dir = entry_dir_of(dir.path(), gpu_a(), "k");
  const std::string key_hex = fs::path(real_key_dir).filename().string();
  const std::string prefix = key_hex.substr(0, 2);
  fs::create_directories(outside.path() + "/" + prefix + "/" + key_hex);
  write_bytes(outside.path() + "/" + prefix + "/" + key_hex + "/0.entry",
              entry_bytes_for(pocl_cpu(), "k", binary_for("k", 100)));
  set_mtime(outside.path() + "/" + prefix + "/" + key_hex + "/0.entry", 1'000'000'000);
  // Linked in as another device's directory, and as a prefix directory of ours.
  fs::create_directory_symlink(outside.path(), dir.path() + "/v2/" + detail::to_hex(detail::device_hash(pocl_cpu())));
  const std::string device_dir = fs::path(real_key_dir).parent_path().parent_path().string();
  fs::create_directory_symlink(outside.path() + "/" + prefix, device_dir + "/ff");
  const auto before = contents_of(outside.path());

  EXPECT_EQ(store.stats(/*recount=*/true).entries, 1u);
  EXPECT_EQ(store.list().size(), 1u);
  EXPECT_FALSE(store.get(pocl_cpu(), "k").has_value());
  EXPECT_EQ(store.verify(false).size(), 2u) << "both links are reported";
  EXPECT_EQ(store.prune(0, 30), 1u) << "only the store's own entry";
  store.clear();
  EXPECT_EQ(contents_of(outside.path()), before);
  store.verify(true);
  EXPECT_EQ(contents_of(outside.path()), before);
  EXPECT_TRUE(store.verify(false).empty());
}

TEST(KernelStore, ADirectoryInAnEntrysPlaceIsSkippedByGetAndPutAlike) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  const std::string key_dir = make_key_directory(dir.path(), gpu_a(), "k");
  fs::create_directory(key_dir + "/0.entry");
  EXPECT_FALSE(store.get(gpu_a(), "k").has_value());
  EXPECT_TRUE(store.put(gpu_a(), "k", binary_for("k", 100)));
  EXPECT_EQ(store.get(gpu_a(), "k"), binary_for("k", 100)) << "get reaches the slot put used";
  EXPECT_TRUE(store.remove(gpu_a(), "k"));
  EXPECT_FALSE(store.get(gpu_a(), "k").has_value());
}

TEST(KernelStore, VerifyReportsWhatDoesNotBelongAndFixRemovesIt) {
  temp_dir dir, outside;
  {
    kernel_store store(store_in(dir.path()));
    for (const char* key : {"good", "k1", "k2", "k3", "k4"}) ASSERT_TRUE(store.put(gpu_a(), key, binary_for(key, 100)));
  }
  const std::string k1 = entry_dir_of(dir.path(), gpu_a(), "k1");
  const std::string k2 = entry_dir_of(dir.path(), gpu_a(), "k2");
  const std::string k3 = entry_dir_of(dir.path(), gpu_a(), "k3");
  const std::string k4 = entry_dir_of(dir.path(), gpu_a(), "k4");
  fs::create_directories(k1 + "/1.entry/inside");  // a directory where an entry goes
  write_bytes(k1 + "/1.entry/inside/file", {1});
  ASSERT_EQ(::mkfifo((k2 + "/1.entry").c_str(), 0600), 0);
  write_bytes(outside.path() + "/file", {1, 2});
  fs::create_symlink(outside.path() + "/file", k3 + "/1.entry");
  write_bytes(k4 + "/notes.txt", {'h', 'i'});  // a file the store never writes
  const auto before = contents_of(outside.path());

  const child_result r = run_in_child(
      [&] {
        kernel_store store(store_in(dir.path()));
        const auto bad = store.verify(false);
        for (const auto& b : bad) std::fprintf(stderr, "%s: %s\n", b.path.c_str(), b.problem.c_str());
        if (bad.size() != 4) return 1;
        if (!fs::exists(k1 + "/1.entry") || !fs::exists(k4 + "/notes.txt")) return 2;  // verify alone changes nothing
        if (store.verify(true).size() != 4) return 3;
        if (!store.verify(false).empty()) return 4;
        for (const char* key : {"good", "k1", "k2", "k3", "k4"}) {
          if (store.get(gpu_a(), key) != binary_for(key, 100)) return 5;  // the entries stay
        }
        return 0;
      },
      kHangAlarmSeconds);
  EXPECT_FALSE(r.hung());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(k1 + "/1.entry"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(k2 + "/1.entry"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(k3 + "/1.entry"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(k4 + "/notes.txt"), std::string::npos) << r.err;
  for (const char* kind : {"a directory", "a FIFO", "a symbolic link", "a regular file"}) {
    EXPECT_NE(r.err.find(kind), std::string::npos) << kind << "\n" << r.err;
  }
  EXPECT_FALSE(fs::exists(fs::symlink_status(k1 + "/1.entry")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(k2 + "/1.entry")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(k3 + "/1.entry")));
  EXPECT_FALSE(fs::exists(k4 + "/notes.txt"));
  EXPECT_EQ(contents_of(outside.path()), before);
}

TEST(KernelStore, AFileLargerThanAnyEntryIsNeverRead) {
  temp_dir dir;
  store_config c = store_in(dir.path());
  c.max_entry_bytes = 1 << 20;
  kernel_store store(c);
  // A sparse 256 MB file in an entry's place (and the same file's header
  // claiming it is an entry of the key).
  const std::string key_dir = make_key_directory(dir.path(), gpu_a(), "k");
  const std::uint64_t huge = std::uint64_t{256} << 20;
  {
    byte_vector header = entry_bytes_for(gpu_a(), "k", {});
    write_bytes(key_dir + "/0.entry", header);
    ASSERT_EQ(::truncate((key_dir + "/0.entry").c_str(), static_cast<off_t>(huge)), 0);
  }
  const std::optional<std::uint64_t> before = bytes_read_by_this_process();
  if (!before) GTEST_SKIP() << "/proc/self/io is not available: cannot count the bytes read";
  EXPECT_FALSE(store.get(gpu_a(), "k").has_value());
  EXPECT_TRUE(store.put(gpu_a(), "k", binary_for("k", 100)));
  EXPECT_EQ(store.get(gpu_a(), "k"), binary_for("k", 100));
  const auto bad = store.verify(false);
  EXPECT_EQ(bad.size(), 1u);
  store.list();
  EXPECT_LT(*bytes_read_by_this_process() - *before, huge / 64) << "the huge file was read";
}

TEST(KernelStore, WhatTheStoreCreatesIsPrivateToItsUser) {
  temp_dir dir;
  kernel_store store(store_in(dir.path() + "/new/store"));
  ASSERT_TRUE(store.put(gpu_a(), "k", binary_for("k", 100)));
  int checked = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path() + "/new")) {
    struct stat st {};
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, S_ISDIR(st.st_mode) ? 0700u : 0600u) << e.path();
    ++checked;
  }
  EXPECT_GE(checked, 10) << "new, store, v2, shards, a lock, a record, device, device.txt, prefix, key, entry";
}

TEST(KernelStore, ARootOwnedByAnotherUserIsRefusedWithOneWarning) {
  if (!can_act_as_another_user()) GTEST_SKIP() << "only root can give a directory to another user";
  temp_dir dir;
  ASSERT_TRUE(kernel_store(store_in(dir.path())).put(gpu_a(), "k", binary_for("k", 100)));
  ASSERT_EQ(::chown(dir.path().c_str(), kOtherUser, kOtherUser), 0);
  ::testing::internal::CaptureStderr();
  kernel_store store(store_in(dir.path()));
  EXPECT_FALSE(store.get(gpu_a(), "k").has_value()) << "another user could have planted it";
  EXPECT_FALSE(store.put(gpu_a(), "new", binary_for("new", 100)));
  EXPECT_FALSE(store.get(gpu_a(), "k").has_value());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("owned by"), std::string::npos) << err;
  EXPECT_NE(err.find("UNICACHE_PERSISTENT_CACHE_SHARED"), std::string::npos) << err;
}

TEST(KernelStore, ARootWritableByGroupOrOthersIsRefusedWithOneWarning) {
  for (const mode_t mode : {0777, 0770, 0722}) {
    temp_dir dir;
    ASSERT_TRUE(kernel_store(store_in(dir.path())).put(gpu_a(), "k", binary_for("k", 100)));
    ASSERT_EQ(::chmod(dir.path().c_str(), mode), 0);
    ::testing::internal::CaptureStderr();
    kernel_store store(store_in(dir.path()));
    EXPECT_FALSE(store.get(gpu_a(), "k").has_value()) << std::oct << mode;
    EXPECT_FALSE(store.put(gpu_a(), "new", binary_for("new", 100)));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find("writable by"), std::string::npos) << err;
  }
}

TEST(KernelStore, AKeyDirectoryOrEntryOfAnotherUserIsNeverLoaded) {
  if (!can_act_as_another_user()) GTEST_SKIP() << "only root can give a file to another user";
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  ASSERT_TRUE(store.put(gpu_a(), "dir", binary_for("dir", 100)));
  ASSERT_TRUE(store.put(gpu_a(), "file", binary_for("file", 100)));
  ASSERT_TRUE(store.put(gpu_a(), "writable", binary_for("writable", 100)));
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(::chown(entry_dir_of(dir.path(), gpu_a(), "dir").c_str(), kOtherUser, kOtherUser), 0);
  ASSERT_EQ(::chown((entry_dir_of(dir.path(), gpu_a(), "file") + "/0.entry").c_str(), kOtherUser, kOtherUser), 0);
  ASSERT_EQ(::chmod((entry_dir_of(dir.path(), gpu_a(), "writable") + "/0.entry").c_str(), 0666), 0);
  EXPECT_FALSE(store.get(gpu_a(), "dir").has_value());
  EXPECT_FALSE(store.get(gpu_a(), "file").has_value());
  EXPECT_FALSE(store.get(gpu_a(), "writable").has_value());
  EXPECT_FALSE(store.put(gpu_a(), "dir", binary_for("dir", 100))) << "its directory is not ours";
  // The entry's slot is skipped: put stores into the next one, which get reaches.
  EXPECT_TRUE(store.put(gpu_a(), "file", binary_for("file", 100)));
  EXPECT_EQ(store.get(gpu_a(), "file"), binary_for("file", 100));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one warning:\n" << err;
}

TEST(KernelStore, MaxSizeZeroMeansNoSizeLimit) {
  temp_dir dir;
  kernel_store store(store_in(dir.path(), /*max_bytes=*/0));
  for (int i = 0; i < 5; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(store.put(gpu_a(), key, binary_for(key, 10000)));
  }
  for (int i = 0; i < 5; ++i) {
    const std::string key = "k" + std::to_string(i);
    EXPECT_EQ(store.get(gpu_a(), key), binary_for(key, 10000)) << key;
  }
  EXPECT_EQ(store.stats(/*recount=*/true).entries, 5u);
}

TEST(KernelStore, ABinaryLargerThanItsShardsShareIsRefusedUpFront) {
  temp_dir dir;
  kernel_store store(store_in(dir.path(), limit_with_shard_share(1000)));
  ASSERT_TRUE(store.put(gpu_a(), "small", binary_for("small", 100)));
  EXPECT_FALSE(store.put(gpu_a(), "huge", binary_for("huge", 1000)));
  EXPECT_FALSE(store.get(gpu_a(), "huge").has_value());
  EXPECT_TRUE(store.get(gpu_a(), "small").has_value()) << "and nothing was evicted for it";
  EXPECT_EQ(store.stats(/*recount=*/true).entries, 1u);
}

TEST(KernelStore, AnEntryLargerThanHalfItsShardsShareIsKeptByItsOwnPut) {
  temp_dir dir;
  kernel_store store(store_in(dir.path(), limit_with_shard_share(10000)));
  detail::store_access::use_key_hasher(store, &shard_zero_hash);
  for (int i = 0; i < 5; ++i) {
    const std::string key = "small" + std::to_string(i);
    ASSERT_TRUE(store.put(gpu_a(), key, binary_for(key, 1000)));
    set_mtime(entry_dir_of(dir.path(), gpu_a(), key, &shard_zero_hash) + "/0.entry", 1'700'000'000 + i);
  }
  // Over the share: eviction down to half (5000 B) cannot keep this 6000 B
  // entry, but it must not evict the entry its own put reports as stored.
  ASSERT_TRUE(store.put(gpu_a(), "large", binary_for("large", 6000)));
  wait_for_eviction();
  EXPECT_EQ(store.get(gpu_a(), "large"), binary_for("large", 6000));
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.entries, 1u) << "the others were evicted";
  EXPECT_EQ(s.recorded_bytes, s.bytes);
}

// Exit codes: 0, or which check failed.
int unreadable_first_slot_checks(const std::string& dir) {
  kernel_store store(store_in(dir));
  if (!store.put(gpu_a(), "k", binary_for("k", 100))) return 10;
  if (::chmod((entry_dir_of(dir, gpu_a(), "k") + "/0.entry").c_str(), 0) != 0) return 11;
  if (store.get(gpu_a(), "k")) return 12;  // unreadable: a miss
  const bool stored = store.put(gpu_a(), "k", binary_for("k", 100));
  if (stored && store.get(gpu_a(), "k") != binary_for("k", 100)) return 13;  // put said stored, get cannot read it
  if (!stored) return 14;  // the next slot is free
  return 0;
}

TEST(KernelStore, AnUnreadableEntryIsSkippedByGetAndPutAlike) {
  temp_dir dir;
  if (!can_act_as_another_user()) {
    EXPECT_EQ(unreadable_first_slot_checks(dir.path()), 0);
    return;
  }
  // Root reads any file: the store runs as an unprivileged user in a child,
  // on a directory that user owns.
  ASSERT_EQ(::chown(dir.path().c_str(), kOtherUser, kOtherUser), 0);
  const child_result r = run_in_child([&] {
    if (!become_other_user()) return 20;
    return unreadable_first_slot_checks(dir.path());
  });
  EXPECT_EQ(r.status, 0) << r.err;
}


TEST(KernelStore, ASharedStoreIsGroupWritableAndTrustsItsGroupButNotEverybody) {
  temp_dir dir;
  store_config c = store_in(dir.path() + "/shared");
  c.shared = true;
  kernel_store store(c);
  ASSERT_TRUE(store.put(gpu_a(), "k", binary_for("k", 100)));
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) {
    struct stat st {};
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, S_ISDIR(st.st_mode) ? 02770u : 0660u) << e.path();
  }
  if (can_act_as_another_user()) {
    // Written by another member of the group: loaded.
    const std::string key_dir = entry_dir_of(c.directory, gpu_a(), "k");
    ASSERT_EQ(::chown(key_dir.c_str(), kOtherUser, kOtherUser), 0);
    ASSERT_EQ(::chown((key_dir + "/0.entry").c_str(), kOtherUser, kOtherUser), 0);
    EXPECT_EQ(kernel_store(c).get(gpu_a(), "k"), binary_for("k", 100));
  }
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(kernel_store(store_in(c.directory)).enabled()) << "a private store refuses a group-writable root";
  ASSERT_EQ(::chmod(c.directory.c_str(), 02777), 0);
  EXPECT_FALSE(kernel_store(c).get(gpu_a(), "k").has_value()) << "writable by everybody: refused even when shared";
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;
  EXPECT_NE(err.find("writable by every user"), std::string::npos) << err;
}

TEST(KernelStore, WithSizeEvictionOffPutsNeverEvictAndTheLimitIsNotEnforced) {
  temp_dir dir;
  store_config c = store_in(dir.path(), /*max_bytes=*/3000);
  c.size_eviction = false;
  kernel_store store(c);
  for (int i = 0; i < 5; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(store.put(gpu_a(), key, binary_for(key, 1000)));
  }
  EXPECT_TRUE(store.put(gpu_a(), "larger than the store", binary_for("l", 5000)));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(store.get(gpu_a(), "k" + std::to_string(i)).has_value()) << i;
  const store_stats s = store.stats(/*recount=*/true);
  EXPECT_EQ(s.entries, 6u);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  // Last use is recorded in whole seconds: make the large entry the least
  // recently used, or the order of entries used in the same second (the
  // walk's) would decide how many pruning removes.
  set_mtime(entry_dir_of(dir.path(), gpu_a(), "larger than the store") + "/0.entry", ::time(nullptr) - 3600);
  EXPECT_EQ(store.prune(3000, 0), 4u) << "explicit pruning still works: the large entry, then three of the five";
}

TEST(KernelStore, ListReadsEachDevicesDescriptionOnce) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(store.put(gpu_a(), "k" + std::to_string(i), binary_for("k", 10)));
  // A description as long as one may be: read once it costs 4 KB, read per
  // entry 200 KB, far more than the 50 small entries themselves.
  const std::string device_txt = entry_dir_of(dir.path(), gpu_a(), "k0") + "/../../device.txt";
  std::ofstream(device_txt, std::ios::trunc) << std::string(4000, 'd') << "\n";
  const auto before = bytes_read_by_this_process();
  if (!before) GTEST_SKIP() << "/proc/self/io is not available: cannot count the bytes read";
  const auto entries = store.list();
  const std::uint64_t read = *bytes_read_by_this_process() - *before;
  ASSERT_EQ(entries.size(), 50u);
  EXPECT_EQ(entries[0].device_description, std::string(4000, 'd'));
  EXPECT_LT(read, 50 * 200 + 4001 + 20000) << "the description was read once per entry";
}

TEST(KeyDescription, ACacheKeyNamesItsKindAndItsKernel) {
  cache_key key;
  key.add("opencl-c").add("gemm").add("-cl-fast-relaxed-math").add("__kernel void gemm() {}");
  const detail::key_description d = detail::describe_key(key.bytes());
  EXPECT_EQ(d.kind, "opencl-c");
  EXPECT_EQ(d.name, "gemm");
  EXPECT_EQ(d.preview, "");
  cache_key kind_only;
  kind_only.add("engine-info").add(std::uint32_t{3});
  EXPECT_EQ(detail::describe_key(kind_only.bytes()).kind, "engine-info");
  EXPECT_EQ(detail::describe_key(kind_only.bytes()).name, "") << "the second field is not a text";
}

TEST(KeyDescription, AnyOtherKeyIsAQuotedShortenedPreview) {
  const detail::key_description plain = detail::describe_key("opencl-engine-info/1");
  EXPECT_EQ(plain.kind, "");
  EXPECT_EQ(plain.preview, "\"opencl-engine-info/1\"");
  const detail::key_description long_key = detail::describe_key(std::string(10000, 'x'));
  EXPECT_LT(long_key.preview.size(), 80u) << long_key.preview;
  EXPECT_NE(long_key.preview.find("(10000 bytes)"), std::string::npos) << long_key.preview;
}

TEST(KeyDescription, UntrustedBytesAreNeverShownRaw) {
  cache_key odd_kind;
  odd_kind.add("\x1b[2Jevil").add("gemm");
  const detail::key_description a = detail::describe_key(odd_kind.bytes());
  EXPECT_EQ(a.kind, "") << "not a kind: shown as a preview";
  cache_key odd_name;
  odd_name.add("opencl-c").add("k\n\x1b]0;title\x07\"");
  const detail::key_description b = detail::describe_key(odd_name.bytes());
  EXPECT_EQ(b.kind, "opencl-c");
  for (const std::string& shown : {a.preview, b.name}) {
    for (const char c : shown) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << shown;
  }
  EXPECT_EQ(b.name, "\"k\\n\\x1b]0;title\\x07\\\"\"");
}

// --- Run-time settings of a store and of the process-wide one.

TEST(KernelStoreSettings, AChangeAppliesToOperationsThatStartAfterIt) {
  temp_dir a, b;
  kernel_store store(store_in(a.path()));
  ASSERT_TRUE(store.put(gpu_a(), "in a", binary_for("a", 100)));
  store.set_directory(b.path());
  EXPECT_EQ(store.config().directory, b.path());
  EXPECT_FALSE(store.get(gpu_a(), "in a").has_value());
  ASSERT_TRUE(store.put(gpu_a(), "in b", binary_for("b", 100)));
  EXPECT_EQ(entry_files(a.path()).size(), 1u);
  EXPECT_EQ(entry_files(b.path()).size(), 1u);
  store.set_enabled(false);
  EXPECT_FALSE(store.enabled());
  EXPECT_FALSE(store.get(gpu_a(), "in b").has_value());
  EXPECT_FALSE(store.put(gpu_a(), "off", binary_for("off", 100)));
  store.set_enabled(true);
  EXPECT_EQ(store.get(gpu_a(), "in b"), binary_for("b", 100));
  store.set_capacity_mb(0);
  EXPECT_EQ(store.config().max_size_bytes, 0u);
  store.set_capacity_mb(1);
  EXPECT_EQ(store.config().max_size_bytes, std::uint64_t{1} << 20);
  EXPECT_THROW(store.set_capacity_mb((UINT64_MAX >> 20) + 1), store_error) << "rejected as the variable is";
  EXPECT_EQ(store.config().max_size_bytes, std::uint64_t{1} << 20) << "a rejected value changes nothing";
  EXPECT_FALSE(store.put(gpu_a(), "2 MB", binary_for("2", 2 << 20))) << "larger than the new capacity";
  store.set_size_eviction(false);
  EXPECT_FALSE(store.config().size_eviction);
  EXPECT_TRUE(store.put(gpu_a(), "2 MB", binary_for("2", 2 << 20))) << "no limit without size eviction";
}

// The process-wide store starts from the environment; these tests set it
// off there, then configure it at run time.
kernel_store& process_store() {
  ::setenv("UNICACHE_PERSISTENT_CACHE", "0", 1);
  return kernel_store::instance();
}

TEST(KernelStoreSettings, TheProcessWideStoreIsConfiguredAtRunTime) {
  temp_dir dir;
  kernel_store& store = process_store();
  EXPECT_EQ(&store, &kernel_store::instance());
  store.set_directory(dir.path());
  store.set_enabled(true);
  ASSERT_TRUE(store.enabled());
  EXPECT_TRUE(store.put(gpu_a(), "k", binary_for("k", 100)));
  EXPECT_EQ(kernel_store(store_in(dir.path())).get(gpu_a(), "k"), binary_for("k", 100));
  store.set_enabled(false);
  EXPECT_FALSE(store.get(gpu_a(), "k").has_value());
}

TEST(KernelStoreSettings, SettingsChangeSafelyWhileOtherThreadsGetAndPut) {
  temp_dir a, b, last;
  kernel_store& store = process_store();
  store.set_directory(a.path());
  store.set_enabled(true);
  constexpr int kWorkers = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, hits{0};
  std::array<std::atomic<int>, kWorkers> iterations{};
  std::vector<std::thread> workers;
  for (int t = 0; t < kWorkers; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const std::string key = "k" + std::to_string((i * 7 + t) % 24);
        store.put(gpu_a(), key, binary_for(key, 40000));
        if (const auto got = store.get(gpu_a(), key)) {
          ++hits;
          if (*got != binary_for(key, 40000)) ++wrong;
        }
        store.remove(gpu_a(), i % 5 == 0 ? key : "absent");
        ++iterations[t];
      }
    });
  }
  // Every worker finishes `more` iterations that started after this call.
  auto wait_for_workers = [&](int more) {
    std::array<int, kWorkers> start{};
    for (int t = 0; t < kWorkers; ++t) start[t] = iterations[t].load();
    for (int t = 0; t < kWorkers; ++t) {
      while (iterations[t].load() < start[t] + more) std::this_thread::yield();
    }
  };
  for (int change = 0; change < 300; ++change) {
    store.set_directory(change % 2 ? b.path() : a.path());
    store.set_capacity_mb(change % 3 == 0 ? 0 : 1);
    store.set_size_eviction(change % 4 != 0);
    store.set_enabled(change % 7 != 0);
  }
  store.set_directory(last.path());
  store.set_enabled(true);
  wait_for_workers(2);  // what started before the change has finished
  wait_for_eviction();  // and the cleanups it asked for (the workers' new ones are in `last`)
  const std::size_t in_a = entry_files(a.path()).size(), in_b = entry_files(b.path()).size();
  wait_for_workers(3);
  stop = true;
  for (auto& w : workers) w.join();
  wait_for_eviction();
  EXPECT_EQ(wrong.load(), 0) << "a get returned another binary";
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(entry_files(a.path()).size(), in_a) << "operations that started after the change used the new directory";
  EXPECT_EQ(entry_files(b.path()).size(), in_b);
  EXPECT_GT(entry_files(last.path()).size(), 0u);
  for (const temp_dir* d : {&a, &b, &last}) {
    kernel_store check(store_in(d->path()));
    const auto bad = check.verify(false);
    EXPECT_TRUE(bad.empty()) << d->path() << ": " << (bad.empty() ? "" : bad.front().path + ": " + bad.front().problem);
    const store_stats s = check.stats(/*recount=*/true);
    EXPECT_EQ(s.recorded_bytes, s.bytes) << d->path();
  }
  store.set_enabled(false);
}

}  // namespace
}  // namespace unicache
