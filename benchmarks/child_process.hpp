// Running this benchmark again as a fresh child process, and reading what it
// reports. A child prints lines of its own protocol to stdout:
//   RESULT name=value name=value ...   numbers (several lines are merged)
//   DEVICE text                        the device it ran on
//   PROGRESS done total                how far it is (passed to on_line)
// Everything else is kept as output, to show when the child fails.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace unicache::bench {

// This executable's path, to start it again.
inline std::string self_path() {
  std::array<char, 4096> buf{};
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : "/proc/self/exe";
}

struct child_run {
  std::map<std::string, double> values;
  std::string device;
  bool ok = false;      // exited with 0 and reported a RESULT
  std::string output;   // everything it printed (stderr included)
};

// Runs `self_path() --child args` under `env environment`, calling
// `on_line` with each line as it arrives.
inline child_run run_child(const std::string& environment, const std::string& args,
                           const std::function<void(const std::string&)>& on_line = {}) {
  const std::string command = "env " + environment + " " + self_path() + " --child " + args + " 2>&1";
  child_run r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> line{};
  while (std::fgets(line.data(), line.size(), pipe)) {
    const std::string text = line.data();
    if (on_line) on_line(text);
    if (text.rfind("RESULT ", 0) == 0) {
      std::istringstream in(text.substr(7));
      std::string field;
      while (in >> field) {
        const auto eq = field.find('=');
        if (eq != std::string::npos) r.values[field.substr(0, eq)] = std::stod(field.substr(eq + 1));
      }
    } else if (text.rfind("DEVICE ", 0) == 0) {
      r.device = text.substr(7, text.size() - 8);
    } else if (text.rfind("PROGRESS ", 0) != 0) {
      r.output += text;
    }
  }
  r.ok = ::pclose(pipe) == 0 && !r.values.empty();
  return r;
}

// Median and other percentiles (nearest rank) of `v`; NaN when empty.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}
inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace unicache::bench
