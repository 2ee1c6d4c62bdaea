// What decides a CUDA binary (the store's key directory) and which drivers
// run it (checked at load): the split that lets one stored cubin serve every
// device of its architecture, whatever the model or the driver.
#include <atomic>
#include <string>

#include "cuda_internal.hpp"

namespace unicache::cuda::detail {
namespace {

std::atomic<int> reported_driver{0};

// "11.8" for 11080.
std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace

bool target_is_ptx(const std::string& target) { return target.ends_with(" (PTX)"); }

device_identity code_identity(const device_info& i) {
  return {"CUDA", "sm_" + std::to_string(i.compute_major) + std::to_string(i.compute_minor), i.target,
          "nvrtc " + std::to_string(i.nvrtc_version)};
}

device_identity machine_identity(const device_info& i) {
  return {"CUDA", i.device_name,
          "sm_" + std::to_string(i.compute_major) + std::to_string(i.compute_minor) + " target " + i.target,
          "driver " + std::to_string(i.driver_version) + " nvrtc " + std::to_string(i.nvrtc_version)};
}

std::string driver_refusal(int driver_version, int nvrtc_version, const std::string& target) {
  if (nvrtc_version <= 0 || driver_version <= 0) return "";  // unknown: the driver's own load decides
  const bool ptx = target_is_ptx(target);
  // CUDA's minor version compatibility: a cubin runs on any driver of its
  // major version or later. PTX is compiled by the driver, which must know
  // its ISA: the compiler's version or later.
  const int needed = ptx ? nvrtc_version : nvrtc_version / 1000 * 1000;
  if (driver_version >= needed) return "";
  return "driver " + std::to_string(driver_version) + " (CUDA " + cuda_version_text(driver_version) +
         ") cannot run " + (ptx ? "PTX" : "cubins") + " made by NVRTC " + cuda_version_text(nvrtc_version) +
         " (it needs CUDA " + cuda_version_text(needed) + " or later)";
}

void report_driver_version_for_testing(int version) { reported_driver.store(version); }

int reported_driver_version(int actual) {
  const int reported = reported_driver.load();
  return reported > 0 ? reported : actual;
}

}  // namespace unicache::cuda::detail
