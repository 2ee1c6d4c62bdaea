#include "util/file_io.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "store_test_support.hpp"

namespace unicache::detail {
namespace {

using namespace unicache::testing;

byte_span as_bytes(const std::string& s) {
  return {reinterpret_cast<const unsigned char*>(s.data()), s.size()};
}

TEST(FileIo, PublishNoReplaceRefusesAnExistingTarget) {
  temp_dir dir;
  std::string first, second;
  ASSERT_EQ(write_temp_file(dir.path(), as_bytes("one"), first), 0);
  ASSERT_EQ(write_temp_file(dir.path(), as_bytes("two"), second), 0);
  const std::string target = dir.path() + "/0.entry";
  EXPECT_EQ(publish_no_replace(first, target), 0);
  EXPECT_EQ(publish_no_replace(second, target), EEXIST);
  byte_vector got;
  struct stat st {};
  ASSERT_EQ(read_file(target, got, &st), 0);
  EXPECT_EQ(std::string(got.begin(), got.end()), "one") << "the first publisher wins";
  EXPECT_TRUE(std::filesystem::exists(second)) << "the loser keeps its temp file to clean up";
}

TEST(FileIo, FailedWriteLeavesNoTemporaryFileBehind) {
  temp_dir dir;
  // A real write failure without privileges: the file size limit (EFBIG).
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {1024, 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string temp;
    const int err = write_temp_file(dir.path(), byte_vector(4096, 7), temp);
    ::_exit(err == EFBIG && !std::filesystem::exists(temp) ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(FileIo, ReadTouchesMtimeOnlyWhenOlderThanTheInterval) {
  temp_dir dir;
  std::string temp;
  ASSERT_EQ(write_temp_file(dir.path(), as_bytes("x"), temp), 0);
  const struct timespec old_times[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, temp.c_str(), old_times, 0), 0);
  byte_vector got;
  struct stat st {};
  ASSERT_EQ(read_file(temp, got, &st, /*touch_older_than_s=*/60), 0);
  struct stat after {};
  ::stat(temp.c_str(), &after);
  EXPECT_GT(after.st_mtim.tv_sec, 1000000000) << "an old entry's use is recorded";
  const auto recorded = after.st_mtim;
  ASSERT_EQ(read_file(temp, got, &st, 60), 0);
  ::stat(temp.c_str(), &after);
  EXPECT_EQ(after.st_mtim.tv_sec, recorded.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, recorded.tv_nsec) << "a recent use is not written again";
}

TEST(FileIo, MakeDirectoriesCreatesPathsAndReportsAFileInTheWay) {
  temp_dir dir;
  EXPECT_EQ(make_directories(dir.path() + "/a/b/c"), 0);
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/a/b/c"));
  std::string temp;
  ASSERT_EQ(write_temp_file(dir.path(), as_bytes("x"), temp), 0);
  EXPECT_EQ(make_directories(temp + "/sub"), ENOTDIR);
}

}  // namespace
}  // namespace unicache::detail
