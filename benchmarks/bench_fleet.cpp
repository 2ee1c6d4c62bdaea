// bench_fleet: a fleet of fresh processes started together against one
// remote tier, each with an empty local store: how many times the fleet
// builds each kernel, and what that costs the slowest process.
//
// Every process (this program again, with --child) creates its GPU engine
// as gpu_demo does (gpu_engine.hpp: CUDA where the driver reports a device,
// else OpenCL), uploads its weights, says it is ready, and waits on a start
// barrier (a pipe the parent closes once every process of the wave is
// ready): engine creation, which contends in the driver when 16 processes
// create contexts at once, is kept out of the figures, and the compiles
// really start together. Then it compiles the partitions of two models, the
// MLP of gpu_demo (768 -> 3072 (GELU) -> 768, batch 1, 8 and 32) and the
// BERT-base encoder layer of bench_dynamic_shapes at the shapes of that
// benchmark's first request, runs each once, waits for the results, and
// reports one JSON line. Driver caches are off (POCL_KERNEL_CACHE=0,
// CUDA_CACHE_DISABLE=1) and every process has an empty local store of its
// own (UNICACHE_PERSISTENT_CACHE_DIR); they share one Redis
// (UNICACHE_REMOTE_CACHE, a key prefix per fleet).
//
// The parent runs one lone cold process first (its own prefix): its builds
// are the distinct kernels, its compile time the baseline. Then, for each
// fleet size N: wave 1, N cold processes on a fresh prefix, and wave 2, N
// more with new empty local stores on the same prefix (all loads, if the
// remote tier serves them). Usage:
//
//   bench_fleet [--processes 4,8,16] [--rounds R] [--remote URL] [--device D]
//               [--timeout-s S] [--json FILE]
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "run_facts.hpp"
#include "dynamic_shapes_workload.hpp"
#include "gpu_engine.hpp"
#include "redis_server.hpp"
#include "unicache/compiler.hpp"
#include "unicache/config.hpp"
#include "unicache/graph.hpp"
#include "unicache/remote.hpp"
#include "unicache/specialization.hpp"
#include "unicache/store.hpp"
#include "unicache/version.hpp"

extern char** environ;

namespace {

using namespace unicache;
using namespace unicache::bench;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// --- JSON: what a child reports, and the parent's file ------------------------------

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

std::string json_string(const std::string& v) {
  std::string out = "\"";
  for (const char c : v) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A child's report: one flat JSON object of numbers and strings.
struct report {
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> texts;
  double number(const std::string& key) const {
    const auto it = numbers.find(key);
    return it == numbers.end() ? NAN : it->second;
  }
  bool has(const std::string& key) const { return numbers.count(key) != 0; }
};

// Parses the line a child wrote with json_string and json_number (and so
// only what they write: no nesting, no escapes but \" \\ and \u00XX).
std::optional<report> parse_report(const std::string& line) {
  report r;
  std::size_t i = 0;
  auto skip = [&] {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
  };
  auto text = [&]() -> std::optional<std::string> {
    if (i >= line.size() || line[i] != '"') return std::nullopt;
    std::string s;
    for (++i; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] != '\\') {
        s += line[i];
      } else if (i + 1 < line.size() && line[i + 1] == 'u' && i + 5 < line.size()) {
        s += static_cast<char>(std::stoi(line.substr(i + 2, 4), nullptr, 16));
        i += 5;
      } else if (++i < line.size()) {
        s += line[i];
      }
    }
    if (i >= line.size()) return std::nullopt;
    ++i;
    return s;
  };
  skip();
  if (i >= line.size() || line[i++] != '{') return std::nullopt;
  for (;;) {
    skip();
    if (i < line.size() && line[i] == '}') return r;
    const std::optional<std::string> key = text();
    skip();
    if (!key || i >= line.size() || line[i++] != ':') return std::nullopt;
    skip();
    if (i < line.size() && line[i] == '"') {
      const std::optional<std::string> value = text();
      if (!value) return std::nullopt;
      r.texts[*key] = *value;
    } else if (line.compare(i, 4, "null") == 0) {
      r.numbers[*key] = NAN;
      i += 4;
    } else {
      char* end = nullptr;
      const double v = std::strtod(line.c_str() + i, &end);
      if (end == line.c_str() + i) return std::nullopt;
      r.numbers[*key] = v;
      i = static_cast<std::size_t>(end - line.c_str());
    }
    skip();
    if (i < line.size() && line[i] == ',') ++i;
  }
}

// --- Child: one process of the fleet ------------------------------------------------------

// The first request of bench_dynamic_shapes' trace (its default settings):
// the BERT layer is compiled at its shapes.
constexpr unsigned kTraceSeed = 2026;
constexpr int kTraceMaxBatch = 8, kTraceMaxSeq = 512;
constexpr std::int64_t kHidden = 768, kFfn = 3072;
constexpr std::int64_t kMlpBatches[] = {1, 8, 32};

// gpu_demo's MLP: 768 -> 3072 (GELU) -> 768, constant weights; two
// partitions (up: matmul + bias + GELU, down: matmul + bias).
struct mlp {
  graph g;
  mlp() {
    auto x = g.tensor({-1, kHidden});
    auto w1 = g.tensor({kHidden, kFfn}, tensor_property::constant), b1 = g.tensor({kFfn}, tensor_property::constant);
    auto h = g.tensor({-1, kFfn}), hb = g.tensor({-1, kFfn}), a = g.tensor({-1, kFfn});
    auto w2 = g.tensor({kFfn, kHidden}, tensor_property::constant), b2 = g.tensor({kHidden}, tensor_property::constant);
    auto y = g.tensor({-1, kHidden}), out = g.tensor({-1, kHidden});
    g.add_op(op_kind::matmul, {x, w1}, {h});
    g.add_op(op_kind::add, {h, b1}, {hb});
    g.add_op(op_kind::gelu_erf, {hb}, {a});
    g.add_op(op_kind::matmul, {a, w2}, {y});
    g.add_op(op_kind::add, {y, b2}, {out});
    g.finalize();
  }
};

// Device memory of the process's engine, freed when this goes.
class device_memory {
 public:
  explicit device_memory(const examples::gpu& gpu) : gpu_(gpu) {}
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;
  ~device_memory() {
    for (void* b : all_) gpu_.release(b);
  }
  // `count` floats, random in [-scale, scale] from `seed`.
  void* random(std::int64_t count, unsigned seed, float scale) {
    const std::vector<float> host = random_values(static_cast<std::size_t>(count), seed, scale);
    all_.push_back(gpu_.make_buffer(host.size() * sizeof(float), host.data()));
    return all_.back();
  }
  void* empty(std::int64_t count) {
    all_.push_back(gpu_.make_buffer(static_cast<std::size_t>(count) * sizeof(float)));
    return all_.back();
  }

 private:
  const examples::gpu& gpu_;
  std::vector<void*> all_;
};

// Blocks until the parent closes the barrier's write end (or dies).
void wait_for_start(int start_fd) {
  char byte = 0;
  while (::read(start_fd, &byte, 1) < 0 && errno == EINTR) {
  }
  ::close(start_fd);
}

// The remote tier's lease counters, where this build's remote_stats has them
// (build leases, remote.hpp): written as they are named there.
template <class Stats>
std::string lease_fields(const Stats& s) {
  if constexpr (requires { s.leases; s.lease_waits; s.lease_hits; s.lease_wait_ms; }) {
    return ", \"leases\": " + std::to_string(s.leases) + ", \"lease_waits\": " + std::to_string(s.lease_waits) +
           ", \"lease_hits\": " + std::to_string(s.lease_hits) + ", \"lease_wait_ms\": " + std::to_string(s.lease_wait_ms);
  } else {
    return "";
  }
}

int run_child(int start_fd) {
  const mlp net;
  const layer bert(kHidden, kFfn);
  const std::int64_t rows = make_trace(1, kTraceSeed, kTraceMaxBatch, kTraceMaxSeq)[0].rows();

  const auto t_engine = clock_type::now();
  const examples::gpu gpu = examples::make_gpu(/*quiet=*/true);
  stream strm = make_stream(gpu.eng);
  const double engine_ms = ms_since(t_engine);

  device_memory mem(gpu);
  void* mlp_weights[4] = {mem.random(kHidden * kFfn, 1, 0.05f), mem.random(kFfn, 2, 0.05f),
                          mem.random(kFfn * kHidden, 3, 0.05f), mem.random(kHidden, 4, 0.05f)};
  std::vector<std::array<void*, 3>> mlp_io;  // per batch: input, activation, output
  for (const std::int64_t batch : kMlpBatches) {
    mlp_io.push_back({mem.random(batch * kHidden, 5, 1.f), mem.empty(batch * kFfn), mem.empty(batch * kHidden)});
  }
  void* bert_x = mem.random(rows * kHidden, 6, 1.f);
  std::vector<void*> bert_w, bert_b, bert_y;
  for (std::size_t i = 0; i < bert.steps.size(); ++i) {
    const layer::step& s = bert.steps[i];
    bert_w.push_back(mem.random(s.k * s.n, 10 + static_cast<unsigned>(i), 0.05f));
    bert_b.push_back(mem.random(s.n, 20 + static_cast<unsigned>(i), 0.05f));
    bert_y.push_back(mem.empty(rows * s.n));
  }
  const gpu_backends::kernel_counts before = gpu.counts();  // the engine's probe is in here
  std::printf("READY\n");
  std::fflush(stdout);
  wait_for_start(start_fd);

  // Timed from the barrier: every compile, then every partition once and
  // the results read back.
  const auto t_start = clock_type::now();
  std::vector<compiled_partition> up, down, steps;
  for (const std::int64_t batch : kMlpBatches) {
    up.push_back(compile(net.g.partitions()[0], {{batch, kHidden}, {kHidden, kFfn}, {kFfn}}, gpu.eng));
    down.push_back(compile(net.g.partitions()[1], {{batch, kFfn}, {kFfn, kHidden}, {kHidden}}, gpu.eng));
  }
  for (std::size_t i = 0; i < bert.steps.size(); ++i) steps.push_back(compile(bert.part(i), bert.shapes(i, rows), gpu.eng));
  const double compile_ms = ms_since(t_start);
  for (std::size_t b = 0; b < mlp_io.size(); ++b) {
    const auto& [x, act, out] = mlp_io[b];
    up[b].execute(strm, {{up[b].inputs()[0], x}, {up[b].inputs()[1], mlp_weights[0]}, {up[b].inputs()[2], mlp_weights[1]}},
                  {{up[b].outputs()[0], act}});
    down[b].execute(strm,
                    {{down[b].inputs()[0], act}, {down[b].inputs()[1], mlp_weights[2]}, {down[b].inputs()[2], mlp_weights[3]}},
                    {{down[b].outputs()[0], out}});
  }
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const int input = bert.steps[i].input;
    void* in = input < 0 ? bert_x : bert_y[static_cast<std::size_t>(input)];
    steps[i].execute(strm, {{steps[i].inputs()[0], in}, {steps[i].inputs()[1], bert_w[i]}, {steps[i].inputs()[2], bert_b[i]}},
                     {{steps[i].outputs()[0], bert_y[i]}});
  }
  float results[2] = {0, 0};
  gpu.read(strm, mlp_io.back()[2], &results[0], sizeof(float));
  gpu.read(strm, bert_y.back(), &results[1], sizeof(float));
  const double first_result_ms = ms_since(t_start);
  const gpu_backends::kernel_counts at_first_result = gpu.counts();

  // Not timed: kernels built in the background (a GEMM's other split-K
  // variant, specializations) count as builds too; then the remote tier's
  // queued writes go out before the process ends.
  wait_for_specializations();
  // Not timed either: what every output adds up to (absolute values), which
  // the parent compares with the lone process's: a wrong kernel changes it.
  double checksum = 0;
  auto add_up = [&](void* buffer, std::int64_t count) {
    std::vector<float> host(static_cast<std::size_t>(count));
    gpu.read(strm, buffer, host.data(), host.size() * sizeof(float));
    for (const float v : host) checksum += std::fabs(static_cast<double>(v));
  };
  for (std::size_t b = 0; b < mlp_io.size(); ++b) add_up(mlp_io[b][2], kMlpBatches[b] * kHidden);
  for (std::size_t i = 0; i < bert_y.size(); ++i) add_up(bert_y[i], rows * bert.steps[i].n);
  kernel_store::instance().flush_remote();
  const gpu_backends::kernel_counts after = gpu.counts();
  const remote_stats remote = kernel_store::instance().remote_tier_stats();

  char line[2048];
  std::snprintf(line, sizeof line,
                "{\"compile_ms\": %.3f, \"first_result_ms\": %.3f, \"engine_ms\": %.3f, \"builds\": %.0f, "
                "\"loads\": %.0f, \"builds_by_first_result\": %.0f, \"loads_by_first_result\": %.0f, "
                "\"stored\": %.0f, \"probes\": %.0f, \"build_ms\": %.3f, \"load_ms\": %.3f, "
                "\"first_launch_ms\": %.3f, \"remote_enabled\": %d, \"remote_hits\": %llu, \"remote_misses\": %llu, "
                "\"remote_errors\": %llu, \"remote_timeouts\": %llu, \"remote_skipped\": %llu, "
                "\"remote_puts\": %llu, \"remote_dropped\": %llu",
                compile_ms, first_result_ms, engine_ms, after.built - before.built, after.loaded - before.loaded,
                at_first_result.built - before.built, at_first_result.loaded - before.loaded,
                after.stored - before.stored, after.probes, after.build_ms - before.build_ms,
                after.load_ms - before.load_ms, after.first_launch_ms - before.first_launch_ms, remote.enabled ? 1 : 0,
                static_cast<unsigned long long>(remote.hits), static_cast<unsigned long long>(remote.misses),
                static_cast<unsigned long long>(remote.errors), static_cast<unsigned long long>(remote.timeouts),
                static_cast<unsigned long long>(remote.skipped), static_cast<unsigned long long>(remote.puts),
                static_cast<unsigned long long>(remote.dropped));
  std::printf("%s%s, \"checksum\": %.17g, \"rows\": %lld, \"backend\": %s, \"device\": %s}\n", line,
              lease_fields(remote).c_str(), checksum, static_cast<long long>(rows), json_string(gpu.backend).c_str(), json_string(gpu.device).c_str());
  std::fflush(stdout);
  if (!std::isfinite(results[0]) || !std::isfinite(results[1])) {
    std::fprintf(stderr, "bench_fleet: a result is not finite (%g, %g)\n", results[0], results[1]);
    return 3;
  }
  return 0;
}

// --- Parent: a wave of processes started together ---------------------------------------

// One process of a wave, as the parent sees it.
struct child_process {
  pid_t pid = -1;
  int out = -1;          // its stdout and stderr; -1 once closed
  std::string pending;   // the start of a line not yet complete
  std::string output;    // what it printed besides READY and its report (the last 16 KB)
  std::string report_line;
  bool ready = false, exited = false, timed_out = false;
  int status = 0;
  double cpu_ms = NAN;  // user + system time of the process and its threads (wait4)

  // Reaps it if it has exited (`block`: waits until it has).
  void reap(bool block) {
    rusage usage{};
    if (::wait4(pid, &status, block ? 0 : WNOHANG, &usage) != pid) return;
    exited = true;
    cpu_ms = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
             (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;
  }

  bool ok() const { return exited && WIFEXITED(status) && WEXITSTATUS(status) == 0 && parse_report(report_line); }
  std::string failure() const {
    std::string why;
    if (timed_out) {
      why = "timed out (killed)";
    } else if (!exited) {
      why = "did not exit";
    } else if (WIFSIGNALED(status)) {
      why = "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    } else if (WEXITSTATUS(status) != 0) {
      why = "exited with status " + std::to_string(WEXITSTATUS(status));
    } else {
      why = "exited without a report";
    }
    return why + (ready ? "" : ", before it was ready");
  }
  void take(const std::string& line) {
    if (line == "READY") {
      ready = true;
    } else if (!line.empty() && line[0] == '{') {
      report_line = line;
    } else {
      output += line + "\n";
      if (output.size() > 16384) output.erase(0, output.size() - 16384);
    }
  }
};

// The environment of one child: this process's, with `set` replacing
// (or adding) the variables it names.
std::vector<std::string> child_environment(const std::map<std::string, std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (!set.count(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

// Starts `self --child --start-fd F` with stdout and stderr into a pipe of
// its own. Throws runtime_error when it cannot.
child_process spawn_child(const std::vector<std::string>& environment, int start_fd) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const std::string self = self_path(), fd = std::to_string(start_fd);
  std::vector<std::string> args{self, "--child", "--start-fd", fd};
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = environment;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
  child_process c;
  const int rc = ::posix_spawn(&c.pid, self.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    throw std::runtime_error("cannot start " + self + ": " + std::strerror(rc));
  }
  c.out = out[0];
  ::fcntl(c.out, F_SETFL, O_NONBLOCK);
  return c;
}

// Reads what `c` printed so far; closes its pipe at end of file.
void read_output(child_process& c) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(c.out, buf, sizeof buf);
    if (n > 0) {
      c.pending.append(buf, static_cast<std::size_t>(n));
      for (std::size_t nl; (nl = c.pending.find('\n')) != std::string::npos;) {
        c.take(c.pending.substr(0, nl));
        c.pending.erase(0, nl + 1);
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (!c.pending.empty()) c.take(c.pending);
    c.pending.clear();
    ::close(c.out);
    c.out = -1;
    return;
  }
}

struct wave_run {
  std::vector<child_process> children;
  double wall_ms = NAN;  // from the barrier's release to the last exit
};

// Starts one process per environment, releases them together once every
// one is ready (or has died), and waits for them all, at most `timeout`
// from the start: those still running then are killed.
wave_run run_wave(const std::vector<std::vector<std::string>>& environments, std::chrono::seconds timeout) {
  int start[2];
  if (::pipe2(start, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  ::fcntl(start[0], F_SETFD, 0);  // the children inherit the read end, and only it
  wave_run wave;
  const auto deadline = clock_type::now() + timeout;
  try {
    for (const auto& env : environments) wave.children.push_back(spawn_child(env, start[0]));
  } catch (...) {
    ::close(start[0]);
    ::close(start[1]);
    for (child_process& c : wave.children) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &c.status, 0);
      ::close(c.out);
    }
    throw;
  }
  ::close(start[0]);
  int barrier = start[1];
  clock_type::time_point released{};
  for (;;) {
    for (child_process& c : wave.children) {
      if (!c.exited) c.reap(false);
    }
    const bool all_ready = std::all_of(wave.children.begin(), wave.children.end(),
                                       [](const child_process& c) { return c.ready || c.exited || c.out < 0; });
    if (barrier >= 0 && all_ready) {
      ::close(barrier);  // every child's read() returns at once
      barrier = -1;
      released = clock_type::now();
    }
    const bool done = std::all_of(wave.children.begin(), wave.children.end(),
                                  [](const child_process& c) { return c.exited && c.out < 0; });
    if (done) break;
    if (clock_type::now() >= deadline) {
      for (child_process& c : wave.children) {
        if (c.exited) continue;
        ::kill(c.pid, SIGKILL);
        c.reap(true);
        c.timed_out = true;
      }
      for (child_process& c : wave.children) {
        if (c.out >= 0) read_output(c);  // what it printed before it died
        if (c.out >= 0) ::close(c.out);
        c.out = -1;
      }
      break;
    }
    std::vector<pollfd> fds;
    std::vector<child_process*> readers;
    for (child_process& c : wave.children) {
      if (c.out < 0) continue;
      fds.push_back({c.out, POLLIN, 0});
      readers.push_back(&c);
    }
    // At most 50 ms: exits are noticed by wait4, not by poll.
    if (::poll(fds.data(), fds.size(), 50) > 0) {
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents) read_output(*readers[i]);
      }
    }
  }
  if (barrier >= 0) ::close(barrier);
  if (released != clock_type::time_point{}) wave.wall_ms = ms_since(released);
  return wave;
}

// --- Parent: the benchmark ------------------------------------------------------------

struct options {
  std::vector<int> processes{4, 8, 16};
  int rounds = 1;
  std::string remote;  // a server someone else runs; "" starts a redis-server
  std::string device = "default";
  int timeout_s = 600;
  std::string json;
};

// `url` with `prefix` as its key prefix: appended to the prefix it has, if
// it has one (for any scheme: the URL is not parsed).
std::string with_prefix(const std::string& url, const std::string& prefix) {
  const std::size_t query = url.find('?');
  if (query == std::string::npos) return url + "?prefix=" + prefix;
  for (std::size_t at = query + 1; at < url.size();) {
    const std::size_t end = std::min(url.find('&', at), url.size());
    if (url.compare(at, 7, "prefix=") == 0) return url.substr(0, end) + "-" + prefix + url.substr(end);
    at = end + 1;
  }
  return url + "&prefix=" + prefix;
}

// `url` as it may be printed: a password (user information) as "***".
std::string printable(const std::string& url) {
  const std::size_t scheme = url.find("://"), at = url.find('@');
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) return url;
  return url.substr(0, scheme + 3) + "***" + url.substr(at);
}

// The variables --device sets in every child: the backend and the device
// as gpu_engine.hpp and the backends read them.
std::map<std::string, std::string> device_variables(const std::string& device) {
  if (device == "default") return {};
  const std::string backend = device.substr(0, device.find(':'));
  if (backend != "opencl" && backend != "cuda") {
    throw std::invalid_argument("--device must be default, opencl, cuda, opencl:SELECTOR or cuda:SELECTOR");
  }
  std::map<std::string, std::string> vars{{"UNICACHE_BACKEND", backend}};
  if (device.find(':') != std::string::npos) {
    vars[backend == "cuda" ? "UNICACHE_CUDA_DEVICE" : "UNICACHE_OPENCL_DEVICE"] = device.substr(device.find(':') + 1);
  }
  return vars;
}

// One wave's figures.
struct wave_summary {
  std::string name;  // "lone", "cold" or "warm"
  int processes = 0, round = 0, wave = 0;
  std::string prefix;
  double wall_ms = NAN;
  std::vector<report> reports;  // one per process
  std::vector<std::string> failures;

  double sum(const std::string& key) const {
    double total = 0;
    for (const report& r : reports) total += r.has(key) ? r.number(key) : 0;
    return total;
  }
  double largest(const std::string& key) const {
    double most = NAN;
    for (const report& r : reports) most = std::isnan(most) ? r.number(key) : std::max(most, r.number(key));
    return most;
  }
  double median_of(const std::string& key) const {
    std::vector<double> v;
    for (const report& r : reports) v.push_back(r.number(key));
    return median(v);
  }
  bool has_leases() const { return !reports.empty() && reports[0].has("leases"); }
};

class fleet_benchmark {
 public:
  fleet_benchmark(options o, std::string remote_url, std::string root)
      : o_(std::move(o)), remote_url_(std::move(remote_url)), root_(std::move(root)) {
    // A tag no earlier run used: the prefixes start empty even on a
    // server that keeps what earlier runs wrote.
    std::mt19937_64 rng(std::random_device{}() ^ static_cast<std::uint64_t>(std::time(nullptr)));
    char tag[32];
    std::snprintf(tag, sizeof tag, "bench-fleet-%08llx", static_cast<unsigned long long>(rng() & 0xffffffffu));
    tag_ = tag;
  }

  // One wave of `n` processes with new empty local stores on `prefix`.
  wave_summary wave(const std::string& name, int n, int round, int number, const std::string& prefix) {
    wave_summary s{name, n, round, number, prefix, NAN, {}, {}};
    std::map<std::string, std::string> vars = device_variables(o_.device);
    vars["UNICACHE_PERSISTENT_CACHE"] = "1";
    vars["UNICACHE_REMOTE_CACHE"] = with_prefix(remote_url_, prefix);
    vars["POCL_KERNEL_CACHE"] = "0";  // the driver's own caches off, as in gpu_demo
    vars["CUDA_CACHE_DISABLE"] = "1";
    std::vector<std::vector<std::string>> environments;
    for (int i = 0; i < n; ++i) {
      const fs::path store = fs::path(root_) / (prefix + "-" + name) / ("process" + std::to_string(i));
      vars["UNICACHE_PERSISTENT_CACHE_DIR"] = store.string();
      environments.push_back(child_environment(vars));
    }
    std::fprintf(stderr, "bench_fleet: %s, %d process%s (round %d, prefix %s) ...", name.c_str(), n, n == 1 ? "" : "es",
                 round, prefix.c_str());
    std::fflush(stderr);
    wave_run run = run_wave(environments, std::chrono::seconds(o_.timeout_s));
    s.wall_ms = run.wall_ms;
    for (std::size_t i = 0; i < run.children.size(); ++i) {
      const child_process& c = run.children[i];
      if (c.ok()) {
        s.reports.push_back(*parse_report(c.report_line));
        s.reports.back().numbers["cpu_ms"] = c.cpu_ms;
        // Every process computes the same outputs from the same inputs: one
        // whose outputs add up to another sum than the lone process's ran a
        // wrong kernel (rounding differences aside: split-K sums in another
        // order).
        const double want = name == "lone" ? NAN : lone_.reports.at(0).number("checksum");
        const double got = s.reports.back().number("checksum");
        if (!std::isnan(want) && !(std::fabs(got - want) <= 1e-4 * std::fabs(want))) {
          s.failures.push_back("process " + std::to_string(i) + ": its outputs add up to " + std::to_string(got) +
                               ", the lone process's to " + std::to_string(want) + " (a wrong result)");
        }
      } else {
        s.failures.push_back("process " + std::to_string(i) + " " + c.failure() +
                             (c.output.empty() ? "" : "; its output:\n" + c.output));
      }
    }
    std::fprintf(stderr, " %.1f s%s\n", run.wall_ms / 1000,
                 s.failures.empty() ? "" : (", " + std::to_string(s.failures.size()) + " failed").c_str());
    used_prefixes_.insert(prefix);
    return s;
  }

  // The lone cold process, then wave 1 (cold) and wave 2 (warm) for each
  // fleet size and round. Stops at the first wave with a failure.
  bool run() {
    lone_ = wave("lone", 1, 1, 1, tag_ + "-lone");
    if (!lone_.failures.empty()) return false;
    for (int round = 1; round <= o_.rounds; ++round) {
      for (const int n : o_.processes) {
        const std::string prefix = tag_ + "-n" + std::to_string(n) + "-r" + std::to_string(round);
        for (const auto& [number, name] : {std::pair{1, "cold"}, std::pair{2, "warm"}}) {
          waves_.push_back(wave(name, n, round, number, prefix));
          if (!waves_.back().failures.empty()) return false;
        }
      }
    }
    return true;
  }

  const wave_summary* failed() const {
    if (!lone_.failures.empty()) return &lone_;
    for (const wave_summary& w : waves_) {
      if (!w.failures.empty()) return &w;
    }
    return nullptr;
  }
  std::string backend() const { return lone_.reports.empty() ? "" : lone_.reports[0].texts.at("backend"); }
  std::string device() const { return lone_.reports.empty() ? "" : lone_.reports[0].texts.at("device"); }
  double distinct() const { return lone_.reports.empty() ? NAN : lone_.reports[0].number("builds"); }
  double lone_compile_ms() const { return lone_.reports.empty() ? NAN : lone_.reports[0].number("compile_ms"); }
  const std::set<std::string>& prefixes() const { return used_prefixes_; }

  void print_table(const std::string& server) const;
  bool write_json(const std::string& path, const std::string& server) const;

 private:
  options o_;
  std::string remote_url_, root_, tag_;
  wave_summary lone_;
  std::vector<wave_summary> waves_;
  std::set<std::string> used_prefixes_;
};

void fleet_benchmark::print_table(const std::string& server) const {
  if (lone_.reports.empty()) return;
  const report& lone = lone_.reports[0];
  std::printf("\n%s: %s\nremote: %s\n", backend().c_str(), device().c_str(), server.c_str());
  std::printf("lone cold process: %.0f distinct kernels built (+%.0f probe), compile %.1f ms, first result %.1f ms, "
              "engine %.1f ms, CPU %.1f s\n\n",
              distinct(), lone.number("probes"), lone_compile_ms(), lone.number("first_result_ms"),
              lone.number("engine_ms"), lone.number("cpu_ms") / 1000);
  const bool leases = lone_.has_leases();
  std::printf("%5s %5s %-5s %7s %7s %8s %10s %15s %8s %15s %15s %8s %16s%s\n", "N", "round", "wave", "builds",
              "loads", "distinct", "b/distinct", "slowest compile", "vs lone", "slowest 1st res", "median compile",
              "CPU s", "remote hit/miss", leases ? "  leases/waits/hits" : "");
  for (const wave_summary& w : waves_) {
    std::printf("%5d %5d %-5s ", w.processes, w.round, w.name.c_str());
    if (!w.failures.empty()) {
      std::printf("FAILED (%zu of %d processes)\n", w.failures.size(), w.processes);
      continue;
    }
    const double slowest = w.largest("compile_ms");
    char hits[40];
    std::snprintf(hits, sizeof hits, "%.0f/%.0f", w.sum("remote_hits"), w.sum("remote_misses"));
    std::printf("%7.0f %7.0f %8.0f %9.2fx %12.1f ms %7.2fx %12.1f ms %12.1f ms %8.1f %16s", w.sum("builds"),
                w.sum("loads"), distinct(), w.sum("builds") / distinct(), slowest, slowest / lone_compile_ms(),
                w.largest("first_result_ms"), w.median_of("compile_ms"), w.sum("cpu_ms") / 1000, hits);
    if (leases) std::printf("  %.0f/%.0f/%.0f", w.sum("leases"), w.sum("lease_waits"), w.sum("lease_hits"));
    std::printf("\n");
  }
  std::printf(
      "\nbuilds, loads: kernels built from source and loaded from a binary, summed over the wave's processes\n"
      "(after their first result and any background builds; the OpenCL engine's probe not counted).\n"
      "b/distinct: builds over the lone process's; 1 means each kernel was built once by the whole fleet.\n"
      "slowest compile, median compile: of the processes' compile() phases, timed from the start barrier;\n"
      "vs lone: the slowest over the lone process's. slowest 1st res: compile + first execution + read back.\n"
      "CPU s: the processes' CPU time, whole lives (engine and execution included), summed: what the\n"
      "fleet spent, which other load on the machine changes far less than it changes the times.\n"
      "remote hit/miss: the remote tier's reads, summed (the engine's included).\n");
  if (leases) {
    std::printf("leases/waits/hits: build leases granted, lease waits on another process's build, and waits\n"
                "that ended with its value, summed.\n");
  }
}

std::string summary_json(const wave_summary& w, double distinct, double lone_compile_ms) {
  std::ostringstream out;
  const double slowest = w.largest("compile_ms");
  out << "{\"processes\": " << w.processes << ", \"round\": " << w.round << ", \"wave\": " << w.wave
      << ", \"name\": " << json_string(w.name) << ", \"prefix\": " << json_string(w.prefix)
      << ", \"builds\": " << json_number(w.sum("builds")) << ", \"loads\": " << json_number(w.sum("loads"))
      << ", \"distinct_kernels\": " << json_number(distinct)
      << ", \"builds_per_distinct\": " << json_number(w.sum("builds") / distinct)
      << ", \"slowest_compile_ms\": " << json_number(slowest)
      << ", \"slowest_compile_over_lone\": " << json_number(slowest / lone_compile_ms)
      << ", \"slowest_first_result_ms\": " << json_number(w.largest("first_result_ms"))
      << ", \"median_compile_ms\": " << json_number(w.median_of("compile_ms"))
      << ", \"median_first_result_ms\": " << json_number(w.median_of("first_result_ms"))
      << ", \"wall_ms\": " << json_number(w.wall_ms) << ", \"cpu_ms\": " << json_number(w.sum("cpu_ms"));
  for (const char* key : {"remote_hits", "remote_misses", "remote_errors", "remote_timeouts", "remote_puts",
                          "remote_dropped", "leases", "lease_waits", "lease_hits", "lease_wait_ms"}) {
    if (w.reports.empty() || w.reports[0].has(key)) out << ", " << json_string(key) << ": " << json_number(w.sum(key));
  }
  out << ",\n      \"children\": [";
  for (std::size_t i = 0; i < w.reports.size(); ++i) {
    out << (i ? ",\n        {" : "\n        {");
    bool first = true;
    for (const auto& [key, value] : w.reports[i].numbers) {
      out << (first ? "" : ", ") << json_string(key) << ": " << json_number(value);
      first = false;
    }
    out << "}";
  }
  out << "]}";
  return out.str();
}

bool fleet_benchmark::write_json(const std::string& path, const std::string& server) const {
  std::ofstream out(path);
  const char* shapes = std::getenv("UNICACHE_KERNEL_SHAPES");
  const report& lone = lone_.reports.at(0);
  out << "{\n  \"benchmark\": \"bench_fleet\",\n  \"version\": " << json_string(UNICACHE_VERSION_STRING)
      << ",\n  \"unicache\": " << json_string(std::string(UNICACHE_VERSION_STRING) + " " + UNICACHE_GIT_HASH)
      << ",\n  \"date\": " << json_string(today()) << ",\n  \"machine\": " << json_string(machine_name())
      << ",\n  \"cores\": " << ::sysconf(_SC_NPROCESSORS_ONLN) << ",\n  \"backend\": " << json_string(backend())
      << ",\n  \"device\": " << json_string(device()) << ",\n  \"remote\": " << json_string(server)
      << ",\n  \"kernel_shapes\": " << json_string(shapes ? shapes : "default")
      << ",\n  \"timeout_s\": " << o_.timeout_s << ",\n  \"rounds\": " << o_.rounds
      << ",\n  \"workload\": {\"mlp\": \"768 -> 3072 (GELU) -> 768, batch 1, 8, 32 (gpu_demo)\", "
      << "\"bert_layer\": {\"hidden\": " << kHidden << ", \"ffn\": " << kFfn << ", \"rows\": "
      << json_number(lone.number("rows")) << ", \"trace\": \"first request of bench_dynamic_shapes --seed " << kTraceSeed
      << " --max-batch " << kTraceMaxBatch << " --max-seq " << kTraceMaxSeq << "\"}, \"compile_calls\": "
      << 2 * std::size(kMlpBatches) + 6 << "},\n  \"distinct_kernels\": " << json_number(distinct())
      << ",\n  \"lone\": " << summary_json(lone_, distinct(), lone_compile_ms()) << ",\n  \"waves\": [";
  for (std::size_t i = 0; i < waves_.size(); ++i) {
    out << (i ? ",\n    " : "\n    ") << summary_json(waves_[i], distinct(), lone_compile_ms());
  }
  out << "\n  ]\n}\n";
  out.close();
  return static_cast<bool>(out);
}

std::vector<int> parse_counts(const std::string& list) {
  std::vector<int> counts;
  std::stringstream in(list);
  std::string part;
  while (std::getline(in, part, ',')) {
    std::size_t used = 0;
    const int n = std::stoi(part, &used);
    if (used != part.size() || n < 1 || n > 1024) throw std::invalid_argument("--processes: 1..1024 each, not '" + part + "'");
    counts.push_back(n);
  }
  if (counts.empty()) throw std::invalid_argument("--processes needs a list such as 4,8,16");
  return counts;
}

const char* const kUsage =
    "usage: bench_fleet [--processes 4,8,16] [--rounds R] [--remote URL] [--device D]\n"
    "                   [--timeout-s S] [--json FILE]\n"
    "\n"
    "A fleet of fresh processes started together against one remote tier, each\n"
    "with an empty local store of its own and the driver's caches off: each\n"
    "creates its GPU engine, waits at a start barrier, then compiles and runs\n"
    "gpu_demo's MLP (batch 1, 8, 32) and bench_dynamic_shapes' BERT layer (its\n"
    "first request's shapes). First one lone cold process (the distinct kernels\n"
    "and the baseline compile time), then for each N a cold wave of N processes\n"
    "on a fresh key prefix and a warm wave of N more on the same prefix. Prints,\n"
    "per wave, the kernels built and loaded, builds per distinct kernel, and the\n"
    "slowest and median compile and first-result times.\n"
    "\n"
    "  --processes LIST  fleet sizes (default 4,8,16)\n"
    "  --rounds R        the waves of each size R times, each on a fresh prefix\n"
    "                    (default 1)\n"
    "  --remote URL      an existing server's URL, as UNICACHE_REMOTE_CACHE (its\n"
    "                    options, such as lease=0, are kept; prefix= is extended);\n"
    "                    default: a redis-server on loopback started here\n"
    "  --device D        default (gpu_demo's choice: CUDA where the driver reports\n"
    "                    a device, else OpenCL), opencl, cuda, or opencl:SELECTOR,\n"
    "                    cuda:SELECTOR (UNICACHE_OPENCL_DEVICE, UNICACHE_CUDA_DEVICE)\n"
    "  --timeout-s S     a wave's processes still running after S seconds are\n"
    "                    killed and the benchmark fails (default 600)\n"
    "  --json FILE       write the figures, every process's included, to FILE\n"
    "(--child and --start-fd are how it starts its own processes.)\n";

options parse_options(int argc, char** argv, bool& child, int& start_fd) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--child") {
      child = true;
    } else if (a == "--start-fd") {
      start_fd = std::stoi(next());
    } else if (a == "--processes") {
      o.processes = parse_counts(next());
    } else if (a == "--rounds") {
      o.rounds = std::stoi(next());
      if (o.rounds < 1 || o.rounds > 100) throw std::invalid_argument("--rounds must be 1..100");
    } else if (a == "--remote") {
      o.remote = next();
      if (o.remote.empty()) throw std::invalid_argument("--remote needs a URL");
    } else if (a == "--device") {
      o.device = next();
      device_variables(o.device);  // checks it
    } else if (a == "--timeout-s") {
      o.timeout_s = std::stoi(next());
      if (o.timeout_s < 1) throw std::invalid_argument("--timeout-s must be positive");
    } else if (a == "--json") {
      o.json = next();
    } else {
      throw std::invalid_argument("unknown argument " + a);
    }
  }
  return o;
}

// Deletes what the waves wrote under their prefixes on a server this
// program did not start. A failure is a warning: the figures stand.
void clear_prefixes(const std::string& url, const std::set<std::string>& prefixes) {
  for (const std::string& prefix : prefixes) {
    try {
      remote_maintenance(with_prefix(url, prefix)).clear();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_fleet: warning: the values under prefix %s stay on the server: %s\n", prefix.c_str(),
                   e.what());
    }
  }
}

int run_parent(const options& o) {
  std::optional<unicache::testing::redis_server> redis;
  std::string url = o.remote, server;
  if (url.empty()) {
    redis.emplace();
    if (!redis->started()) {
      std::fprintf(stderr, "bench_fleet: %s; or pass --remote URL\n",
                   unicache::testing::redis_server_binary().empty() ? "no redis-server (apt-get install redis-server)"
                                                                    : "redis-server did not start");
      return 1;
    }
    url = redis->url();
    server = url + " (a redis-server started by bench_fleet)";
  } else {
    server = printable(url) + " (given)";
  }
  char tmpl[] = "/tmp/unicache-fleet-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    std::fprintf(stderr, "bench_fleet: cannot make a temporary directory: %s\n", std::strerror(errno));
    return 1;
  }
  const std::string root = tmpl;
  fleet_benchmark bench(o, url, root);
  const bool ok = bench.run();
  fs::remove_all(root);
  if (!o.remote.empty()) clear_prefixes(url, bench.prefixes());
  bench.print_table(server);
  if (!ok) {
    const wave_summary& w = *bench.failed();
    std::fprintf(stderr, "\nbench_fleet: FAILED: %zu of %d process%s of the %s wave (N=%d, round %d) failed "
                 "(wave timeout %d s):\n",
                 w.failures.size(), w.processes, w.processes == 1 ? "" : "es", w.name.c_str(), w.processes, w.round,
                 o.timeout_s);
    for (const std::string& f : w.failures) std::fprintf(stderr, "  %s\n", f.c_str());
    return 1;
  }
  if (!o.json.empty()) {
    if (!bench.write_json(o.json, server)) {
      std::fprintf(stderr, "bench_fleet: cannot write %s\n", o.json.c_str());
      return 1;
    }
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  bool child = false;
  int start_fd = -1;
  options o;
  try {
    o = parse_options(argc, argv, child, start_fd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fleet: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    if (child) {
      if (start_fd < 0) throw std::invalid_argument("--child needs --start-fd");
      return run_child(start_fd);
    }
    return run_parent(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fleet: %s\n", e.what());
    return 1;
  }
}
