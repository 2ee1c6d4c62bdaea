// Directory handles: openat(O_NOFOLLOW | O_DIRECTORY) one component at a
// time, so that a link planted anywhere below a handle is refused, not followed.
#include "util/directory_handle.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <new>

namespace unicache::detail {
namespace {

// O_NONBLOCK: opening never waits, whatever the name turns out to be.
constexpr int kOpenDirectory = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK;

// Deeper trees are not a store's: remove_tree leaves them (and reports ELOOP)
// rather than recursing without bound.
constexpr int kMaxRemoveDepth = 16;

bool is_one_component(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

int remove_tree_at(const directory_handle& dir, const std::string& name, int depth) noexcept {
  if (::unlinkat(dir.fd(), name.c_str(), 0) == 0) return 0;
  if (errno != EISDIR && errno != EPERM) return errno;
  if (depth >= kMaxRemoveDepth) return ELOOP;
  const directory_handle sub = dir.open_subdirectory(name);
  if (!sub.ok()) return sub.error();
  try {
    for (const std::string& inner : directory_names(sub)) remove_tree_at(sub, inner, depth + 1);
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
  return ::unlinkat(dir.fd(), name.c_str(), AT_REMOVEDIR) == 0 ? 0 : errno;
}

}  // namespace

directory_handle directory_handle::failure(int error) noexcept {
  directory_handle h;
  h.error_ = error;
  return h;
}

directory_handle directory_handle::adopt(int fd) noexcept {
  if (fd < 0) return failure(errno);
  directory_handle h;
  h.fd_ = unique_fd(fd);
  if (::fstat(fd, &h.status_) != 0) return failure(errno);
  h.error_ = 0;
  return h;
}

directory_handle directory_handle::open(const std::string& path) noexcept {
  return adopt(::open(path.c_str(), kOpenDirectory));
}

directory_handle directory_handle::open_or_create(const std::string& path, mode_t mode) noexcept {
  directory_handle existing = open(path);
  if (existing.ok() || existing.error() != ENOENT) return existing;
  try {
    std::string parent_path = path;
    while (parent_path.size() > 1 && parent_path.back() == '/') parent_path.pop_back();
    const std::size_t slash = parent_path.find_last_of('/');
    const std::string name = slash == std::string::npos ? parent_path : parent_path.substr(slash + 1);
    parent_path = slash == std::string::npos ? "." : slash == 0 ? "/" : parent_path.substr(0, slash);
    directory_handle parent = open_or_create(parent_path, mode);
    if (!parent.ok()) return parent;
    return parent.make_subdirectory(name, mode);
  } catch (const std::bad_alloc&) {
    return failure(ENOMEM);
  }
}

directory_handle directory_handle::duplicate() const noexcept {
  return adopt(::openat(fd(), ".", kOpenDirectory));
}

directory_handle directory_handle::open_subdirectory(const std::string& name) const noexcept {
  if (!is_one_component(name)) return failure(EINVAL);
  return adopt(::openat(fd(), name.c_str(), kOpenDirectory | O_NOFOLLOW));
}

int directory_handle::create_subdirectory(const std::string& name, mode_t mode) const noexcept {
  if (!is_one_component(name)) return EINVAL;
  if (::mkdirat(fd(), name.c_str(), mode & 0777) != 0) return errno;
  // mkdir applies the umask and leaves out the setgid bit: set what was asked.
  const directory_handle created = open_subdirectory(name);
  if (created.ok()) ::fchmod(created.fd(), mode);
  return 0;
}

directory_handle directory_handle::make_subdirectory(const std::string& name, mode_t mode) const noexcept {
  if (const int err = create_subdirectory(name, mode); err != 0 && err != EEXIST) return failure(err);
  return open_subdirectory(name);
}

std::vector<std::string> directory_names(const directory_handle& dir) {
  std::vector<std::string> names;
  // A descriptor of its own: readdir moves the file offset, which a dup shares.
  const int fd = ::openat(dir.fd(), ".", kOpenDirectory);
  if (fd < 0) return names;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return names;
  }
  try {
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
  } catch (...) {
    ::closedir(d);
    throw;
  }
  ::closedir(d);
  return names;
}

int remove_tree(const directory_handle& dir, const std::string& name) noexcept {
  if (name.find('/') != std::string::npos || name == "." || name == "..") return EINVAL;
  return remove_tree_at(dir, name, 0);
}

}  // namespace unicache::detail
