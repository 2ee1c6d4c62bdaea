// Printing untrusted text: plain text as it is, anything else through quoted().
#include "util/printable.hpp"

#include <algorithm>

#include "util/env.hpp"

namespace unicache::detail {

std::string printable(std::string_view text, std::size_t max_chars) {
  const bool plain = text.size() <= max_chars && std::all_of(text.begin(), text.end(), [](char c) {
                       return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
                     });
  return plain ? std::string(text) : quoted(text, max_chars);
}

}  // namespace unicache::detail
