// The GPU core's Attention kernel: scaled dot-product attention in one
// launch, the scores in local memory only.
#pragma once

#include <vector>

#include "device_kernel.hpp"

namespace unicache::gpu::detail {

// One work-group per block of query rows of one batch and head
// (kernels::attention_source); sizes and strides are arguments, so the
// program depends on the head sizes, the causal flag and whether there is a
// mask, and serves every length and batch.
class attention_kernel final : public device_kernel {
 public:
  attention_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in, const engine& e,
                   const std::vector<kernel_binary>& preloaded);
  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  attention_problem problem_;
  std::int32_t blocks_ = 1;  // query blocks per batch and head
  launch_dims launch_;
  const kernel* program_ = nullptr;
};

}  // namespace unicache::gpu::detail
