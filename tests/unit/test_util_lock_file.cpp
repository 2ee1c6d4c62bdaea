// The store's lock: held across processes and threads, released by a dying
// holder, and never opened through a link or a FIFO.
#include "util/lock_file.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "store_test_support.hpp"

namespace unicache::detail {
namespace {

using namespace unicache::testing;
namespace fs = std::filesystem;

TEST(LockFile, ExcludesAnotherProcessWhileHeld) {
  temp_dir dir;
  const std::string path = dir.path() + "/lock";
  lock_file lock(directory_handle::open(dir.path()), "lock", 0600);
  ASSERT_TRUE(lock.ok());
  {
    lock_file_holder held(&lock);
    EXPECT_EQ(run_in_child([&] { return is_locked_by_another_process(path) ? 0 : 1; }).status, 0);
  }
  EXPECT_EQ(run_in_child([&] { return is_locked_by_another_process(path) ? 0 : 1; }).status, 1);
}

TEST(LockFile, AChildOfForkWaitsForItsParentsHoldAndNeverDeadlocks) {
  temp_dir dir;
  const std::string released = dir.path() + "/released";
  lock_file lock(directory_handle::open(dir.path()), "lock", 0600);
  ASSERT_TRUE(lock.ok());
  lock.lock();  // held across the fork: the child's copy of the mutex is locked too
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(kHangAlarmSeconds);  // a child stuck on the copied mutex fails here
    lock.lock();                 // must wait for the parent, not share its hold
    const bool after_release = fs::exists(released);
    lock.unlock();
    ::_exit(after_release ? 0 : 1);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // room for a child that does not wait
  std::ofstream(released).put('x');
  lock.unlock();
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung on the lock (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child took the lock while its parent held it";
  lock_file_holder again(&lock);  // the parent's own lock still works
}

TEST(LockFile, HolderKilledWithSigkillLeavesItUnlocked) {
  temp_dir dir;
  const std::string path = dir.path() + "/lock";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    lock_file lock(directory_handle::open(dir.path()), "lock", 0600);
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
  lock_file lock(directory_handle::open(dir.path()), "lock", 0600);
  lock_file_holder held(&lock);  // and it can be taken
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(LockFile, SerializesThreadsOfOneProcess) {
  temp_dir dir;
  lock_file lock(directory_handle::open(dir.path()), "lock", 0600);
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
  lock_file lock(directory_handle::open("/nonexistent-dir"), "lock", 0600);
  EXPECT_FALSE(lock.ok());
  EXPECT_EQ(lock.error(), EBADF);
}

TEST(LockFile, ALinkOrFifoInItsPlaceIsRefusedWithoutBlockingOrFollowing) {
  temp_dir dir, outside;
  const std::string target = outside.path() + "/victim";
  fs::create_symlink(target, dir.path() + "/link");
  ASSERT_EQ(::mkfifo((dir.path() + "/fifo").c_str(), 0600), 0);
  const child_result r = run_in_child(
      [&] {
        const directory_handle d = directory_handle::open(dir.path());
        if (lock_file(d, "link", 0600).error() != ELOOP) return 1;
        if (lock_file(d, "fifo", 0600).ok()) return 2;
        return 0;
      },
      kHangAlarmSeconds);
  EXPECT_FALSE(r.hung());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(fs::exists(target)) << "nothing created through the link";
}

TEST(LockFile, IsCreatedWithExactlyTheModeAsked) {
  temp_dir dir;
  const mode_t old_umask = ::umask(077);
  lock_file lock(directory_handle::open(dir.path()), "lock", 0660);
  ::umask(old_umask);
  ASSERT_TRUE(lock.ok());
  struct stat st {};
  ::stat((dir.path() + "/lock").c_str(), &st);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
}

}  // namespace
}  // namespace unicache::detail
