// A real redis-server for a test: started on loopback on a free port, with
// nothing saved to disk, and stopped (or killed, or paused) by the test.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "remote/redis_client.hpp"

extern char** environ;

namespace unicache::testing {

// The path of `program` (redis-server, redis-cli) in the usual places,
// then in $PATH (a GPU host keeps Debian's copy in a private root on its
// PATH), or "" (tests that need one skip, saying so).
inline std::string redis_program(const std::string& program) {
  std::vector<std::string> dirs{"/usr/bin", "/usr/sbin", "/usr/local/bin"};
  if (const char* path = std::getenv("PATH")) {
    const std::string all(path);
    for (std::size_t at = 0; at <= all.size();) {
      const std::size_t end = std::min(all.find(':', at), all.size());
      if (end > at) dirs.push_back(all.substr(at, end - at));
      at = end + 1;
    }
  }
  for (const std::string& dir : dirs) {
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

inline std::string redis_server_binary() { return redis_program("redis-server"); }

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

class redis_server {
 public:
  // Starts a server (with AUTH when `password` is not empty); started()
  // says whether it answers.
  explicit redis_server(std::string password = "") : password_(std::move(password)) { start(); }
  ~redis_server() { stop(); }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  bool started() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string url(const std::string& options = "") const {
    return "redis://" + (password_.empty() ? "" : password_ + "@") + "127.0.0.1:" + std::to_string(port_) +
           (options.empty() ? "" : "?" + options);
  }

  // Starts it again on the same port (after stop or kill).
  bool start() {
    const std::string binary = redis_server_binary();
    if (binary.empty()) return false;
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      if (port_ == 0 || attempt > 0) port_ = free_port();
      std::vector<std::string> args{binary, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
                                    "--dir", std::filesystem::temp_directory_path().string()};
      if (!password_.empty()) {
        args.push_back("--requirepass");
        args.push_back(password_);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
      posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
      pid_t pid = 0;
      const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
      posix_spawn_file_actions_destroy(&actions);
      if (rc != 0) return false;
      pid_ = pid;
      if (!wait_until_answering()) stop();
      if (pid_ <= 0) port_ = 0;
    }
    return pid_ > 0;
  }

  // SIGTERM, then SIGKILL if it lingers; waits for it.
  void stop() { end(SIGTERM); }
  // SIGKILL: the server dies mid-run, as a crash would.
  void kill() { end(SIGKILL); }
  // SIGSTOP, then SIGCONT: a server that stalls (commands wait in its
  // sockets) and then goes on, running what waited.
  void freeze() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  void thaw() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }

 private:
  bool wait_until_answering() {
    redis_config c;
    c.host = "127.0.0.1";
    c.port = static_cast<std::uint16_t>(port_);
    c.password = password_;
    redis::redis_connection conn(c);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;  // it exited: the port was taken meanwhile
        return false;
      }
      if (conn.command({"PING"}).status == redis::redis_status::ok) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  void end(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);  // a frozen one would not act on SIGTERM
    ::kill(pid_, signal);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
  }

  std::string password_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace unicache::testing
