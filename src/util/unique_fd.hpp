// An owned file descriptor: closed when it goes out of scope, so no early
// return leaks one.
#pragma once

#include <unistd.h>

#include <cerrno>

#include <utility>

namespace unicache::detail {

class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  ~unique_fd() { reset(); }
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Closes now and returns 0 or close(2)'s errno: where a network
  // filesystem reports a failed write (ENOSPC).
  int close() noexcept {
    const int result = fd_ >= 0 && ::close(std::exchange(fd_, -1)) != 0 ? errno : 0;
    return result;
  }

 private:
  int fd_ = -1;
};

}  // namespace unicache::detail
