// An advisory inter-process lock on a file: flock(2), which the kernel
// releases when the holding process dies, so a crash never leaves it held.
// flock belongs to an open file description, so threads of one process that
// share a lock_file are serialized by its mutex as well.
//
// fork(): a child shares its parent's open file description, so the same
// flock would not keep the two apart (and the parent's mutex may have been
// copied locked). The first lock() in a child therefore opens the file
// again (a description of its own) and takes a new mutex.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>

#include "util/directory_handle.hpp"
#include "util/mutex.hpp"

namespace unicache::detail {

class ABSL_LOCKABLE lock_file {
 public:
  // Opens `name` in `dir`, creating it with exactly `mode` if missing. A
  // link or anything but a regular file is refused (never followed, never
  // blocked on). Check ok() before locking.
  lock_file(const directory_handle& dir, const std::string& name, mode_t mode);
  ~lock_file();
  lock_file(const lock_file&) = delete;
  lock_file& operator=(const lock_file&) = delete;

  bool ok() const { return error_ == 0; }
  int error() const { return error_; }  // errno of a failed open

  // Blocks until this thread holds the lock across threads and processes.
  // Only when ok().
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  void unlock() ABSL_UNLOCK_FUNCTION();

 private:
  // This process's description of the file and its threads' mutex.
  struct holder {
    pid_t pid;
    int fd;
    mutex threads;
  };
  holder& mine();

  std::atomic<holder*> holder_{nullptr};  // a parent's is left alone in a child
  int error_ = 0;
};

using lock_file_holder = scoped_lock<lock_file>;

// Whether another process holds the lock on `path` right now (for tests and
// the maintenance tool): tries a non-blocking flock and releases it.
bool is_locked_by_another_process(const std::string& path);

}  // namespace unicache::detail
