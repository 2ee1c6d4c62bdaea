// bench_warm_start: time to first result of a fresh process that compiles
// and runs one fused MatMul+bias+GELU partition on the default device of a
// GPU backend: OpenCL (UNICACHE_OPENCL_DEVICE selects another) or CUDA
// (UNICACHE_CUDA_DEVICE selects another), in three conditions:
//
//   cold    empty unicache store, driver caches off (POCL_KERNEL_CACHE=0,
//           CUDA_CACHE_DISABLE=1)
//   driver  unicache store off, the driver's own cache on and warm
//   warm    unicache store warm, driver caches off
//   remote  empty local store, the remote tier (a redis-server on loopback
//           that this program starts) warm, driver caches off: a fresh
//           machine of a fleet. Left out, saying why, without redis-server.
//   down    as cold, with the remote tier's server down (a closed port)
//   stalled as cold, with a server that accepts connections and never
//           answers (timeout_ms=250): the first lookup waits for the
//           timeout, the breaker opens, the rest run at local speed
//
// Time to first result is compile() + the first execution + the copy back;
// it is also reported with engine creation added. And engine creation with
// and without an engine cache blob. Every measured run is a fresh process
// (this program, started again with --child); the figures are medians over
// --runs processes. Usage:
//
//   bench_warm_start [--backend opencl|cuda] [--runs N] [--m M] [--k K] [--n N] [--json FILE]
//
// CUDA: the driver's cache is its compute cache (CUDA_CACHE_DISABLE,
// CUDA_CACHE_PATH, here in the temporary root). Engine creation is compared
// with what any CUDA process pays before its first kernel: the driver's
// load, cuInit and the primary context of device 0, measured without
// unicache in a process of its own; make_engine(0) is measured in another.
// CUDA_VISIBLE_DEVICES picks the device for all of them.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "redis_server.hpp"
#include "gpu_backends.hpp"
#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"
#include "unicache/version.hpp"
#if UNICACHE_GPU_WITH_CUDA
#include <dlfcn.h>
#endif

namespace {

using namespace unicache::bench;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

struct sizes {
  std::int64_t m = 256, k = 768, n = 3072;  // a BERT-base FFN up-projection of 256 tokens
};

std::vector<float> random_values(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

// The backend's kernel counters as the child reports them.
template <class Backend>
std::string counters_of() {
  const unicache::gpu_backends::kernel_counts c = Backend::counts();
  char text[160];
  std::snprintf(text, sizeof text, "probes=%.0f from_source=%.0f from_binary=%.0f stored=%.0f", c.probes, c.built,
                c.loaded, c.stored);
  return text;
}

// A TCP socket on loopback that listens and never accepts: connections
// complete in its backlog and nothing is ever answered (a stalled server).
class blackhole {
 public:
  blackhole() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
  }
  ~blackhole() {
    if (fd_ >= 0) ::close(fd_);
  }
  blackhole(const blackhole&) = delete;
  blackhole& operator=(const blackhole&) = delete;
  int listen_port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// --- Child: one fresh process ---------------------------------------------------

// The partition every run compiles: MatMul [m,k] x [k,n] + bias + GELU.
unicache::graph the_graph(const sizes& sz) {
  using namespace unicache;
  graph g;
  auto x = g.tensor({-1, sz.k}), w = g.tensor({sz.k, sz.n}, tensor_property::constant);
  auto b = g.tensor({sz.n}, tensor_property::constant), mm = g.tensor({-1, sz.n}), s = g.tensor({-1, sz.n});
  auto y = g.tensor({-1, sz.n});
  g.add_op(op_kind::matmul, {x, w}, {mm});
  g.add_op(op_kind::add, {mm, b}, {s});
  g.add_op(op_kind::gelu_erf, {s}, {y});
  g.finalize();
  return g;
}

template <class Backend>
int child_first_result(const sizes& sz) {
  using namespace unicache;
  using buffer = typename Backend::buffer;
  const auto start = clock_type::now();
  const graph g = the_graph(sz);
  const auto xv = random_values(sz.m * sz.k, 1), wv = random_values(sz.k * sz.n, 2), bv = random_values(sz.n, 3);

  const auto t_engine = clock_type::now();
  engine eng = Backend::make_engine();
  stream strm = make_stream(eng);
  const double engine_ms = ms_since(t_engine);
  const buffer xb = Backend::make_buffer(eng, xv.size() * 4, xv.data());
  const buffer wb = Backend::make_buffer(eng, wv.size() * 4, wv.data());
  const buffer bb = Backend::make_buffer(eng, bv.size() * 4, bv.data());
  const buffer yb = Backend::make_buffer(eng, static_cast<std::size_t>(sz.m * sz.n) * 4);

  const auto t_compile = clock_type::now();
  compiled_partition cp = compile(g.partitions()[0], {{sz.m, sz.k}, {sz.k, sz.n}, {sz.n}}, eng);
  const double compile_ms = ms_since(t_compile);
  const auto t_run = clock_type::now();
  cp.execute(strm,
             {{cp.inputs()[0], Backend::data(xb)}, {cp.inputs()[1], Backend::data(wb)},
              {cp.inputs()[2], Backend::data(bb)}},
             {{cp.outputs()[0], Backend::data(yb)}});
  std::vector<float> out(static_cast<std::size_t>(sz.m * sz.n));
  Backend::read_buffer(strm, yb, out.data(), out.size() * 4);
  const double run_ms = ms_since(t_run);
  const double total_ms = ms_since(t_engine);
  const double process_ms = ms_since(start);

  // Not timed: a spot check of 64 outputs against a double-precision reference.
  double max_error = 0;
  std::mt19937 rng(4);
  for (int i = 0; i < 64; ++i) {
    const std::int64_t r = rng() % sz.m, c = rng() % sz.n;
    double acc = bv[c];
    for (std::int64_t p = 0; p < sz.k; ++p) acc += double(xv[r * sz.k + p]) * wv[p * sz.n + c];
    const double want = 0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0)));
    max_error = std::max(max_error, std::abs(want - out[r * sz.n + c]));
  }
  for (buffer mem : {xb, wb, bb, yb}) Backend::free_buffer(eng, mem);
  std::printf(
      "RESULT engine_ms=%.3f compile_ms=%.3f first_run_ms=%.3f partition_ms=%.3f total_ms=%.3f process_ms=%.3f "
      "%s max_error=%.3g\n",
      engine_ms, compile_ms, run_ms, compile_ms + run_ms, total_ms, process_ms, counters_of<Backend>().c_str(),
      max_error);
  std::printf("DEVICE %s\n", Backend::device(eng).c_str());
  return max_error < 1e-3 ? 0 : 3;
}

#if UNICACHE_GPU_WITH_OPENCL
// Engine creation on the benchmark's device (make_engine()'s choice): a
// context, then an engine that probes (the store is off in this child, so
// it must), then one from that engine's cache blob.
int child_engine_opencl() {
  using namespace unicache;
  cl_device_id d = opencl::default_device();
  cl_int err = CL_SUCCESS;
  const auto t_context = clock_type::now();
  cl_context ctx = clCreateContext(nullptr, 1, &d, nullptr, nullptr, &err);
  const double context_ms = ms_since(t_context);
  if (err != CL_SUCCESS) return 2;
  const auto t_probe = clock_type::now();
  const engine probed = opencl::make_engine(d, ctx);
  const double probe_ms = ms_since(t_probe);
  const byte_vector blob = opencl::get_engine_cache_blob(probed);
  const auto t_blob = clock_type::now();
  const engine from_blob = opencl::make_engine_from_cache_blob(d, ctx, blob);
  const double blob_ms = ms_since(t_blob);
  std::printf("RESULT context_ms=%.3f engine_probe_ms=%.3f engine_blob_ms=%.3f blob_bytes=%zu probes=%llu\n",
              context_ms, probe_ms, blob_ms, blob.size(),
              static_cast<unsigned long long>(opencl::stats().probe_builds));
  const bool same = opencl::info(from_blob) == opencl::info(probed);
  clReleaseContext(ctx);
  return same ? 0 : 3;
}
#endif

#if UNICACHE_GPU_WITH_CUDA
// The two driver entry points, declared as cuda.h declares them (CUresult
// and CUdevice are ints): the baseline must not go through unicache.
using cu_init_fn = int (*)(unsigned int flags);
using cu_device_primary_ctx_retain_fn = int (*)(CUcontext* context, int device);

// What any CUDA process pays before its first kernel, unicache or not:
// loading the driver, cuInit and device 0's primary context (the one the
// CUDA runtime and PyTorch use), timed from before the dlopen.
int child_context_cuda() {
  const auto t_context = clock_type::now();
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) {
    std::printf("error: libcuda.so.1 cannot be loaded (%s)\n", ::dlerror());
    return 1;
  }
  const auto init = reinterpret_cast<cu_init_fn>(::dlsym(driver, "cuInit"));
  const auto retain = reinterpret_cast<cu_device_primary_ctx_retain_fn>(::dlsym(driver, "cuDevicePrimaryCtxRetain"));
  if (!init || !retain) {
    std::printf("error: libcuda.so.1 lacks cuInit or cuDevicePrimaryCtxRetain\n");
    return 1;
  }
  if (const int r = init(0); r != 0) {
    std::printf("error: cuInit returned CUresult %d\n", r);
    return 1;
  }
  CUcontext context = nullptr;
  // A CUdevice is its ordinal: device 0 without a cuDeviceGet.
  if (const int r = retain(&context, 0); r != 0) {
    std::printf("error: cuDevicePrimaryCtxRetain returned CUresult %d\n", r);
    return 1;
  }
  const double context_ms = ms_since(t_context);
  std::printf("RESULT context_ms=%.3f\n", context_ms);
  return 0;
}

// make_engine(0) in a fresh process (the driver's load, cuInit, NVRTC's load,
// the primary context and the device query), then one from its cache blob.
int child_engine_cuda() {
  using namespace unicache;
  const auto t_engine = clock_type::now();
  const engine made = cuda::make_engine(0);
  const double engine_ms = ms_since(t_engine);
  const byte_vector blob = cuda::get_engine_cache_blob(made);
  const auto t_blob = clock_type::now();
  const engine from_blob = cuda::make_engine_from_cache_blob(0, blob);
  const double blob_ms = ms_since(t_blob);
  std::printf("RESULT engine_ms=%.3f engine_blob_ms=%.3f blob_bytes=%zu\n", engine_ms, blob_ms, blob.size());
  return cuda::info(from_blob) == cuda::info(made) ? 0 : 3;
}
#endif

// --- Parent -------------------------------------------------------------------------

struct condition {
  std::string name;
  std::string description;
  std::string environment;
  std::string warm_up_environment;  // "" = no warm-up run
  std::vector<child_run> runs;
  double median_of(const std::string& key) const {
    std::vector<double> v;
    for (const auto& r : runs) {
      if (auto it = r.values.find(key); it != r.values.end()) v.push_back(it->second);
    }
    return median(v);
  }
};

bool backend_built(const std::string& backend) {
#if UNICACHE_GPU_WITH_OPENCL
  if (backend == "opencl") return true;
#endif
#if UNICACHE_GPU_WITH_CUDA
  if (backend == "cuda") return true;
#endif
  (void)backend;
  return false;
}

int run_child_mode(const std::string& backend, bool engine_mode, bool context_mode, const sizes& sz) {
#if UNICACHE_GPU_WITH_OPENCL
  if (backend == "opencl") return engine_mode ? child_engine_opencl() : child_first_result<unicache::gpu_backends::opencl_backend>(sz);
#endif
#if UNICACHE_GPU_WITH_CUDA
  if (backend == "cuda") {
    if (context_mode) return child_context_cuda();
    return engine_mode ? child_engine_cuda() : child_first_result<unicache::gpu_backends::cuda_backend>(sz);
  }
#endif
  (void)engine_mode;
  (void)context_mode;
  (void)sz;
  std::printf("error: this build has no %s backend\n", backend.c_str());
  return 2;
}

const char* const kUsage =
    "usage: bench_warm_start [--backend opencl|cuda] [--runs N] [--m M] [--k K] [--n N] [--json FILE]\n"
    "\n"
    "Time to first result of a fresh process that compiles and runs one fused\n"
    "MatMul+bias+GELU partition on a GPU backend's default device, in each\n"
    "condition: cold (empty store, driver caches off), driver (the driver's own\n"
    "cache warm), warm (the unicache store warm), remote (the remote tier warm,\n"
    "on a redis-server this program starts, where there is one), down and\n"
    "stalled (as cold, the remote tier's server closed or silent). Also engine\n"
    "creation with and without an engine cache blob. Every measured run is a\n"
    "fresh process; the figures are medians.\n"
    "\n"
    "  --backend B  opencl or cuda (default: opencl if built, else cuda);\n"
    "               UNICACHE_OPENCL_DEVICE, UNICACHE_CUDA_DEVICE pick the device\n"
    "  --runs N     processes per condition (default 5)\n"
    "  --m M, --k K, --n N\n"
    "               the matmul's sizes (default 256 x 768 x 3072, the BERT FFN)\n"
    "  --json FILE  write the figures to FILE as well\n"
    "  --bundle FILE\n"
    "               also the bundle condition: an empty store with FILE imported\n"
    "               (`unicache-store precompile --out`, `export`) before each run\n"
    "  --graph-out FILE\n"
    "               write the partition's graph, with its shape, as graph JSON\n"
    "               (what `unicache-store precompile` takes), and exit\n"
    "(--child, --engine and --context are how it starts its own processes.)\n";

}  // namespace

int main(int argc, char** argv) {
  sizes sz;
  int runs = 5;
  std::string json_path;
#if UNICACHE_GPU_WITH_OPENCL
  std::string backend = "opencl";
#else
  std::string backend = "cuda";
#endif
  bool child = false, engine_mode = false, context_mode = false;
  std::string graph_out, bundle;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--child") child = true;
    else if (a == "--engine") engine_mode = true;
    else if (a == "--context") context_mode = true;
    else if (a == "--backend") backend = next();
    else if (a == "--runs") runs = std::max(1, std::atoi(next().c_str()));
    else if (a == "--m") sz.m = std::atoll(next().c_str());
    else if (a == "--k") sz.k = std::atoll(next().c_str());
    else if (a == "--n") sz.n = std::atoll(next().c_str());
    else if (a == "--json") json_path = next();
    else if (a == "--graph-out") graph_out = next();
    else if (a == "--bundle") bundle = next();
    else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (backend != "opencl" && backend != "cuda") {
    std::fprintf(stderr, "bench_warm_start: --backend must be opencl or cuda, not '%s'\n", backend.c_str());
    return 2;
  }
  if (!backend_built(backend)) {
    std::fprintf(stderr, "bench_warm_start: this build has no %s backend (UNICACHE_WITH_%s=OFF)\n", backend.c_str(),
                 backend == "cuda" ? "CUDA" : "OPENCL");
    return 2;
  }
  const bool cuda = backend == "cuda";
  if (!graph_out.empty()) {
    // What `unicache-store precompile` takes to build this run's kernels ahead of time.
    const unicache::graph g = the_graph(sz);
    std::ofstream(graph_out) << unicache::to_json(g, {{{g.tensors()[0].id, {sz.m, sz.k}}}});
    std::printf("wrote the graph (MatMul %lldx%lldx%lld + bias + GELU) to %s\n", static_cast<long long>(sz.m),
                static_cast<long long>(sz.k), static_cast<long long>(sz.n), graph_out.c_str());
    return 0;
  }
  try {
    if (child) return run_child_mode(backend, engine_mode, context_mode, sz);
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
#if UNICACHE_GPU_WITH_CUDA
  // Said here, once, rather than as the first child's failure.
  if (cuda && !unicache::cuda::available()) {
    std::fprintf(stderr, "bench_warm_start: the CUDA backend is unavailable: %s\n",
                 unicache::cuda::unavailable_reason().c_str());
    return 1;
  }
#endif

  char tmpl[] = "/tmp/unicache-warm-start-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const std::string size_args = "--backend " + backend + " --m " + std::to_string(sz.m) + " --k " +
                                std::to_string(sz.k) + " --n " + std::to_string(sz.n);
  const std::string drivers_off = "POCL_KERNEL_CACHE=0 CUDA_CACHE_DISABLE=1";
  const std::string drivers_on = "POCL_KERNEL_CACHE=1 POCL_CACHE_DIR=" + root + "/pocl CUDA_CACHE_DISABLE=0 CUDA_CACHE_PATH=" +
                                 root + "/cuda";
  const std::string store = "UNICACHE_PERSISTENT_CACHE=1 UNICACHE_PERSISTENT_CACHE_DIR=" + root + "/store";
  std::vector<condition> conditions = {
      {"cold", "empty unicache store, driver caches off", "", "", {}},
      {"driver", "unicache store off, driver cache warm", "UNICACHE_PERSISTENT_CACHE=0 " + drivers_on,
       "UNICACHE_PERSISTENT_CACHE=0 " + drivers_on, {}},
      {"warm", "unicache store warm, driver caches off", store + " " + drivers_off, store + " " + drivers_off, {}},
  };
  if (!bundle.empty()) {
    conditions.push_back({"bundle", "an empty store with the bundle imported before each run, driver caches off",
                          drivers_off, "", {}});
  }
  // The remote condition: a server of its own, filled by a warm-up process
  // with a local store of its own.
  unicache::testing::redis_server redis;
  blackhole stalled_server;
  if (redis.started()) {
    const std::string remote = "UNICACHE_REMOTE_CACHE=" + redis.url() + " " + drivers_off;
    conditions.push_back({"remote", "empty local store, remote tier warm, driver caches off",
                          remote + " UNICACHE_PERSISTENT_CACHE=1 UNICACHE_PERSISTENT_CACHE_DIR=" + root + "/remote",
                          remote + " UNICACHE_PERSISTENT_CACHE=1 UNICACHE_PERSISTENT_CACHE_DIR=" + root + "/remote-fill",
                          {}});
    // A closed port, and a listening socket nobody reads (connections
    // complete in its backlog; commands are never answered).
    const int closed_port = unicache::testing::free_port();
    conditions.push_back({"down", "empty local store, remote server down", "", "", {}});
    conditions.back().environment = "UNICACHE_REMOTE_CACHE=redis://127.0.0.1:" + std::to_string(closed_port) + " " +
                                    drivers_off + " UNICACHE_PERSISTENT_CACHE=1 UNICACHE_PERSISTENT_CACHE_DIR=" + root +
                                    "/down";
    if (const int port = stalled_server.listen_port(); port > 0) {
      conditions.push_back({"stalled", "empty local store, remote server never answers (timeout_ms=250)",
                            "UNICACHE_REMOTE_CACHE=redis://127.0.0.1:" + std::to_string(port) + "?timeout_ms=250 " +
                                drivers_off + " UNICACHE_PERSISTENT_CACHE=1 UNICACHE_PERSISTENT_CACHE_DIR=" + root +
                                "/stalled",
                            "", {}});
    }
  } else {
    std::fprintf(stderr, "bench_warm_start: no remote condition: %s\n",
                 unicache::testing::redis_server_binary().empty() ? "no redis-server (apt-get install redis-server)"
                                                                  : "redis-server did not start");
  }
  std::fprintf(stderr, "bench_warm_start: %d fresh processes per condition, MatMul %lldx%lldx%lld + bias + GELU\n", runs,
               static_cast<long long>(sz.m), static_cast<long long>(sz.k), static_cast<long long>(sz.n));
  std::string device;
  for (condition& c : conditions) {
    if (!c.warm_up_environment.empty()) {
      const child_run w = run_child(c.warm_up_environment, size_args);
      if (!w.ok) {
        std::fprintf(stderr, "bench_warm_start: warm-up of %s failed:\n%s", c.name.c_str(), w.output.c_str());
        return 1;
      }
    }
    for (int r = 0; r < runs; ++r) {
      std::string env = c.environment;
      if (c.name == "cold") {  // a new empty store every run
        env = "UNICACHE_PERSISTENT_CACHE=1 UNICACHE_PERSISTENT_CACHE_DIR=" + root + "/cold" + std::to_string(r) + " " +
              drivers_off;
      }
      if (c.name == "remote" || c.name == "down" || c.name == "stalled") env += std::to_string(r);  // empty every run
      if (c.name == "bundle") {
        // A new store holding only what the bundle holds (built elsewhere,
        // for instance by `unicache-store precompile` on a machine without a GPU).
        const std::string dir = root + "/bundle" + std::to_string(r);
        unicache::store_config config;
        config.directory = dir;
        const unicache::bundle_report imported = unicache::kernel_store(config).import_bundle(bundle);
        if (imported.imported == 0 || !imported.refused.empty()) {
          std::fprintf(stderr, "bench_warm_start: the bundle %s imported %llu entries, %zu refused\n", bundle.c_str(),
                       static_cast<unsigned long long>(imported.imported), imported.refused.size());
          return 1;
        }
        env = "UNICACHE_PERSISTENT_CACHE=1 UNICACHE_PERSISTENT_CACHE_DIR=" + dir + " " + env;
      }
      child_run one = run_child(env, size_args);
      if (!one.ok) {
        std::fprintf(stderr, "bench_warm_start: a %s run failed:\n%s", c.name.c_str(), one.output.c_str());
        return 1;
      }
      device = one.device;
      std::fprintf(stderr, "  %-6s run %d/%d: %.1f ms\n", c.name.c_str(), r + 1, runs, one.values["total_ms"]);
      c.runs.push_back(std::move(one));
    }
  }
  condition engine_runs{"engine", "engine creation, unicache store and driver caches off",
                        "UNICACHE_PERSISTENT_CACHE=0 " + drivers_off, "", {}};
  for (int r = 0; r < runs; ++r) {
    // CUDA: the context alone and the engine each in a fresh process, so
    // that neither finds the driver loaded by the other.
    child_run one = run_child(engine_runs.environment, "--backend " + backend + " --engine");
    if (one.ok && cuda) {
      const child_run context = run_child(engine_runs.environment, "--backend cuda --context");
      one.ok = context.ok;
      one.output += context.output;
      one.values.insert(context.values.begin(), context.values.end());
    }
    if (!one.ok) {
      std::fprintf(stderr, "bench_warm_start: an engine run failed:\n%s", one.output.c_str());
      return 1;
    }
    engine_runs.runs.push_back(std::move(one));
  }
  std::filesystem::remove_all(root);

  // Time to first result: compile() of the partition, its first execution
  // and the copy back (the engine exists). "with engine" adds engine
  // creation, which includes the runtime's own start-up (OpenCL: platform
  // and device enumeration; CUDA: the driver's load, cuInit and the primary
  // context), the same in every condition.
  const double cold = conditions[0].median_of("partition_ms"), cold_total = conditions[0].median_of("total_ms");
  std::printf("device: %s\n", device.c_str());
  std::printf("%-8s %12s %10s %12s %10s %10s %12s %10s  %s\n", "", "first result", "vs cold", "with engine", "vs cold",
              "engine", "compile", "first run", cuda ? "kernels built / loaded" : "kernels built+probe / loaded");
  for (const condition& c : conditions) {
    const double partition = c.median_of("partition_ms"), total = c.median_of("total_ms");
    std::printf("%-8s %9.1f ms %9.1fx %9.1f ms %9.1fx %7.1f ms %9.1f ms %7.1f ms  ", c.name.c_str(), partition,
                cold / partition, total, cold_total / total, c.median_of("engine_ms"), c.median_of("compile_ms"),
                c.median_of("first_run_ms"));
    if (cuda) {
      std::printf("%.0f / %.0f\n", c.median_of("from_source"), c.median_of("from_binary"));
    } else {
      std::printf("%.0f+%.0f / %.0f\n", c.median_of("from_source"), c.median_of("probes"), c.median_of("from_binary"));
    }
  }
  const double context = engine_runs.median_of("context_ms");
  if (cuda) {
    std::printf("engine creation: CUDA context alone %.1f ms (dlopen, cuInit, primary context), make_engine(0) %.1f ms, "
                "from an engine cache blob %.3f ms (%.0f bytes)\n",
                context, engine_runs.median_of("engine_ms"), engine_runs.median_of("engine_blob_ms"),
                engine_runs.median_of("blob_bytes"));
  } else {
    std::printf("engine creation: context %.1f ms, with probe build %.1f ms, from an engine cache blob %.3f ms (%.0f bytes)\n",
                context, engine_runs.median_of("engine_probe_ms"), engine_runs.median_of("engine_blob_ms"),
                engine_runs.median_of("blob_bytes"));
  }
  const double driver = conditions[1].median_of("partition_ms"), warm = conditions[2].median_of("partition_ms");
  const double driver_total = conditions[1].median_of("total_ms"), warm_total = conditions[2].median_of("total_ms");
  std::printf("first result: warm / cold = 1/%.0f, warm / driver cache = 1/%.1f; with engine: 1/%.0f and 1/%.1f\n",
              cold / warm, driver / warm, cold_total / warm_total, driver_total / warm_total);
  if (conditions.size() > 3) {
    const double remote = conditions[3].median_of("partition_ms"), remote_total = conditions[3].median_of("total_ms");
    std::printf("remote tier, empty local store: first result %.2fx warm local store's (with engine %.2fx)\n",
                remote / warm, remote_total / warm_total);
    for (std::size_t i = 4; i < conditions.size(); ++i) {
      std::printf("remote %s: first result with engine %.1f ms against cold's %.1f ms (%+.1f ms)\n",
                  conditions[i].name.c_str(), conditions[i].median_of("total_ms"), cold_total,
                  conditions[i].median_of("total_ms") - cold_total);
    }
  }
  if (cuda) {
    std::printf("warm first result with engine: %.1f ms = %.2fx CUDA context creation alone (%.1f ms)\n", warm_total,
                warm_total / context, context);
  }

  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\n  \"benchmark\": \"bench_warm_start\",\n  \"backend\": \"" << backend << "\",\n  \"unicache\": \""
        << UNICACHE_VERSION_STRING << " " << UNICACHE_GIT_HASH << "\",\n  \"device\": \"" << device
        << "\",\n  \"runs\": " << runs << ",\n  \"partition\": {\"m\": " << sz.m << ", \"k\": " << sz.k
        << ", \"n\": " << sz.n << ", \"ops\": \"MatMul+Add+GELU(erf)\"},\n  \"conditions\": {\n";
    std::vector<std::string> keys{"partition_ms", "total_ms", "engine_ms", "compile_ms", "first_run_ms", "process_ms",
                                  "probes", "from_source", "from_binary", "max_error"};
    if (cuda) keys.erase(std::find(keys.begin(), keys.end(), "probes"));  // no probe on CUDA
    for (std::size_t i = 0; i < conditions.size(); ++i) {
      const condition& c = conditions[i];
      out << "    \"" << c.name << "\": {\"description\": \"" << c.description << "\"";
      for (const std::string& key : keys) out << ", \"" << key << "_median\": " << c.median_of(key);
      out << ", \"total_ms_all\": [";
      for (std::size_t r = 0; r < c.runs.size(); ++r) out << (r ? ", " : "") << c.runs[r].values.at("total_ms");
      out << "]}" << (i + 1 < conditions.size() ? "," : "") << "\n";
    }
    if (cuda) {
      out << "  },\n  \"engine\": {\"context_ms_median\": " << context
          << ", \"engine_ms_median\": " << engine_runs.median_of("engine_ms")
          << ", \"blob_ms_median\": " << engine_runs.median_of("engine_blob_ms")
          << ", \"blob_bytes\": " << engine_runs.median_of("blob_bytes") << "},\n"
          << "  \"warm\": {\"first_result_ms\": " << warm << ", \"total_ms\": " << warm_total
          << ", \"context_ms\": " << context << "},\n";
    } else {
      out << "  },\n  \"engine\": {\"context_ms_median\": " << context
          << ", \"probe_ms_median\": " << engine_runs.median_of("engine_probe_ms")
          << ", \"blob_ms_median\": " << engine_runs.median_of("engine_blob_ms")
          << ", \"blob_bytes\": " << engine_runs.median_of("blob_bytes") << "},\n";
    }
    out << "  \"ratios\": {\"cold_over_warm\": " << cold / warm << ", \"driver_over_warm\": " << driver / warm
        << ", \"cold_over_warm_with_engine\": " << cold_total / warm_total
        << ", \"driver_over_warm_with_engine\": " << driver_total / warm_total;
    if (cuda) out << ", \"warm_with_engine_over_context\": " << warm_total / context;
    if (conditions.size() > 3) {
      out << ", \"remote_over_warm\": " << conditions[3].median_of("partition_ms") / warm
          << ", \"remote_over_warm_with_engine\": " << conditions[3].median_of("total_ms") / warm_total;
    }
    out << "}\n}\n";
  }
  return 0;
}
