// XXH3-128 hashes, the same in every process and on every machine.
#include "util/stable_hash.hpp"

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace unicache::detail {

hash128 stable_hash128(std::string_view bytes) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes.data(), bytes.size()));
  hash128 out;
  std::memcpy(out.data(), canonical.digest, out.size());
  return out;
}

std::string to_hex(const hash128& h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (std::size_t i = 0; i < h.size(); ++i) {
    out[2 * i] = kDigits[h[i] >> 4];
    out[2 * i + 1] = kDigits[h[i] & 0xf];
  }
  return out;
}

}  // namespace unicache::detail
