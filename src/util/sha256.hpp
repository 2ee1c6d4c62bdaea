// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): what signs remote entries
// and bundle records. The core's own, as LLVM's Support/SHA256 is, so that
// the core library needs no crypto library; checked against the standards'
// own test vectors (tests/unit/test_util_sha256.cpp). Not constant time in
// the data (a MAC's inputs are not secret but for the key, which is hashed
// once); equal_in_constant_time compares MACs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "unicache/bytes.hpp"

namespace unicache::detail {

using sha256_digest = std::array<unsigned char, 32>;

class sha256 {
 public:
  static constexpr std::size_t kBlockBytes = 64;
  void update(byte_span data);
  // The digest of everything given to update; the object is spent after.
  sha256_digest finish();

 private:
  void compress(const unsigned char* block);
  std::array<std::uint32_t, 8> state_{0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                      0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
  std::array<unsigned char, kBlockBytes> block_{};
  std::size_t used_ = 0;        // bytes in block_
  std::uint64_t length_ = 0;    // bytes given so far
};

sha256_digest sha256_of(byte_span data);

// HMAC-SHA256 under `key` (any length: a key longer than a block is hashed
// first, as RFC 2104 says).
class hmac_sha256 {
 public:
  explicit hmac_sha256(byte_span key);
  void update(byte_span data) { inner_.update(data); }
  sha256_digest finish();

 private:
  sha256 inner_;
  sha256 outer_;
};

// Whether a and b (n bytes each) are equal, in time that does not depend on
// where they differ.
bool equal_in_constant_time(const unsigned char* a, const unsigned char* b, std::size_t n);

}  // namespace unicache::detail
