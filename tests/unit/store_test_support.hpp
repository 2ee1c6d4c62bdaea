// Helpers shared by the store tests: temporary directories, configurations,
// device identities, deterministic binaries.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "unicache/store.hpp"

namespace unicache::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/unicache-test-XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline store_config store_in(const std::string& dir, std::uint64_t max_bytes = std::uint64_t{1} << 30) {
  store_config c;
  c.directory = dir;
  c.max_size_bytes = max_bytes;
  return c;
}

inline device_identity gpu_a() { return {"NVIDIA CUDA", "NVIDIA H200", "OpenCL 3.0 CUDA", "560.35.03"}; }
inline device_identity pocl_cpu() { return {"Portable Computing Language", "cpu-x86-64-znver3", "OpenCL 3.0 PoCL", "3.1"}; }

// A binary derived from its key, so any reader can check what it got.
inline byte_vector binary_for(const std::string& key, std::size_t bytes) {
  byte_vector out(bytes);
  std::uint64_t x = std::hash<std::string>{}(key) | 1;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  return out;
}

// Every *.entry file under `dir`.
inline std::vector<std::string> entry_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().extension() == ".entry") out.push_back(it->path().string());
  }
  return out;
}

}  // namespace unicache::testing
