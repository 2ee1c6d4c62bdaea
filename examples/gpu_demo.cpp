// gpu_demo: cold start vs warm start on the default GPU device.
//
// Runs the MLP block of mlp_demo (768 -> 3072 (GELU) -> 768, constant
// weights) on the default GPU backend and device (CUDA where a driver is
// present, else OpenCL: see gpu_engine.hpp) for batch sizes 1, 8 and 32, in
// two fresh processes that share one persistent kernel store: the first
// finds it empty and builds every kernel (with the driver's own cache off,
// as on a new machine); the second loads them. Every batch size runs the
// same kernels: sizes are arguments.
//
//   build/examples/gpu_demo
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "example_usage.hpp"
#include "gpu_engine.hpp"
#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"
#include "unicache/store.hpp"

namespace {

using namespace unicache;
using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

constexpr std::int64_t kHidden = 768, kFfn = 3072;
constexpr std::int64_t kBatches[] = {1, 8, 32};

// The MLP block: two partitions, MatMul+bias+GELU and MatMul+bias.
graph mlp_graph() {
  graph g;
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
  return g;
}

// One process: what an application does, timed.
int run_model(const char* label) {
  const graph g = mlp_graph();
  const auto start = clock_type::now();
  const examples::gpu gpu = examples::make_gpu(/*quiet=*/std::string(label) == "cold");
  const engine& eng = gpu.eng;
  stream strm = make_stream(eng);
  const double engine_ms = ms_since(start);

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  auto buffer = [&](std::int64_t count) {
    std::vector<float> host(static_cast<std::size_t>(count));
    for (auto& v : host) v = dist(rng);
    return gpu.make_buffer(host.size() * sizeof(float), host.data());
  };
  void* weights[4] = {buffer(kHidden * kFfn), buffer(kFfn), buffer(kFfn * kHidden), buffer(kHidden)};
  double compile_ms = 0, first_result_ms = 0;
  for (std::int64_t batch : kBatches) {
    void *xin = buffer(batch * kHidden), *act = buffer(batch * kFfn), *res = buffer(batch * kHidden);
    const auto t = clock_type::now();
    compiled_partition up = compile(g.partitions()[0], {{batch, kHidden}, {kHidden, kFfn}, {kFfn}}, eng);
    compiled_partition down = compile(g.partitions()[1], {{batch, kFfn}, {kFfn, kHidden}, {kHidden}}, eng);
    compile_ms += ms_since(t);
    up.execute(strm, {{up.inputs()[0], xin}, {up.inputs()[1], weights[0]}, {up.inputs()[2], weights[1]}},
               {{up.outputs()[0], act}});
    down.execute(strm, {{down.inputs()[0], act}, {down.inputs()[1], weights[2]}, {down.inputs()[2], weights[3]}},
                 {{down.outputs()[0], res}});
    float first = 0;
    gpu.read(strm, res, &first, sizeof first);
    if (batch == 1) first_result_ms = ms_since(start);
    for (void* m : {xin, act, res}) gpu.release(m);
  }
  for (void* m : weights) gpu.release(m);
  const auto [built, loaded] = gpu.kernels_built_and_loaded();
  std::printf("  %-5s %10.1f %12.1f %15.1f %10llu %12llu\n", label, engine_ms, compile_ms, first_result_ms,
              static_cast<unsigned long long>(built), static_cast<unsigned long long>(loaded));
  if (std::string(label) == "warm") std::printf("device: %s backend, %s\n", gpu.backend.c_str(), gpu.device.c_str());
  return 0;
}

const char* const kUsage =
    "usage: gpu_demo [--bundle FILE | --graph]\n"
    "\n"
    "Cold start against warm start on the default GPU device: runs the MLP block\n"
    "of mlp_demo (768 -> 3072 (GELU) -> 768) for batch sizes 1, 8 and 32 in two\n"
    "fresh processes that share one persistent kernel store, in a temporary\n"
    "directory, with the driver's own caches off. The cold process builds every\n"
    "kernel, the warm one loads them from the store. Prints each one's engine,\n"
    "compile and first-result times and its kernels built and loaded.\n"
    "\n"
    "  --bundle FILE  the first process starts from a store holding only FILE's\n"
    "                 entries (`unicache-store precompile --out FILE`), not empty\n"
    "  --graph        print the MLP as graph JSON, with its three batch sizes\n"
    "                 (what `unicache-store precompile` takes), and exit\n"
    "\n"
    "The backend is CUDA where the driver reports a device,\n"
    "else OpenCL; UNICACHE_BACKEND=cuda|opencl forces one, UNICACHE_CUDA_DEVICE\n"
    "and UNICACHE_OPENCL_DEVICE pick the device. (gpu_demo --process LABEL is\n"
    "how it starts its two processes.)\n";


std::string self_path() {
  std::array<char, 4096> buf{};
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : "gpu_demo";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "--process") {
    try {
      return run_model(argv[2]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpu_demo: %s\n", e.what());
      return 1;
    }
  }
  if (argc > 1 && std::string(argv[1]) == "--graph") {
    // What `unicache-store precompile` takes: the MLP and its three batch sizes.
    const graph g = mlp_graph();
    std::vector<shape_request> requests;
    for (std::int64_t batch : kBatches) requests.push_back({{g.tensors()[0].id, {batch, kHidden}}});
    std::printf("%s\n", to_json(g, requests).c_str());
    return 0;
  }
  std::string bundle;
  if (argc > 2 && std::string(argv[1]) == "--bundle") bundle = argv[2];
  if (argc > 1 && bundle.empty()) return unicache::examples::answer_argument("gpu_demo", kUsage, argv[1]);
  char tmpl[] = "/tmp/unicache-demo-XXXXXX";
  const std::string store = ::mkdtemp(tmpl);
  if (!bundle.empty()) {
    // The first process starts from what the bundle holds (kernels built
    // ahead of time, elsewhere) instead of an empty store.
    store_config config;
    config.directory = store;
    const bundle_report r = kernel_store(config).import_bundle(bundle);
    std::printf("imported %llu entries from %s (%zu refused)\n", static_cast<unsigned long long>(r.imported),
                bundle.c_str(), r.refused.size());
  }
  // The driver's own caches off: what a process on a new machine (or in a
  // fresh container) pays, and what the unicache store removes.
  const std::string env = "env UNICACHE_PERSISTENT_CACHE=1 UNICACHE_PERSISTENT_CACHE_DIR=" + store +
                          " POCL_KERNEL_CACHE=0 CUDA_CACHE_DISABLE=1 ";
  std::printf("MLP 768 -> 3072 (GELU) -> 768 on the default GPU device, batch 1, 8, 32; two fresh processes\n");
  std::printf("sharing one kernel store (%s); driver caches off.\n\n", store.c_str());
  std::printf("  %-5s %10s %12s %15s %10s %12s\n", "", "engine ms", "compile ms", "first result ms", "builds",
              "from store");
  std::fflush(stdout);
  int status = 0;
  for (const char* label : {bundle.empty() ? "cold" : "bundle", "warm"}) {
    std::fprintf(stderr, "  (%s process running%s)\n", label,
                 std::string(label) == "cold" ? ": building every kernel, a few seconds" : "");
    status |= std::system((env + self_path() + " --process " + label).c_str());
  }
  std::filesystem::remove_all(store);
  std::printf("\nbuilds: kernels built from source (OpenCL: the engine's probe included); from store: kernels\n"
              "loaded from the persistent kernel store. Three batch sizes share one kernel per partition kind.\n");
  return status == 0 ? 0 : 1;
}
