// A directory for a whole test process: made on first use under $TMPDIR (or
// /tmp) and removed with its contents when that process exits normally.
// A forked child that exits leaves it alone: it belongs to its maker.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace unicache::testing {

class process_temp_dir {
 public:
  explicit process_temp_dir(const std::string& prefix) {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
    if (::mkdtemp(pattern.data())) path_ = pattern;
  }
  ~process_temp_dir() {
    if (path_.empty() || ::getpid() != maker_) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  process_temp_dir(const process_temp_dir&) = delete;
  process_temp_dir& operator=(const process_temp_dir&) = delete;
  // Empty when no directory could be made.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  pid_t maker_ = ::getpid();
};

}  // namespace unicache::testing
