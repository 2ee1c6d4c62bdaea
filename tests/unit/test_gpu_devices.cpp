// Devices across the GPU backends: the OpenCL and CUDA views of one GPU are
// one physical device (one device id, one budget); an OpenCL CPU device is
// the host's CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "unicache/cuda.hpp"
#include "unicache/opencl.hpp"

namespace unicache {
namespace {

// The OpenCL GPU devices of NVIDIA's platform ("P:D ..." as list_devices
// says them). With one CUDA device on the host, each is that GPU; PoCL or
// another platform may show GPUs of its own, which this leaves out.
std::vector<std::string> nvidia_opencl_gpus() {
  std::vector<std::string> out;
  for (const std::string& d : opencl::list_devices()) {
    if (d.find("(GPU)") != std::string::npos && d.find("NVIDIA") != std::string::npos) out.push_back(d);
  }
  return out;
}

// The OpenCL engine of device "P:D" (the default device, chosen by
// UNICACHE_OPENCL_DEVICE), in a context of its own.
engine opencl_engine_of(const std::string& listed) {
  ::setenv("UNICACHE_OPENCL_DEVICE", listed.substr(0, listed.find(' ')).c_str(), 1);
  cl_device_id d = opencl::default_device();
  ::unsetenv("UNICACHE_OPENCL_DEVICE");
  cl_int err = CL_SUCCESS;
  cl_context context = clCreateContext(nullptr, 1, &d, nullptr, nullptr, &err);
  engine e = opencl::make_engine(d, context);
  clReleaseContext(context);  // the engine holds its own reference
  return e;
}

// Physical GPUs are counted, not OpenCL devices: a host with one NVIDIA GPU
// and PoCL lists the GPU more than once.
TEST(GpuDevices, TheOpenclAndCudaViewsOfOneGpuAreOneDevice) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  if (cuda::device_count() != 1) GTEST_SKIP() << "needs exactly one GPU (to know which OpenCL device is the CUDA one)";
  const std::vector<std::string> views = nvidia_opencl_gpus();
  if (views.empty()) GTEST_SKIP() << "NVIDIA's OpenCL platform lists no GPU";
  ASSERT_EQ(views.size(), 1u) << "one CUDA device, but NVIDIA's OpenCL lists " << views.size() << " GPUs";
  const engine c = cuda::make_engine();
  const engine o = opencl_engine_of(views.front());
  ASSERT_TRUE(opencl::info(o).is_gpu);
  EXPECT_EQ(o.kind(), engine_kind::gpu);
  EXPECT_EQ(c.kind(), engine_kind::gpu);
  EXPECT_EQ(o.device_id(), c.device_id()) << "matched by PCI address " << cuda::info(c).pci_bus_id;
  EXPECT_NE(o.context_id(), c.context_id()) << "two contexts: kernels and weights are never shared";
  // One budget: in a cache of 1 MB per device, a 1 MB entry of the CUDA
  // engine's scope evicts the OpenCL engine's.
  cache_config config;
  config.gpu = {1, eviction_policy::lru};
  unified_cache one_mb(config);
  constexpr owner_id kTest = 0x7E570002;
  auto add = [&](const engine& e, const char* key) {
    std::promise<cache_value> p;
    ASSERT_FALSE(one_mb.get_or_add(e.scope(), kTest, key, 1 << 20, 1, p.get_future().share()).valid());
    p.set_value(std::make_shared<int>(0));
  };
  add(o, "opencl's");
  add(c, "cuda's");
  EXPECT_FALSE(one_mb.contains(o.scope(), kTest, "opencl's")) << "the two engines draw on one device's budget";
  EXPECT_TRUE(one_mb.contains(c.scope(), kTest, "cuda's"));
}

TEST(GpuDevices, AnOpenclCpuDeviceIsAnEngineOfTheHostCpu) {
  const std::vector<std::string> all = opencl::list_devices();
  const auto cpu = std::find_if(all.begin(), all.end(), [](const std::string& d) {
    return d.find("(CPU)") != std::string::npos;
  });
  if (cpu == all.end()) GTEST_SKIP() << "no OpenCL CPU device";
  ::setenv("UNICACHE_OPENCL_DEVICE", cpu->substr(0, cpu->find(' ')).c_str(), 1);  // "P:D"
  const engine e = opencl::make_engine(opencl::default_device(), [] {
    cl_device_id d = opencl::default_device();
    cl_int err = CL_SUCCESS;
    return clCreateContext(nullptr, 1, &d, nullptr, nullptr, &err);
  }());
  ::unsetenv("UNICACHE_OPENCL_DEVICE");
  EXPECT_FALSE(opencl::info(e).is_gpu);
  EXPECT_EQ(e.kind(), engine_kind::cpu);
  EXPECT_EQ(e.device_id(), host_cpu_device_id);
  clReleaseContext(opencl::native_context(e));  // the engine holds its own reference
}

}  // namespace
}  // namespace unicache
