// Misses that explain themselves, through the kernel path on the machine's
// OpenCL device (PoCL in CI): with UNICACHE_EXPLAIN_MISSES on, a kernel built
// while another shape class of it is stored prints one line naming the
// shape class, once per kernel and reason, and records the miss for
// `unicache-store explain`; with it off, nothing.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "opencl_internal.hpp"
#include "scoped_settings.hpp"
#include "temp_dir.hpp"
#include "unicache/kernel_generator.hpp"
#include "unicache/opencl.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

// Every test process gets a store of its own, set before first use.
const std::string& store_dir() {
  static const testing::temp_dir dir("unicache-opencl-explain-test");
  static const bool set = ::setenv("UNICACHE_PERSISTENT_CACHE_DIR", dir.path().c_str(), 1) == 0;
  (void)set;
  return dir.path();
}
const bool store_configured = !store_dir().empty();

kernel_source gemm_for(long m) {
  gpu::kernels::gemm_config c;
  c.tiles = {32, 32, 8, 4, 4};
  c.fixed_mnk = std::array<long, 3>{m, 64, 96};
  return gpu::kernels::gemm_source(gpu::kernels::dialect::opencl_c, c);
}

class ExplainedMisses : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_configured);
    ASSERT_TRUE(kernel_store::instance().enabled()) << store_dir();
    kernel_store::instance().clear();
    kernel_cache().clear();
  }
  void TearDown() override { set_explain_misses(false); }

  // What building the GEMM for each M printed on stderr.
  std::string built(std::initializer_list<long> ms) {
    ::testing::internal::CaptureStderr();
    for (long m : ms) (void)gpu::get_program(eng_, gemm_for(m), {});
    return ::testing::internal::GetCapturedStderr();
  }

  testing::scoped_no_specialization no_background;
  engine eng_ = opencl::make_engine();
};

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(ExplainedMisses, AKernelBuiltBesideAnotherShapeClassOfItNamesTheShapeClassOnce) {
  const device_identity device = eng_.get_backend()->identity(eng_);
  const kernel_source stored = gemm_for(3);
  ASSERT_TRUE(kernel_store::instance().put(device, stored.store_key(), byte_vector{1, 2, 3}));
  set_explain_misses(true);
  const std::string err = built({5, 7});
  EXPECT_EQ(count(err, "unicache: miss explained: opencl-c gemm ("), 1u) << "once per kernel and reason:\n" << err;
  EXPECT_NE(err.find("differs in shape class (stored M=3 N=64 K=96, here M=5 N=64 K=96)"), std::string::npos) << err;
  // The miss was recorded: explained again offline by the id its line shows.
  const std::size_t at = err.find("opencl-c gemm (") + 15;
  const std::string id = err.substr(at, 16);
  const std::optional<miss_explanation> again = kernel_store::instance().explain_recorded_miss(id);
  ASSERT_TRUE(again.has_value()) << id;
  const std::string line = err.substr(err.find("unicache: miss explained:"), err.find('\n', at) - err.find("unicache: miss explained:"));
  EXPECT_EQ(again->line(), line);
}

TEST_F(ExplainedMisses, NothingIsPrintedWhenExplainingIsOffOrNoOtherEntryOfTheKernelIsStored) {
  const std::string first = [&] {
    set_explain_misses(true);
    return built({11});
  }();
  EXPECT_EQ(first.find("miss explained"), std::string::npos) << "nothing of this kernel was stored:\n" << first;
  const device_identity device = eng_.get_backend()->identity(eng_);
  ASSERT_TRUE(kernel_store::instance().put(device, gemm_for(3).store_key(), byte_vector{1, 2, 3}));
  set_explain_misses(false);
  const std::string off = built({13});
  EXPECT_EQ(off.find("miss explained"), std::string::npos) << off;
}

}  // namespace
}  // namespace unicache
