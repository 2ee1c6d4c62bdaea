// A real three-master Redis Cluster for a test: three redis-server processes
// on loopback on free ports, in a temporary directory of their own (their
// nodes-*.conf), nothing saved, joined by `redis-cli --cluster create`
// with no replicas. The destructor kills them and removes the directory.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.hpp"
#include "remote/redis_client.hpp"
#include "unicache/remote.hpp"

namespace unicache::testing {

inline std::string redis_cli_binary() { return redis_program("redis-cli"); }

class redis_cluster_server {
 public:
  static constexpr int kMasters = 3;

  // Why a cluster cannot be had here ("" when it can): the binaries it needs.
  static std::string missing() {
    if (redis_server_binary().empty()) return "no redis-server (Debian: apt-get install redis-server)";
    if (redis_cli_binary().empty()) return "no redis-cli (Debian: apt-get install redis-tools)";
    return "";
  }

  // Starts the masters and joins them; started() says whether every node
  // reports cluster_state:ok, problem() why not.
  redis_cluster_server() {
    std::string pattern = (std::filesystem::temp_directory_path() / "unicache-cluster-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) {
      problem_ = "mkdtemp failed in " + std::filesystem::temp_directory_path().string();
      return;
    }
    dir_ = pattern;
    if (!missing().empty()) {
      problem_ = missing();
      return;
    }
    for (int i = 0; i < kMasters && problem_.empty(); ++i) start_node(i);
    if (problem_.empty()) create();
    if (problem_.empty()) wait_until_ok();
  }
  ~redis_cluster_server() {
    for (int i = 0; i < kMasters; ++i) kill(i);
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  redis_cluster_server(const redis_cluster_server&) = delete;
  redis_cluster_server& operator=(const redis_cluster_server&) = delete;

  bool started() const { return problem_.empty(); }
  const std::string& problem() const { return problem_; }
  int port(int i) const { return ports_[i]; }

  // The cluster's URL: every master a seed, with `options`.
  std::string url(const std::string& options = "") const {
    std::string u = "redis://";
    for (int i = 0; i < kMasters; ++i) u += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(ports_[i]);
    return u + (options.empty() ? "" : "?" + options);
  }
  // One master alone (not a cluster's configuration), for direct commands.
  redis_config node_config(int i) const {
    redis_config c;
    c.host = "127.0.0.1";
    c.port = static_cast<std::uint16_t>(ports_[i]);
    return c;
  }

  // SIGSTOP, then SIGCONT: master i stalls (the kernel still accepts
  // connections to it; nothing answers), then goes on.
  void freeze(int i) {
    if (pids_[i] > 0) ::kill(pids_[i], SIGSTOP);
  }
  void thaw(int i) {
    if (pids_[i] > 0) ::kill(pids_[i], SIGCONT);
  }
  // SIGKILL: master i dies as in a crash (its slots have no replica).
  void kill(int i) {
    if (pids_[i] <= 0) return;
    ::kill(pids_[i], SIGKILL);
    int status = 0;
    ::waitpid(pids_[i], &status, 0);
    pids_[i] = -1;
  }

 private:
  static pid_t spawn(std::vector<std::string> args, const std::string& log) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    return rc == 0 ? pid : -1;
  }

  static std::string text_of(const redis::redis_result& r) { return std::string(r.value.begin(), r.value.end()); }

  // Master i, on a free port (tried again on others while one was taken).
  void start_node(int i) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      // The cluster bus port is given too: port + 10000 may be over 65535.
      ports_[i] = free_port();
      const int bus = free_port();
      const std::string p = std::to_string(ports_[i]);
      pids_[i] = spawn({redis_server_binary(), "--port", p, "--cluster-enabled", "yes", "--cluster-port",
                        std::to_string(bus), "--cluster-config-file", dir_ + "/nodes-" + p + ".conf",
                        "--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no", "--save", "",
                        "--appendonly", "no", "--bind", "127.0.0.1", "--dir", dir_, "--daemonize", "no"},
                       dir_ + "/server-" + p + ".log");
      if (pids_[i] <= 0) {
        problem_ = "redis-server did not start";
        return;
      }
      if (answers(i)) return;
      kill(i);
      if (!problem_.empty()) return;
    }
    if (problem_.empty()) problem_ = "redis-server did not start on a free port in 5 tries";
  }

  // Whether master i answers PING within 10 s; false when it exited (its
  // port was taken meanwhile) or sets problem_ when it hangs.
  bool answers(int i) {
    redis::redis_connection c(node_config(i));
    for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);;) {
      int status = 0;
      if (::waitpid(pids_[i], &status, WNOHANG) == pids_[i]) {
        pids_[i] = -1;
        return false;
      }
      if (c.command({"PING"}).status == redis::redis_status::ok) return true;
      if (std::chrono::steady_clock::now() > deadline) {
        problem_ = "redis-server on port " + std::to_string(ports_[i]) + " did not answer";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void create() {
    std::vector<std::string> args{redis_cli_binary(), "--cluster", "create"};
    for (int i = 0; i < kMasters; ++i) args.push_back("127.0.0.1:" + std::to_string(ports_[i]));
    for (const char* a : {"--cluster-replicas", "0", "--cluster-yes"}) args.push_back(a);
    const pid_t pid = spawn(args, dir_ + "/create.log");
    if (pid <= 0) {
      problem_ = "redis-cli did not start";
      return;
    }
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        problem_ = "redis-cli --cluster create took over 60 s: " + log_of("create.log");
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      problem_ = "redis-cli --cluster create failed: " + log_of("create.log");
    }
  }

  void wait_until_ok() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int i = 0; i < kMasters; ++i) {
      redis::redis_connection c(node_config(i));
      while (text_of(c.command({"CLUSTER", "INFO"})).find("cluster_state:ok") == std::string::npos) {
        if (std::chrono::steady_clock::now() > deadline) {
          problem_ = "the cluster's state was not ok within 30 s";
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }

  std::string log_of(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str().substr(0, 2000);
  }

  std::string dir_;
  std::string problem_;
  std::array<int, kMasters> ports_{};
  std::array<pid_t, kMasters> pids_{-1, -1, -1};
};

// A GoogleTest fixture with a cluster of its own, skipped, saying why,
// where redis-server or redis-cli is missing.
class redis_cluster_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = redis_cluster_server::missing(); !why.empty()) GTEST_SKIP() << why;
    cluster_ = std::make_unique<redis_cluster_server>();
    ASSERT_TRUE(cluster_->started()) << cluster_->problem();
  }
  // The cluster's URL with `options`, parsed.
  redis_config config(const std::string& options = "") { return parse_redis_url(cluster_->url(options)); }

  std::unique_ptr<redis_cluster_server> cluster_;
};

}  // namespace unicache::testing
