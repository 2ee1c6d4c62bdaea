// The store's size file: recorded bytes and last walk, checked by magic,
// version and checksum, replaced by rename.
#include "store/size_file.hpp"

#include <unistd.h>

#include <cstring>

#include "store/store_layout.hpp"
#include "util/file_io.hpp"
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
  byte_vector buf;
  if (read_regular_file(dir_, kSizeName, kBytes, buf) != 0) return std::nullopt;
  if (buf.size() != kBytes || std::memcmp(buf.data(), kMagic, sizeof kMagic) != 0 ||
      get_le64(buf.data() + 8) != kVersion || get_le64(buf.data() + 32) != XXH3_64bits(buf.data(), 32)) {
    return std::nullopt;
  }
  return size_record{get_le64(buf.data() + 16), static_cast<std::int64_t>(get_le64(buf.data() + 24))};
}

int size_file::write(const size_record& record) const noexcept {
  unsigned char buf[kBytes];
  std::memcpy(buf, kMagic, sizeof kMagic);
  put_le64(buf + 8, kVersion);
  put_le64(buf + 16, record.bytes);
  put_le64(buf + 24, static_cast<std::uint64_t>(record.last_walk_unix));
  put_le64(buf + 32, XXH3_64bits(buf, 32));
  std::string temp;
  if (const int err = write_temp_file(dir_, byte_span(buf, kBytes), mode_, temp); err != 0) return err;
  const int err = publish_replace(dir_, temp, kSizeName);
  if (err != 0) ::unlinkat(dir_.fd(), temp.c_str(), 0);
  return err;
}

}  // namespace unicache::detail
