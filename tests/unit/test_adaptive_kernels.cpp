// Adaptive kernels: the dispatch of compiled partitions between their generic
// kernel and the specialized kernels built in the background, through a
// small backend of plain C++ loops (so that ThreadSanitizer sees every
// access): which classes get specialized, the swap, eviction, failures, the
// per-partition limit, and the swap under concurrent executions.
#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "scoped_settings.hpp"
#include "unicache/compiler.hpp"
#include "unicache/specialization.hpp"

namespace unicache::testing {
namespace {

using shape_t = std::vector<std::int64_t>;

// C[m, n] = sum_k A[m, k] * B[k, n] (+ bias[n]). The generic and the specialized
// kernel compute the same values; the specialized one also counts its executions.
class loop_kernel final : public compiled_kernel {
 public:
  loop_kernel(std::atomic<int>* runs, bool bias, int repeats = 1, bool own_shapes = false)
      : runs_(runs), bias_(bias), repeats_(repeats), own_shapes_(own_shapes) {}
  bool built_for_its_shapes() const override { return own_shapes_; }
  void execute(stream&, const std::vector<tensor>& in, const std::vector<tensor>& out) const override {
    const shape_t& a = in[0].desc.shape;
    const shape_t& b = in[1].desc.shape;
    const std::int64_t m = a[0], k = a[1], n = b[1];
    const auto* x = static_cast<const float*>(in[0].data);
    const auto* w = static_cast<const float*>(in[1].data);
    auto* y = static_cast<float*>(out[0].data);
    if (throws_ && throws_->load()) {
      std::fill_n(static_cast<float*>(out[0].data), out[0].desc.shape[0] * b[1], -7.f);  // half-written output
      throw execute_error("adaptive_test: this kernel fails on purpose");
    }
    for (int r = 0; r < repeats_; ++r) {
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          float acc = bias_ ? static_cast<const float*>(in[2].data)[j] : 0.f;
          for (std::int64_t l = 0; l < k; ++l) acc += x[i * k + l] * w[l * n + j];
          y[i * n + j] = acc;
        }
      }
    }
    runs_->fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<int>* runs_;
  bool bias_;
  int repeats_;  // > 1: the same result, computed that many times (a slow kernel)
  bool own_shapes_;

 public:
  const std::atomic<bool>* throws_ = nullptr;  // set: execute() throws while it is true
};

// Classes: M in [2^(b-1), 2^b), for M >= 2.
class loop_backend final : public backend {
 public:
  const char* name() const override { return "adaptive_test"; }
  engine_kind kind() const override { return engine_kind::cpu; }
  owner_id cache_owner() const override { return 0x7E570010; }
  std::shared_ptr<const compiled_kernel> compile(const partition& p, const std::vector<logical_tensor>&,
                                                 const std::vector<logical_tensor>&, const engine&,
                                                 const std::vector<kernel_binary>&) override {
    // own_first_shape: the first compile is for its shapes alone (as the
    // oneDNN backend builds a configuration's first shape).
    auto kernel = std::make_shared<loop_kernel>(&generic_runs, p.ops().size() > 1, 1, own_first_shape.exchange(false));
    kernel->throws_ = &generic_throws;
    return kernel;
  }
  shape_class specialization_class(const partition&, const std::vector<logical_tensor>& in,
                                   const std::vector<logical_tensor>&, const engine&) const override {
    const auto m = static_cast<std::uint64_t>(in[0].shape[0]);
    if (m < 2) return {};
    const int bits = std::bit_width(m);
    return {"bits" + std::to_string(bits), "M " + std::to_string(1 << (bits - 1)) + ".." + std::to_string((1 << bits) - 1)};
  }
  bool specialization_ready(const partition&, const std::vector<logical_tensor>&, const std::vector<logical_tensor>&,
                            const engine&) const override {
    ready_asks.fetch_add(1);
    return ready.load();
  }
  std::shared_ptr<const compiled_kernel> specialize(const partition& p, const std::vector<logical_tensor>&,
                                                    const std::vector<logical_tensor>&, const engine&) override {
    builds.fetch_add(1);
    if (hold_ms > 0) hold_a_static(hold_ms);
    if (fail) throw compile_error("adaptive_test: this build fails on purpose");
    auto kernel = std::make_shared<loop_kernel>(&specialized_runs, p.ops().size() > 1, slow ? 200 : 1);
    kernel->throws_ = &specialized_throws;
    return kernel;
  }
  // Sizes are read from the tensors: one generic kernel per rank.
  std::string kernel_configuration(const partition&, const std::vector<shape_t>& shapes, const engine&) const override {
    return shape_mode_configuration(current_kernel_shapes(), shapes);
  }
  stream make_stream(const engine& e) override { return stream(e, nullptr); }
  device_identity identity(const engine&) const override { return {"test", "loops", "1", "1"}; }
  // With device_timing on, a backend whose executions are timed on the
  // device (as the GPU backends'): each timer is done at once, 1 us.
  std::unique_ptr<device_timer> start_timer(stream&) override {
    if (!device_timing.load()) return nullptr;
    struct done_timer final : device_timer {
      void stop(stream&) override {}
      bool done() const override { return true; }
      std::optional<std::uint64_t> elapsed_ns() const override { return 1000; }
    };
    timers.fetch_add(1);
    return std::make_unique<done_timer>();
  }

  // What a compiler does on its first build: it constructs a function-local
  // static (whose destructor is registered then, after anything of ours),
  // works for a while, and uses the static again.
  static void hold_a_static(int ms) {
    struct compiler_state {
      ~compiler_state() { alive = false; }
      std::atomic<bool> alive{true};
    };
    static compiler_state state;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    if (!state.alive.load()) {
      std::fputs("adaptive_test: a build used a static object destroyed by exit\n", stderr);
      std::_Exit(3);
    }
  }

  std::atomic<int> generic_runs{0}, specialized_runs{0}, builds{0}, hold_ms{0}, timers{0};
  mutable std::atomic<int> ready_asks{0};
  std::atomic<bool> ready{false};  // specialization_ready's answer
  std::atomic<bool> fail{false}, slow{false}, own_first_shape{false}, specialized_throws{false},
      generic_throws{false}, device_timing{false};
};

class AdaptiveKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = current_specialize_settings();
    specialize_settings s;
    s.threshold = 0;  // a class is hot at its first generic execution
    set_specialize_settings(s);
    kernel_cache().clear();
  }
  void TearDown() override {
    wait_for_specializations();
    set_specialize_settings(saved_);
  }

  // A MatMul [-1, 8] x [8, 4] (+ bias), compiled for M rows and run once.
  struct run_result {
    std::vector<float> y, want;
  };
  run_result run(std::int64_t m, bool bias = true) {
    const compiled_partition cp = compile(part(bias), bias ? std::vector<shape_t>{{m, 8}, {8, 4}, {4}}
                                                          : std::vector<shape_t>{{m, 8}, {8, 4}},
                                          eng);
    std::vector<float> x(static_cast<std::size_t>(m * 8)), w(32), b(4), y(static_cast<std::size_t>(m * 4), -1.f);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.f;
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) * 0.5f;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i);
    std::vector<tensor> in{{cp.inputs()[0], x.data()}, {cp.inputs()[1], w.data()}};
    if (bias) in.push_back({cp.inputs()[2], b.data()});
    stream s = make_stream(eng);
    cp.execute(s, in, {{cp.outputs()[0], y.data()}});
    run_result r{y, std::vector<float>(y.size())};
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < 4; ++j) {
        float acc = bias ? b[static_cast<std::size_t>(j)] : 0.f;
        for (std::int64_t l = 0; l < 8; ++l) acc += x[static_cast<std::size_t>(i * 8 + l)] * w[static_cast<std::size_t>(l * 4 + j)];
        r.want[static_cast<std::size_t>(i * 4 + j)] = acc;
      }
    }
    return r;
  }

  partition part(bool bias) {
    graph g;
    auto x = g.tensor({-1, 8}), w = g.tensor({8, 4}, tensor_property::constant), y = g.tensor({-1, 4});
    if (bias) {
      auto b = g.tensor({4}, tensor_property::constant), mm = g.tensor({-1, 4});
      g.add_op(op_kind::matmul, {x, w}, {mm});
      g.add_op(op_kind::add, {mm, b}, {y});
    } else {
      g.add_op(op_kind::matmul, {x, w}, {y});
    }
    g.finalize();
    return g.partitions().front();
  }

  loop_backend backend_;
  // A context of its own per test: each test starts with no dispatch tables.
  static inline std::atomic<std::uint64_t> next_context{0x7153000};
  engine eng{&backend_, 0, next_context.fetch_add(1), nullptr};
  scoped_kernel_shapes mode{kernel_shapes::adaptive};
  specialize_settings saved_;
};

TEST_F(AdaptiveKernels, AdaptiveIsTheModeByItsOneName) {
  EXPECT_EQ(parse_kernel_shapes("Adaptive"), kernel_shapes::adaptive);
  EXPECT_EQ(parse_kernel_shapes("tiered"), std::nullopt) << "a name from before the release is not kept";
  EXPECT_EQ(to_string(kernel_shapes::adaptive), "adaptive");
  EXPECT_TRUE(shape_agnostic(kernel_shapes::adaptive));
  EXPECT_FALSE(shape_agnostic(kernel_shapes::specialized));
}

// compile() of a new shape looks up no class: its first execution does
// (after enqueueing it while no class of the process was ever queued, where
// no specialized kernel can exist; before it otherwise). Either way the
// execution is counted for the class.
TEST_F(AdaptiveKernels, AShapesClassIsFoundAtItsFirstExecutionNotByCompile) {
  specialize_settings never_hot = current_specialize_settings();
  never_hot.threshold = 1e6;
  set_specialize_settings(never_hot);
  const specialization_stats before = specialization::stats();
  (void)compile(part(true), {{5, 8}, {8, 4}, {4}}, eng);
  EXPECT_EQ(specialization::stats().classes, before.classes) << "compile() looked the class up";
  EXPECT_EQ(backend_.ready_asks.load(), 0);
  auto r = run(5);  // the compiled shape, executed for the first time
  EXPECT_EQ(r.y, r.want);
  specialization_stats after = specialization::stats();
  EXPECT_EQ(after.classes - before.classes, 1u);
  EXPECT_EQ(after.generic_executions - before.generic_executions, 1u);
  EXPECT_EQ(backend_.ready_asks.load(), 1) << "a new class asks the backend once";
  r = run(6);  // a new shape of the same class
  EXPECT_EQ(r.y, r.want);
  after = specialization::stats();
  EXPECT_EQ(after.classes - before.classes, 1u);
  EXPECT_EQ(after.generic_executions - before.generic_executions, 2u);
  EXPECT_EQ(backend_.ready_asks.load(), 1);
  EXPECT_EQ(backend_.generic_runs.load(), 2);
  EXPECT_EQ(backend_.builds.load(), 0);
}

// While no class of the process was ever queued, a new shape's first
// execution runs before its class is looked up, and is timed by its
// table's turn: after the first shape with a class, the backend's way of
// timing is learnt once (one timer), then one in 8 of these executions is
// timed on the device. Looked up first (any class queued), each new class's
// first execution would start a timer of its own (16 here): the figures
// tell the two paths apart. Needs a process where nothing was queued yet
// (this binary's tests in order; skipped under a shuffle that ran others first).
TEST_F(AdaptiveKernels, FirstExecutionsOfNewShapesAreTimedByTheirTablesTurnBeforeAnythingIsQueued) {
  if (specialization::stats().queued != 0) GTEST_SKIP() << "a class was queued earlier in this process";
  specialize_settings never_hot = current_specialize_settings();
  never_hot.threshold = 1e6;
  set_specialize_settings(never_hot);
  backend_.device_timing = true;
  const specialization_stats before = specialization::stats();
  for (int bits = 2; bits <= 17; ++bits) run(std::int64_t{1} << (bits - 1));  // 16 shapes of 16 classes
  const specialization_stats after = specialization::stats();
  EXPECT_EQ(after.classes - before.classes, 16u);
  EXPECT_EQ(after.generic_executions - before.generic_executions, 16u);
  EXPECT_EQ(backend_.timers.load(), 3) << "learnt at the second shape, then turns 0 and 8 of the other 14";
  EXPECT_EQ(after.queued, 0u);
}

// A partition whose shapes have no class (M = 1 here) starts no timer at
// its first executions: nothing would count the time.
TEST_F(AdaptiveKernels, FirstExecutionsOfShapesWithoutAClassAreNotTimed) {
  if (specialization::stats().queued != 0) GTEST_SKIP() << "a class was queued earlier in this process";
  backend_.device_timing = true;
  for (int i = 0; i < 3; ++i) run(1);
  EXPECT_EQ(backend_.timers.load(), 0);
  EXPECT_EQ(backend_.generic_runs.load(), 3);
}

TEST_F(AdaptiveKernels, AHotClassIsSpecializedInTheBackgroundAndSharedByItsShapes) {
  const specialization_stats before = specialization::stats();
  auto r = run(5);  // generic: the class M 4..7 turns hot
  EXPECT_EQ(r.y, r.want);
  EXPECT_EQ(backend_.generic_runs.load(), 1);
  wait_for_specializations();
  EXPECT_EQ(backend_.builds.load(), 1);
  r = run(5);
  EXPECT_EQ(r.y, r.want);
  EXPECT_EQ(backend_.specialized_runs.load(), 1);
  r = run(7);  // another shape of the class: specialized at its first execution
  EXPECT_EQ(r.y, r.want);
  EXPECT_EQ(backend_.specialized_runs.load(), 2);
  EXPECT_EQ(backend_.generic_runs.load(), 1);
  EXPECT_EQ(backend_.builds.load(), 1);
  const specialization_stats after = specialization::stats();
  EXPECT_EQ(after.ready - before.ready, 1u);
  EXPECT_EQ(after.queued - before.queued, 1u);
  EXPECT_EQ(after.specialized_executions - before.specialized_executions, 2u);
  EXPECT_GT(after.build_ns, before.build_ns);
}

TEST_F(AdaptiveKernels, ShapesWithoutAClassAndOtherModesRunOnlyTheGenericKernel) {
  const specialization_stats before = specialization::stats();
  run(1);  // no class for M = 1
  {
    scoped_kernel_shapes agnostic(kernel_shapes::agnostic);
    run(12);
    run(12);
  }
  wait_for_specializations();
  EXPECT_EQ(backend_.builds.load(), 0);
  EXPECT_EQ(backend_.generic_runs.load(), 3);
  EXPECT_EQ(specialization::stats().classes, before.classes);
}

TEST_F(AdaptiveKernels, AKernelBuiltForItsOwnShapesIsLeftAlone) {
  backend_.own_first_shape = true;
  const specialization_stats before = specialization::stats();
  for (int i = 0; i < 3; ++i) run(5);  // M 4..7, but its kernel is M = 5's own
  wait_for_specializations();
  EXPECT_EQ(backend_.builds.load(), 0);
  EXPECT_EQ(specialization::stats().generic_executions, before.generic_executions);
  run(6);  // the same class, on the generic kernel: hot
  wait_for_specializations();
  EXPECT_EQ(backend_.builds.load(), 1);
  auto r = run(5);
  EXPECT_EQ(r.y, r.want);
  r = run(6);
  EXPECT_EQ(r.y, r.want);
  EXPECT_EQ(backend_.specialized_runs.load(), 1) << "M = 5 keeps its own kernel";
  EXPECT_EQ(backend_.generic_runs.load(), 5);
}

TEST_F(AdaptiveKernels, NoSpecializationWithZeroThreads) {
  specialize_settings s = current_specialize_settings();
  s.threads = 0;
  set_specialize_settings(s);
  run(9);
  run(9);
  wait_for_specializations();
  EXPECT_EQ(backend_.builds.load(), 0);
  EXPECT_EQ(backend_.generic_runs.load(), 2);
}

TEST_F(AdaptiveKernels, AClassTheBackendHasReadyIsBuiltAtItsFirstUseAndAskedAboutOncePerShapeClass) {
  specialize_settings s = current_specialize_settings();
  s.threshold = 1e6;  // only a ready class is built
  set_specialize_settings(s);
  backend_.ready = true;
  run(5);
  wait_for_specializations();
  EXPECT_EQ(backend_.builds.load(), 1);
  for (const std::int64_t m : {6, 7}) {  // the same class: specialized, not asked again
    const auto r = run(m);
    EXPECT_EQ(r.y, r.want);
  }
  EXPECT_EQ(backend_.ready_asks.load(), 2) << "when the class was made, and by its build";
  EXPECT_EQ(backend_.specialized_runs.load(), 2);
  EXPECT_EQ(backend_.generic_runs.load(), 1);
  backend_.ready = false;
  run(20);  // another class, not ready: the cost model waits
  wait_for_specializations();
  EXPECT_EQ(backend_.ready_asks.load(), 3);
  EXPECT_EQ(backend_.builds.load(), 1);
}

TEST_F(AdaptiveKernels, TheCostModelWaitsUntilGenericTimeRepaysABuild) {
  specialize_settings s = current_specialize_settings();
  s.threshold = 1e6;  // a build would have to be repaid a million times over
  set_specialize_settings(s);
  for (int i = 0; i < 5; ++i) run(20);
  wait_for_specializations();
  EXPECT_EQ(backend_.builds.load(), 0);
}

TEST_F(AdaptiveKernels, DeviceTimingOfAColdClassStopsOnceItsMeanIsKnown) {
  backend_.device_timing = true;
  specialize_settings s = current_specialize_settings();
  s.threshold = 1e6;  // the class stays cold: its generic executions stay candidates for timing
  set_specialize_settings(s);
  for (int i = 0; i < 200; ++i) run(20);
  const int timed = backend_.timers.load();
  EXPECT_GE(timed, 2) << "the class's generic executions were timed on the device";
  EXPECT_LE(timed, 40) << "one in eight of 200 executions, or fewer: sampled, not every one";
  for (int i = 0; i < 200; ++i) run(20);
  EXPECT_EQ(backend_.timers.load(), timed) << "no device timer once the mean is known";
  EXPECT_EQ(backend_.generic_runs.load(), 400);
  EXPECT_EQ(backend_.builds.load(), 0);
}

TEST_F(AdaptiveKernels, AFailedBuildLeavesTheGenericKernelAndIsReportedOnce) {
  backend_.fail = true;
  const specialization_stats before = specialization::stats();
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 4; ++i) {
    const auto r = run(40);
    EXPECT_EQ(r.y, r.want);
    wait_for_specializations();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(backend_.builds.load(), 1);
  EXPECT_EQ(backend_.generic_runs.load(), 4);
  EXPECT_EQ(specialization::stats().failed - before.failed, 1u);
  const auto first = err.find("this build fails on purpose");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("this build fails on purpose", first + 1), std::string::npos) << err;
  EXPECT_NE(err.find("keep running on the generic kernel"), std::string::npos) << err;
}

TEST_F(AdaptiveKernels, ASpecializedKernelThatThrowsIsDroppedAndTheGenericOneAnswers) {
  run(30);
  wait_for_specializations();
  backend_.specialized_throws = true;
  const specialization_stats before = specialization::stats();
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    const auto r = run(30);
    EXPECT_EQ(r.y, r.want) << "the generic kernel writes every output again";
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(backend_.generic_runs.load(), 1 + 3);
  EXPECT_EQ(backend_.specialized_runs.load(), 0);
  EXPECT_EQ(specialization::stats().failed - before.failed, 1u);
  const auto first = err.find("this kernel fails on purpose");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("this kernel fails on purpose", first + 1), std::string::npos) << err;
  wait_for_specializations();
  EXPECT_EQ(backend_.builds.load(), 1) << "a failed class is not built again";
}

TEST_F(AdaptiveKernels, WhenTheGenericKernelFailsTooTheSpecializedOneIsNotBlamed) {
  run(30);
  wait_for_specializations();
  backend_.specialized_throws = true;
  backend_.generic_throws = true;  // say, a device error that outlives one launch
  const specialization_stats before = specialization::stats();
  EXPECT_THROW(run(30), execute_error);
  EXPECT_EQ(specialization::stats().failed, before.failed);
  backend_.specialized_throws = false;
  backend_.generic_throws = false;
  const auto r = run(30);
  EXPECT_EQ(r.y, r.want);
  EXPECT_EQ(backend_.specialized_runs.load(), 1) << "the specialized kernel stays";
}

TEST_F(AdaptiveKernels, AFailedSpecializedRunOverItsOwnInputsIsNotRunAgain) {
  run(30, /*bias=*/false);
  wait_for_specializations();
  backend_.specialized_throws = true;
  const compiled_partition cp = compile(part(false), {{30, 8}, {8, 4}}, eng);
  std::vector<float> x(30 * 8, 1.f), w(32, 0.5f);
  tensor in_place{cp.outputs()[0], x.data()};  // y over x's first rows
  stream s = make_stream(eng);
  const specialization_stats before = specialization::stats();
  ::testing::internal::CaptureStderr();
  EXPECT_THROW(cp.execute(s, {{cp.inputs()[0], x.data()}, {cp.inputs()[1], w.data()}}, {in_place}), execute_error);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("the outputs overlap the inputs"), std::string::npos) << err;
  EXPECT_EQ(backend_.generic_runs.load(), 1) << "the generic kernel would read what the failed run wrote";
  EXPECT_EQ(specialization::stats().failed - before.failed, 1u);
  backend_.specialized_throws = false;
  const auto r = run(30, /*bias=*/false);
  EXPECT_EQ(r.y, r.want);
  EXPECT_EQ(backend_.specialized_runs.load(), 0) << "dropped: its shapes run on the generic kernel";
}

TEST_F(AdaptiveKernels, AnEvictedSpecializedKernelFallsBackToTheGenericOne) {
  run(100);
  wait_for_specializations();
  run(100);
  EXPECT_EQ(backend_.specialized_runs.load(), 1);
  const specialization_stats before = specialization::stats();
  kernel_cache().clear();  // evicts the variant (the compiled partitions too; compile() makes them again)
  auto r = run(100);
  EXPECT_EQ(r.y, r.want);
  EXPECT_EQ(backend_.specialized_runs.load(), 1);
  EXPECT_EQ(backend_.generic_runs.load(), 2);
  wait_for_specializations();
  r = run(100);  // hot again: specialized again
  EXPECT_EQ(r.y, r.want);
  EXPECT_EQ(backend_.specialized_runs.load(), 2);
  EXPECT_GE(specialization::stats().evicted - before.evicted + (backend_.builds.load() == 2 ? 1 : 0), 1u);
}

TEST_F(AdaptiveKernels, ASpecializedKernelSlowerThanTheGenericOneIsDropped) {
  backend_.slow = true;
  specialize_settings s = current_specialize_settings();
  s.threshold = 1e-9;  // hot at the first timed execution (the class's second)
  set_specialize_settings(s);
  const specialization_stats before = specialization::stats();
  run(50);
  run(50);
  wait_for_specializations();
  EXPECT_EQ(backend_.builds.load(), 1);
  // Its first execution is not timed, the next eight are, then it is judged.
  for (int i = 0; i < 12; ++i) {
    const auto r = run(50);
    EXPECT_EQ(r.y, r.want);
  }
  wait_for_specializations();
  EXPECT_EQ(backend_.specialized_runs.load(), 9);
  EXPECT_EQ(backend_.generic_runs.load(), 2 + 3);
  EXPECT_EQ(backend_.builds.load(), 1) << "a class found slower is not built again";
  EXPECT_EQ(specialization::stats().slower - before.slower, 1u);
}

TEST_F(AdaptiveKernels, AtMostMaxVariantsPerPartition) {
  specialize_settings s = current_specialize_settings();
  s.max_variants = 1;
  set_specialize_settings(s);
  const specialization_stats before = specialization::stats();
  run(3);
  wait_for_specializations();
  run(17);  // another class of the same partition: over the limit
  wait_for_specializations();
  run(17);
  run(3, /*bias=*/false);  // another partition has a budget of its own
  wait_for_specializations();
  EXPECT_EQ(backend_.builds.load(), 2);
  EXPECT_GE(specialization::stats().over_limit - before.over_limit, 1u);
}

// Eight threads run one compiled shape's first executions at once: each
// looks its class up, one lookup is kept, and every execution counts for
// that one class (under ThreadSanitizer in CI).
TEST_F(AdaptiveKernels, ConcurrentFirstExecutionsOfAShapeAgreeOnItsClass) {
  specialize_settings never_hot = current_specialize_settings();
  never_hot.threshold = 1e6;
  set_specialize_settings(never_hot);
  constexpr int kThreads = 8;
  constexpr std::int64_t m = 20;
  const compiled_partition cp = compile(part(true), {{m, 8}, {8, 4}, {4}}, eng);
  const specialization_stats before = specialization::stats();
  std::vector<float> x(static_cast<std::size_t>(m * 8), 1.f), w(32, 0.5f), b(4, 2.f);
  std::atomic<int> arrived{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::vector<float> y(static_cast<std::size_t>(m * 4), -1.f);
      stream s = make_stream(eng);
      arrived.fetch_add(1);
      while (arrived.load() < kThreads) std::this_thread::yield();  // start together
      cp.execute(s, {{cp.inputs()[0], x.data()}, {cp.inputs()[1], w.data()}, {cp.inputs()[2], b.data()}},
                 {{cp.outputs()[0], y.data()}});
      for (const float v : y) {
        if (v != 8 * 0.5f + 2.f) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  const specialization_stats after = specialization::stats();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(after.classes - before.classes, 1u);
  EXPECT_EQ(after.generic_executions - before.generic_executions, static_cast<std::uint64_t>(kThreads));
  EXPECT_EQ(backend_.generic_runs.load(), kThreads);
}

TEST_F(AdaptiveKernels, ExecutionsOnManyThreadsWhileVariantsArriveAndAreEvicted) {
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        const auto r = run(2 + (t * 61 + i * 7) % 90);
        if (r.y != r.want) wrong.fetch_add(1);
      }
    });
  }
  std::thread evictor([&] {
    while (!stop.load()) {
      kernel_cache().clear();
      std::this_thread::yield();
    }
  });
  for (auto& th : threads) th.join();
  stop = true;
  evictor.join();
  wait_for_specializations();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(backend_.generic_runs.load() + backend_.specialized_runs.load(), 6 * 60);
  EXPECT_GT(backend_.builds.load(), 0);
}

// The process exits (main returns) while a build runs: the build finishes
// before exit destroys what it uses, including statics it constructed itself.
TEST_F(AdaptiveKernels, ABuildRunningAtExitEndsBeforeStaticObjectsAreDestroyed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: oneTBB does not survive fork()
  EXPECT_EXIT(
      {
        backend_.hold_ms = 300;
        run(6);
        while (backend_.builds.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// The same when the build was queued by another thread (a server's workers
// execute; main only joins them).
TEST_F(AdaptiveKernels, ABuildQueuedByAnotherThreadAndRunningAtExitEndsFirstToo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        backend_.hold_ms = 300;
        std::thread([&] { run(6); }).join();
        while (backend_.builds.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace unicache::testing
