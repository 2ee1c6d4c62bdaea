// unicache/bytes.hpp — the two byte types the library passes binaries in.
// For: users and backend authors.
//
// A device binary, a cache blob or a stored entry is a byte_vector when the
// library hands it over (the caller owns it) and a byte_span when the caller
// lends it (valid for the call only).
#pragma once

#include <span>
#include <vector>

namespace unicache {

using byte_vector = std::vector<unsigned char>;
using byte_span = std::span<const unsigned char>;

}  // namespace unicache
