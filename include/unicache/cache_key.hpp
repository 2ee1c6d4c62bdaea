// unicache/cache_key.hpp — building unambiguous cache keys from fields.
// For: backend authors (cache and store keys, blob payloads).
//
// A cache key is a byte string compared in full. Backends build theirs from
// the fields that decide what the cached value is (for a kernel: source hash,
// build options, device; never tensor shapes). `cache_key` writes each field
// with a fixed width or a length prefix, so two different field lists never
// produce the same bytes:
//
//   unicache::cache_key key;
//   key.add("gemm").add(std::uint32_t{tile_m}).add(transpose_b).add(build_options);
//   cache.get_or_build<kernel>(scope, kOpenClBackend, key.bytes(), size, build);
//
// Not thread-safe; cheap to copy.
#pragma once

#include <concepts>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "unicache/error.hpp"

namespace unicache {

class cache_key {
 public:
  // Integers and enums: fixed width, little-endian, prefixed by their width
  // so that int32 7 and int64 7 differ.
  template <typename T>
    requires std::integral<T> || std::is_enum_v<T>
  cache_key& add(T value) {
    if constexpr (std::is_same_v<T, bool>) {
      return add(static_cast<std::uint8_t>(value ? 1 : 0));
    } else {
    auto v = static_cast<std::make_unsigned_t<typename integer_of<T>::type>>(value);
    bytes_.push_back(static_cast<char>(sizeof v));
    for (std::size_t i = 0; i < sizeof v; ++i) {
      bytes_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    return *this;
    }
  }
  // Strings and byte blobs: length-prefixed.
  cache_key& add(std::string_view text) {
    add(static_cast<std::uint64_t>(text.size()));
    bytes_.append(text);
    return *this;
  }
  cache_key& add(const char* text) { return add(std::string_view(text)); }
  cache_key& add(const std::string& text) { return add(std::string_view(text)); }

  std::string_view bytes() const noexcept { return bytes_; }
  bool operator==(const cache_key&) const = default;

 private:
  // The integer type a field is written as: enums as their underlying type,
  // bool as one byte.
  template <typename T>
  struct integer_of {
    using type = T;
  };
  template <typename T>
    requires std::is_enum_v<T>
  struct integer_of<T> {
    using type = std::underlying_type_t<T>;
  };

  std::string bytes_;
};

// Reads back, field by field, bytes that a cache_key wrote: what blob
// payloads written with cache_key are parsed with. Every read checks the
// field's width prefix and bounds and throws unicache::invalid_argument when the
// bytes are not the field asked for; it never reads out of bounds.
class cache_key_reader {
 public:
  explicit cache_key_reader(std::string_view bytes) : bytes_(bytes) {}

  template <typename T>
    requires std::integral<T> && (!std::is_same_v<T, bool>)
  T read() {
    using U = std::make_unsigned_t<T>;
    if (bytes_.size() - at_ < 1 + sizeof(U) || static_cast<unsigned char>(bytes_[at_]) != sizeof(U)) {
      throw invalid_argument("malformed field at byte " + std::to_string(at_));
    }
    U v = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) {
      v |= static_cast<U>(static_cast<U>(static_cast<unsigned char>(bytes_[at_ + 1 + i])) << (8 * i));
    }
    at_ += 1 + sizeof(U);
    return static_cast<T>(v);
  }
  bool read_bool() { return read<std::uint8_t>() != 0; }
  std::string_view read_text() {
    const auto n = read<std::uint64_t>();
    if (bytes_.size() - at_ < n) throw invalid_argument("truncated text field at byte " + std::to_string(at_));
    std::string_view v = bytes_.substr(at_, n);
    at_ += n;
    return v;
  }
  bool done() const noexcept { return at_ == bytes_.size(); }

 private:
  std::string_view bytes_;
  std::size_t at_ = 0;
};

}  // namespace unicache
