// A shard's size record: checked by magic, version and checksum, written in place.
#include "store/shard_record.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "util/file_io.hpp"
#include "util/unique_fd.hpp"
#include "util/little_endian.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace unicache::detail {
namespace {

constexpr char kMagic[8] = {'U', 'C', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr std::uint64_t kVersion = 1;
constexpr std::size_t kBytes = 64;

}  // namespace

std::optional<shard_totals> shard_record::read() const noexcept {
  byte_vector buf;
  if (read_regular_file(dir_, name_, kBytes, buf) != 0) return std::nullopt;
  if (buf.size() != kBytes || std::memcmp(buf.data(), kMagic, sizeof kMagic) != 0 ||
      get_le64(buf.data() + 8) != kVersion || get_le64(buf.data() + 56) != XXH3_64bits(buf.data(), 56)) {
    return std::nullopt;
  }
  shard_totals t;
  t.bytes = get_le64(buf.data() + 16);
  t.entries = get_le64(buf.data() + 24);
  t.last_walk_unix = static_cast<std::int64_t>(get_le64(buf.data() + 32));
  t.generation = get_le64(buf.data() + 40);
  t.pending_removal = get_le64(buf.data() + 48);
  return t;
}

bool shard_record::write_in_place(const unsigned char* bytes) const noexcept {
  // O_NONBLOCK: a FIFO under the name fails to open (ENXIO), never waits.
  const unique_fd fd(::openat(dir_.fd(), name_.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
      st.st_size != static_cast<off_t>(kBytes)) {
    return false;
  }
  return ::pwrite(fd.get(), bytes, kBytes, 0) == static_cast<ssize_t>(kBytes);
}

int shard_record::write(const shard_totals& t) const noexcept {
  unsigned char buf[kBytes];
  std::memcpy(buf, kMagic, sizeof kMagic);
  put_le64(buf + 8, kVersion);
  put_le64(buf + 16, t.bytes);
  put_le64(buf + 24, t.entries);
  put_le64(buf + 32, static_cast<std::uint64_t>(t.last_walk_unix));
  put_le64(buf + 40, t.generation);
  put_le64(buf + 48, t.pending_removal);
  put_le64(buf + 56, XXH3_64bits(buf, 56));
  if (write_in_place(buf)) return 0;
  std::string temp;
  if (const int err = write_temp_file(dir_, byte_span(buf, kBytes), mode_, temp); err != 0) return err;
  const int err = publish_replace(dir_, temp, name_);
  if (err != 0) ::unlinkat(dir_.fd(), temp.c_str(), 0);
  return err;
}

}  // namespace unicache::detail
