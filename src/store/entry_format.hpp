// The one on-disk (and blob) format of a stored binary, written and checked
// in one place.
//
//   offset size
//        0    8  magic "UCKSTORE"
//        8    4  format version (little-endian)
//       12    4  header size (64)
//       16   16  device identity hash (XXH3-128, see device_hash)
//       32    8  key size
//       40    8  binary size
//       48    8  creation time (Unix seconds)
//       56    8  checksum: XXH3-64 of bytes 0..55, the key and the binary
//       64    .  key bytes, then binary bytes; nothing after them
//
// A file that is shorter or longer than its header says, or whose magic,
// version, device or checksum differ, is rejected with a reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "unicache/store.hpp"
#include "util/stable_hash.hpp"

namespace unicache::detail {

inline constexpr std::uint32_t kStoreFormatVersion = 1;
inline constexpr std::size_t kEntryHeaderBytes = 64;
// Keys describe a kernel (its source included); they are not payloads. A
// longer key is not stored, so that no reader ever needs to read more than
// max_entry_file_bytes.
inline constexpr std::size_t kMaxKeyBytes = std::size_t{1} << 20;

// The largest entry file of a key of `key_bytes` (or of any key, with
// kMaxKeyBytes) whose binary is at most `max_binary_bytes`: nothing larger
// is ever read.
constexpr std::uint64_t max_entry_file_bytes(std::uint64_t key_bytes, std::uint64_t max_binary_bytes) {
  const std::uint64_t rest = kEntryHeaderBytes + key_bytes;
  return max_binary_bytes > UINT64_MAX - rest ? UINT64_MAX : rest + max_binary_bytes;
}

// Stable across processes and machines: XXH3-128 of the identity's fields
// and of this unicache build's version and git hash.
hash128 device_hash(const device_identity& device);
hash128 key_hash(std::string_view key);
// blob_id() of an entry of `device` (a device_hash) and `key`.
std::string blob_id_of(const hash128& device, std::string_view key);
// "platform / device / version / driver / unicache x.y.z (git)"
std::string describe(const device_identity& device);

// Serializes an entry.
byte_vector encode_entry(const hash128& device, std::string_view key, byte_span binary,
                         std::int64_t created_unix);

enum class entry_problem { none, truncated, not_an_entry, wrong_version, wrong_device, corrupt };
const char* describe(entry_problem problem);

struct parsed_entry {
  entry_problem problem = entry_problem::none;
  std::string_view key;  // views into the parsed bytes
  byte_span binary;
  hash128 device{};
  std::int64_t created_unix = 0;

  bool ok() const { return problem == entry_problem::none; }
};

// Parses `bytes` as an entry for `device` (or for any device when `device`
// is null: the maintenance tool). Never throws.
parsed_entry parse_entry(byte_span bytes, const hash128* device);

// An entry read in two parts, so that a get reads the binary straight into
// the vector it returns (no copy): first the header and the key, checked
// here, then the binary, checked with binary_matches. `head` holds the
// first kEntryHeaderBytes + key.size() bytes of a file of `file_bytes`.
// Returns the binary's size, or nullopt when the file is not an intact
// entry of exactly `key` for `device` (the caller then reads it whole, to
// tell which).
std::optional<std::uint64_t> binary_size_of(byte_span head, std::uint64_t file_bytes, std::string_view key,
                                            const hash128& device);
// Whether the checksum in `head` (checked by binary_size_of) covers `binary`.
bool binary_matches(byte_span head, byte_span binary);

}  // namespace unicache::detail
