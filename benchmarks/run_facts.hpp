// What a benchmark's JSON records about the run: the machine's CPU model and
// the date (UTC).
#pragma once

#include <ctime>
#include <fstream>
#include <string>

namespace unicache::bench {

// The CPU's model name from /proc/cpuinfo, or "unknown".
inline std::string machine_name() {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// Today as YYYY-MM-DD, in UTC.
inline std::string today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

}  // namespace unicache::bench
