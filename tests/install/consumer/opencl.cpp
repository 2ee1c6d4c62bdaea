// The OpenCL backend, as an outside project links it: lists the devices
// through the ICD loader (no device is needed, nothing is compiled).
#include <cstdio>
#include <string>
#include <vector>

#include <unicache/opencl.hpp>

int main() {
  const std::vector<std::string> devices = unicache::opencl::list_devices();
  std::printf("consumer_opencl: ok (%zu OpenCL devices)\n", devices.size());
  for (const std::string& d : devices) std::printf("  %s\n", d.c_str());
  return 0;
}
