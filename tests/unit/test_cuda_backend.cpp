// The CUDA backend. Without a GPU (here and in CI): every generated CUDA C
// kernel compiles with NVRTC to a cubin for sm_80 and sm_90 and round-trips
// through the persistent store; the generator's two dialects share one body;
// the backend reports itself unavailable with a reason. With a GPU: numerics
// of every partition kind against the double-precision reference, one kernel
// per configuration across shapes, the store across two processes, rejected
// binaries rebuilt, engine and compiled-partition blobs, packed weights and
// the out-of-memory retry.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backend_numerics.hpp"
#include "split_variant_check.hpp"
#include "cuda_internal.hpp"
#include "mlp_partition.hpp"
#include "temp_dir.hpp"
#include "adaptive_gemm_numerics.hpp"
#include "unicache/cuda.hpp"
#include "unicache/kernel_generator.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;
using unicache::gpu::kernels::dialect;

// Every test process gets a store of its own, set before first use (a child
// process is given its parent's through the environment).
const std::string& store_dir() {
  static const std::string dir = [] {
    if (const char* given = ::getenv("UNICACHE_PERSISTENT_CACHE_DIR"); given && *given) return std::string(given);
    static const temp_dir own("unicache-cuda-test");
    ::setenv("UNICACHE_PERSISTENT_CACHE_DIR", own.path().c_str(), 1);
    return own.path();
  }();
  return dir;
}
const bool store_configured = !store_dir().empty();

// Every kernel the backend generates, in one dialect.
std::vector<kernel_source> every_kernel(dialect d) {
  const unicache::gpu::kernels::gemm_tiles gpu{128, 128, 8, 8, 8};
  std::vector<kernel_source> out;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      unicache::gpu::kernels::gemm_config c;
      c.transpose_a = ta;
      c.transpose_b = tb;
      c.tiles = gpu;
      out.push_back(unicache::gpu::kernels::gemm_source(d, c));
    }
  }
  unicache::gpu::kernels::gemm_config fused;
  fused.packed_b = true;
  fused.tiles = gpu;
  fused.chain = {op_kind::add, op_kind::gelu_erf, op_kind::multiply, op_kind::relu, op_kind::sigmoid,
                 op_kind::tanh, op_kind::gelu_tanh};
  out.push_back(unicache::gpu::kernels::gemm_source(d, fused));
  fused.fixed_mnk = std::array<long, 3>{1000, 129, 7};
  out.push_back(unicache::gpu::kernels::gemm_source(d, fused));
  out.push_back(unicache::gpu::kernels::gemm_reduce_source(d, fused, 256));
  for (bool tb : {false, true}) out.push_back(unicache::gpu::kernels::pack_source(d, tb, 256));
  out.push_back(unicache::gpu::kernels::softmax_source(d, 256));
  out.push_back(unicache::gpu::kernels::layer_norm_source(d, 256));
  out.push_back(unicache::gpu::kernels::transpose_source(d, 256));
  for (op_kind k : {op_kind::relu, op_kind::gelu_erf, op_kind::gelu_tanh, op_kind::sigmoid, op_kind::tanh}) {
    out.push_back(unicache::gpu::kernels::eltwise_source(d, k, 256));
  }
  for (op_kind k : {op_kind::add, op_kind::multiply}) out.push_back(unicache::gpu::kernels::binary_source(d, k, 256));
  return out;
}

bool is_cubin(const byte_vector& b) {
  return b.size() > 64 && std::memcmp(b.data(), "\x7f" "ELF", 4) == 0 && (b[18] | (b[19] << 8)) == 190;  // EM_CUDA
}

std::string nvrtc_missing() {
  std::string why;
  return cuda::detail::nvrtc(&why) ? "" : why;
}

// --- Without a GPU ------------------------------------------------------------------

TEST(CudaCode, EveryGeneratedKernelCompilesToACubinForSm80AndSm90) {
  if (const std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << "NVRTC: " << why;
  for (const kernel_source& src : every_kernel(dialect::cuda_c)) {
    for (const auto& [major, minor] : {std::pair{8, 0}, std::pair{9, 0}}) {
      SCOPED_TRACE(src.kernel_name + " for sm_" + std::to_string(major) + std::to_string(minor));
      const cuda::detail::nvrtc_output out =
          cuda::detail::nvrtc_compile(src.source, src.kernel_name + ".cu", major, minor, {src.options});
      EXPECT_FALSE(out.ptx);
      EXPECT_TRUE(is_cubin(out.binary));
    }
  }
}

TEST(CudaCode, CubinsRoundTripThroughTheStoreUnderTheirKernelKeys) {
  if (const std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << "NVRTC: " << why;
  ASSERT_TRUE(store_configured);
  kernel_store& store = kernel_store::instance();
  ASSERT_TRUE(store.enabled()) << store_dir();
  const device_identity sm80{"CUDA", "test GPU", "sm_80 target sm_80", "driver 0 nvrtc 0"};
  const device_identity sm90{"CUDA", "test GPU", "sm_90 target sm_90", "driver 0 nvrtc 0"};
  const std::vector<kernel_source> sources = every_kernel(dialect::cuda_c);
  for (const kernel_source& src : {sources.front(), sources.back()}) {
    const byte_vector a = cuda::detail::nvrtc_compile(src.source, "k.cu", 8, 0, {src.options}).binary;
    const byte_vector b = cuda::detail::nvrtc_compile(src.source, "k.cu", 9, 0, {src.options}).binary;
    ASSERT_TRUE(store.put(sm80, src.store_key(), a));
    ASSERT_TRUE(store.put(sm90, src.store_key(), b));
    EXPECT_EQ(store.get(sm80, src.store_key()), a);
    EXPECT_EQ(store.get(sm90, src.store_key()), b) << "one key, one binary per device identity";
  }
}

TEST(CudaCode, OneGeneratorWritesBothDialectsFromOneBody) {
  const std::vector<kernel_source> cu = every_kernel(dialect::cuda_c), cl = every_kernel(dialect::opencl_c);
  ASSERT_EQ(cu.size(), cl.size());
  for (std::size_t i = 0; i < cu.size(); ++i) {
    SCOPED_TRACE(cu[i].kernel_name);
    EXPECT_EQ(cu[i].kernel_name, cl[i].kernel_name);
    EXPECT_EQ(cu[i].language, "cuda-c");
    EXPECT_EQ(cl[i].language, "opencl-c");
    EXPECT_NE(cu[i].config, cl[i].config) << "the dialect is part of the configuration";
    EXPECT_NE(cu[i].store_key(), cl[i].store_key());
    EXPECT_NE(cu[i].source.find("extern \"C\" __global__"), std::string::npos);
    EXPECT_NE(cl[i].source.find("__kernel void"), std::string::npos);
    // Past the dialect's prelude the kernel body is the same text.
    const std::string body = "KERNEL(";
    ASSERT_NE(cu[i].source.find(body), std::string::npos);
    EXPECT_EQ(cu[i].source.substr(cu[i].source.rfind("DEVICE_FN float u_relu")),
              cl[i].source.substr(cl[i].source.rfind("DEVICE_FN float u_relu")));
  }
}

TEST(CudaCode, SplitKIsChosenWhereTheTilesCannotFillTheDevice) {
  // A BERT layer's Linear on an H100 (132 SMs) with the generic 64x128 tiles.
  const unicache::gpu::kernels::gemm_tiles plan{64, 128, 16, 8, 8};
  auto splits = [&](std::int64_t m, std::int64_t k, std::int64_t n, int compute_units) {
    return unicache::gpu::kernels::gemm_splits(mlp_gemm_problem(m, k, n, plan), compute_units);
  };
  EXPECT_EQ(splits(594, 768, 768, 132), 4) << "60 tiles on 132 SMs";
  EXPECT_EQ(splits(594, 768, 3072, 132), 1) << "240 tiles";
  EXPECT_EQ(splits(2870, 3072, 768, 132), 4) << "270 tiles, but a long K";
  EXPECT_EQ(splits(4096, 4096, 4096, 132), 1) << "2048 tiles";
  EXPECT_EQ(splits(594, 768, 768, 0), 1) << "compute units unknown";
  EXPECT_EQ(splits(8, 512, 64, 132), 4);
  EXPECT_EQ(splits(8, 300, 64, 132), 1) << "K below 512 is not shared out";
}

TEST(CudaCode, ANarrowBatchRunsOnTheGenericTilesTurnedAround) {
  const unicache::gpu::kernels::gemm_tiles plan{64, 128, 16, 8, 8};
  auto tiles_for = [](std::int64_t batch, std::int64_t m, std::int64_t k, std::int64_t n,
                      const unicache::gpu::kernels::gemm_tiles& generic = {64, 128, 16, 8, 8}) {
    graph g;
    auto a = g.tensor({-1, -1, -1}), b = g.tensor({-1, -1, -1}), c = g.tensor({-1, -1, -1});
    g.add_op(op_kind::matmul, {a, b}, {c});
    g.finalize();
    const partition& p = g.partitions()[0];
    std::vector<logical_tensor> in = p.inputs(), out = p.outputs();
    in[0].shape = {batch, m, k};
    in[1].shape = {batch, k, n};
    out[0].shape = {batch, m, n};
    return unicache::gpu::kernels::batch_tiles(unicache::gpu::kernels::gemm_problem(p, in, out, generic, kernel_shapes::adaptive), generic);
  };
  const unicache::gpu::kernels::gemm_tiles turned{128, 64, 16, 8, 8};
  EXPECT_EQ(tiles_for(84, 469, 469, 64), turned) << "attention's P V: N = 64, half of BN";
  EXPECT_EQ(tiles_for(2, 5, 7, 1), turned);
  EXPECT_EQ(tiles_for(84, 469, 64, 469), plan) << "Q K^T: N is the sequence";
  EXPECT_EQ(tiles_for(84, 469, 469, 65), plan) << "more than half of BN";
  EXPECT_EQ(tiles_for(1, 469, 469, 64), plan) << "one product: its shape class is tuned";
  EXPECT_EQ(unicache::gpu::kernels::batch_tiles(mlp_gemm_problem(594, 768, 64, plan), plan), plan);
  const unicache::gpu::kernels::gemm_tiles square{64, 64, 16, 4, 4};
  EXPECT_EQ(tiles_for(84, 469, 469, 16, square), square) << "square tiles: nothing to turn";
  // Turned tiles are tiles the generator takes.
  unicache::gpu::kernels::gemm_config c;
  c.tiles = turned;
  EXPECT_NO_THROW(unicache::gpu::kernels::gemm_source(dialect::cuda_c, c));
}

TEST(CudaCode, TilesTheGemmCannotUseAreACompileError) {
  unicache::gpu::kernels::gemm_config c;
  c.tiles = {128, 128, 8, 6, 8};  // a register block that is not a multiple of 4
  EXPECT_THROW(unicache::gpu::kernels::gemm_source(dialect::cuda_c, c), compile_error);
}

TEST(CudaBackend, WithoutADriverItSaysWhyAndEnginesFailWithThatReason) {
  if (cuda::available()) GTEST_SKIP() << "a CUDA driver and device are present";
  const std::string why = cuda::unavailable_reason();
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_TRUE(cuda::list_devices().empty());
  for (auto make : {+[] { return cuda::make_engine(); }, +[] { return cuda::make_engine(0); }}) {
    try {
      make();
      FAIL() << "an engine without a driver";
    } catch (const cuda::cuda_error& e) {
      if (why.find("libcuda.so.1") != std::string::npos) {
        EXPECT_NE(std::string(e.what()).find("libcuda.so.1"), std::string::npos) << e.what();
      }
    }
  }
}

// --- With a GPU -----------------------------------------------------------------------

std::string gpu_missing() {
  return cuda::available() ? "" : "no CUDA device: " + cuda::unavailable_reason();
}

// Device buffers of an engine, freed at scope exit.
struct buffers {
  engine eng;
  std::vector<CUdeviceptr> all;
  explicit buffers(engine e) : eng(std::move(e)) {}
  ~buffers() {
    for (CUdeviceptr p : all) cuda::free_buffer(eng, p);
  }
  void* make(const std::vector<float>& host) {
    all.push_back(cuda::make_buffer(eng, host.size() * sizeof(float), host.data()));
    return reinterpret_cast<void*>(all.back());
  }
  void* make(std::size_t count) {
    all.push_back(cuda::make_buffer(eng, count * sizeof(float)));
    return reinterpret_cast<void*>(all.back());
  }
};

std::vector<float> run_compiled(const engine& e, stream& s, const compiled_partition& cp,
                                const std::vector<const std::vector<float>*>& data, std::uint64_t version = 0) {
  buffers b(e);
  std::vector<tensor> in;
  for (std::size_t i = 0; i < data.size(); ++i) in.push_back({cp.inputs()[i], b.make(*data[i]), version});
  const auto n = static_cast<std::size_t>(elements(cp.outputs()[0].shape));
  void* out = b.make(n);
  cp.execute(s, in, {{cp.outputs()[0], out, 0}});
  std::vector<float> result(n);
  cuda::read_buffer(s, reinterpret_cast<CUdeviceptr>(out), result.data(), n * sizeof(float));
  return result;
}

struct cuda_device {
  engine eng = cuda::available() ? cuda::make_engine() : engine();
  stream strm = cuda::available() ? make_stream(eng) : stream();
  std::string unavailable() const { return gpu_missing(); }

  std::vector<float> run(graph& g, const std::vector<shape_t>& shapes, std::vector<std::vector<float>*> data,
                         std::uint64_t version) {
    g.finalize();
    EXPECT_EQ(g.partitions().size(), 1u);
    compiled_partition cp = compile(g.partitions()[0], shapes, eng);
    std::vector<const std::vector<float>*> in(data.begin(), data.end());
    return run_compiled(eng, strm, cp, in, version);
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(cuda, BackendNumerics, cuda_device);
INSTANTIATE_TYPED_TEST_SUITE_P(cuda_specialized, BackendNumerics, specialized<cuda_device>);

struct gpu : ::testing::Test, cuda_device {
  void SetUp() override {
    if (const std::string why = gpu_missing(); !why.empty()) GTEST_SKIP() << why;
  }
  // Forgets every kernel this process holds in memory: the next compile
  // goes to the store (or blob), as a new process would.
  static void forget_kernels() { kernel_cache().clear(); }
  scoped_no_specialization no_background;  // the kernel path's counts are exact
};

// Adaptive: every GEMM tile candidate, chosen through the store, on odd sizes.
TEST_F(gpu, EveryTileCandidateMatchesTheReferenceAndAStoredChoiceIsUsed) {
  check_every_candidate(*this, eng.native<cuda::detail::engine_state>().facts.gemm, "cuda");
}

TEST_F(gpu, EveryShapeOfAPartitionRunsOneKernelAndTheEngineNamesThePhysicalDevice) {
  const std::int64_t k = 33, n = 17;
  graph g = mlp_graph(k, n, /*constant_weight=*/false);
  const auto w = random_data({k, n}, 40), b = random_data({n}, 41);
  forget_kernels();
  const cuda::backend_stats before = cuda::stats();
  for (std::int64_t m : {1, 7, 129, 1000, 2}) {
    compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, eng);
    const auto x = random_data({m, k}, static_cast<unsigned>(m));
    expect_close(run_compiled(eng, strm, cp, {&x, &w, &b}), mlp_reference(x, w, b, m, k, n), matmul_atol(k), 1e-5,
                 "M=" + std::to_string(m));
  }
  const cuda::backend_stats after = cuda::stats();
  EXPECT_EQ(after.programs_from_source + after.programs_from_binary -
                (before.programs_from_source + before.programs_from_binary),
            1u)
      << "five shapes, one GEMM kernel";
  EXPECT_EQ(eng.kind(), engine_kind::gpu);
  const cuda::device_info& info = cuda::info(eng);
  EXPECT_FALSE(info.pci_bus_id.empty());
  EXPECT_EQ(info.target, "sm_" + std::to_string(info.compute_major) + std::to_string(info.compute_minor))
      << "this host's NVRTC targets its GPU";
}

TEST_F(gpu, EnginesOverACallersContextAndStreamsOverACallersStreamRestoreTheCallersContext) {
  const cuda::detail::driver_api& d = cuda::detail::api();
  const CUcontext context = cuda::native_context(eng);  // the caller's: alive as long as `eng`
  const engine mine = cuda::make_engine(context);
  EXPECT_EQ(mine.device_id(), eng.device_id());
  EXPECT_NE(mine.context_id(), eng.context_id()) << "a caller's context: a scope of the engine's own";
  CUstream own = nullptr;
  {
    cuda::detail::context_guard guard(context);
    ASSERT_EQ(d.cuStreamCreate(&own, 0), 0);
  }
  stream theirs = cuda::make_stream(mine, own);
  EXPECT_EQ(cuda::native_stream(theirs), own);

  ASSERT_EQ(d.cuCtxSetCurrent(nullptr), 0);  // the caller has no context current
  const shape_t s{5, 300};
  graph g;
  auto xt = g.tensor(s), yt = g.tensor(s);
  g.add_op(op_kind::relu, {xt}, {yt});
  g.finalize();
  compiled_partition cp = compile(g.partitions()[0], {s}, mine);
  const auto x = random_data(s, 80);
  std::vector<float> want;
  for (float v : x) want.push_back(v > 0 ? v : 0.f);
  expect_close(run_compiled(mine, theirs, cp, {&x}), want, 0, 0, "relu on the caller's stream");
  CUcontext current = context;
  ASSERT_EQ(d.cuCtxGetCurrent(&current), 0);
  EXPECT_EQ(current, nullptr) << "every call restored the caller's (absent) context";
  cuda::release_cached(mine);
  cuda::detail::context_guard guard(context);
  d.cuStreamDestroy(own);
}

TEST_F(gpu, UnicacheCudaDeviceSelectsByOrdinalOrNameAndWarnsOnceOnNoMatch) {
  const int device0 = cuda::native_device(cuda::make_engine(0));
  std::string name = cuda::info(eng).device_name;
  ::setenv("UNICACHE_CUDA_DEVICE", "0", 1);
  EXPECT_EQ(cuda::native_device(cuda::make_engine()), device0);
  ::setenv("UNICACHE_CUDA_DEVICE", name.substr(name.size() / 2).c_str(), 1);  // a substring of the name
  EXPECT_EQ(cuda::info(cuda::make_engine()).device_name, name);
  ::setenv("UNICACHE_CUDA_DEVICE", "no such GPU\x1b[2J", 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cuda::native_device(cuda::make_engine()), device0) << "no match: device 0";
  const std::string warning = ::testing::internal::GetCapturedStderr();
  ::unsetenv("UNICACHE_CUDA_DEVICE");
  EXPECT_NE(warning.find("UNICACHE_CUDA_DEVICE"), std::string::npos) << warning;
  EXPECT_EQ(warning.find('\x1b'), std::string::npos) << "the value is escaped";
}

TEST_F(gpu, AStoredBinaryTheDriverRejectsIsRemovedAndRebuilt) {
  const cuda::detail::engine_state& es = eng.native<cuda::detail::engine_state>();
  const kernel_source src = unicache::gpu::kernels::eltwise_source(dialect::cuda_c, op_kind::sigmoid, es.facts.vector_work_group);
  kernel_store& store = kernel_store::instance();
  // A well-formed store entry whose binary looks like a cubin but is not one.
  byte_vector garbage(4096, 0x5a);
  std::memcpy(garbage.data(), "\x7f" "ELF", 4);
  store.remove(es.facts.identity, src.store_key());
  ASSERT_TRUE(store.put(es.facts.identity, src.store_key(), garbage));
  forget_kernels();
  const shape_t s{7, 129};
  graph g;
  auto xt = g.tensor(s), yt = g.tensor(s);
  g.add_op(op_kind::sigmoid, {xt}, {yt});
  g.finalize();
  const cuda::backend_stats before = cuda::stats();
  compiled_partition cp = compile(g.partitions()[0], {s}, eng);
  const auto x = random_data(s, 47);
  std::vector<float> want;
  for (float v : x) want.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(v)))));
  expect_close(run_compiled(eng, strm, cp, {&x}), want, 2e-6, 2e-5, "rebuilt kernel");
  const cuda::backend_stats after = cuda::stats();
  EXPECT_EQ(after.binaries_rejected - before.binaries_rejected, 1u);
  EXPECT_EQ(after.programs_from_source - before.programs_from_source, 1u);
  const auto now = store.get(es.facts.identity, src.store_key());
  ASSERT_TRUE(now.has_value()) << "the rebuilt binary replaced the rejected one";
  EXPECT_TRUE(is_cubin(*now));
}

// Run by the test below in a child process (DISABLED_: not on its own):
// the MLP on the GPU, checked against the reference, and what the kernel
// path did written to $UNICACHE_TEST_CHILD_OUT.
TEST_F(gpu, DISABLED_ChildRunsTheMlp) {
  const std::int64_t m = 37, k = 300, n = 65;
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  const auto x = random_data({m, k}, 1), w = random_data({k, n}, 2), b = random_data({n}, 3);
  compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, eng);
  expect_close(run_compiled(eng, strm, cp, {&x, &w, &b}), mlp_reference(x, w, b, m, k, n), matmul_atol(k), 1e-5,
               "child");
  const cuda::backend_stats st = cuda::stats();
  std::ofstream(::getenv("UNICACHE_TEST_CHILD_OUT")) << st.programs_from_source << " " << st.programs_from_binary
                                                     << " " << st.binaries_stored << "\n";
}

TEST_F(gpu, TheStoreServesCubinsToTheNextProcess) {
  char tmpl[] = "/tmp/unicache-cuda-processes-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  auto child = [&](const std::string& out) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("UNICACHE_PERSISTENT_CACHE_DIR", dir.c_str(), 1);
      ::setenv("UNICACHE_TEST_CHILD_OUT", out.c_str(), 1);
      ::execl("/proc/self/exe", "test_cuda_backend", "--gtest_filter=gpu.DISABLED_ChildRunsTheMlp",
              "--gtest_also_run_disabled_tests", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed: " << status;
    std::uint64_t from_source = 0, from_binary = 0, stored = 0;
    std::ifstream(out) >> from_source >> from_binary >> stored;
    return std::array<std::uint64_t, 3>{from_source, from_binary, stored};
  };
  const auto first = child(dir + "/first.txt");
  EXPECT_EQ(first[0], 2u) << "the GEMM and the weight packer, compiled by NVRTC";
  EXPECT_EQ(first[1], 0u);
  EXPECT_EQ(first[2], 2u) << "both cubins stored after their first launch";
  const auto second = child(dir + "/second.txt");
  EXPECT_EQ(second[0], 0u) << "nothing compiled in the second process";
  EXPECT_EQ(second[1], 2u) << "both loaded from the store";
  std::filesystem::remove_all(dir);
}

TEST_F(gpu, ACompiledPartitionBlobRecreatesItWithoutCompiling) {
  const std::int64_t k = 40, n = 24, m = 6;
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  const std::vector<shape_t> shapes{{m, k}, {k, n}, {n}};
  const auto x = random_data({m, k}, 60), w = random_data({k, n}, 61), b = random_data({n}, 62);
  byte_vector blob;
  {
    compiled_partition cp = compile(g.partitions()[0], shapes, eng);
    run_compiled(eng, strm, cp, {&x, &w, &b});
    blob = cp.get_cache_blob();
  }
  kernel_store::instance().clear();
  forget_kernels();
  const cuda::backend_stats before = cuda::stats();
  compiled_partition cp = compile_from_cache_blob(g.partitions()[0], shapes, eng, blob);
  const cuda::backend_stats after = cuda::stats();
  EXPECT_EQ(after.programs_from_source - before.programs_from_source, 0u);
  EXPECT_EQ(after.programs_from_binary - before.programs_from_binary, 2u) << "the GEMM and the weight packer";
  expect_close(run_compiled(eng, strm, cp, {&x, &w, &b}), mlp_reference(x, w, b, m, k, n), matmul_atol(k), 1e-5,
               "from the blob");
  EXPECT_EQ(cuda::stats().binaries_stored - after.binaries_stored, 0u) << "a blob's binaries are not stored";
}

TEST_F(gpu, AShapeWhoseSplitVariantIsNotBuiltRunsOnTheOtherWhileItBuildsInTheBackground) {
  check_split_variant_built_in_background(eng, cuda::stats, [&](const compiled_partition& cp, const std::vector<const std::vector<float>*>& data) {
    return run_compiled(eng, strm, cp, data);
  });
}

TEST_F(gpu, ABlobOfASplitKShapeHoldsItsKernelsAndIsNotTheUnsplitShapesBlob) {
  // Few rows and K = 768: the generic GEMM shares K out (its own kernel and
  // the sum's); many rows: it does not. One blob per regime, each complete.
  const std::int64_t k = 768, n = 768;
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  const partition& p = g.partitions()[0];
  auto shapes = [&](std::int64_t m) { return std::vector<shape_t>{{m, k}, {k, n}, {n}}; };
  const std::int64_t few = 6, more = 7, many = 64 * 4 * cuda::info(eng).multiprocessors;
  EXPECT_EQ(get_cache_blob_id(p, shapes(few), eng), get_cache_blob_id(p, shapes(more), eng));
  EXPECT_NE(get_cache_blob_id(p, shapes(few), eng), get_cache_blob_id(p, shapes(many), eng));
  const auto x = random_data({few, k}, 63), w = random_data({k, n}, 64), b = random_data({n}, 65);
  byte_vector blob;
  {
    compiled_partition cp = compile(p, shapes(few), eng);
    run_compiled(eng, strm, cp, {&x, &w, &b});
    blob = cp.get_cache_blob();
  }
  kernel_store::instance().clear();
  forget_kernels();
  const cuda::backend_stats before = cuda::stats();
  compiled_partition cp = compile_from_cache_blob(p, shapes(more), eng, blob);
  EXPECT_EQ(cuda::stats().programs_from_source - before.programs_from_source, 0u);
  EXPECT_EQ(cuda::stats().programs_from_binary - before.programs_from_binary, 2u)
      << "the split GEMM and the split-K sum (the weight, in the GEMM's layout, is read in place: no packer)";
  const auto x7 = random_data({more, k}, 66);
  expect_close(run_compiled(eng, strm, cp, {&x7, &w, &b}), mlp_reference(x7, w, b, more, k, n), matmul_atol(k), 1e-5,
               "split-K from the blob");
}

TEST_F(gpu, AGemmOnPointersThatAreNot16ByteAlignedIsRightAndLeavesTheContextUsable) {
  const std::int64_t m = 64, k = 256, n = 128;
  graph g;
  auto a = g.tensor({m, k}), bt = g.tensor({k, n}), c = g.tensor({m, n});
  g.add_op(op_kind::matmul, {a, bt}, {c});
  g.finalize();
  compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}}, eng);
  const auto av = random_data({m, k}, 90), bv = random_data({k, n}, 91);
  buffers b(eng);
  // One float past 16-byte-aligned allocations: an arena's or a view's pointer.
  std::vector<float> pad_a(av.size() + 1), pad_b(bv.size() + 1);
  std::copy(av.begin(), av.end(), pad_a.begin() + 1);
  std::copy(bv.begin(), bv.end(), pad_b.begin() + 1);
  auto* ap = static_cast<float*>(b.make(pad_a)) + 1;
  auto* bp = static_cast<float*>(b.make(pad_b)) + 1;
  auto* cp_out = static_cast<float*>(b.make(static_cast<std::size_t>(m * n + 1))) + 1;
  cp.execute(strm, {{cp.inputs()[0], ap, 0}, {cp.inputs()[1], bp, 0}}, {{cp.outputs()[0], cp_out, 0}});
  std::vector<float> got(static_cast<std::size_t>(m * n));
  cuda::read_buffer(strm, reinterpret_cast<CUdeviceptr>(cp_out), got.data(), got.size() * sizeof(float));
  expect_close(got, ref_matmul(av, bv, m, k, n, false, false), matmul_atol(k), 1e-5, "misaligned operands");
  EXPECT_NO_THROW(make_stream(eng)) << "the context is still usable";
}

TEST_F(gpu, LaunchesBeyondCudasGridLimitsAreCompileErrors) {
  const std::int64_t batch = 70000;  // the batch is grid dimension z: at most 65535
  graph g;
  auto a = g.tensor({batch, 4, 4}), bt = g.tensor({batch, 4, 4}), c = g.tensor({batch, 4, 4});
  g.add_op(op_kind::matmul, {a, bt}, {c});
  g.finalize();
  try {
    compile(g.partitions()[0], {{batch, 4, 4}, {batch, 4, 4}}, eng);
    FAIL() << "compiled a launch CUDA cannot make";
  } catch (const compile_error& e) {
    try {
      std::rethrow_if_nested(e);
    } catch (const cuda::cuda_error& nested) {
      EXPECT_NE(std::string(nested.what()).find("65535"), std::string::npos) << nested.what();
    }
  }
}

TEST_F(gpu, EnginesOverACallersContextHaveScopesOfTheirOwnAndReleaseThem) {
  const CUcontext context = cuda::native_context(eng);
  const engine first = cuda::make_engine(context), second = cuda::make_engine(context);
  EXPECT_NE(first.context_id(), second.context_id()) << "a context's address may be reused once it is destroyed";
  EXPECT_NE(first.context_id(), eng.context_id());
  const shape_t s{3, 33};
  graph g;
  auto xt = g.tensor(s), yt = g.tensor(s);
  g.add_op(op_kind::tanh, {xt}, {yt});
  g.finalize();
  stream st = make_stream(first);
  compiled_partition cp = compile(g.partitions()[0], {s}, first);
  const auto x = random_data(s, 92);
  run_compiled(first, st, cp, {&x});
  EXPECT_GT(kernel_cache().stats(first.scope()).entries, 0u);
  cuda::release_cached(first);
  EXPECT_EQ(kernel_cache().stats(first.scope()).entries, 0u) << "nothing of the scope is left cached";
}

TEST_F(gpu, TheKernelCacheCountsEachCubinAtItsRealSize) {
  const engine own = cuda::make_engine(cuda::native_context(eng));  // a scope of its own
  std::uint64_t sum = 0;
  std::vector<std::shared_ptr<const kernel>> built;
  for (const kernel_source& src : {unicache::gpu::kernels::softmax_source(dialect::cuda_c, 64),
                                   unicache::gpu::kernels::eltwise_source(dialect::cuda_c, op_kind::relu, 64),
                                   unicache::gpu::kernels::pack_source(dialect::cuda_c, /*transpose_b=*/false, 64)}) {
    built.push_back(unicache::gpu::get_program(own, src, {}));
    const kernel& k = *built.back();
    const std::size_t cubin = k.binary().size();
    EXPECT_GT(cubin, 0u) << k.name();
    EXPECT_GE(k.cached_bytes(), cubin + k.store_key().size()) << k.name() << ": the cubin and the key at least";
    sum += k.cached_bytes();
  }
  const cache_stats s = kernel_cache().stats(own.scope());
  EXPECT_EQ(s.entries, built.size());
  EXPECT_EQ(s.bytes, sum) << "the kernel cache counts the sum of the cubins' real sizes";
  cuda::release_cached(own);
}

TEST_F(gpu, EngineBlobsRoundTripAndForeignOrCorruptOnesAreRejected) {
  const byte_vector blob = cuda::get_engine_cache_blob(eng);
  const engine again = cuda::make_engine_from_cache_blob(cuda::native_device(eng), blob);
  EXPECT_EQ(cuda::info(again), cuda::info(eng));
  byte_vector corrupt = blob;
  corrupt[corrupt.size() / 2] ^= 0x40;
  EXPECT_THROW(cuda::make_engine_from_cache_blob(cuda::native_device(eng), corrupt), cuda::cuda_error);
  const device_identity other{"CUDA", "another GPU", "sm_10 target sm_10", "driver 1 nvrtc 1"};
  const byte_vector foreign = serialize_blob(other, "cuda-engine-info/1", byte_span(blob.data(), 8));
  EXPECT_THROW(cuda::make_engine_from_cache_blob(cuda::native_device(eng), foreign), cuda::cuda_error);
}

TEST_F(gpu, AWeightIsPackedOncePerContentsAndEvictionFreesItsMemory) {
  const std::int64_t k = 64, n = 48;
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  const auto w = random_data({k, n}, 70), b = random_data({n}, 71);
  buffers keep(eng);
  void* wbuf = keep.make(w);
  void* bbuf = keep.make(b);
  const cuda::backend_stats before = cuda::stats();
  for (std::int64_t m : {3, 50, 3}) {
    compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, eng);
    const auto x = random_data({m, k}, static_cast<unsigned>(m));
    buffers local(eng);
    void* xbuf = local.make(x);
    void* ybuf = local.make(static_cast<std::size_t>(m * n));
    cp.execute(strm, {{cp.inputs()[0], xbuf, 0}, {cp.inputs()[1], wbuf, 1}, {cp.inputs()[2], bbuf, 1}},
               {{cp.outputs()[0], ybuf, 0}});
    std::vector<float> y(static_cast<std::size_t>(m * n));
    cuda::read_buffer(strm, reinterpret_cast<CUdeviceptr>(ybuf), y.data(), y.size() * sizeof(float));
    expect_close(y, mlp_reference(x, w, b, m, k, n), matmul_atol(k), 1e-5, "M=" + std::to_string(m));
  }
  EXPECT_EQ(cuda::stats().weights_packed - before.weights_packed, 1u) << "three executions, one packing";
  const std::uint64_t released = cuda::stats().weights_released;
  constant_tensor_cache().clear();
  EXPECT_GE(cuda::stats().weights_released - released, 1u) << "eviction freed the packed copy";
}

// On a stream whose caller versions its constants (torch's parameters),
// address and version identify a weight: nothing is read back to check it
// (a change without a bump is not seen, as the caller promised it cannot
// happen), and a bump packs it again.
TEST_F(gpu, AStreamWithVersionedConstantsIdentifiesAWeightByAddressAndVersion) {
  const std::int64_t m = 5, k = 64, n = 48;  // N a multiple of no GEMM tile: the weight is packed
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  const auto w = random_data({k, n}, 72), w2 = random_data({k, n}, 73), b = random_data({n}, 74);
  const auto x = random_data({m, k}, 75);
  stream versioned = cuda::make_stream_with_versioned_constants(eng, nullptr);
  buffers keep(eng);
  void* wbuf = keep.make(w);
  void* bbuf = keep.make(b);
  void* xbuf = keep.make(x);
  void* ybuf = keep.make(static_cast<std::size_t>(m * n));
  compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, eng);
  const auto run = [&](std::uint64_t version) {
    cp.execute(versioned, {{cp.inputs()[0], xbuf, 0}, {cp.inputs()[1], wbuf, version}, {cp.inputs()[2], bbuf, 1}},
               {{cp.outputs()[0], ybuf, 0}});
    std::vector<float> y(static_cast<std::size_t>(m * n));
    cuda::read_buffer(versioned, reinterpret_cast<CUdeviceptr>(ybuf), y.data(), y.size() * sizeof(float));
    return y;
  };
  const cuda::backend_stats before = cuda::stats();
  expect_close(run(1), mlp_reference(x, w, b, m, k, n), matmul_atol(k), 1e-5, "version 1");
  cuda::write_buffer(versioned, reinterpret_cast<CUdeviceptr>(wbuf), w2.data(), w2.size() * sizeof(float));
  expect_close(run(1), mlp_reference(x, w, b, m, k, n), matmul_atol(k), 1e-5, "changed without a bump: not read");
  expect_close(run(2), mlp_reference(x, w2, b, m, k, n), matmul_atol(k), 1e-5, "version 2: packed again");
  EXPECT_EQ(cuda::stats().weights_packed - before.weights_packed, 2u);
  versioned.wait();
}

// A weight in the packed layout is read where it is at any address: 4 bytes
// into a buffer (no float4 loads there) too, never packed.
TEST_F(gpu, AWeightInThePackedLayoutIsReadWhereItIsAtAnyAddress) {
  const std::int64_t m = 5, k = 256, n = 256;
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  const auto x = random_data({m, k}, 80), w = random_data({k, n}, 81), b = random_data({n}, 82);
  std::vector<float> shifted(1, 0.0f);
  shifted.insert(shifted.end(), w.begin(), w.end());
  buffers keep(eng);
  void* xbuf = keep.make(x);
  void* bbuf = keep.make(b);
  void* ybuf = keep.make(static_cast<std::size_t>(m * n));
  void* aligned = keep.make(w);
  void* unaligned = static_cast<char*>(keep.make(shifted)) + sizeof(float);
  compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, eng);
  for (void* wbuf : {aligned, unaligned}) {
    const std::uint64_t before = cuda::stats().weights_packed;
    cp.execute(strm, {{cp.inputs()[0], xbuf, 0}, {cp.inputs()[1], wbuf, 1}, {cp.inputs()[2], bbuf, 1}},
               {{cp.outputs()[0], ybuf, 0}});
    std::vector<float> y(static_cast<std::size_t>(m * n));
    cuda::read_buffer(strm, reinterpret_cast<CUdeviceptr>(ybuf), y.data(), y.size() * sizeof(float));
    const std::string where = wbuf == aligned ? "aligned" : "4 bytes in";
    expect_close(y, mlp_reference(x, w, b, m, k, n), matmul_atol(k), 1e-5, where);
    EXPECT_EQ(cuda::stats().weights_packed - before, 0u) << where;
  }
}

TEST_F(gpu, AnAllocationOutOfMemoryEvictsConstantTensorsAndRetriesOnce) {
  // A packed weight of 1 GiB (N a multiple of no tile: packed, not read in
  // place), then a buffer that fits only without it.
  const std::int64_t k = 16384, n = 16380;
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  std::vector<float> w(static_cast<std::size_t>(k * n), 0.5f), b(static_cast<std::size_t>(n), 0.f);
  std::vector<float> x(static_cast<std::size_t>(k), 1.f);
  compiled_partition cp = compile(g.partitions()[0], {{1, k}, {k, n}, {n}}, eng);
  {
    buffers weights(eng);
    void* wbuf = weights.make(w);
    void* bbuf = weights.make(b);
    void* xbuf = weights.make(x);
    void* ybuf = weights.make(static_cast<std::size_t>(n));
    cp.execute(strm, {{cp.inputs()[0], xbuf, 0}, {cp.inputs()[1], wbuf, 1}, {cp.inputs()[2], bbuf, 1}},
               {{cp.outputs()[0], ybuf, 0}});
  }  // the source weight is freed; its packed copy stays in the cache
  std::size_t free_bytes = 0, total = 0;
  {
    cuda::detail::context_guard guard(cuda::native_context(eng));
    ASSERT_EQ(cuda::detail::api().cuMemGetInfo(&free_bytes, &total), 0);
  }
  const std::size_t packed = static_cast<std::size_t>(k * n) * sizeof(float);
  const cuda::backend_stats before = cuda::stats();
  // More than is free, less than is free once the packed weight is gone.
  const CUdeviceptr big = cuda::make_buffer(eng, free_bytes + packed / 2);
  const cuda::backend_stats after = cuda::stats();
  cuda::free_buffer(eng, big);
  EXPECT_EQ(after.out_of_memory_retries - before.out_of_memory_retries, 1u);
  EXPECT_GE(after.weights_released - before.weights_released, 1u);
}

}  // namespace
}  // namespace unicache
