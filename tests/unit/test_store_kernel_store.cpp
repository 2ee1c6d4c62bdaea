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
#include <filesystem>
#include <fstream>
#include <thread>

#include "store/entry_format.hpp"
#include "store/size_file.hpp"
#include "store/store_testing.hpp"
#include "util/file_io.hpp"
#include "store_test_support.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;
namespace fs = std::filesystem;

std::string entry_dir_of(const std::string& root, const device_identity& d, std::string_view key) {
  const std::string k = detail::to_hex(detail::key_hash(key));
  return root + "/v1/" + detail::to_hex(detail::device_hash(d)) + "/" + k.substr(0, 2) + "/" + k;
}

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
      dir.path() + "/v1/" + detail::to_hex(detail::device_hash(gpu_a())) + "/" +
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
  byte_vector bytes;
  struct stat st {};
  ASSERT_EQ(detail::read_file(path, bytes, &st), 0);
  write_bytes(path, GetParam().apply(bytes));
  EXPECT_FALSE(store.get(gpu_a(), "k").has_value());
  EXPECT_FALSE(fs::exists(path)) << "a bad entry must be removed";
  const store_stats s = store.stats();
  EXPECT_EQ(s.recorded_bytes, s.bytes) << "the size file follows the removal";
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
  const store_stats s = store.stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  const byte_vector rebuilt = binary_for("gemm-rebuilt", 6000);
  EXPECT_TRUE(store.put(gpu_a(), "gemm", rebuilt)) << "the slot is free for the rebuilt binary";
  EXPECT_EQ(store.get(gpu_a(), "gemm"), rebuilt);
}

TEST(KernelStore, SizeFileEqualsTheRecountAndIsRebuiltWhenMissingOrCorrupt) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  for (int i = 0; i < 20; ++i) store.put(gpu_a(), "k" + std::to_string(i), binary_for("k", 1000 + i));
  store_stats s = store.stats();
  EXPECT_EQ(s.entries, 20u);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  fs::remove(dir.path() + "/v1/size");
  store.put(gpu_a(), "after_missing", binary_for("x", 10));
  s = store.stats();
  EXPECT_EQ(s.recorded_bytes, s.bytes) << "a missing size file is recounted";
  write_bytes(dir.path() + "/v1/size", byte_vector(40, 0xff));
  store.put(gpu_a(), "after_corrupt", binary_for("x", 10));
  s = store.stats();
  EXPECT_EQ(s.recorded_bytes, s.bytes) << "a corrupt size file is recounted";
}

TEST(KernelStore, OverTheLimitLeastRecentlyUsedEntriesGoUntilHalfTheLimit) {
  temp_dir dir;
  const std::uint64_t entry_bytes = 10000 + detail::kEntryHeaderBytes + 2;
  kernel_store store(store_in(dir.path(), /*max_bytes=*/10 * entry_bytes));
  // Ten entries, last used at t0 + i (k0 the least recently used)...
  const std::int64_t t0 = 1'700'000'000;
  for (int i = 0; i < 10; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(store.put(gpu_a(), key, binary_for(key, 10000)));
    set_mtime(entry_dir_of(dir.path(), gpu_a(), key) + "/0.entry", t0 + i);
  }
  // ...then k0 and k1 are used, which records their use (they were old).
  ASSERT_TRUE(store.get(gpu_a(), "k0").has_value());
  ASSERT_TRUE(store.get(gpu_a(), "k1").has_value());
  // One more entry crosses the limit: down to half.
  ASSERT_TRUE(store.put(gpu_a(), "k10", binary_for("k10", 10000)));
  const store_stats s = store.stats();
  EXPECT_LE(s.bytes, 5 * entry_bytes);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
  for (const char* kept : {"k0", "k1", "k10"}) EXPECT_TRUE(store.get(gpu_a(), kept).has_value()) << kept;
  for (const char* gone : {"k2", "k3", "k4", "k5"}) EXPECT_FALSE(store.get(gpu_a(), gone).has_value()) << gone;
}

TEST(KernelStore, UseIsRecordedAtMostOnceAMinuteAndNeverReadFromAtime) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  store.put(gpu_a(), "k", binary_for("k", 10));
  const std::string path = entry_dir_of(dir.path(), gpu_a(), "k") + "/0.entry";
  set_mtime(path, 1'000'000'000);
  store.get(gpu_a(), "k");
  const std::int64_t recorded = mtime_of(path);
  EXPECT_GT(recorded, 1'000'000'000);
  set_mtime(path, recorded - 10);  // used 10 s ago: within the minute
  store.get(gpu_a(), "k");
  EXPECT_EQ(mtime_of(path), recorded - 10) << "a recent use is not written again";
}

TEST(KernelStore, EntriesUnusedForThresholdDaysAreRemovedByTheDailyWalk) {
  temp_dir dir;
  store_config c = store_in(dir.path());
  c.threshold_days = 7;
  kernel_store store(c);
  store.put(gpu_a(), "stale", binary_for("stale", 100));
  store.put(gpu_a(), "fresh", binary_for("fresh", 100));
  const std::int64_t now = ::time(nullptr);
  set_mtime(entry_dir_of(dir.path(), gpu_a(), "stale") + "/0.entry", now - 8 * 86400);
  set_mtime(entry_dir_of(dir.path(), gpu_a(), "fresh") + "/0.entry", now - 6 * 86400);
  // The last walk was two days ago: the next write walks and ages entries out.
  detail::size_file sizes(dir.path() + "/v1/size");
  auto record = sizes.read();
  ASSERT_TRUE(record);
  record->last_walk_unix = now - 2 * 86400;
  ASSERT_EQ(sizes.write(*record), 0);
  store.put(gpu_a(), "new", binary_for("new", 100));
  EXPECT_FALSE(fs::exists(entry_dir_of(dir.path(), gpu_a(), "stale") + "/0.entry"));
  EXPECT_TRUE(store.get(gpu_a(), "fresh").has_value());
  EXPECT_TRUE(store.get(gpu_a(), "new").has_value());
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
  EXPECT_EQ(store.stats().entries, 1u);
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
  EXPECT_THROW(store.stats(), store_error);
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

// Runs `body` in a child process with stderr captured; returns exit status
// and what it printed.
struct child_result {
  int status = -1;
  std::string err;
};
template <typename Body>
child_result run_in_child(Body body) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    ::_exit(body());
  }
  ::close(pipe_fds[1]);
  child_result r;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) r.err.append(buf, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
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
  // A real full disk: a 64 KB tmpfs in a private mount namespace; where
  // mounting is not allowed, a real write failure from the file size limit.
  const child_result r = run_in_child([&] {
    const std::string mount_point = dir.path() + "/disk";
    fs::create_directory(mount_point);
    const bool tmpfs = ::unshare(CLONE_NEWNS) == 0 &&
                       ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                       ::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=64k") == 0;
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

TEST(KernelStore, PermissionErrorWarnsOnceAndStoredBinariesStillServe) {
  temp_dir dir;
  ::chmod(dir.path().c_str(), 0755);  // mkdtemp made it private; others may read the store
  kernel_store(store_in(dir.path())).put(gpu_a(), "k", binary_for("k", 100));
  const child_result r = run_in_child([&] {
    if (::geteuid() == 0) {
      // Root ignores permissions: drop to nobody for a real EACCES.
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 20;
    } else {
      ::chmod((dir.path() + "/v1").c_str(), 0555);
    }
    kernel_store store(store_in(dir.path()));
    if (store.writable()) return 21;
    if (store.put(gpu_a(), "new", binary_for("new", 100))) return 22;
    if (store.get(gpu_a(), "k") != binary_for("k", 100)) return 23;
    return 0;
  });
  ::chmod((dir.path() + "/v1").c_str(), 0755);
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
  const store_stats s = store.stats();
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
  write_bytes(key_dir + "/.tmp.99999.0", byte_vector(full.begin(), full.begin() + 50));
  EXPECT_FALSE(store.get(gpu_a(), "other").has_value());
  EXPECT_EQ(store.stats().temporary_files, 1u);
  EXPECT_TRUE(store.verify(/*fix=*/true).empty());
  EXPECT_EQ(store.stats().temporary_files, 0u);
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
  const store_stats s = store.stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.recorded_bytes, s.bytes);
}

TEST(KernelStore, PruneAndClear) {
  temp_dir dir;
  kernel_store store(store_in(dir.path()));
  for (int i = 0; i < 10; ++i) store.put(gpu_a(), "k" + std::to_string(i), binary_for("k", 1000));
  const std::uint64_t entry_bytes = store.stats().bytes / 10;
  EXPECT_EQ(store.prune(4 * entry_bytes, 0), 6u);
  EXPECT_EQ(store.stats().entries, 4u);
  store.clear();
  const store_stats s = store.stats();
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.recorded_bytes, 0u);
}

}  // namespace
}  // namespace unicache
