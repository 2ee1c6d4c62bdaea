// The store's inter-process lock: flock(2) on a file beside the entries.
#include "util/lock_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace unicache::detail {

lock_file::lock_file(const directory_handle& dir, const std::string& name, mode_t mode) {
  constexpr int kFlags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
  int fd = ::openat(dir.fd(), name.c_str(), kFlags | O_CREAT | O_EXCL, mode & 0777);
  if (fd >= 0) {
    ::fchmod(fd, mode);  // the umask does not decide
  } else if (errno == EEXIST) {
    fd = ::openat(dir.fd(), name.c_str(), kFlags);
  }
  if (fd < 0) {
    error_ = errno;
    return;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error_ = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    ::close(fd);
    return;
  }
  holder_.store(new holder{::getpid(), fd, {}}, std::memory_order_release);
}

lock_file::~lock_file() {
  holder* h = holder_.load(std::memory_order_acquire);
  if (h && h->pid == ::getpid()) {
    ::close(h->fd);
    delete h;
  }
}

lock_file::holder& lock_file::mine() {
  holder* h = holder_.load(std::memory_order_acquire);
  const pid_t pid = ::getpid();
  if (h->pid == pid) return *h;
  // A child of fork(): the same file through a new open file description
  // (/proc/self/fd names the file this descriptor has open, not a path
  // that could have been replaced). Without /proc, the shared description
  // still keeps this process's threads apart.
  const std::string self = "/proc/self/fd/" + std::to_string(h->fd);
  const int inherited = h->fd;
  int fd = ::open(self.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) fd = inherited;
  auto* fresh = new holder{pid, fd, {}};
  if (holder_.compare_exchange_strong(h, fresh, std::memory_order_acq_rel)) return *fresh;
  if (fd != inherited) ::close(fd);
  delete fresh;
  return *h;  // another thread of this child was first
}

void lock_file::lock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  holder& h = mine();
  h.threads.lock();
  while (::flock(h.fd, LOCK_EX) != 0 && errno == EINTR) {
  }
}

void lock_file::unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  holder& h = *holder_.load(std::memory_order_acquire);
  ::flock(h.fd, LOCK_UN);
  h.threads.unlock();
}

bool is_locked_by_another_process(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases the lock if we took it
  return locked;
}

}  // namespace unicache::detail
