// A fresh directory under $TMPDIR (or /tmp), removed with its contents when
// the object goes. Made at a function-local static, it serves a whole test
// process. A forked child that destroys it leaves it alone: the directory
// belongs to the process that made it.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace unicache::testing {

class temp_dir {
 public:
  explicit temp_dir(const std::string& prefix = "unicache-test") {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
    if (::mkdtemp(pattern.data())) path_ = pattern;
  }
  ~temp_dir() {
    if (path_.empty() || ::getpid() != maker_) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  // Empty when no directory could be made.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  pid_t maker_ = ::getpid();
};

}  // namespace unicache::testing
