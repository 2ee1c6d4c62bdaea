#include "util/lock_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

namespace unicache::detail {

lock_file::lock_file(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) error_ = errno;
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
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases the lock if we took it
  return locked;
}

}  // namespace unicache::detail
