#include "util/file_io.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <new>

namespace unicache::detail {

int read_file(const std::string& path, byte_vector& out, struct stat* info,
              long touch_older_than_s) noexcept {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int result = 0;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    result = errno;
  } else {
    try {
      out.resize(static_cast<std::size_t>(st.st_size));
      std::size_t done = 0;
      while (done < out.size()) {
        const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          result = errno;
          break;
        }
        if (n == 0) {  // shrank under us: report what is there
          out.resize(done);
          break;
        }
        done += static_cast<std::size_t>(n);
      }
    } catch (const std::bad_alloc&) {
      result = ENOMEM;
    }
    if (result == 0 && touch_older_than_s > 0) {
      struct timespec now {};
      ::clock_gettime(CLOCK_REALTIME, &now);
      if (now.tv_sec - st.st_mtim.tv_sec >= touch_older_than_s) {
        const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
        ::futimens(fd, times);  // best effort: a read-only store still serves
      }
    }
  }
  if (info) *info = st;
  ::close(fd);
  return result;
}

int write_temp_file(const std::string& directory, byte_span data, std::string& temp_path) noexcept {
  static std::atomic<unsigned long> counter{0};
  try {
    int fd = -1;
    for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
      temp_path = directory + "/.tmp." + std::to_string(::getpid()) + "." +
                  std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
      fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0 && errno != EEXIST) return errno;
    }
    if (fd < 0) return EEXIST;
    std::size_t done = 0;
    int result = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        result = errno;
        break;
      }
      done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0 && result == 0) result = errno;  // NFS reports ENOSPC here
    if (result != 0) ::unlink(temp_path.c_str());
    return result;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
}

int publish_no_replace(const std::string& from, const std::string& to) noexcept {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return errno;
  // The filesystem cannot rename without replacing: a hard link can.
  if (::link(from.c_str(), to.c_str()) != 0) return errno;
  ::unlink(from.c_str());
  return 0;
}

int publish_replace(const std::string& from, const std::string& to) noexcept {
  return ::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
}

int make_directories(const std::string& path) noexcept {
  // Deepest first: usually only the last component is missing.
  if (::mkdir(path.c_str(), 0755) == 0) return 0;
  int err = errno;
  if (err == ENOENT) {
    try {
      const std::size_t slash = path.find_last_of('/');
      if (slash == std::string::npos || slash == 0) return ENOENT;
      if (const int parent = make_directories(path.substr(0, slash)); parent != 0) return parent;
    } catch (const std::bad_alloc&) {
      return ENOMEM;
    }
    if (::mkdir(path.c_str(), 0755) == 0) return 0;
    err = errno;
  }
  if (err != EEXIST) return err;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}
}  // namespace unicache::detail
