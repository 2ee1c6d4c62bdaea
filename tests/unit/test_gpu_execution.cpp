// Asynchronous execution on every GPU backend the build has (the GPU core,
// backends/gpu): execute() enqueues and returns before the device is done,
// stream::wait() is the one wait, and a packed weight that queued work
// reads outlives its eviction until that work is done. On PoCL in CI; on
// CUDA and NVIDIA's OpenCL on a GPU host.
#include <gtest/gtest.h>
#include <stdlib.h>

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
  std::vector<float> read(const stream& s, void* data, std::size_t floats) {
    std::vector<float> out(floats);
    Backend::read_buffer(s, Backend::from_data(data), out.data(), floats * sizeof(float));
    return out;
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
  const gemm_case c = this->long_gemm();
  graph g = matmul_graph(c.k, c.n, tensor_property::variable);
  compiled_partition cp = compile(g.partitions()[0], {{c.m, c.k}, {c.k, c.n}}, this->eng);
  buffers<TypeParam> b(this->eng);
  void* a = b.upload(c.ones());
  void* w = b.upload(c.weight());
  void* out = b.make(static_cast<std::size_t>(c.m * c.n) * sizeof(float));
  for (int i = 0; i < 4; ++i) cp.execute(this->s1, {{cp.inputs()[0], a}, {cp.inputs()[1], w}}, {{cp.outputs()[0], out}});
  const std::shared_ptr<const gpu::event> end = end_of(this->s1);
  EXPECT_EQ(end->query(), gpu::event::state::pending)
      << "four " << c.m << "x" << c.k << "x" << c.n << " GEMMs were done when the last execute() returned";
  this->s1.wait();
  EXPECT_EQ(end->query(), gpu::event::state::complete);
  EXPECT_EQ(c.first_wrong(this->read(this->s1, out, static_cast<std::size_t>(c.m * c.n))), -1);
}

// What adaptive mode's cost model times generic and specialized executions
// with: the device's own clock, read once the work is done, never a wait.
TYPED_TEST(GpuExecution, ADeviceTimerGivesTheDeviceTimeOnceTheWorkIsDone) {
  const gemm_case c = this->long_gemm();
  graph g = matmul_graph(c.k, c.n, tensor_property::variable);
  compiled_partition cp = compile(g.partitions()[0], {{c.m, c.k}, {c.k, c.n}}, this->eng);
  buffers<TypeParam> b(this->eng);
  void* a = b.upload(c.ones());
  void* w = b.upload(c.weight());
  void* out = b.make(static_cast<std::size_t>(c.m * c.n) * sizeof(float));
  cp.execute(this->s1, {{cp.inputs()[0], a}, {cp.inputs()[1], w}}, {{cp.outputs()[0], out}});  // first launch
  std::unique_ptr<device_timer> timer = this->eng.get_backend()->start_timer(this->s1);
  ASSERT_NE(timer, nullptr) << "a GPU backend's execute() returns before the device is done: it must time on the device";
  for (int i = 0; i < 4; ++i) cp.execute(this->s1, {{cp.inputs()[0], a}, {cp.inputs()[1], w}}, {{cp.outputs()[0], out}});
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
  const gemm_case c = this->long_gemm();
  graph g = matmul_graph(c.k, c.n, tensor_property::constant);
  compiled_partition cp = compile(g.partitions()[0], {{c.m, c.k}, {c.k, c.n}}, this->eng);
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
  void* a = b.upload(c.ones());
  void* w = b.upload(c.weight());
  void* garbage = b.upload(std::vector<float>(static_cast<std::size_t>(garbage_floats), 1e30f));
  void* out = b.make(static_cast<std::size_t>(c.m * c.n) * sizeof(float));
  const gpu::backend_stats before = gpu::stats(this->eng.get_backend()->cache_owner());

  for (int i = 0; i < 4; ++i) {
    cp.execute(this->s1, {{cp.inputs()[0], a}, {cp.inputs()[1], w, 1}}, {{cp.outputs()[0], out}});
  }
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
  EXPECT_EQ(c.first_wrong(this->read(this->s1, out, static_cast<std::size_t>(c.m * c.n))), -1);
}

TYPED_TEST(GpuExecution, AWeightPackedOnOneStreamIsReadOnAnotherOnlyAfterThePacking) {
  const gemm_case c = this->long_gemm();
  graph g = matmul_graph(c.k, c.n, tensor_property::constant);
  constant_tensor_cache().evict_scope(this->eng.scope());  // the weight is packed here, on s1
  compiled_partition big = compile(g.partitions()[0], {{c.m, c.k}, {c.k, c.n}}, this->eng);
  const gemm_case small{8, c.k, c.n};
  compiled_partition few_rows = compile(g.partitions()[0], {{small.m, c.k}, {c.k, c.n}}, this->eng);
  buffers<TypeParam> b(this->eng);
  void* a = b.upload(c.ones());
  void* w = b.upload(c.weight());
  void* out = b.make(static_cast<std::size_t>(c.m * c.n) * sizeof(float));
  void* small_out = b.make(static_cast<std::size_t>(small.m * small.n) * sizeof(float));
  // A long GEMM first, so that s1's packing (after it) is still queued when
  // s2 finds the packed weight in the cache.
  compiled_partition unpacked = compile(matmul_graph(c.k, c.n, tensor_property::variable).partitions()[0],
                                        {{c.m, c.k}, {c.k, c.n}}, this->eng);
  unpacked.execute(this->s1, {{unpacked.inputs()[0], a}, {unpacked.inputs()[1], w}}, {{unpacked.outputs()[0], out}});
  big.execute(this->s1, {{big.inputs()[0], a}, {big.inputs()[1], w, 2}}, {{big.outputs()[0], out}});
  few_rows.execute(this->s2, {{few_rows.inputs()[0], a}, {few_rows.inputs()[1], w, 2}},
                   {{few_rows.outputs()[0], small_out}});
  this->s2.wait();
  EXPECT_EQ(small.first_wrong(this->read(this->s2, small_out, static_cast<std::size_t>(small.m * small.n))), -1);
  this->s1.wait();
  EXPECT_EQ(c.first_wrong(this->read(this->s1, out, static_cast<std::size_t>(c.m * c.n))), -1);
}

}  // namespace
}  // namespace unicache
