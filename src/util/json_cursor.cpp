// The JSON cursor: whitespace, separators, strings, numbers and literals
// read one at a time, each checked against RFC 8259's grammar.
#include "util/json_cursor.hpp"

#include <charconv>
#include <cmath>

#include "util/printable.hpp"

namespace unicache::detail {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string quote_char(char c) {
  if (c >= 0x20 && c < 0x7f) return std::string("'") + c + "'";
  static const char* hex = "0123456789abcdef";
  const auto byte = static_cast<unsigned char>(c);
  return std::string("byte 0x") + hex[byte >> 4] + hex[byte & 15];
}

}  // namespace

const char* describe(json_type type) {
  switch (type) {
    case json_type::object: return "an object";
    case json_type::array: return "an array";
    case json_type::string: return "a string";
    case json_type::number: return "a number";
    case json_type::boolean: return "true or false";
    case json_type::null: return "null";
    case json_type::invalid: return "no JSON value";
    case json_type::end: return "the end of the text";
  }
  return "?";
}

void json_cursor::skip_whitespace() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
    ++pos_;
  }
}

json_type json_cursor::next() {
  skip_whitespace();
  if (pos_ >= text_.size()) return json_type::end;
  const char c = text_[pos_];
  if (c == '{') return json_type::object;
  if (c == '[') return json_type::array;
  if (c == '"') return json_type::string;
  if (c == '-' || is_digit(c)) return json_type::number;
  if (c == 't' || c == 'f') return json_type::boolean;
  if (c == 'n') return json_type::null;
  return json_type::invalid;
}

void json_cursor::fail(const std::string& what) const {
  throw json_error("at byte " + std::to_string(pos_) + ": " + what);
}

void json_cursor::fail_at(std::size_t offset, const std::string& path, const std::string& what) const {
  throw json_error(path + ": " + what + " (at byte " + std::to_string(offset) + ")");
}

void json_cursor::expect(char c) {
  if (!consume(c)) {
    fail(std::string("expected '") + c + "'" +
         (pos_ < text_.size() ? ", got " + quote_char(text_[pos_]) : ", got the end of the text"));
  }
}

bool json_cursor::consume(char c) {
  skip_whitespace();
  if (pos_ < text_.size() && text_[pos_] == c) {
    ++pos_;
    return true;
  }
  return false;
}

void json_cursor::expect_closing(char close) {
  if (consume(close)) return;
  fail(std::string("expected ',' or '") + close + "'" +
       (pos_ < text_.size() ? ", got " + quote_char(text_[pos_]) : ", got the end of the text"));
}

void json_cursor::expect_end() {
  skip_whitespace();
  if (pos_ < text_.size()) fail("expected the end of the text, got " + quote_char(text_[pos_]));
}

void json_cursor::expect_type(json_type type, const std::string& path) {
  const json_type found = next();
  if (found != type) {
    fail_at(pos_, path, std::string("expected ") + describe(type) + ", got " + describe(found));
  }
}

void json_cursor::read_escape(std::string& out) {
  // At the byte after the backslash.
  if (pos_ >= text_.size()) fail("the text ends inside a string");
  const char c = text_[pos_++];
  switch (c) {
    case '"': out += '"'; return;
    case '\\': out += '\\'; return;
    case '/': out += '/'; return;
    case 'b': out += '\b'; return;
    case 'f': out += '\f'; return;
    case 'n': out += '\n'; return;
    case 'r': out += '\r'; return;
    case 't': out += '\t'; return;
    case 'u': break;
    default: --pos_; fail("invalid escape \\" + printable(std::string_view(&c, 1)) + " in a string");
  }
  unsigned code = 0;
  for (int i = 0; i < 4; ++i, ++pos_) {
    const char h = pos_ < text_.size() ? text_[pos_] : '\0';
    const int digit = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
    if (digit < 0) fail("expected four hex digits after \\u");
    code = code * 16 + static_cast<unsigned>(digit);
  }
  out += code < 0x80 ? static_cast<char>(code) : '?';
}

std::string json_cursor::read_string(std::size_t max_bytes) {
  skip_whitespace();
  if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a string");
  const std::size_t start = pos_++;
  std::string out;
  for (;;) {
    if (pos_ >= text_.size()) {
      pos_ = start;
      fail("the string starting here never ends");
    }
    const char c = text_[pos_++];
    if (c == '"') return out;
    if (c == '\\') {
      read_escape(out);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      --pos_;
      fail("a control character (" + quote_char(c) + ") in a string");
    } else {
      out += c;
    }
    if (out.size() > max_bytes) {
      pos_ = start;
      fail("a string longer than " + std::to_string(max_bytes) + " bytes");
    }
  }
}

std::string_view json_cursor::read_number() {
  skip_whitespace();
  const std::size_t start = pos_;
  auto digits = [&] {
    const std::size_t from = pos_;
    while (pos_ < text_.size() && is_digit(text_[pos_]) && pos_ - start <= kMaxJsonNumberChars) ++pos_;
    return pos_ > from;
  };
  auto bad = [&](const char* why) {
    pos_ = start;
    fail(std::string("not a JSON number: ") + why);
  };
  if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
  if (pos_ >= text_.size() || !is_digit(text_[pos_])) bad("expected a digit");
  if (text_[pos_] == '0') {
    ++pos_;
    if (pos_ < text_.size() && is_digit(text_[pos_])) bad("a leading zero");
  } else {
    digits();
  }
  if (pos_ < text_.size() && text_[pos_] == '.') {
    ++pos_;
    if (!digits()) bad("expected a digit after '.'");
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (!digits()) bad("expected a digit in the exponent");
  }
  if (pos_ - start > kMaxJsonNumberChars) bad("longer than 64 characters");
  return text_.substr(start, pos_ - start);
}

std::int64_t json_cursor::read_integer() {
  skip_whitespace();
  const std::size_t start = pos_;
  const std::string_view token = read_number();
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (end != token.data() + token.size()) {
    pos_ = start;
    fail(std::string(token) + " is not an integer");
  }
  if (ec != std::errc()) {
    pos_ = start;
    fail(std::string(token) + " is out of range (a 64-bit integer)");
  }
  return value;
}

float json_cursor::read_float() {
  skip_whitespace();
  const std::size_t start = pos_;
  const std::string_view token = read_number();
  float value = 0;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (ec != std::errc() || end != token.data() + token.size() || !std::isfinite(value)) {
    pos_ = start;
    fail(std::string(token) + " is out of range (a 32-bit float)");
  }
  return value;
}

bool json_cursor::read_boolean() {
  skip_whitespace();
  const std::string_view rest = text_.substr(pos_);
  if (rest.starts_with("true")) {
    pos_ += 4;
    return true;
  }
  if (rest.starts_with("false")) {
    pos_ += 5;
    return false;
  }
  fail("expected true or false");
}

}  // namespace unicache::detail
