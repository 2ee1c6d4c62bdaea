// SHA-256 and HMAC-SHA256 (util/sha256.hpp), written from FIPS 180-4
// section 6.2 and RFC 2104.
#include "util/sha256.hpp"

#include <algorithm>
#include <cstring>

namespace unicache::detail {
namespace {

constexpr std::array<std::uint32_t, 64> kRound = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

std::uint32_t load_be32(const unsigned char* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | std::uint32_t{p[3]};
}

}  // namespace

void sha256::compress(const unsigned char* block) {
  std::array<std::uint32_t, 64> w;
  for (int t = 0; t < 16; ++t) w[t] = load_be32(block + 4 * t);
  for (int t = 16; t < 64; ++t) {
    const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
    const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  state_[0] += a, state_[1] += b, state_[2] += c, state_[3] += d;
  state_[4] += e, state_[5] += f, state_[6] += g, state_[7] += h;
}

void sha256::update(byte_span data) {
  const unsigned char* p = data.data();
  std::size_t n = data.size();
  length_ += n;
  if (used_ > 0) {
    const std::size_t take = std::min(n, kBlockBytes - used_);
    std::memcpy(block_.data() + used_, p, take);
    used_ += take, p += take, n -= take;
    if (used_ < kBlockBytes) return;
    compress(block_.data());
    used_ = 0;
  }
  for (; n >= kBlockBytes; p += kBlockBytes, n -= kBlockBytes) compress(p);
  if (n > 0) std::memcpy(block_.data(), p, n);
  used_ = n;
}

sha256_digest sha256::finish() {
  const std::uint64_t bits = length_ * 8;
  const unsigned char one = 0x80;
  update(byte_span(&one, 1));
  const unsigned char zeros[kBlockBytes] = {};
  update(byte_span(zeros, (used_ <= 56 ? 56 : 56 + kBlockBytes) - used_));
  unsigned char tail[8];
  for (int i = 0; i < 8; ++i) tail[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  update(byte_span(tail, 8));
  sha256_digest out;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<unsigned char>(state_[i] >> (24 - 8 * j));
  }
  return out;
}

sha256_digest sha256_of(byte_span data) {
  sha256 h;
  h.update(data);
  return h.finish();
}

hmac_sha256::hmac_sha256(byte_span key) {
  std::array<unsigned char, sha256::kBlockBytes> block{};
  if (key.size() > block.size()) {
    const sha256_digest hashed = sha256_of(key);
    std::memcpy(block.data(), hashed.data(), hashed.size());
  } else if (!key.empty()) {
    std::memcpy(block.data(), key.data(), key.size());
  }
  std::array<unsigned char, sha256::kBlockBytes> pad;
  for (std::size_t i = 0; i < pad.size(); ++i) pad[i] = block[i] ^ 0x36;
  inner_.update(byte_span(pad.data(), pad.size()));
  for (std::size_t i = 0; i < pad.size(); ++i) pad[i] = block[i] ^ 0x5c;
  outer_.update(byte_span(pad.data(), pad.size()));
}

sha256_digest hmac_sha256::finish() {
  const sha256_digest inner = inner_.finish();
  outer_.update(byte_span(inner.data(), inner.size()));
  return outer_.finish();
}

bool equal_in_constant_time(const unsigned char* a, const unsigned char* b, std::size_t n) {
  volatile unsigned char difference = 0;
  for (std::size_t i = 0; i < n; ++i) difference = difference | static_cast<unsigned char>(a[i] ^ b[i]);
  return difference == 0;
}

}  // namespace unicache::detail
