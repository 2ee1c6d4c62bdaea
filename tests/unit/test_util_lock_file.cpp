#include "util/lock_file.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "store_test_support.hpp"

namespace unicache::detail {
namespace {

using unicache::testing::temp_dir;

// Runs `body` in a child process and returns its exit status.
template <typename Body>
int in_child(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(LockFile, ExcludesAnotherProcessWhileHeld) {
  temp_dir dir;
  const std::string path = dir.path() + "/lock";
  lock_file lock(path);
  ASSERT_TRUE(lock.ok());
  {
    lock_file_holder held(&lock);
    EXPECT_EQ(in_child([&] { return is_locked_by_another_process(path) ? 0 : 1; }), 0);
  }
  EXPECT_EQ(in_child([&] { return is_locked_by_another_process(path) ? 0 : 1; }), 1);
}

TEST(LockFile, HolderKilledWithSigkillLeavesItUnlocked) {
  temp_dir dir;
  const std::string path = dir.path() + "/lock";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    lock_file lock(path);
    lock.lock();
    (void)!::write(ready[1], "x", 1);
    ::pause();  // hold it until killed
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_TRUE(is_locked_by_another_process(path));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(is_locked_by_another_process(path)) << "a dead process must not hold the store lock";
  lock_file lock(path);
  lock_file_holder held(&lock);  // and it can be taken
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(LockFile, SerializesThreadsOfOneProcess) {
  temp_dir dir;
  lock_file lock(dir.path() + "/lock");
  int inside = 0, max_inside = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        lock_file_holder held(&lock);
        max_inside = std::max(max_inside, ++inside);
        --inside;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(max_inside, 1);
}

TEST(LockFile, UnopenablePathIsReportedNotThrown) {
  lock_file lock("/nonexistent-dir/lock");
  EXPECT_FALSE(lock.ok());
  EXPECT_EQ(lock.error(), ENOENT);
}

}  // namespace
}  // namespace unicache::detail
