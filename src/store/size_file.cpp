#include "store/size_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/little_endian.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace unicache::detail {
namespace {

constexpr char kMagic[8] = {'U', 'C', 'S', 'I', 'Z', 'E', '0', '1'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kBytes = 40;


}  // namespace

std::optional<size_record> size_file::read() const noexcept {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  unsigned char buf[kBytes + 1];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  ::close(fd);
  if (n != static_cast<ssize_t>(kBytes) || std::memcmp(buf, kMagic, sizeof kMagic) != 0 ||
      get_le64(buf + 8) != kVersion || get_le64(buf + 32) != XXH3_64bits(buf, 32)) {
    return std::nullopt;
  }
  return size_record{get_le64(buf + 16), static_cast<std::int64_t>(get_le64(buf + 24))};
}

int size_file::write(const size_record& record) const noexcept {
  unsigned char buf[kBytes];
  std::memcpy(buf, kMagic, sizeof kMagic);
  put_le64(buf + 8, kVersion);
  put_le64(buf + 16, record.bytes);
  put_le64(buf + 24, static_cast<std::uint64_t>(record.last_walk_unix));
  put_le64(buf + 32, XXH3_64bits(buf, 32));
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int result = 0;
  if (::pwrite(fd, buf, kBytes, 0) != static_cast<ssize_t>(kBytes)) result = errno ? errno : EIO;
  if (result == 0 && ::ftruncate(fd, kBytes) != 0) result = errno;
  if (::close(fd) != 0 && result == 0) result = errno;
  return result;
}

}  // namespace unicache::detail
