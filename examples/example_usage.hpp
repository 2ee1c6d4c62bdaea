// What the examples do with an argument: --help (or -h) prints the usage on
// stdout and exits 0; any other argument an example does not take is a
// usage error, with the usage on stderr and exit 2.
#pragma once

#include <cstdio>
#include <string_view>

namespace unicache::examples {

inline int answer_argument(const char* program, const char* usage, std::string_view argument) {
  if (argument == "--help" || argument == "-h") {
    std::fputs(usage, stdout);
    return 0;
  }
  std::fprintf(stderr, "%s: unknown argument %.*s\n\n%s", program, static_cast<int>(argument.size()),
               argument.data(), usage);
  return 2;
}

}  // namespace unicache::examples
