// The run-time loader of the CUDA driver and NVRTC: a clear reason without
// a driver, CUBINs from NVRTC for the architectures it knows, PTX for a GPU
// newer than it, compile errors with NVRTC's log, UNICACHE_NVRTC_LIBRARY;
// and, where there is a GPU, a kernel run through the loaded driver.
#include "cuda_api.hpp"

#include "unicache/cuda.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace unicache::cuda::detail {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSaxpy = R"CUDA(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)CUDA";

bool driver_loadable() {
  // Loading it here changes nothing for driver(): it is loaded once anyway.
  return ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) != nullptr;
}

std::uint16_t elf_machine(const std::vector<unsigned char>& elf) {
  return static_cast<std::uint16_t>(elf[18] | (elf[19] << 8));  // e_machine, little-endian
}

void expect_cubin(const nvrtc_output& out, const std::string& arch) {
  EXPECT_FALSE(out.ptx);
  EXPECT_EQ(out.arch, arch);
  ASSERT_GE(out.binary.size(), 64u);
  EXPECT_EQ(std::memcmp(out.binary.data(), "\x7f" "ELF", 4), 0);
  EXPECT_EQ(elf_machine(out.binary), 190);  // EM_CUDA
}

TEST(CudaApi, DriverUnavailableGivesReason) {
  if (driver_loadable()) GTEST_SKIP() << "libcuda.so.1 loads on this machine";
  std::string why;
  EXPECT_EQ(driver(&why), nullptr);
  EXPECT_NE(why.find("libcuda.so.1"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  // Computed once: the same answer again, and a null why_not is allowed.
  std::string again;
  EXPECT_EQ(driver(&again), nullptr);
  EXPECT_EQ(again, why);
  EXPECT_EQ(driver(nullptr), nullptr);
}

TEST(CudaApi, ResultNames) {
  EXPECT_EQ(result_name(CUDA_SUCCESS), "CUDA_SUCCESS (0)");
  EXPECT_EQ(result_name(CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY (2)");
  EXPECT_EQ(result_name(CUDA_ERROR_NO_DEVICE), "CUDA_ERROR_NO_DEVICE (100)");
  EXPECT_EQ(result_name(CUDA_ERROR_UNSUPPORTED_PTX_VERSION), "CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)");
  EXPECT_NE(result_name(123456).find("(123456)"), std::string::npos);
}

TEST(CudaApi, NvrtcCompilesCubin) {
  std::string why;
  if (!nvrtc(&why)) GTEST_SKIP() << why;
  EXPECT_GE(nvrtc_version(), 11000);
  EXPECT_FALSE(nvrtc_library().empty());
  expect_cubin(nvrtc_compile(kSaxpy, "saxpy.cu", 8, 0, {}), "sm_80");
  // NVRTC knows sm_90 from 11.8 on.
  if (nvrtc_version() < 11080) GTEST_SKIP() << "NVRTC " << nvrtc_version() << " predates sm_90";
  expect_cubin(nvrtc_compile(kSaxpy, "saxpy.cu", 9, 0, {"--use_fast_math"}), "sm_90");
}

TEST(CudaApi, NvrtcFallsBackToPtxForNewerGpu) {
  std::string why;
  if (!nvrtc(&why)) GTEST_SKIP() << why;
  const nvrtc_output out = nvrtc_compile(kSaxpy, "saxpy.cu", 20, 0, {});
  EXPECT_TRUE(out.ptx);
  ASSERT_EQ(out.arch.rfind("compute_", 0), 0u) << out.arch;
  ASSERT_FALSE(out.binary.empty());
  EXPECT_EQ(out.binary.back(), '\0');  // cuModuleLoadData reads it as a C string
  const std::string text(reinterpret_cast<const char*>(out.binary.data()));
  EXPECT_EQ(text.rfind("//", 0), 0u);
  // PTX names the virtual architecture by its real one: compute_90 -> sm_90.
  EXPECT_NE(text.find(".target sm_" + out.arch.substr(8)), std::string::npos) << text.substr(0, 400);
  EXPECT_NE(text.find(".entry saxpy"), std::string::npos);
}

TEST(CudaApi, NvrtcCompileErrorCarriesLog) {
  std::string why;
  if (!nvrtc(&why)) GTEST_SKIP() << why;
  const std::string broken = "extern \"C\" __global__ void broken(float* y) { y[0] = undeclared_name; }\n";
  try {
    nvrtc_compile(broken, "broken_kernel.cu", 8, 0, {});
    FAIL() << "no exception";
  } catch (const cuda_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("nvrtc: compiling broken_kernel.cu for sm_80 failed: NVRTC_ERROR_COMPILATION"),
              std::string::npos)
        << what;
    // The log: where, and what.
    EXPECT_NE(what.find("broken_kernel.cu(1): error"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_name"), std::string::npos) << what;
  }
  // A bad option fails the same way.
  EXPECT_THROW(nvrtc_compile(kSaxpy, "saxpy.cu", 8, 0, {"--no-such-option"}), cuda_error);
}

// The variable is read once per process: each case runs in a process of its
// own (the death test's re-executed child), where nothing is loaded yet.
TEST(CudaApi, NvrtcLibraryFromEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // A file to name, found without loading NVRTC in this process.
  std::string target;
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"}) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("libnvrtc.so", 0) == 0) target = entry.path().string();
    }
    if (!target.empty()) break;
  }
  if (target.empty()) GTEST_SKIP() << "no libnvrtc.so* in the usual directories";
  // Through a link of another name: the path NVRTC comes from shows which
  // candidate was taken.
  char tmpl[] = "/tmp/unicache-nvrtc-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string link = std::string(tmpl) + "/libnvrtc-from-environment.so";
  fs::create_symlink(target, link);

  // Runs in the child: sets the variable, loads NVRTC from "/", and exits 0
  // if `ok`. (The child made its own directory and link on its way here.)
  const auto exit_with = [&](const std::string& value, auto ok) {
    ::setenv("UNICACHE_NVRTC_LIBRARY", value.c_str(), 1);
    if (::chdir("/") != 0) ::_exit(2);
    std::string why;
    const bool loaded = nvrtc(&why) != nullptr;
    const bool good = ok(loaded, why);
    fs::remove_all(tmpl);
    ::_exit(good ? 0 : 1);
  };
  EXPECT_EXIT(exit_with(link, [&](bool loaded, const std::string&) { return loaded && nvrtc_library() == link; }),
              ::testing::ExitedWithCode(0), "");
  // A relative path is ignored, though from "/" it would load.
  EXPECT_EXIT(exit_with(link.substr(1),
                        [](bool loaded, const std::string&) {
                          return loaded && nvrtc_library().find("from-environment") == std::string::npos;
                        }),
              ::testing::ExitedWithCode(0), "");
  // A path that does not load falls through to the usual candidates, and is
  // named in the reason if none of them loads either.
  EXPECT_EXIT(exit_with("/nonexistent/libnvrtc.so",
                        [](bool loaded, const std::string& why) {
                          return loaded || why.find("/nonexistent/libnvrtc.so") != std::string::npos;
                        }),
              ::testing::ExitedWithCode(0), "");
  fs::remove_all(tmpl);
}

// Checks a driver call, with the name of the result on failure.
#define CU_OK(call)                                                  \
  do {                                                               \
    const CUresult r_ = (call);                                      \
    ASSERT_EQ(r_, CUDA_SUCCESS) << #call << ": " << result_name(r_); \
  } while (0)

// Only where there is a GPU: the loaded entry points (their _v2 signatures
// and the CUDA_MEMCPY2D layout) work on the real driver.
TEST(CudaApi, DriverRunsKernel) {
  std::string why;
  const driver_api* cu = driver(&why);
  if (!cu) GTEST_SKIP() << why;
  if (!nvrtc(&why)) GTEST_SKIP() << why;
  int version = 0, count = 0;
  CU_OK(cu->cuDriverGetVersion(&version));
  CU_OK(cu->cuDeviceGetCount(&count));
  ASSERT_GT(count, 0);
  CUdevice dev = 0;
  CU_OK(cu->cuDeviceGet(&dev, 0));
  char name[256] = {}, bus[32] = {};
  CU_OK(cu->cuDeviceGetName(name, sizeof name, dev));
  CU_OK(cu->cuDeviceGetPCIBusId(bus, sizeof bus, dev));
  std::size_t total = 0;
  CU_OK(cu->cuDeviceTotalMem(&total, dev));
  EXPECT_GT(total, std::size_t{1} << 30);
  if (cu->cuDeviceGetUuid) {
    CUuuid uuid{};
    CU_OK(cu->cuDeviceGetUuid(&uuid, dev));
  }
  int major = 0, minor = 0, threads = 0, sms = 0, optin = 0;
  CU_OK(cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU_OK(cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  CU_OK(cu->cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev));
  CU_OK(cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CU_OK(cu->cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
  EXPECT_GE(threads, 512);
  EXPECT_GT(sms, 0);
  std::cout << name << " (" << bus << "), sm_" << major << minor << ", driver " << version << ", NVRTC "
            << nvrtc_version() << " from " << nvrtc_library() << "\n";

  CUcontext ctx = nullptr, popped = nullptr;
  CU_OK(cu->cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_OK(cu->cuCtxPushCurrent(ctx));
  CUdevice current = -1;
  CU_OK(cu->cuCtxGetDevice(&current));
  EXPECT_EQ(current, dev);

  const nvrtc_output out = nvrtc_compile(kSaxpy, "saxpy.cu", major, minor, {});
  CUmodule module = nullptr;
  CUfunction saxpy = nullptr;
  CU_OK(cu->cuModuleLoadData(&module, out.binary.data()));
  CU_OK(cu->cuModuleUnload(module));
  char log[4096] = {};
  CUjit_option keys[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(sizeof log)};
  CU_OK(cu->cuModuleLoadDataEx(&module, out.binary.data(), 2, keys, values));
  CU_OK(cu->cuModuleGetFunction(&saxpy, module, "saxpy"));
  CU_OK(cu->cuFuncSetAttribute(saxpy, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0));

  int n = 1000;
  std::vector<float> x(n), y(n), got(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.0f;
  }
  CUstream stream = nullptr;
  CU_OK(cu->cuStreamCreate(&stream, 0));
  CUdeviceptr dx = 0, dy = 0;
  CU_OK(cu->cuMemAlloc(&dx, n * sizeof(float)));
  CU_OK(cu->cuMemAlloc(&dy, n * sizeof(float)));
  CU_OK(cu->cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU_OK(cu->cuMemcpyHtoDAsync(dy, y.data(), n * sizeof(float), stream));
  float a = 2.0f;
  void* params[] = {&a, &dx, &dy, &n};
  CU_OK(cu->cuLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, params, nullptr));
  CU_OK(cu->cuMemcpyDtoHAsync(got.data(), dy, n * sizeof(float), stream));
  CU_OK(cu->cuStreamSynchronize(stream));
  for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], 2.0f * i + 1.0f) << i;

  // A 2D copy: columns 2..5 of rows 1..3 of a 10-wide device matrix (y) to
  // a packed host block, then a memset seen through a plain copy.
  std::vector<float> block(4 * 3);
  CUDA_MEMCPY2D copy{};
  copy.srcXInBytes = 2 * sizeof(float);
  copy.srcY = 1;
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = dy;
  copy.srcPitch = 10 * sizeof(float);
  copy.dstMemoryType = CU_MEMORYTYPE_HOST;
  copy.dstHost = block.data();
  copy.dstPitch = 4 * sizeof(float);
  copy.WidthInBytes = 4 * sizeof(float);
  copy.Height = 3;
  CU_OK(cu->cuMemcpy2D(&copy));
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(block[r * 4 + c], got[(r + 1) * 10 + c + 2]) << r << "," << c;
  }
  std::vector<float> again(4 * 3);
  copy.dstHost = again.data();
  CU_OK(cu->cuMemcpy2DAsync(&copy, stream));
  CU_OK(cu->cuStreamSynchronize(stream));
  EXPECT_EQ(again, block);
  CU_OK(cu->cuMemsetD8(dy, 0, n * sizeof(float)));
  CU_OK(cu->cuMemcpyDtoH(got.data(), dy, n * sizeof(float)));
  CU_OK(cu->cuCtxSynchronize());
  EXPECT_EQ(got, std::vector<float>(n, 0.0f));

  CU_OK(cu->cuMemFree(dx));
  CU_OK(cu->cuMemFree(dy));
  CU_OK(cu->cuStreamDestroy(stream));
  CU_OK(cu->cuModuleUnload(module));
  CU_OK(cu->cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, ctx);
  CU_OK(cu->cuCtxSetCurrent(ctx));
  CUcontext now = nullptr;
  CU_OK(cu->cuCtxGetCurrent(&now));
  EXPECT_EQ(now, ctx);
  CU_OK(cu->cuCtxSetCurrent(nullptr));
  CU_OK(cu->cuDevicePrimaryCtxRelease(dev));
}

}  // namespace
}  // namespace unicache::cuda::detail
