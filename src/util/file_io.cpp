// The store's file operations, all relative to directory handles and none
// of them blocking on or following what another writer left.
#include "util/file_io.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <new>

namespace unicache::detail {

namespace {

int open_regular_file_at(int dir_fd, const char* name, opened_file& out) noexcept {
  constexpr int kFlags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
  out.fd = unique_fd(::openat(dir_fd, name, kFlags | O_NOATIME));
  // O_NOATIME needs the file to be ours (a shared store's files may be
  // another user's): without it, then.
  if (!out.fd && errno == EPERM) out.fd = unique_fd(::openat(dir_fd, name, kFlags));
  if (!out.fd) return errno;
  if (::fstat(out.fd.get(), &out.status) != 0) return errno;
  if (S_ISDIR(out.status.st_mode)) return EISDIR;
  if (!S_ISREG(out.status.st_mode)) return EINVAL;
  return 0;
}

}  // namespace

int open_regular_file(const directory_handle& dir, const std::string& name, opened_file& out) noexcept {
  return open_regular_file_at(dir.fd(), name.c_str(), out);
}

int open_regular_file(const std::string& path, opened_file& out) noexcept {
  return open_regular_file_at(AT_FDCWD, path.c_str(), out);
}

int read_contents(const opened_file& file, std::size_t max_bytes, byte_vector& out) noexcept {
  if (file.status.st_size < 0 || static_cast<std::uint64_t>(file.status.st_size) > max_bytes) return EFBIG;
  try {
    out.resize(static_cast<std::size_t>(file.status.st_size));
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(file.fd.get(), out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) {  // shrank under us: report what is there
      out.resize(done);
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

int read_exactly(const opened_file& file, unsigned char* out, std::size_t size, std::uint64_t offset) noexcept {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(file.fd.get(), out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;  // shorter than its size said
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

int read_regular_file(const directory_handle& dir, const std::string& name, std::size_t max_bytes,
                      byte_vector& out) noexcept {
  opened_file file;
  if (const int err = open_regular_file(dir, name, file); err != 0) return err;
  return read_contents(file, max_bytes, out);
}

bool older_than(const opened_file& file, long seconds) noexcept {
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return now.tv_sec - file.status.st_mtim.tv_sec >= seconds;
}

void set_mtime_now(int fd) noexcept {
  const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  ::futimens(fd, times);
}

int write_temp_file(const directory_handle& dir, byte_span data, mode_t mode, std::string& temp_name) noexcept {
  static std::atomic<unsigned long> counter{0};
  try {
    unique_fd fd;
    for (int attempt = 0; attempt < 16 && !fd; ++attempt) {
      temp_name = ".tmp." + std::to_string(::getpid()) + "." +
                  std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
      fd = unique_fd(::openat(dir.fd(), temp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                              mode & 0777));
      if (!fd && errno != EEXIST) return errno;
    }
    if (!fd) return EEXIST;
    int result = ::fchmod(fd.get(), mode) == 0 ? 0 : errno;  // the umask does not decide
    std::size_t done = 0;
    while (result == 0 && done < data.size()) {
      const ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        result = errno;
        break;
      }
      done += static_cast<std::size_t>(n);
    }
    if (const int err = fd.close(); err != 0 && result == 0) result = err;
    if (result != 0) ::unlinkat(dir.fd(), temp_name.c_str(), 0);
    return result;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
}

int publish_no_replace(const directory_handle& dir, const std::string& from, const std::string& to) noexcept {
  if (::renameat2(dir.fd(), from.c_str(), dir.fd(), to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return errno;
  // The filesystem cannot rename without replacing: a hard link can.
  if (::linkat(dir.fd(), from.c_str(), dir.fd(), to.c_str(), 0) != 0) return errno;
  ::unlinkat(dir.fd(), from.c_str(), 0);
  return 0;
}

int publish_replace(const directory_handle& dir, const std::string& from, const std::string& to) noexcept {
  return ::renameat(dir.fd(), from.c_str(), dir.fd(), to.c_str()) == 0 ? 0 : errno;
}

}  // namespace unicache::detail
