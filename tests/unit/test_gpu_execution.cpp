// Asynchronous execution on every GPU backend the build has (the GPU core,
// backends/gpu): execute() enqueues and returns before the device is done,
// stream::wait() is the one wait, and a packed weight that queued work
// reads outlives its eviction until that work is done. On PoCL in CI; on
// CUDA and NVIDIA's OpenCL on a GPU host.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_backends.hpp"
#include "temp_dir.hpp"
#include "unicache/gpu.hpp"

namespace unicache {
namespace {

using namespace unicache::gpu_backends;

const std::string& store_dir() {
  static const testing::temp_dir dir("unicache-gpu-execution-test");
  static const bool set = ::setenv("UNICACHE_PERSISTENT_CACHE_DIR", dir.path().c_str(), 1) == 0;
  (void)set;
  return dir.path();
}
const bool store_configured = !store_dir().empty();

// An event at the stream's end: pending while the device has work of it left.
std::shared_ptr<const gpu::event> end_of(const stream& s) {
  return gpu::device_of(s.get_engine().get_backend())->record(s);
}
bool busy(const stream& s) { return end_of(s)->query() == gpu::event::state::pending; }

// C = A x B with A all ones and B[k][j] = j % 7: C[i][j] = K * (j % 7),
// exact in fp32, checkable at any size.
struct gemm_case {
  std::int64_t m, k, n;
  std::vector<float> ones() const { return std::vector<float>(static_cast<std::size_t>(m * k), 1.0f); }
  std::vector<float> weight() const {
    std::vector<float> w(static_cast<std::size_t>(k * n));
    for (std::int64_t r = 0; r < k; ++r) {
      for (std::int64_t j = 0; j < n; ++j) w[static_cast<std::size_t>(r * n + j)] = static_cast<float>(j % 7);
    }
    return w;
  }
  // The first wrong element of `c`, or -1.
  std::int64_t first_wrong(const std::vector<float>& c) const {
    for (std::int64_t i = 0; i < m * n; ++i) {
      if (c[static_cast<std::size_t>(i)] != static_cast<float>(k * ((i % n) % 7))) return i;
    }
    return -1;
  }
};

graph matmul_graph(std::int64_t k, std::int64_t n, tensor_property weight) {
  graph g;
  auto x = g.tensor({-1, k}), w = g.tensor({k, n}, weight), y = g.tensor({-1, n});
  g.add_op(op_kind::matmul, {x, w}, {y});
  g.finalize();
  return g;
}

// C = A x B of a gemm_case on one backend: compiled, with device buffers.
template <class Backend>
struct gemm_run {
  gemm_run(const engine& e, const gemm_case& c, tensor_property weight)
      : shape(c), g(matmul_graph(c.k, c.n, weight)), cp(compile(g.partitions()[0], {{c.m, c.k}, {c.k, c.n}}, e)),
        b(e), a(b.upload(c.ones())), w(b.upload(c.weight())),
        out(b.make(static_cast<std::size_t>(c.m * c.n) * sizeof(float))) {}
  void execute(stream& s, std::uint64_t weight_version = 0) {
    cp.execute(s, {{cp.inputs()[0], a}, {cp.inputs()[1], w, weight_version}}, {{cp.outputs()[0], out}});
  }
  // The first wrong element of C (read on `s`, after its work), or -1.
  std::int64_t first_wrong(const stream& s) {
    std::vector<float> c(static_cast<std::size_t>(shape.m * shape.n));
    Backend::read_buffer(s, Backend::from_data(out), c.data(), c.size() * sizeof(float));
    return shape.first_wrong(c);
  }
  gemm_case shape;
  graph g;
  compiled_partition cp;
  buffers<Backend> b;
  void *a, *w, *out;
};

template <class Backend>
class GpuExecution : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = Backend::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    eng = Backend::make_engine();
    s1 = make_stream(eng);
    s2 = make_stream(eng);
  }
  // Enough work that the host enqueues it long before the device is done:
  // a GPU does a few hundred GFLOP in tens of ms, PoCL on a CPU a few GFLOP.
  gemm_case long_gemm() const {
    return eng.kind() == engine_kind::gpu ? gemm_case{8192, 4096, 4096} : gemm_case{1024, 512, 512};
  }
  // The same with a constant weight the GEMM packs: N a multiple of no tile
  // (a weight already in the packed layout is read where it is).
  gemm_case packed_gemm() const {
    gemm_case c = long_gemm();
    c.n += 4;
    return c;
  }

  engine eng;
  stream s1, s2;
};

#if UNICACHE_GPU_WITH_OPENCL && UNICACHE_GPU_WITH_CUDA
using backends = ::testing::Types<opencl_backend, cuda_backend>;
#elif UNICACHE_GPU_WITH_OPENCL
using backends = ::testing::Types<opencl_backend>;
#else
using backends = ::testing::Types<cuda_backend>;
#endif
TYPED_TEST_SUITE(GpuExecution, backends);

TYPED_TEST(GpuExecution, ExecuteReturnsBeforeTheDeviceIsDoneAndWaitIsWhereItEnds) {
  gemm_run<TypeParam> run(this->eng, this->long_gemm(), tensor_property::variable);
  for (int i = 0; i < 4; ++i) run.execute(this->s1);
  const std::shared_ptr<const gpu::event> end = end_of(this->s1);
  EXPECT_EQ(end->query(), gpu::event::state::pending) << "four GEMMs were done when the last execute() returned";
  this->s1.wait();
  EXPECT_EQ(end->query(), gpu::event::state::complete);
  EXPECT_EQ(run.first_wrong(this->s1), -1);
}

// The default constant check reads 1 KB of a packed weight's source at every
// execution; on a stream the engine made it does so without waiting for the
// GEMMs queued before it.
TYPED_TEST(GpuExecution, TheConstantCheckDoesNotWaitForTheStreamsQueuedWork) {
  const constant_check before = current_constant_check();
  set_constant_check(constant_check::sampled);
  gemm_run<TypeParam> slow(this->eng, this->long_gemm(), tensor_property::variable);
  gemm_run<TypeParam> weighted(this->eng, gemm_case{8, 512, 516}, tensor_property::constant);
  weighted.execute(this->s1);  // packs (the fingerprint's read waits, once)
  this->s1.wait();
  for (int i = 0; i < 4; ++i) slow.execute(this->s1);
  weighted.execute(this->s1);  // the check's read: not after the four GEMMs
  const std::shared_ptr<const gpu::event> end = end_of(this->s1);
  EXPECT_EQ(end->query(), gpu::event::state::pending) << "the check waited for the queued GEMMs";
  this->s1.wait();
  EXPECT_EQ(weighted.first_wrong(this->s1), -1);
  set_constant_check(before);
}

// What adaptive mode's cost model times generic and specialized executions
// with: the device's own clock, read once the work is done, never a wait.
TYPED_TEST(GpuExecution, ADeviceTimerGivesTheDeviceTimeOnceTheWorkIsDone) {
  gemm_run<TypeParam> run(this->eng, this->long_gemm(), tensor_property::variable);
  run.execute(this->s1);  // the first launch
  std::unique_ptr<device_timer> timer = this->eng.get_backend()->start_timer(this->s1);
  ASSERT_NE(timer, nullptr) << "a GPU backend's execute() returns before the device is done: it must time on the device";
  for (int i = 0; i < 4; ++i) run.execute(this->s1);
  timer->stop(this->s1);
  EXPECT_FALSE(timer->done()) << "the GEMMs were done when the last execute() returned";
  EXPECT_FALSE(timer->elapsed_ns().has_value());
  this->s1.wait();
  EXPECT_TRUE(timer->done());
  const std::optional<std::uint64_t> ns = timer->elapsed_ns();
  ASSERT_TRUE(ns.has_value());
  EXPECT_GT(*ns, 0u);
}

TYPED_TEST(GpuExecution, AnEvictedWeightThatQueuedWorkReadsIsFreedOnlyAfterThatWork) {
  const gemm_case c = this->packed_gemm();
  gemm_run<TypeParam> run(this->eng, c, tensor_property::constant);
  // What overwrites reused memory: ReLU of large values into fresh buffers,
  // on another stream, while the GEMMs still run.
  const std::int64_t garbage_floats = c.k * c.n + 4096;
  graph relu;
  {
    auto x = relu.tensor({garbage_floats}), y = relu.tensor({garbage_floats});
    relu.add_op(op_kind::relu, {x}, {y});
    relu.finalize();
  }
  compiled_partition overwrite = compile(relu.partitions()[0], {{garbage_floats}}, this->eng);
  buffers<TypeParam> b(this->eng);
  void* garbage = b.upload(std::vector<float>(static_cast<std::size_t>(garbage_floats), 1e30f));
  constant_tensor_cache().evict_scope(this->eng.scope());  // an earlier test's packing of equal contents goes
  const gpu::backend_stats before = gpu::stats(this->eng.get_backend()->cache_owner());

  for (int i = 0; i < 4; ++i) run.execute(this->s1, 1);
  ASSERT_TRUE(busy(this->s1)) << "the GEMMs were done before the eviction: make the case larger";
  constant_tensor_cache().evict_scope(this->eng.scope());
  const gpu::backend_stats evicted = gpu::stats(this->eng.get_backend()->cache_owner());
  EXPECT_EQ(evicted.weights_packed, before.weights_packed + 1);
  EXPECT_EQ(evicted.deferred_releases, before.deferred_releases + 1) << "the release waits for the GEMMs";
  EXPECT_EQ(evicted.weights_released, before.weights_released) << "freed under running GEMMs";
  for (int i = 0; i < 4; ++i) {
    void* fresh = b.make(static_cast<std::size_t>(garbage_floats) * sizeof(float));
    overwrite.execute(this->s2, {{overwrite.inputs()[0], garbage}}, {{overwrite.outputs()[0], fresh}});
  }
  this->s2.wait();
  this->s1.wait();
  EXPECT_EQ(gpu::stats(this->eng.get_backend()->cache_owner()).weights_released, before.weights_released + 1)
      << "released once the stream's work is done";
  EXPECT_EQ(run.first_wrong(this->s1), -1);
}

// A program's binary is read back while launches of it are queued (no wait
// between execute() and get_cache_blob()): the read waits for them, and the
// blob serves a compile elsewhere (PoCL 5 aborts when binaries are read
// under a running kernel).
TYPED_TEST(GpuExecution, ACacheBlobTakenWhileItsKernelsAreQueuedIsWhole) {
  gemm_run<TypeParam> run(this->eng, this->long_gemm(), tensor_property::variable);
  for (int i = 0; i < 2; ++i) run.execute(this->s1);
  const byte_vector blob = run.cp.get_cache_blob();
  ASSERT_FALSE(blob.empty());
  compiled_partition again =
      compile_from_cache_blob(run.g.partitions()[0], {{run.shape.m, run.shape.k}, {run.shape.k, run.shape.n}},
                              this->eng, blob);
  run.execute(this->s1);
  this->s1.wait();
  EXPECT_EQ(run.first_wrong(this->s1), -1);
}

TYPED_TEST(GpuExecution, AWeightPackedOnOneStreamIsReadOnAnotherOnlyAfterThePacking) {
  const gemm_case c = this->packed_gemm();
  constant_tensor_cache().evict_scope(this->eng.scope());  // the weight is packed here, on s1
  gemm_run<TypeParam> slow(this->eng, c, tensor_property::variable);
  gemm_run<TypeParam> big(this->eng, c, tensor_property::constant);
  gemm_run<TypeParam> few_rows(this->eng, gemm_case{8, c.k, c.n}, tensor_property::constant);  // the same weight
  // A long GEMM first, so that s1's packing (after it) is still queued when
  // s2 finds the packed weight in the cache.
  slow.execute(this->s1);
  big.execute(this->s1, 2);
  few_rows.execute(this->s2, 2);
  this->s2.wait();
  EXPECT_EQ(few_rows.first_wrong(this->s2), -1);
  this->s1.wait();
  EXPECT_EQ(big.first_wrong(this->s1), -1);
  EXPECT_EQ(slow.first_wrong(this->s1), -1);
}

// A constant weight already in the packed layout (not transposed, K and N
// multiples of the tile) is read where it is: nothing packed, nothing in the
// constant cache, and new contents at the same address and version are used
// at once, even where the sampled check would not see them.
TYPED_TEST(GpuExecution, AWeightInThePackedLayoutIsReadWhereItIs) {
  constant_tensor_cache().evict_scope(this->eng.scope());
  const gemm_case c{8, 512, 512};
  gemm_run<TypeParam> run(this->eng, c, tensor_property::constant);
  const std::uint64_t packed = gpu::stats(this->eng.get_backend()->cache_owner()).weights_packed;
  run.execute(this->s1);
  this->s1.wait();
  EXPECT_EQ(run.first_wrong(this->s1), -1);
  // Row 5 of B to zeros: no block the sampled check reads (those start
  // every 32 rows), same buffer, same version.
  std::vector<float> w = c.weight();
  std::fill(w.begin() + 5 * c.n, w.begin() + 6 * c.n, 0.0f);
  TypeParam::write_buffer(this->s1, TypeParam::from_data(run.w), w.data(), w.size() * sizeof(float));
  run.execute(this->s1);
  std::vector<float> out(static_cast<std::size_t>(c.m * c.n));
  TypeParam::read_buffer(this->s1, TypeParam::from_data(run.out), out.data(), out.size() * sizeof(float));
  for (std::int64_t i = 0; i < c.m * c.n; ++i) {
    ASSERT_EQ(out[static_cast<std::size_t>(i)], static_cast<float>((c.k - 1) * ((i % c.n) % 7))) << "element " << i;
  }
  EXPECT_EQ(gpu::stats(this->eng.get_backend()->cache_owner()).weights_packed, packed);
  EXPECT_EQ(constant_tensor_cache().stats(this->eng.scope()).entries, 0u);
}

}  // namespace
}  // namespace unicache
