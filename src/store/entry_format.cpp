// Writing and checking the one format of a stored entry or blob.
#include "store/entry_format.hpp"

#include <cstring>

#include "unicache/cache_key.hpp"
#include "unicache/version.hpp"

#include "util/little_endian.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace unicache::detail {
namespace {

constexpr char kMagic[8] = {'U', 'C', 'K', 'S', 'T', 'O', 'R', 'E'};
constexpr std::size_t kChecksumOffset = 56;


std::uint64_t checksum(const unsigned char* header, std::string_view key, byte_span binary) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, header, kChecksumOffset);
  XXH3_64bits_update(&state, key.data(), key.size());
  XXH3_64bits_update(&state, binary.data(), binary.size());
  return XXH3_64bits_digest(&state);
}

// The fields of an entry's header (its first kEntryHeaderBytes), as
// encode_entry writes them.
struct header_fields {
  bool magic = false;
  std::uint32_t version = 0;
  std::uint32_t header_bytes = 0;
  hash128 device{};
  std::uint64_t key_size = 0;
  std::uint64_t binary_size = 0;
  std::uint64_t created_unix = 0;
  std::uint64_t checksum = 0;
};

header_fields read_header(const unsigned char* h) {
  header_fields f;
  f.magic = std::memcmp(h, kMagic, sizeof kMagic) == 0;
  f.version = get_le32(h + 8);
  f.header_bytes = get_le32(h + 12);
  std::memcpy(f.device.data(), h + 16, f.device.size());
  f.key_size = get_le64(h + 32);
  f.binary_size = get_le64(h + 40);
  f.created_unix = get_le64(h + 48);
  f.checksum = get_le64(h + kChecksumOffset);
  return f;
}

}  // namespace

hash128 device_hash(const device_identity& device) {
  cache_key fields;
  fields.add("unicache-device").add(device.platform_name).add(device.device_name)
      .add(device.device_version).add(device.driver_version)
      .add(UNICACHE_VERSION_STRING).add(UNICACHE_GIT_HASH);
  return stable_hash128(fields.bytes());
}

hash128 key_hash(std::string_view key) { return stable_hash128(key); }

std::string blob_id_of(const hash128& device, std::string_view key) {
  std::string material(reinterpret_cast<const char*>(device.data()), device.size());
  material.append(key);
  return to_hex(key_hash(material));
}

std::string describe(const device_identity& device) {
  return device.platform_name + " / " + device.device_name + " / " + device.device_version + " / " +
         device.driver_version + " / unicache " + UNICACHE_VERSION_STRING + " (" +
         UNICACHE_GIT_HASH + ")";
}

byte_vector encode_entry(const hash128& device, std::string_view key, byte_span binary,
                         std::int64_t created_unix) {
  byte_vector out(kEntryHeaderBytes + key.size() + binary.size());
  unsigned char* h = out.data();
  std::memcpy(h, kMagic, sizeof kMagic);
  put_le32(h + 8, kStoreFormatVersion);
  put_le32(h + 12, kEntryHeaderBytes);
  std::memcpy(h + 16, device.data(), device.size());
  put_le64(h + 32, key.size());
  put_le64(h + 40, binary.size());
  put_le64(h + 48, static_cast<std::uint64_t>(created_unix));
  if (!key.empty()) std::memcpy(h + kEntryHeaderBytes, key.data(), key.size());
  if (!binary.empty()) std::memcpy(h + kEntryHeaderBytes + key.size(), binary.data(), binary.size());
  put_le64(h + kChecksumOffset, checksum(h, key, binary));
  return out;
}

const char* describe(entry_problem problem) {
  switch (problem) {
    case entry_problem::none: return "valid";
    case entry_problem::truncated: return "truncated (shorter or longer than its header says)";
    case entry_problem::not_an_entry: return "not a unicache entry (bad magic or header)";
    case entry_problem::wrong_version: return "written by another unicache store format version";
    case entry_problem::wrong_device: return "built for another device, driver or unicache build";
    case entry_problem::corrupt: return "corrupt (checksum mismatch)";
  }
  return "?";
}

parsed_entry parse_entry(byte_span bytes, const hash128* device) {
  parsed_entry out;
  if (bytes.size() < kEntryHeaderBytes) {
    out.problem = bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0
                      ? entry_problem::truncated
                      : entry_problem::not_an_entry;
    return out;
  }
  const unsigned char* h = bytes.data();
  const header_fields f = read_header(h);
  if (!f.magic) {
    out.problem = entry_problem::not_an_entry;
    return out;
  }
  if (f.version != kStoreFormatVersion) {
    out.problem = entry_problem::wrong_version;
    return out;
  }
  if (f.header_bytes != kEntryHeaderBytes) {
    out.problem = entry_problem::not_an_entry;
    return out;
  }
  out.device = f.device;
  const std::uint64_t available = bytes.size() - kEntryHeaderBytes;
  if (f.key_size > available || f.binary_size != available - f.key_size) {
    out.problem = entry_problem::truncated;
    return out;
  }
  out.key = std::string_view(reinterpret_cast<const char*>(h + kEntryHeaderBytes), f.key_size);
  out.binary = bytes.subspan(kEntryHeaderBytes + f.key_size);
  out.created_unix = static_cast<std::int64_t>(f.created_unix);
  if (checksum(h, out.key, out.binary) != f.checksum) {
    out.problem = entry_problem::corrupt;
    return out;
  }
  if (device && out.device != *device) {
    out.problem = entry_problem::wrong_device;
    return out;
  }
  return out;
}

std::optional<std::uint64_t> binary_size_of(byte_span head, std::uint64_t file_bytes, std::string_view key,
                                            const hash128& device) {
  if (head.size() != kEntryHeaderBytes + key.size() || file_bytes < head.size()) return std::nullopt;
  const header_fields f = read_header(head.data());
  if (!f.magic || f.version != kStoreFormatVersion || f.header_bytes != kEntryHeaderBytes || f.device != device ||
      f.key_size != key.size() || f.binary_size != file_bytes - head.size() ||
      std::memcmp(head.data() + kEntryHeaderBytes, key.data(), key.size()) != 0) {
    return std::nullopt;
  }
  return f.binary_size;
}

bool binary_matches(byte_span head, byte_span binary) {
  const std::string_view key(reinterpret_cast<const char*>(head.data() + kEntryHeaderBytes),
                             head.size() - kEntryHeaderBytes);
  return checksum(head.data(), key, binary) == read_header(head.data()).checksum;
}

}  // namespace unicache::detail
