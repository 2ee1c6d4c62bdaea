// The JSON cursor: RFC 8259's grammar, strictly, with every error naming
// the byte where the text went wrong.
#include "util/json_cursor.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace unicache::detail {
namespace {

// The message `read` throws on `text`; "" if it reads.
template <typename Read>
std::string error_of(const std::string& text, Read&& read) {
  json_cursor c(text);
  try {
    read(c);
  } catch (const json_error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonCursor, NumbersFollowJsonsGrammarStrictly) {
  for (const char* good : {"0", "-0", "7", "-12", "1.5", "1.5e-3", "1E+2", "2e10"}) {
    json_cursor c(good);
    EXPECT_EQ(c.read_number(), good);
    EXPECT_NO_THROW(c.expect_end());
  }
  for (const char* bad : {"01", "+1", ".5", "1.", "-", "1e", "1e+", "-.5", "NaN", "Infinity", "-Infinity"}) {
    EXPECT_NE(error_of(bad, [](json_cursor& c) { c.read_number(); }).find("at byte 0: not a JSON number"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(error_of(std::string(65, '1'), [](json_cursor& c) { c.read_number(); }).find("longer than 64"),
            std::string::npos);
}

TEST(JsonCursor, IntegersAreWithinInt64AndHaveNoFractionOrExponent) {
  json_cursor c(" -9223372036854775808 ");
  EXPECT_EQ(c.read_integer(), INT64_MIN);
  EXPECT_EQ(error_of("9223372036854775808", [](json_cursor& c) { c.read_integer(); }),
            "at byte 0: 9223372036854775808 is out of range (a 64-bit integer)");
  EXPECT_EQ(error_of("  1.0", [](json_cursor& c) { c.read_integer(); }), "at byte 2: 1.0 is not an integer");
  EXPECT_EQ(error_of("1e3", [](json_cursor& c) { c.read_integer(); }), "at byte 0: 1e3 is not an integer");
}

TEST(JsonCursor, FloatsReadBackExactlyAndBeyondFloatsRangeAreRefused) {
  json_cursor c("1e-12");
  EXPECT_EQ(c.read_float(), 1e-12f);
  EXPECT_NE(error_of("1e39", [](json_cursor& c) { c.read_float(); }).find("out of range (a 32-bit float)"),
            std::string::npos);
  EXPECT_NE(error_of("1e-50", [](json_cursor& c) { c.read_float(); }).find("out of range"), std::string::npos);
}

TEST(JsonCursor, StringsAreUnescapedAndControlCharactersAndOverlongOnesRefused) {
  json_cursor c(R"("a\"b\\c\/\n\u0041\u00e9")");
  EXPECT_EQ(c.read_string(64), "a\"b\\c/\nA?");
  EXPECT_EQ(error_of("\"ab\ncd\"", [](json_cursor& c) { c.read_string(64); }),
            "at byte 3: a control character (byte 0x0a) in a string");
  EXPECT_EQ(error_of(R"("\x")", [](json_cursor& c) { c.read_string(64); }), "at byte 2: invalid escape \\x in a string");
  EXPECT_EQ(error_of(R"("\u12")", [](json_cursor& c) { c.read_string(64); }),
            "at byte 5: expected four hex digits after \\u");
  EXPECT_EQ(error_of("  \"abc", [](json_cursor& c) { c.read_string(64); }),
            "at byte 2: the string starting here never ends");
  EXPECT_EQ(error_of("\"abcdef\"", [](json_cursor& c) { c.read_string(4); }),
            "at byte 0: a string longer than 4 bytes");
}

TEST(JsonCursor, ObjectsAndArraysCheckTheirSeparatorsAndNameTheByte) {
  std::vector<std::string> keys;
  json_cursor c(R"( {"a": [1, 2], "b": true} )");
  c.read_object([&](const std::string& key) {
    keys.push_back(key);
    if (key == "a") {
      c.read_array([&](std::size_t) { c.read_integer(); });
    } else {
      EXPECT_TRUE(c.read_boolean());
    }
  });
  c.expect_end();
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b"}));
  auto read_ints = [](json_cursor& c) { c.read_array([&](std::size_t) { c.read_integer(); }); };
  EXPECT_EQ(error_of("[1 2]", read_ints), "at byte 3: expected ',' or ']', got '2'");
  EXPECT_EQ(error_of("[1,]", read_ints), "at byte 3: not a JSON number: expected a digit");
  EXPECT_EQ(error_of("[1", read_ints), "at byte 2: expected ',' or ']', got the end of the text");
  EXPECT_EQ(error_of("{1: 2}", [](json_cursor& c) { c.read_object([](const std::string&) {}); }),
            "at byte 1: expected a member name (a string)");
  EXPECT_EQ(error_of("[] x", [&](json_cursor& c) {
              read_ints(c);
              c.expect_end();
            }),
            "at byte 3: expected the end of the text, got 'x'");
}

TEST(JsonCursor, TypeErrorsNameThePathAndTheByte) {
  json_cursor c(R"({"shape": "x"})");
  EXPECT_EQ(c.next(), json_type::object);
  EXPECT_EQ(error_of(R"(  "x")", [](json_cursor& c) { c.expect_type(json_type::array, "tensors[0].shape"); }),
            "tensors[0].shape: expected an array, got a string (at byte 2)");
  EXPECT_EQ(error_of("", [](json_cursor& c) { c.expect_type(json_type::object, "the document"); }),
            "the document: expected an object, got the end of the text (at byte 0)");
}

}  // namespace
}  // namespace unicache::detail
