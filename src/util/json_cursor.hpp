// Reading JSON text token by token, for a reader that knows its schema: the
// reader asks for the value it expects next, so nesting costs no stack, and
// every error names the byte where the text went wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "unicache/error.hpp"

namespace unicache::detail {

// Malformed JSON, or JSON that is not what the reader expected. The message
// names the byte offset ("at byte 57: expected ','") or the value's path.
class json_error : public invalid_argument {
 public:
  using invalid_argument::invalid_argument;
};

// What the value that starts at the cursor is, by its first byte.
enum class json_type : std::uint8_t { object, array, string, number, boolean, null, invalid, end };
// "an object", "a string", ... as messages name a type.
const char* describe(json_type type);

// The longest number token read (digits, sign, point, exponent): longer is
// an error, so no number costs more than this to convert.
inline constexpr std::size_t kMaxJsonNumberChars = 64;

// A position in a JSON text (RFC 8259). Holds a view: the text must outlive
// it. Every read skips the whitespace before it; every error is a
// json_error. Not thread-safe.
class json_cursor {
 public:
  explicit json_cursor(std::string_view text) : text_(text) {}

  // The type of the value that starts at the next non-whitespace byte.
  json_type next();
  std::size_t offset() const { return pos_; }

  // Consumes `c` (after whitespace), or fails with "expected 'c'".
  void expect(char c);
  // Consumes `c` if it is the next non-whitespace byte.
  bool consume(char c);
  // Fails unless only whitespace is left.
  void expect_end();

  // A string value, unescaped (\uXXXX above 0x7f becomes '?': names this
  // cursor's readers compare are ASCII), at most `max_bytes` long.
  std::string read_string(std::size_t max_bytes);
  // A number value as written, checked against JSON's grammar (no NaN, no
  // Infinity, no leading '+' or zeros) and kMaxJsonNumberChars.
  std::string_view read_number();
  // A number without fraction or exponent, within int64.
  std::int64_t read_integer();
  // A number as the nearest float; fails for one beyond float's range.
  float read_float();
  bool read_boolean();

  // The members of an object: on_member(key) must read the member's value.
  // Keys are at most 256 bytes.
  template <typename OnMember>
  void read_object(OnMember&& on_member) {
    expect('{');
    if (consume('}')) return;
    do {
      if (next() != json_type::string) fail("expected a member name (a string)");
      const std::string key = read_string(kMaxKeyBytes);
      expect(':');
      on_member(key);
    } while (consume(','));
    expect_closing('}');
  }
  // The elements of an array: on_element(index) must read the element.
  template <typename OnElement>
  void read_array(OnElement&& on_element) {
    expect('[');
    if (consume(']')) return;
    std::size_t index = 0;
    do {
      on_element(index++);
    } while (consume(','));
    expect_closing(']');
  }

  // Fails unless the next value is of `type`: "<path>: expected <type>, got <type>".
  void expect_type(json_type type, const std::string& path);

  // Throws json_error("at byte N: <what>").
  [[noreturn]] void fail(const std::string& what) const;
  // Throws json_error("<path>: <what> (at byte N)"), N where the value at fault starts.
  [[noreturn]] void fail_at(std::size_t offset, const std::string& path, const std::string& what) const;

 private:
  static constexpr std::size_t kMaxKeyBytes = 256;
  void skip_whitespace();
  void expect_closing(char close);  // after a member or element: "expected ',' or '}'"
  void read_escape(std::string& out);

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace unicache::detail
