// The store's inter-process lock: flock(2) on a file beside the entries.
#include "util/lock_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace unicache::detail {

lock_file::lock_file(const directory_handle& dir, const std::string& name, mode_t mode) {
  constexpr int kFlags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
  fd_ = ::openat(dir.fd(), name.c_str(), kFlags | O_CREAT | O_EXCL, mode & 0777);
  if (fd_ >= 0) {
    ::fchmod(fd_, mode);  // the umask does not decide
    return;
  }
  if (errno == EEXIST) fd_ = ::openat(dir.fd(), name.c_str(), kFlags);
  if (fd_ < 0) {
    error_ = errno;
    return;
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    error_ = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    ::close(fd_);
    fd_ = -1;
  }
}

lock_file::~lock_file() {
  if (fd_ >= 0) ::close(fd_);
}

void lock_file::lock() {
  threads_.lock();
  while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
}

void lock_file::unlock() {
  ::flock(fd_, LOCK_UN);
  threads_.unlock();
}

bool is_locked_by_another_process(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases the lock if we took it
  return locked;
}

}  // namespace unicache::detail
