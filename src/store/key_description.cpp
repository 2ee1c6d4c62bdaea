// Reading a key's kind and name back with cache_key_reader, or previewing it.
#include "store/key_description.hpp"

#include <algorithm>
#include <stdexcept>

#include "unicache/cache_key.hpp"
#include "util/env.hpp"
#include "util/printable.hpp"

namespace unicache::detail {
namespace {

constexpr std::size_t kMaxKindBytes = 64;
constexpr std::size_t kMaxShownNameBytes = 64;
constexpr std::size_t kPreviewBytes = 40;

bool is_kind(std::string_view text) {
  return !text.empty() && text.size() <= kMaxKindBytes && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  std::string_view("._-+/:").find(c) != std::string_view::npos;
         });
}

}  // namespace

key_description describe_key(std::string_view key) {
  key_description out;
  cache_key_reader fields(key);
  try {
    const std::string_view kind = fields.read_text();
    if (is_kind(kind)) out.kind = std::string(kind);
  } catch (const invalid_argument&) {
    // Not written with cache_key.
  }
  if (out.kind.empty()) {
    out.preview = quoted(key, kPreviewBytes);
    return out;
  }
  try {
    out.name = printable(fields.read_text(), kMaxShownNameBytes);
  } catch (const invalid_argument&) {
    // No second text field: the kind says it all.
  }
  return out;
}

}  // namespace unicache::detail
