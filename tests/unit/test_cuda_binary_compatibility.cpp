// What decides a CUDA binary and which drivers run it. Without a GPU (here
// and in CI): the store key's identity names the architecture, the target
// and NVRTC, never the device model or the driver; a cubin runs on drivers
// of its compiler's major version or later, PTX on its compiler's version or
// later, and a refusal names the driver. With a GPU: a stored cubin is
// loaded under a reported driver above its need, and refused below it with
// a line naming the driver, then built here, the stored one left in place.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "cuda_internal.hpp"
#include "scoped_settings.hpp"
#include "temp_dir.hpp"
#include "unicache/cuda.hpp"
#include "unicache/kernel_generator.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using cuda::detail::code_identity;
using cuda::detail::driver_refusal;
using cuda::detail::machine_identity;

// Every test process gets a store of its own, set before first use.
const std::string& store_dir() {
  static const testing::temp_dir dir("unicache-cuda-compat-test");
  static const bool set = ::setenv("UNICACHE_PERSISTENT_CACHE_DIR", dir.path().c_str(), 1) == 0;
  (void)set;
  return dir.path();
}
const bool store_configured = !store_dir().empty();

cuda::device_info h100(const std::string& model, int driver) {
  cuda::device_info i;
  i.device_name = model;
  i.compute_major = 9;
  i.compute_minor = 0;
  i.multiprocessors = model.find("PCIe") != std::string::npos ? 114 : 132;
  i.driver_version = driver;
  i.nvrtc_version = 11080;
  i.pci_bus_id = "0000:17:00.0";
  i.target = "sm_90";
  return i;
}

TEST(CudaBinaryCompatibility, BinariesAreKeyedByArchitectureTargetAndCompilerNotByModelOrDriver) {
  const cuda::device_info sxm = h100("NVIDIA H100 80GB HBM3", 13000), pcie = h100("NVIDIA H100 PCIe", 12040);
  EXPECT_EQ(code_identity(sxm), code_identity(pcie)) << "an H100 SXM and an H100 PCIe share cubins";
  EXPECT_EQ(code_identity(sxm).device_name, "sm_90");
  EXPECT_EQ(code_identity(sxm).driver_version, "nvrtc 11080");
  EXPECT_NE(machine_identity(sxm), machine_identity(pcie)) << "an engine blob still describes its own device";
  cuda::device_info a100 = sxm;
  a100.compute_major = 8;
  a100.target = "sm_80";
  EXPECT_NE(code_identity(a100), code_identity(sxm));
  cuda::device_info newer_nvrtc = sxm;
  newer_nvrtc.nvrtc_version = 12040;
  EXPECT_NE(code_identity(newer_nvrtc), code_identity(sxm)) << "the compiler decides the code";
  cuda::device_info ptx = sxm;
  ptx.target = "compute_86 (PTX)";
  EXPECT_NE(code_identity(ptx), code_identity(sxm)) << "PTX is not a cubin";
}

TEST(CudaBinaryCompatibility, ACubinRunsOnDriversOfItsCompilersMajorVersionOrLater) {
  EXPECT_EQ(driver_refusal(11080, 11080, "sm_90"), "");
  EXPECT_EQ(driver_refusal(11040, 11080, "sm_90"), "") << "minor version compatibility";
  EXPECT_EQ(driver_refusal(11000, 11080, "sm_90"), "");
  EXPECT_EQ(driver_refusal(13000, 11080, "sm_90"), "");
  EXPECT_EQ(driver_refusal(10020, 11080, "sm_90"),
            "driver 10020 (CUDA 10.2) cannot run cubins made by NVRTC 11.8 (it needs CUDA 11.0 or later)");
  EXPECT_NE(driver_refusal(12090, 13000, "sm_90"), "");
}

TEST(CudaBinaryCompatibility, PtxRunsOnlyOnDriversOfItsCompilersVersionOrLater) {
  EXPECT_EQ(driver_refusal(11080, 11080, "compute_86 (PTX)"), "");
  EXPECT_EQ(driver_refusal(12000, 11080, "compute_86 (PTX)"), "");
  EXPECT_EQ(driver_refusal(11040, 11080, "compute_86 (PTX)"),
            "driver 11040 (CUDA 11.4) cannot run PTX made by NVRTC 11.8 (it needs CUDA 11.8 or later)");
}

TEST(CudaBinaryCompatibility, AnUnknownVersionRefusesNothingAndLeavesItToTheDriver) {
  EXPECT_EQ(driver_refusal(0, 11080, "sm_90"), "");
  EXPECT_EQ(driver_refusal(11080, 0, "sm_90"), "");
}

// A GPU: engines that report another driver, as the same fleet's machines
// after a driver update (or before one) would.
class ReportedDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::available()) GTEST_SKIP() << "no CUDA: " << cuda::unavailable_reason();
    ASSERT_TRUE(store_configured);
  }
  void TearDown() override { cuda::detail::report_driver_version_for_testing(0); }

  // The kernel's program on a fresh engine reporting `driver` (the kernel
  // cache forgotten, as in a new process); returns what the path did.
  cuda::backend_stats program_with_driver(int driver, const kernel_source& src) {
    cuda::detail::report_driver_version_for_testing(driver);
    kernel_cache().clear();
    const engine e = cuda::make_engine(0);
    identity_ = e.native<cuda::detail::engine_state>().facts.identity;
    const cuda::backend_stats before = cuda::stats();
    program_ = gpu::get_program(e, src, {});
    cuda::backend_stats after = cuda::stats();
    after.programs_from_source -= before.programs_from_source;
    after.programs_from_binary -= before.programs_from_binary;
    after.binaries_rejected -= before.binaries_rejected;
    return after;
  }

  testing::scoped_no_specialization no_background;
  device_identity identity_;
  std::shared_ptr<const kernel> program_;
};

TEST_F(ReportedDriver, AStoredCubinIsLoadedAboveItsNeedAndRefusedWithALineNamingTheDriverBelowIt) {
  const kernel_source src = gpu::kernels::eltwise_source(gpu::kernels::dialect::cuda_c, op_kind::tanh, 256);
  kernel_store& store = kernel_store::instance();
  const int nvrtc = cuda::detail::nvrtc_version();
  // Built, and stored as the path stores it after a first launch.
  (void)program_with_driver(0, src);
  const device_identity built_under = identity_;
  store.remove(identity_, src.store_key());
  const byte_vector stored = program_->binary();
  ASSERT_TRUE(store.put(identity_, src.store_key(), stored));

  const cuda::backend_stats above = program_with_driver(nvrtc / 1000 * 1000 + 9000, src);
  EXPECT_EQ(identity_, built_under) << "the driver is not in the key";
  EXPECT_EQ(above.programs_from_source, 0u);
  EXPECT_EQ(above.programs_from_binary, 1u) << "a later driver loads the stored cubin";

  ::testing::internal::CaptureStderr();
  const int old = nvrtc / 1000 * 1000 - 1000;
  const cuda::backend_stats below = program_with_driver(old, src);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(below.binaries_rejected, 1u);
  EXPECT_EQ(below.programs_from_source, 1u) << "rebuilt";
  EXPECT_NE(err.find("unicache: miss explained: cuda-c eltwise ("), std::string::npos) << err;
  EXPECT_NE(err.find("driver " + std::to_string(old) + " ("), std::string::npos) << err;
  EXPECT_EQ(store.get(built_under, src.store_key()), stored) << "the stored cubin stays, for machines that run it";
}

}  // namespace
}  // namespace unicache
