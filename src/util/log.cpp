// Writing one whole line to stderr per call, with a single write(2).
#include "util/log.hpp"

#include <unistd.h>

#include <cerrno>
#include <string>

namespace unicache::detail {

void write_line(std::string_view line) noexcept {
  try {
    std::string buffer;
    buffer.reserve(line.size() + 1);
    buffer.append(line);
    buffer.push_back('\n');
    const char* data = buffer.data();
    std::size_t left = buffer.size();
    while (left > 0) {
      const ssize_t written = ::write(STDERR_FILENO, data, left);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) return;  // stderr is closed or full: nothing to do
      data += written;
      left -= static_cast<std::size_t>(written);
    }
  } catch (...) {
    // Out of memory while formatting a diagnostic: drop the diagnostic.
  }
}

void warn(std::string_view message) noexcept {
  try {
    write_line(std::string("unicache: ").append(message));
  } catch (...) {
  }
}

}  // namespace unicache::detail
