// The names of the store's layout, in one place:
//
//   <directory>/v2/                      the root of this format
//     shards/<s>.lock, shards/<s>.size   shard s's lock and size record (s: 0-f)
//     <device hash>/device.txt           32 hex digits; the identity in words
//     <device hash>/<kk>/<key hash>/     kk: the key hash's first two digits
//       <n>.entry                        n = 0 .. kMaxCollisions - 1
//     .tmp.<pid>.<n> (at any level)      a writer's unpublished file
//
// Shards: a key belongs to the shard named by its hash's first hex digit,
// on every device: shard s is the <kk> directories that begin with s. Each
// shard has its own lock, size record and eviction, so no operation ever
// needs the whole store's lock or a walk of the whole store.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "util/stable_hash.hpp"

namespace unicache::detail {

// A new format lives beside the old one and never reads it (v1 had one lock
// and one size file for the whole store).
inline constexpr char kFormatDirectory[] = "v2";
inline constexpr char kShardsDirectory[] = "shards";
// Misses the kernel path explained, for `unicache-store explain` (miss_records.cpp).
inline constexpr char kMissesDirectory[] = "misses";
inline constexpr int kShards = 16;
inline constexpr char kDeviceDescriptionName[] = "device.txt";
inline constexpr char kTemporaryPrefix[] = ".tmp.";
inline constexpr int kMaxCollisions = 8;  // entries n = 0..7 under one key hash
inline constexpr std::size_t kHashDigits = 32;
inline constexpr std::size_t kPrefixDigits = 2;
// A device description is one line; anything longer is not ours.
inline constexpr std::size_t kMaxDeviceDescriptionBytes = 4096;

// A key's directory below the root, one component each:
// <device hash>, <kk>, <key hash>.
inline std::array<std::string, 3> key_directory_names(const hash128& device, const hash128& key) {
  std::string key_hex = to_hex(key);
  std::string prefix = key_hex.substr(0, kPrefixDigits);
  return {to_hex(device), std::move(prefix), std::move(key_hex)};
}

// The shard of a key hash, and its digit.
inline int shard_of(const hash128& key) { return key[0] >> 4; }
inline char shard_digit(int shard) { return "0123456789abcdef"[shard & 15]; }
inline std::string shard_lock_name(int shard) { return std::string(1, shard_digit(shard)) + ".lock"; }
inline std::string shard_record_name(int shard) { return std::string(1, shard_digit(shard)) + ".size"; }

inline std::string entry_name(int n) { return std::to_string(n) + ".entry"; }

inline bool is_entry_name(std::string_view name) {
  return name.size() == 7 && name[0] >= '0' && name[0] < '0' + kMaxCollisions && name.substr(1) == ".entry";
}

inline bool is_temporary_name(std::string_view name) { return name.starts_with(kTemporaryPrefix); }

inline bool is_hex_name(std::string_view name, std::size_t digits) {
  if (name.size() != digits) return false;
  for (const char c : name) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace unicache::detail
