// Helpers shared by the store tests: temporary directories, configurations,
// device identities, deterministic binaries, and child processes (for
// operations that could hang, and for running as another user).
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "store/background_evictor.hpp"
#include "store/entry_format.hpp"
#include "store/store_layout.hpp"
#include "temp_dir.hpp"
#include "util/lock_file.hpp"
#include "unicache/store.hpp"

namespace unicache::testing {

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

// Where the store in `root` keeps `key`'s entries for device `d` (keys
// hashed with `hasher`, the store's own by default).
using key_hasher = detail::hash128 (*)(std::string_view);
inline std::string entry_dir_of(const std::string& root, const device_identity& d, std::string_view key,
                                key_hasher hasher = &detail::key_hash) {
  const std::string k = detail::to_hex(hasher(key));
  return root + "/v2/" + detail::to_hex(detail::device_hash(d)) + "/" + k.substr(0, 2) + "/" + k;
}

// The store's key hash with its shard digit zeroed: every key in shard 0,
// for tests of one shard's eviction (use with store_access::use_key_hasher).
inline detail::hash128 shard_zero_hash(std::string_view key) {
  detail::hash128 h = detail::key_hash(key);
  h[0] &= 0x0f;
  return h;
}

// A store limit whose shards each hold `bytes`.
inline std::uint64_t limit_with_shard_share(std::uint64_t bytes) { return bytes * detail::kShards; }

// Waits until this process's background evictor has nothing to do.
inline void wait_for_eviction() {
  if (detail::background_evictor* e = detail::background_evictor::existing()) e->wait_idle();
}

// Whether another process holds any shard's lock of the store in `root`.
inline bool a_shard_is_locked(const std::string& root) {
  for (int s = 0; s < detail::kShards; ++s) {
    if (detail::is_locked_by_another_process(root + "/v2/shards/" + detail::shard_lock_name(s))) return true;
  }
  return false;
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

// A child process's exit status (128 + signal when a signal ended it) and
// what it wrote to stderr.
struct child_result {
  int status = -1;
  std::string err;
  bool hung() const { return status == 128 + SIGALRM; }
};

// Runs `body` (returning an exit code) in a forked child with stderr
// captured. With `alarm_seconds`, SIGALRM ends a child still running then,
// so an operation that blocks fails the test instead of hanging it.
template <typename Body>
child_result run_in_child(Body body, unsigned alarm_seconds = 0) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    if (alarm_seconds > 0) ::alarm(alarm_seconds);
    ::_exit(body());
  }
  ::close(pipe_fds[1]);
  child_result r;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) r.err.append(buf, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// A shell command's exit status (-1 if it did not exit) and its output
// (stdout and stderr, when the command redirects it).
struct command_result {
  int status = -1;
  std::string out;
};
inline command_result run_command(const std::string& command) {
  command_result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe)) r.out += buf.data();
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Long enough for any store operation on a loaded machine, short enough that
// a blocked one fails the test soon.
inline constexpr unsigned kHangAlarmSeconds = 20;

// Another local user (nobody), for ownership and permission tests; only root
// can act as it.
inline constexpr uid_t kOtherUser = 65534;
inline bool can_act_as_another_user() { return ::geteuid() == 0; }

// In a child that has become kOtherUser: gives up root for good.
inline bool become_other_user() {
  return ::setresgid(kOtherUser, kOtherUser, kOtherUser) == 0 &&
         ::setresuid(kOtherUser, kOtherUser, kOtherUser) == 0;
}

// Bytes this process has read so far (rchar of /proc/self/io: every read(2),
// pread(2), ... whatever the page cache did), or nullopt where the kernel
// does not say.
inline std::optional<std::uint64_t> bytes_read_by_this_process() {
  std::ifstream io("/proc/self/io");
  std::string field;
  std::uint64_t value = 0;
  while (io >> field >> value) {
    if (field == "rchar:") return value;
  }
  return std::nullopt;
}

}  // namespace unicache::testing
