// The store's file operations and directory handles: what another writer may
// plant (links, FIFOs, directories, huge files) is refused without blocking,
// following or reading it. (Directory handles are tested here until they get
// a test executable of their own.)
#include "util/file_io.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store_test_support.hpp"
#include "util/directory_handle.hpp"

namespace unicache::detail {
namespace {

using namespace unicache::testing;
namespace fs = std::filesystem;

byte_span as_bytes(const std::string& s) {
  return {reinterpret_cast<const unsigned char*>(s.data()), s.size()};
}

std::string text_of(const byte_vector& bytes) { return std::string(bytes.begin(), bytes.end()); }

mode_t mode_of(const std::string& path) {
  struct stat st {};
  ::lstat(path.c_str(), &st);
  return st.st_mode & 07777;
}

TEST(FileIo, PublishNoReplaceRefusesAnExistingTarget) {
  temp_dir dir;
  const directory_handle d = directory_handle::open(dir.path());
  std::string first, second;
  ASSERT_EQ(write_temp_file(d, as_bytes("one"), 0600, first), 0);
  ASSERT_EQ(write_temp_file(d, as_bytes("two"), 0600, second), 0);
  EXPECT_EQ(publish_no_replace(d, first, "0.entry"), 0);
  EXPECT_EQ(publish_no_replace(d, second, "0.entry"), EEXIST);
  byte_vector got;
  ASSERT_EQ(read_regular_file(d, "0.entry", 100, got), 0);
  EXPECT_EQ(text_of(got), "one") << "the first publisher wins";
  EXPECT_TRUE(fs::exists(dir.path() + "/" + second)) << "the loser keeps its temp file to clean up";
}

TEST(FileIo, ALinkNamedLikeTheTargetCountsAsTakenAndIsNeverWrittenThrough) {
  temp_dir dir, outside;
  const directory_handle d = directory_handle::open(dir.path());
  fs::create_symlink(outside.path() + "/absent", dir.path() + "/0.entry");  // dangling
  std::string temp;
  ASSERT_EQ(write_temp_file(d, as_bytes("x"), 0600, temp), 0);
  EXPECT_EQ(publish_no_replace(d, temp, "0.entry"), EEXIST);
  EXPECT_EQ(publish_replace(d, temp, "0.entry"), 0) << "the link itself is replaced";
  EXPECT_FALSE(fs::is_symlink(dir.path() + "/0.entry"));
  EXPECT_TRUE(fs::is_empty(outside.path()));
}

TEST(FileIo, FailedWriteLeavesNoTemporaryFileBehind) {
  temp_dir dir;
  // A real write failure without privileges: the file size limit (EFBIG).
  const child_result r = run_in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {1024, 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string temp;
    const int err = write_temp_file(directory_handle::open(dir.path()), byte_vector(4096, 7), 0600, temp);
    return err == EFBIG && !fs::exists(dir.path() + "/" + temp) ? 0 : 1;
  });
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(FileIo, TemporaryFilesHaveExactlyTheModeAskedWhateverTheUmask) {
  temp_dir dir;
  const directory_handle d = directory_handle::open(dir.path());
  const mode_t old_umask = ::umask(027);
  std::string shared, private_file;
  ASSERT_EQ(write_temp_file(d, as_bytes("x"), 0660, shared), 0);
  ::umask(0);
  ASSERT_EQ(write_temp_file(d, as_bytes("x"), 0600, private_file), 0);
  ::umask(old_umask);
  EXPECT_EQ(mode_of(dir.path() + "/" + shared), 0660u);
  EXPECT_EQ(mode_of(dir.path() + "/" + private_file), 0600u);
}

TEST(FileIo, OnlyRegularFilesAreOpenedAndNothingBlocks) {
  temp_dir dir, outside;
  std::ofstream(outside.path() + "/target") << "secret";
  std::ofstream(dir.path() + "/regular") << "ok";
  fs::create_symlink(outside.path() + "/target", dir.path() + "/link");
  fs::create_directory(dir.path() + "/directory");
  ASSERT_EQ(::mkfifo((dir.path() + "/fifo").c_str(), 0600), 0);
  const child_result r = run_in_child(
      [&] {
        const directory_handle d = directory_handle::open(dir.path());
        byte_vector got;
        if (read_regular_file(d, "regular", 100, got) != 0 || text_of(got) != "ok") return 1;
        if (read_regular_file(d, "link", 100, got) != ELOOP) return 2;
        if (read_regular_file(d, "directory", 100, got) != EISDIR) return 3;
        if (read_regular_file(d, "fifo", 100, got) != EINVAL) return 4;  // opened without blocking, refused
        if (read_regular_file(d, "absent", 100, got) != ENOENT) return 5;
        return 0;
      },
      kHangAlarmSeconds);
  EXPECT_FALSE(r.hung()) << "opening the FIFO blocked";
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(FileIo, AFileOverTheLimitIsNotReadAtAll) {
  temp_dir dir;
  const std::uint64_t huge = std::uint64_t{64} << 20;
  std::ofstream(dir.path() + "/sparse") << "x";
  ASSERT_EQ(::truncate((dir.path() + "/sparse").c_str(), static_cast<off_t>(huge)), 0);
  const directory_handle d = directory_handle::open(dir.path());
  const auto before = bytes_read_by_this_process();
  if (!before) GTEST_SKIP() << "/proc/self/io is not available: cannot count the bytes read";
  byte_vector got;
  EXPECT_EQ(read_regular_file(d, "sparse", huge - 1, got), EFBIG);
  EXPECT_TRUE(got.empty());
  EXPECT_LT(*bytes_read_by_this_process() - *before, std::uint64_t{1} << 20);
  EXPECT_EQ(read_regular_file(d, "sparse", huge, got), 0) << "at the limit it is read";
  EXPECT_EQ(got.size(), huge);
}

TEST(FileIo, AUseIsRecordedOnlyWhenOlderThanTheInterval) {
  temp_dir dir;
  const directory_handle d = directory_handle::open(dir.path());
  std::string temp;
  ASSERT_EQ(write_temp_file(d, as_bytes("x"), 0600, temp), 0);
  const std::string path = dir.path() + "/" + temp;
  const struct timespec old_times[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), old_times, 0), 0);
  opened_file file;
  ASSERT_EQ(open_regular_file(d, temp, file), 0);
  EXPECT_TRUE(older_than(file, 60));
  set_mtime_now(file.fd.get());
  struct stat after {};
  ::stat(path.c_str(), &after);
  EXPECT_GT(after.st_mtim.tv_sec, 1000000000) << "an old entry's use is recorded";
  ASSERT_EQ(open_regular_file(d, temp, file), 0);
  EXPECT_FALSE(older_than(file, 60)) << "a recent use is not written again";
}

TEST(DirectoryHandle, OpenOrCreateMakesMissingDirectoriesWithTheModeAndReportsAFileInTheWay) {
  temp_dir dir;
  const mode_t old_umask = ::umask(077);
  const directory_handle created = directory_handle::open_or_create(dir.path() + "/a/b/c", 02770);
  ::umask(old_umask);
  ASSERT_TRUE(created.ok()) << created.error();
  for (const char* sub : {"/a", "/a/b", "/a/b/c"}) EXPECT_EQ(mode_of(dir.path() + sub), 02770u) << sub;
  std::ofstream(dir.path() + "/file") << "x";
  EXPECT_EQ(directory_handle::open_or_create(dir.path() + "/file/sub", 0700).error(), ENOTDIR);
}

TEST(DirectoryHandle, TheRootMayBeALinkButNothingBelowItIsFollowed) {
  temp_dir dir, elsewhere;
  fs::create_directory(elsewhere.path() + "/real");
  fs::create_directory_symlink(elsewhere.path(), dir.path() + "/root");
  const directory_handle root = directory_handle::open(dir.path() + "/root");
  ASSERT_TRUE(root.ok()) << "the configured root may live elsewhere";
  EXPECT_TRUE(root.open_subdirectory("real").ok());
  fs::create_directory_symlink(elsewhere.path() + "/real", elsewhere.path() + "/link");
  EXPECT_EQ(root.open_subdirectory("link").error(), ENOTDIR);
  EXPECT_EQ(root.make_subdirectory("link", 0700).error(), ENOTDIR) << "not created through the link";
  EXPECT_TRUE(fs::is_empty(elsewhere.path() + "/real"));
  EXPECT_EQ(root.open_subdirectory("../x").error(), EINVAL);
  EXPECT_EQ(root.open_subdirectory("..").error(), EINVAL);
}

TEST(DirectoryHandle, RemoveTreeRemovesALinkNotWhatItPointsTo) {
  temp_dir dir, outside;
  std::ofstream(outside.path() + "/keep") << "x";
  fs::create_directories(dir.path() + "/tree/inner");
  std::ofstream(dir.path() + "/tree/inner/file") << "x";
  fs::create_directory_symlink(outside.path(), dir.path() + "/tree/inner/link");
  fs::create_directory_symlink(outside.path(), dir.path() + "/link");
  const directory_handle d = directory_handle::open(dir.path());
  EXPECT_EQ(remove_tree(d, "link"), 0);
  EXPECT_EQ(remove_tree(d, "tree"), 0);
  EXPECT_TRUE(fs::is_empty(dir.path()));
  EXPECT_TRUE(fs::exists(outside.path() + "/keep"));
  EXPECT_EQ(remove_tree(d, "absent"), ENOENT);
}

}  // namespace
}  // namespace unicache::detail
