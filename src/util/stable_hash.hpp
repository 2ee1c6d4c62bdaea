// Hashes that are the same in every process and on every machine (for names
// on disk, fingerprints and blob ids): XXH3-128 in canonical (big-endian)
// form, printed as 32 lowercase hex digits. Never std::hash.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace unicache::detail {

using hash128 = std::array<unsigned char, 16>;

hash128 stable_hash128(std::string_view bytes);
std::string to_hex(const hash128& h);

}  // namespace unicache::detail
