// Entry signing for what a remote tier writes: the entry followed by an
// HMAC-SHA256, under a secret, of a scope (what the value is bound to: a
// Redis tier's key prefix), a zero byte and the entry. A value signed for
// one scope is no value of another's, and one signed under another secret
// (or none) is never accepted. Compared in constant time
// (util/sha256.hpp: the core's own HMAC-SHA256).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "unicache/bytes.hpp"

namespace unicache::detail {

// The secret in `path`, without a trailing newline. The file is opened
// without blocking (a FIFO never hangs) and must be a regular file that its
// group and others cannot write, of 16 to 4096 bytes; its contents are never
// echoed. Throws invalid_argument naming `what` ("the remote tier's secret
// file") and the path.
std::string read_secret_file(const std::string& path, const std::string& what);

class entry_signer {
 public:
  // `secret` empty: values are neither signed nor checked.
  entry_signer(std::string secret, std::string scope) : secret_(std::move(secret)), scope_(std::move(scope)) {}
  bool signs() const { return !secret_.empty(); }
  // `entry` followed by its MAC (the entry alone without a secret).
  byte_vector sign(byte_vector entry) const;
  // The entry in `value` if its MAC is right (all of it without a secret).
  std::optional<byte_span> verify(byte_span value) const;

  static constexpr std::size_t kMacBytes = 32;

 private:
  const std::string secret_;
  const std::string scope_;
};

}  // namespace unicache::detail
