// The OpenCL backend on the machine's default OpenCL device (PoCL in CI):
// numerics of every partition kind, one kernel per configuration across
// shapes, the kernel path through the persistent store (rejected binaries
// rebuilt), constant weights per context, engine and compiled-partition
// cache blobs.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <latch>
#include <random>
#include <thread>

#include "backend_numerics.hpp"
#include "split_variant_check.hpp"
#include "mlp_partition.hpp"
#include "opencl_internal.hpp"
#include "temp_dir.hpp"
#include "adaptive_gemm_numerics.hpp"
#include "unicache/kernel_generator.hpp"
#include "unicache/opencl.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;
namespace fs = std::filesystem;

// Every test process gets a store of its own, set before first use.
const std::string& store_dir() {
  static const temp_dir dir("unicache-opencl-test");
  static const bool set = ::setenv("UNICACHE_PERSISTENT_CACHE_DIR", dir.path().c_str(), 1) == 0;
  (void)set;
  return dir.path();
}
const bool store_configured = !store_dir().empty();

// Buffers of an engine, released at scope exit.
struct buffers {
  std::vector<cl_mem> all;
  ~buffers() {
    for (cl_mem m : all) clReleaseMemObject(m);
  }
  cl_mem make(const engine& e, const std::vector<float>& host) {
    all.push_back(opencl::make_buffer(e, host.size() * sizeof(float), host.data()));
    return all.back();
  }
  cl_mem make(const engine& e, std::size_t count) {
    all.push_back(opencl::make_buffer(e, count * sizeof(float)));
    return all.back();
  }
};

// Runs `cp` on host data through device buffers and returns the output.
std::vector<float> run_compiled(const engine& e, stream& s, const compiled_partition& cp,
                                const std::vector<const std::vector<float>*>& data, std::uint64_t version = 0,
                                buffers* keep = nullptr) {
  buffers local;
  buffers& b = keep ? *keep : local;
  std::vector<tensor> in;
  for (std::size_t i = 0; i < data.size(); ++i) in.push_back({cp.inputs()[i], b.make(e, *data[i]), version});
  const auto n = static_cast<std::size_t>(elements(cp.outputs()[0].shape));
  cl_mem out = b.make(e, n);
  cp.execute(s, in, {{cp.outputs()[0], out, 0}});
  std::vector<float> result(n);
  opencl::read_buffer(s, out, result.data(), n * sizeof(float));
  return result;
}

struct opencl_device {
  engine eng = opencl::make_engine();
  stream strm = make_stream(eng);

  std::vector<float> run(graph& g, const std::vector<shape_t>& shapes, std::vector<std::vector<float>*> data,
                         std::uint64_t version) {
    g.finalize();
    EXPECT_EQ(g.partitions().size(), 1u);
    compiled_partition cp = compile(g.partitions()[0], shapes, eng);
    std::vector<const std::vector<float>*> in(data.begin(), data.end());
    return run_compiled(eng, strm, cp, in, version);
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(opencl, BackendNumerics, opencl_device);
INSTANTIATE_TYPED_TEST_SUITE_P(opencl_specialized, BackendNumerics, specialized<opencl_device>);

// Adaptive: every GEMM tile candidate, chosen through the store, on odd sizes.
TEST(OpenclAdaptive, EveryTileCandidateMatchesTheReferenceAndAStoredChoiceIsUsed) {
  opencl_device device;
  check_every_candidate(device, device.eng.native<opencl::detail::engine_state>().facts.gemm, "opencl");
}

// A context of its own on the default device: nothing cached in memory yet.
struct fresh_context {
  cl_context context = nullptr;
  engine eng;
  stream strm;
  explicit fresh_context(const engine& like) {
    cl_device_id d = opencl::native_device(like);
    cl_int err = CL_SUCCESS;
    context = clCreateContext(nullptr, 1, &d, nullptr, nullptr, &err);
    EXPECT_EQ(err, CL_SUCCESS);
    eng = opencl::make_engine(d, context);
    strm = make_stream(eng);
  }
  ~fresh_context() { clReleaseContext(context); }
};

// The kernel path's counts are exact: no class turns hot in the background.
struct fixture : ::testing::Test, opencl_device {
  scoped_no_specialization no_background;
};

// --- Kernels: one per configuration -------------------------------------------------

// The MLP partition (variable weight) in a fresh context for M in `ms`;
// returns how many programs were built or loaded, and checks every result.
std::uint64_t programs_for_shapes(const engine& like, std::int64_t k, std::int64_t n,
                                  std::initializer_list<std::int64_t> ms) {
  fresh_context ctx(like);
  graph g = mlp_graph(k, n, /*constant_weight=*/false);
  const auto w = random_data({k, n}, 40), b = random_data({n}, 41);
  const opencl::backend_stats before = opencl::stats();
  for (std::int64_t m : ms) {
    compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, ctx.eng);
    const auto x = random_data({m, k}, static_cast<unsigned>(m));
    expect_close(run_compiled(ctx.eng, ctx.strm, cp, {&x, &w, &b}), mlp_reference(x, w, b, m, k, n), matmul_atol(k),
                 1e-5, "M=" + std::to_string(m));
  }
  const opencl::backend_stats after = opencl::stats();
  return after.programs_from_source + after.programs_from_binary -
         (before.programs_from_source + before.programs_from_binary);
}

TEST_F(fixture, EveryShapeOfAPartitionRunsOneKernel) {
  EXPECT_EQ(programs_for_shapes(eng, 33, 17, {1, 7, 129, 1000, 2}), 1u) << "five shapes, one GEMM kernel";
}

TEST_F(fixture, SpecializedKernelsAreOneProgramPerShapeWithTheSizesCompiledIn) {
  scoped_kernel_shapes mode(kernel_shapes::specialized);
  EXPECT_EQ(programs_for_shapes(eng, 35, 19, {1, 7, 129}), 3u) << "three shapes, three GEMM programs";
}

TEST_F(fixture, TheKernelCacheCountsEachProgramAtItsRealSize) {
  fresh_context ctx(eng);  // a scope of its own: only these kernels count in it
  std::uint64_t sum = 0;
  std::vector<std::shared_ptr<const kernel>> built;
  for (const kernel_source& src : {gpu::kernels::softmax_source(gpu::kernels::dialect::opencl_c, 64),
                                   gpu::kernels::eltwise_source(gpu::kernels::dialect::opencl_c, op_kind::relu, 64),
                                   gpu::kernels::pack_source(gpu::kernels::dialect::opencl_c, /*transpose_b=*/false, 64)}) {
    built.push_back(unicache::gpu::get_program(ctx.eng, src, {}));
    const kernel& k = *built.back();
    const std::size_t binary = k.binary().size();
    EXPECT_GT(binary, 0u) << k.name();
    EXPECT_GE(k.cached_bytes(), binary + k.store_key().size()) << k.name() << ": the binary and the key at least";
    EXPECT_NE(k.cached_bytes(), kernel_bytes_estimate) << k.name();
    sum += k.cached_bytes();
  }
  const cache_stats s = kernel_cache().stats(ctx.eng.scope());
  EXPECT_EQ(s.entries, built.size());
  EXPECT_EQ(s.bytes, sum) << "the kernel cache counts the sum of the kernels' real sizes";
}

TEST_F(fixture, AShapeWhoseSplitVariantIsNotBuiltRunsOnTheOtherWhileItBuildsInTheBackground) {
  check_split_variant_built_in_background(eng, opencl::stats, [&](const compiled_partition& cp, const std::vector<const std::vector<float>*>& data) {
    return run_compiled(eng, strm, cp, data);
  });
}

TEST_F(fixture, ConcurrentFirstCompilesBuildOnce) {
  fresh_context ctx(eng);
  const std::int64_t k = 9, n = 5;
  graph g = mlp_graph(k, n, false);
  const auto w = random_data({k, n}, 42), b = random_data({n}, 43);
  const opencl::backend_stats before = opencl::stats();
  constexpr int kThreads = 8;
  std::latch start(kThreads);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      stream s = make_stream(ctx.eng);
      const std::int64_t m = 1 + t * 13;
      const auto x = random_data({m, k}, 100 + t);
      start.arrive_and_wait();
      compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, ctx.eng);
      const auto got = run_compiled(ctx.eng, s, cp, {&x, &w, &b});
      const auto want = mlp_reference(x, w, b, m, k, n);
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::abs(got[i] - want[i]) > 1e-4) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  const opencl::backend_stats after = opencl::stats();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(after.programs_from_source + after.programs_from_binary -
                (before.programs_from_source + before.programs_from_binary),
            1u)
      << "eight threads, eight shapes, one build";
}

// --- The kernel path through the persistent store ---------------------------------------

TEST_F(fixture, ABinaryStoredAfterItsFirstLaunchServesTheNextContext) {
  // A post-op chain no other test builds: its kernel is not in the store yet.
  const std::int64_t k = 21, n = 11, m = 5;
  graph g;
  auto xt = g.tensor({-1, k}), wt = g.tensor({k, n}), st = g.tensor({1, n}), mm = g.tensor({-1, n});
  auto scaled = g.tensor({-1, n}), yt = g.tensor({-1, n});
  g.add_op(op_kind::matmul, {xt, wt}, {mm});
  g.add_op(op_kind::multiply, {mm, st}, {scaled});
  g.add_op(op_kind::sigmoid, {scaled}, {yt});
  g.finalize();
  const auto x = random_data({m, k}, 44), w = random_data({k, n}, 45), b = random_data({1, n}, 46);
  auto want = ref_binary(ref_matmul(x, w, m, k, n, false, false), {m, n}, b, {1, n}, {m, n}, false);
  for (auto& v : want) v = ref_eltwise(6, v);
  opencl::backend_stats before = opencl::stats();
  {
    fresh_context first(eng);
    compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {1, n}}, first.eng);
    run_compiled(first.eng, first.strm, cp, {&x, &w, &b});
  }
  opencl::backend_stats after = opencl::stats();
  ASSERT_TRUE(kernel_store::instance().enabled()) << store_dir();
  EXPECT_EQ(after.binaries_stored - before.binaries_stored, 1u) << "stored after the first launch";

  before = after;
  fresh_context second(eng);
  compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {1, n}}, second.eng);
  expect_close(run_compiled(second.eng, second.strm, cp, {&x, &w, &b}), want, matmul_atol(k), 1e-5,
               "from the stored binary");
  after = opencl::stats();
  EXPECT_EQ(after.programs_from_binary - before.programs_from_binary, 1u);
  EXPECT_EQ(after.programs_from_source - before.programs_from_source, 0u);
}

TEST_F(fixture, AStoredBinaryTheDriverRejectsIsRemovedAndRebuilt) {
  // Plant garbage (a well-formed store entry whose binary is not a program)
  // under the key of the eltwise kernel this test then compiles.
  const opencl::detail::engine_state& es = eng.native<opencl::detail::engine_state>();
  const kernel_source src =
      gpu::kernels::eltwise_source(gpu::kernels::dialect::opencl_c, op_kind::tanh, es.facts.vector_work_group);
  const byte_vector garbage(4096, 0x5a);
  kernel_store& store = kernel_store::instance();
  store.remove(es.facts.identity, src.store_key());
  ASSERT_TRUE(store.put(es.facts.identity, src.store_key(), garbage));

  fresh_context ctx(eng);
  const shape_t s{7, 129};
  graph g;
  auto xt = g.tensor(s), yt = g.tensor(s);
  g.add_op(op_kind::tanh, {xt}, {yt});
  g.finalize();
  const opencl::backend_stats before = opencl::stats();
  compiled_partition cp = compile(g.partitions()[0], {s}, ctx.eng);
  const auto x = random_data(s, 47);
  std::vector<float> want;
  for (float v : x) want.push_back(std::tanh(v));
  expect_close(run_compiled(ctx.eng, ctx.strm, cp, {&x}), want, 2e-6, 2e-5, "rebuilt kernel");
  const opencl::backend_stats after = opencl::stats();
  EXPECT_EQ(after.binaries_rejected - before.binaries_rejected, 1u);
  EXPECT_EQ(after.programs_from_source - before.programs_from_source, 1u);
  const auto now = store.get(es.facts.identity, src.store_key());
  ASSERT_TRUE(now.has_value()) << "the rebuilt binary replaced the rejected one";
  EXPECT_NE(*now, garbage);
}

TEST_F(fixture, ARealBuildErrorReachesTheUserWithTheBuildLog) {
  const opencl::detail::engine_state& es = eng.native<opencl::detail::engine_state>();
  try {
    clReleaseProgram(opencl::detail::build_from_source(
        es, "__kernel void broken(__global float* x) { x[0] = undeclared_name; }", ""));
    FAIL() << "a kernel with an undeclared name built";
  } catch (const opencl::opencl_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.status(), CL_BUILD_PROGRAM_FAILURE);
    EXPECT_NE(what.find("build log"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_name"), std::string::npos) << what;
  }
}

// --- Constant weights ---------------------------------------------------------------

struct weights_fixture : fixture {
  static constexpr std::int64_t m = 9, k = 70, n = 260;  // packed: over 64 KB
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  std::vector<float> x = random_data({m, k}, 50), w = random_data({k, n}, 51), b = random_data({n}, 52);

  std::uint64_t packs() const { return opencl::stats().weights_packed; }
};

TEST_F(weights_fixture, AWeightIsPackedOnceAndReusedAcrossExecutionsAndShapes) {
  fresh_context ctx(eng);
  buffers keep;
  const cl_mem wbuf = keep.make(ctx.eng, w), bbuf = keep.make(ctx.eng, b);
  const std::uint64_t before = packs();
  for (std::int64_t rows : {m, std::int64_t{1}, m, std::int64_t{200}}) {
    compiled_partition cp = compile(g.partitions()[0], {{rows, k}, {k, n}, {n}}, ctx.eng);
    const auto xr = random_data({rows, k}, 53);
    const cl_mem xbuf = keep.make(ctx.eng, xr), ybuf = keep.make(ctx.eng, static_cast<std::size_t>(rows * n));
    cp.execute(ctx.strm, {{cp.inputs()[0], xbuf, 0}, {cp.inputs()[1], wbuf, 7}, {cp.inputs()[2], bbuf, 7}},
               {{cp.outputs()[0], ybuf, 0}});
    std::vector<float> y(static_cast<std::size_t>(rows * n));
    opencl::read_buffer(ctx.strm, ybuf, y.data(), y.size() * sizeof(float));
    expect_close(y, mlp_reference(xr, w, b, rows, k, n), matmul_atol(k), 1e-5, "packed weight");
  }
  EXPECT_EQ(packs() - before, 1u) << "four executions of three shapes share one packed weight";
}

TEST_F(weights_fixture, ANewVersionIsPackedAgain) {
  fresh_context ctx(eng);
  buffers keep;
  compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, ctx.eng);
  run_compiled(ctx.eng, ctx.strm, cp, {&x, &w, &b}, /*version=*/1, &keep);
  const std::uint64_t before = packs();
  const cl_mem wbuf = keep.all[1];
  for (float& v : w) v = -v;  // the framework changed the weight in place...
  opencl::write_buffer(ctx.strm, wbuf, w.data(), w.size() * sizeof(float));
  const cl_mem xbuf = keep.all[0], bbuf = keep.all[2], ybuf = keep.all[3];
  cp.execute(ctx.strm, {{cp.inputs()[0], xbuf, 0}, {cp.inputs()[1], wbuf, 2}, {cp.inputs()[2], bbuf, 2}},
             {{cp.outputs()[0], ybuf, 0}});  // ...and bumped its version
  std::vector<float> y(m * n);
  opencl::read_buffer(ctx.strm, ybuf, y.data(), y.size() * sizeof(float));
  EXPECT_EQ(packs() - before, 1u);
  expect_close(y, mlp_reference(x, w, b, m, k, n), matmul_atol(k), 1e-5, "repacked weight");
}

// New contents in the same cl_mem with the same version: what a framework
// that frees a weight and gets the same handle for the next one does.
TEST_F(weights_fixture, NewContentsInTheSameBufferAndVersionArePackedAgainNotServedStale) {
  for (kernel_shapes mode : {kernel_shapes::agnostic, kernel_shapes::specialized}) {
    SCOPED_TRACE(std::string(to_string(mode)));
    scoped_kernel_shapes shapes(mode);
    fresh_context ctx(eng);
    buffers keep;
    std::vector<float> weight = w;
    compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, ctx.eng);
    run_compiled(ctx.eng, ctx.strm, cp, {&x, &weight, &b}, /*version=*/0, &keep);
    const std::uint64_t before = packs();
    const cl_mem xbuf = keep.all[0], wbuf = keep.all[1], bbuf = keep.all[2], ybuf = keep.all[3];
    weight = random_data({k, n}, 54);
    opencl::write_buffer(ctx.strm, wbuf, weight.data(), weight.size() * sizeof(float));
    cp.execute(ctx.strm, {{cp.inputs()[0], xbuf, 0}, {cp.inputs()[1], wbuf, 0}, {cp.inputs()[2], bbuf, 0}},
               {{cp.outputs()[0], ybuf, 0}});
    std::vector<float> y(m * n);
    opencl::read_buffer(ctx.strm, ybuf, y.data(), y.size() * sizeof(float));
    EXPECT_EQ(packs() - before, 1u) << "the new contents were packed";
    expect_close(y, mlp_reference(x, weight, b, m, k, n), matmul_atol(k), 1e-5, "the result must use the new weight");
  }
}

TEST_F(weights_fixture, TwoContextsOnOneDeviceNeverShareAPackedWeight) {
  fresh_context a(eng), c(eng);
  EXPECT_EQ(a.eng.device_id(), c.eng.device_id());
  EXPECT_NE(a.eng.context_id(), c.eng.context_id());
  const std::uint64_t before = packs();
  for (fresh_context* ctx : {&a, &c}) {
    compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, ctx->eng);
    expect_close(run_compiled(ctx->eng, ctx->strm, cp, {&x, &w, &b}, 3), mlp_reference(x, w, b, m, k, n),
                 matmul_atol(k), 1e-5, "per-context weight");
  }
  EXPECT_EQ(packs() - before, 2u) << "one packed copy per context";
  EXPECT_EQ(constant_tensor_cache().stats(a.eng.scope()).entries, 1u);
  EXPECT_EQ(constant_tensor_cache().stats(c.eng.scope()).entries, 1u);
}

TEST_F(weights_fixture, EvictionReleasesThePackedBufferAndTheNextExecutionRepacks) {
  fresh_context ctx(eng);
  compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, ctx.eng);
  buffers keep;
  run_compiled(ctx.eng, ctx.strm, cp, {&x, &w, &b}, 4, &keep);
  const opencl::backend_stats before = opencl::stats();
  const std::uint64_t cached = constant_tensor_cache().stats().entries;  // this test's and earlier ones'
  ASSERT_GE(cached, 1u);
  constant_tensor_cache().clear();  // evicts every packed weight: callbacks run
  EXPECT_EQ(opencl::stats().weights_released - before.weights_released, cached)
      << "the callbacks dropped the kernels' handles: each cl_mem is released now, not when its kernel dies";
  const cl_mem xbuf = keep.all[0], wbuf = keep.all[1], bbuf = keep.all[2], ybuf = keep.all[3];
  cp.execute(ctx.strm, {{cp.inputs()[0], xbuf, 0}, {cp.inputs()[1], wbuf, 4}, {cp.inputs()[2], bbuf, 4}},
             {{cp.outputs()[0], ybuf, 0}});
  std::vector<float> y(m * n);
  opencl::read_buffer(ctx.strm, ybuf, y.data(), y.size() * sizeof(float));
  EXPECT_EQ(opencl::stats().weights_packed - before.weights_packed, 1u) << "packed again after eviction";
  expect_close(y, mlp_reference(x, w, b, m, k, n), matmul_atol(k), 1e-5, "after eviction");
}

// --- Engines and engine cache blobs -------------------------------------------------------

TEST_F(fixture, TheProcessEngineIsOneContextAndProbeResultsAreStored) {
  EXPECT_EQ(opencl::make_engine().context_id(), eng.context_id());
  const opencl::device_info& info = opencl::info(eng);
  // A GPU is a gpu engine; a CPU device (PoCL) is the host's CPU, in its budget.
  EXPECT_EQ(eng.kind(), info.is_gpu ? engine_kind::gpu : engine_kind::cpu);
  if (!info.is_gpu) {
    EXPECT_EQ(eng.device_id(), host_cpu_device_id);
  }
  EXPECT_FALSE(info.device_name.empty());
  EXPECT_GT(info.kernel_work_group_size, 0u);
  EXPECT_GT(info.preferred_work_group_multiple, 0u);
  const std::uint64_t probes = opencl::stats().probe_builds;
  fresh_context ctx(eng);
  EXPECT_EQ(opencl::stats().probe_builds - probes, 0u) << "the first engine kept its probe results in the store";
  EXPECT_EQ(opencl::info(ctx.eng), info);
}

TEST_F(fixture, UnicacheOpenclDeviceSelectsByIndexOrNameAndWarnsOnNoMatch) {
  const std::string name = opencl::info(eng).device_name;
  const std::vector<std::string> devices = opencl::list_devices();
  ASSERT_FALSE(devices.empty());
  const std::string first_index = devices[0].substr(0, devices[0].find(' '));
  ::setenv("UNICACHE_OPENCL_DEVICE", first_index.c_str(), 1);
  EXPECT_EQ(opencl::make_engine().device_id(), 0);
  ::setenv("UNICACHE_OPENCL_DEVICE", name.substr(0, 6).c_str(), 1);
  EXPECT_EQ(opencl::info(opencl::make_engine()).device_name.substr(0, 6), name.substr(0, 6));
  ::setenv("UNICACHE_OPENCL_DEVICE", "no-such-device-anywhere", 1);
  ::testing::internal::CaptureStderr();
  const engine fallback = opencl::make_engine();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::unsetenv("UNICACHE_OPENCL_DEVICE");
  EXPECT_EQ(fallback.context_id(), eng.context_id()) << "the default device";
  EXPECT_NE(err.find("UNICACHE_OPENCL_DEVICE=\"no-such-device-anywhere\" names no OpenCL device"), std::string::npos)
      << err;
  EXPECT_NE(err.find(name), std::string::npos) << "the warning lists the devices: " << err;
}

TEST_F(fixture, AnEngineFromItsCacheBlobSkipsTheProbeAndMatches) {
  cl_device_id d = opencl::native_device(eng);
  const std::string id = opencl::get_engine_cache_blob_id(d);
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(id, opencl::get_engine_cache_blob_id(d)) << "stable";
  const byte_vector blob = opencl::get_engine_cache_blob(eng);
  const std::uint64_t probes = opencl::stats().probe_builds;
  const engine from_blob = opencl::make_engine_from_cache_blob(d, opencl::native_context(eng), blob);
  EXPECT_EQ(opencl::stats().probe_builds, probes) << "no probe compile";
  EXPECT_EQ(opencl::info(from_blob), opencl::info(eng));
  EXPECT_EQ(from_blob.scope(), eng.scope()) << "same device and context: same cache scope";
}

void expect_rejected(cl_device_id d, cl_context c, const byte_vector& blob, const std::string& reason) {
  try {
    opencl::make_engine_from_cache_blob(d, c, blob);
    ADD_FAILURE() << "accepted a blob that should fail with: " << reason;
  } catch (const opencl::opencl_error& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST_F(fixture, ForeignStaleAndCorruptEngineBlobsAreRejectedWithClearErrors) {
  cl_device_id d = opencl::native_device(eng);
  cl_context c = opencl::native_context(eng);
  const byte_vector good = opencl::get_engine_cache_blob(eng);
  const device_identity other{"Another Platform", "Another Device", "OpenCL 3.0", "1.0"};
  expect_rejected(d, c, serialize_blob(other, "opencl-engine-info/1", {good.data(), 10}), "another device");
  expect_rejected(d, c, serialize_blob(opencl::detail::identity_of(opencl::info(eng)), "opencl-engine-info/0", {}),
                  "not this unicache's engine info");
  byte_vector flipped = good;
  flipped[flipped.size() - 3] ^= 0x40;
  expect_rejected(d, c, flipped, "checksum");
  expect_rejected(d, c, byte_vector(good.begin(), good.begin() + static_cast<long>(good.size() / 2)), "truncated");
  expect_rejected(d, c, byte_vector{'h', 'e', 'l', 'l', 'o'}, "not a unicache");
}

TEST_F(fixture, RandomlyMutatedEngineBlobsAreRejectedOrEqual) {
  cl_device_id d = opencl::native_device(eng);
  cl_context c = opencl::native_context(eng);
  const byte_vector good = opencl::get_engine_cache_blob(eng);
  std::mt19937 rng(2026);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    byte_vector b = good;
    switch (rng() % 3) {
      case 0: b[rng() % b.size()] ^= static_cast<unsigned char>(1 + rng() % 255); break;
      case 1: b.resize(rng() % b.size()); break;
      default: b.insert(b.begin() + static_cast<long>(rng() % b.size()), static_cast<unsigned char>(rng())); break;
    }
    try {
      const engine e = opencl::make_engine_from_cache_blob(d, c, b);
      EXPECT_EQ(opencl::info(e), opencl::info(eng)) << "an accepted blob must describe the device";
      ++accepted;
    } catch (const opencl::opencl_error&) {
    }
  }
  EXPECT_LT(accepted, 10) << "the checksum catches mutations";
}

// --- Compiled-partition cache blobs ---------------------------------------------------------

TEST_F(fixture, ACompiledPartitionBlobRecreatesItInAnotherContextWithoutBuilding) {
  const std::int64_t k = 40, n = 24, m = 6;
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  const std::vector<shape_t> shapes{{m, k}, {k, n}, {n}};
  const auto x = random_data({m, k}, 60), w = random_data({k, n}, 61), b = random_data({n}, 62);
  byte_vector blob;
  std::string id;
  {
    fresh_context first(eng);
    id = get_cache_blob_id(g.partitions()[0], shapes, first.eng);
    compiled_partition cp = compile(g.partitions()[0], shapes, first.eng);
    run_compiled(first.eng, first.strm, cp, {&x, &w, &b});
    EXPECT_EQ(cp.get_cache_blob_id(), id) << "known before compiling";
    blob = cp.get_cache_blob();
  }
  // The store would serve it too: take it away, so only the blob can.
  kernel_store::instance().clear();
  fresh_context second(eng);
  EXPECT_EQ(get_cache_blob_id(g.partitions()[0], shapes, second.eng), id) << "the id names no context";
  const opencl::backend_stats before = opencl::stats();
  compiled_partition cp = compile_from_cache_blob(g.partitions()[0], shapes, second.eng, blob);
  const opencl::backend_stats after = opencl::stats();
  EXPECT_EQ(after.programs_from_source - before.programs_from_source, 0u);
  EXPECT_EQ(after.programs_from_binary - before.programs_from_binary, 2u) << "the GEMM and the weight packer";
  expect_close(run_compiled(second.eng, second.strm, cp, {&x, &w, &b}), mlp_reference(x, w, b, m, k, n),
               matmul_atol(k), 1e-5, "from the blob");
  EXPECT_EQ(opencl::stats().binaries_stored - after.binaries_stored, 0u)
      << "a blob's binaries are the application's to trust: never put in the shared store";
}

TEST_F(fixture, APostOpThatBroadcastsTheMatMulToALargerShapeIsACompileErrorNotAWrongResult) {
  graph g;
  auto x = g.tensor({1, 8}), w = g.tensor({8, 8}), bias = g.tensor({4, 8}), mm = g.tensor({1, 8});
  auto y = g.tensor({4, 8});
  g.add_op(op_kind::matmul, {x, w}, {mm});
  g.add_op(op_kind::add, {mm, bias}, {y});  // [1, 8] + [4, 8] -> [4, 8]
  g.finalize();
  ASSERT_EQ(g.partitions().size(), 1u) << "fused";
  EXPECT_THROW(compile(g.partitions()[0], {{1, 8}, {8, 8}, {4, 8}}, eng), compile_error);
}

TEST_F(fixture, SizesBeyondTheKernelsIntegerArgumentsAreACompileError) {
  const std::int64_t huge = std::int64_t{1} << 31;  // K = 2^31: one more than an int holds
  graph g;
  auto x = g.tensor({1, huge}), w = g.tensor({huge, 1}), y = g.tensor({1, 1});
  g.add_op(op_kind::matmul, {x, w}, {y});
  g.finalize();
  EXPECT_THROW(compile(g.partitions()[0], {{1, huge}, {huge, 1}}, eng), compile_error);
}

TEST_F(fixture, ShapeAgnosticKernelsGiveOneBlobForEveryShapeOfAConfiguration) {
  const std::int64_t k = 40, n = 24;
  graph g = mlp_graph(k, n, /*constant_weight=*/true);
  byte_vector blob;
  std::string id;
  {
    fresh_context first(eng);
    for (std::int64_t m : {1, 3, 17, 64, 100}) {
      compiled_partition cp = compile(g.partitions()[0], {{m, k}, {k, n}, {n}}, first.eng);
      if (id.empty()) {
        id = cp.get_cache_blob_id();
        blob = cp.get_cache_blob();
        continue;
      }
      EXPECT_EQ(cp.get_cache_blob_id(), id) << "M=" << m << ": the same kernels under another id";
      const byte_vector again = cp.get_cache_blob();
      const device_identity who = opencl::detail::identity_of(opencl::info(first.eng));
      EXPECT_EQ(deserialize_blob(who, again).binary, deserialize_blob(who, blob).binary) << "M=" << m;
    }
    EXPECT_NE(get_cache_blob_id(g.partitions()[0], {{2, 3, k}, {k, n}, {n}}, first.eng), id)
        << "another rank is another configuration";
  }
  kernel_store::instance().clear();
  fresh_context second(eng);
  const std::int64_t m = 7;  // a shape the blob was never made for
  const auto x = random_data({m, k}, 63), w = random_data({k, n}, 64), b = random_data({n}, 65);
  const opencl::backend_stats before = opencl::stats();
  compiled_partition cp = compile_from_cache_blob(g.partitions()[0], {{m, k}, {k, n}, {n}}, second.eng, blob);
  EXPECT_EQ(opencl::stats().programs_from_source - before.programs_from_source, 0u);
  expect_close(run_compiled(second.eng, second.strm, cp, {&x, &w, &b}), mlp_reference(x, w, b, m, k, n),
               matmul_atol(k), 1e-5, "another shape from the blob");
}

TEST_F(fixture, SpecializedKernelsGiveOneBlobPerShape) {
  scoped_kernel_shapes mode(kernel_shapes::specialized);
  fresh_context ctx(eng);
  const std::int64_t k = 12, n = 8;
  graph g = mlp_graph(k, n, false);
  compiled_partition cp = compile(g.partitions()[0], {{3, k}, {k, n}, {n}}, ctx.eng);
  EXPECT_NE(get_cache_blob_id(g.partitions()[0], {{4, k}, {k, n}, {n}}, ctx.eng), cp.get_cache_blob_id());
  try {
    compile_from_cache_blob(g.partitions()[0], {{4, k}, {k, n}, {n}}, ctx.eng, cp.get_cache_blob());
    ADD_FAILURE() << "a blob of specialized kernels for M=3 was accepted for M=4";
  } catch (const compile_error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel configuration"), std::string::npos) << e.what();
  }
}

TEST_F(fixture, ACompiledPartitionBlobForAnotherConfigurationOrCorruptIsRejected) {
  fresh_context ctx(eng);
  const std::int64_t k = 12, n = 8;
  graph g = mlp_graph(k, n, false);
  compiled_partition cp = compile(g.partitions()[0], {{3, k}, {k, n}, {n}}, ctx.eng);
  const byte_vector blob = cp.get_cache_blob();
  auto expect_error = [&](const byte_vector& b, const std::vector<shape_t>& shapes, const std::string& reason) {
    try {
      compile_from_cache_blob(g.partitions()[0], shapes, ctx.eng, b);
      ADD_FAILURE() << "accepted; expected: " << reason;
    } catch (const compile_error& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  };
  expect_error(blob, {{2, 4, k}, {k, n}, {n}}, "another partition, backend or kernel configuration");
  byte_vector corrupt = blob;
  corrupt[corrupt.size() / 2] ^= 1;
  expect_error(corrupt, {{3, k}, {k, n}, {n}}, "checksum");
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    byte_vector b = blob;
    b[rng() % b.size()] ^= static_cast<unsigned char>(1 + rng() % 255);
    EXPECT_THROW(compile_from_cache_blob(g.partitions()[0], {{3, k}, {k, n}, {n}}, ctx.eng, b), compile_error);
  }
}

}  // namespace
}  // namespace unicache
