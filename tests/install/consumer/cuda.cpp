// The CUDA backend, as an outside project links it: says whether a driver is
// there (no GPU is needed, nothing is compiled).
#include <cstdio>
#include <string>

#include <unicache/cuda.hpp>

int main() {
  if (unicache::cuda::available()) {
    std::printf("consumer_cuda: ok (%d CUDA devices)\n", unicache::cuda::device_count());
  } else {
    std::printf("consumer_cuda: ok (unavailable: %s)\n", unicache::cuda::unavailable_reason().c_str());
  }
  return 0;
}
