// The core's SHA-256 and HMAC-SHA256 against the standards' own vectors:
// FIPS 180-4's examples (NIST CSRC) and RFC 4231's HMAC-SHA256 cases.
#include "util/sha256.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace unicache::detail {
namespace {

byte_span bytes_of(const std::string& s) { return byte_span(reinterpret_cast<const unsigned char*>(s.data()), s.size()); }

std::string hex(const sha256_digest& d) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : d) out += {digits[c >> 4], digits[c & 15]};
  return out;
}

std::string unhex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

std::string hmac_hex(const std::string& key, const std::string& data) {
  hmac_sha256 mac(bytes_of(key));
  mac.update(bytes_of(data));
  return hex(mac.finish());
}

TEST(Sha256, MatchesTheStandardsExamples) {
  EXPECT_EQ(hex(sha256_of(bytes_of(""))), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256_of(bytes_of("abc"))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256_of(bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(sha256_of(bytes_of(std::string(1000000, 'a')))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Padding crosses into a second block at 56 bytes: every length around the
// block's edges, fed whole and in uneven pieces, gives the same digest.
TEST(Sha256, PiecesAndLengthsAroundABlockAgreeWithTheWhole) {
  std::string data;
  for (int i = 0; i < 200; ++i) data += static_cast<char>(i * 7 + 3);
  for (std::size_t length : {55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u, 128u, 200u}) {
    const std::string part = data.substr(0, length);
    sha256 pieces;
    for (std::size_t at = 0, step = 1; at < part.size(); at += step, step = step * 3 % 17 + 1) {
      pieces.update(bytes_of(part.substr(at, step)));
    }
    EXPECT_EQ(hex(pieces.finish()), hex(sha256_of(bytes_of(part)))) << length;
  }
  // One known value at the 56-byte edge (the 448-bit message above is 56 bytes);
  // and a 64-byte one: "a" x 64.
  EXPECT_EQ(hex(sha256_of(bytes_of(std::string(64, 'a')))),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(HmacSha256, MatchesRfc4231) {
  EXPECT_EQ(hmac_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmac_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmac_hex(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  EXPECT_EQ(hmac_hex(unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"), std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Keys longer than a block are hashed first (cases 6 and 7).
  EXPECT_EQ(hmac_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hmac_hex(std::string(131, '\xaa'),
                     "This is a test using a larger than block-size key and a larger than block-size data. The key "
                     "needs to be hashed before being used by the HMAC algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, ComparesInConstantTimeAndTellsADifferenceAnywhere) {
  const sha256_digest a = sha256_of(bytes_of("a"));
  for (std::size_t at = 0; at < a.size(); ++at) {
    sha256_digest b = a;
    b[at] ^= 0x01;
    EXPECT_FALSE(equal_in_constant_time(a.data(), b.data(), a.size())) << at;
  }
  EXPECT_TRUE(equal_in_constant_time(a.data(), a.data(), a.size()));
}

}  // namespace
}  // namespace unicache::detail
